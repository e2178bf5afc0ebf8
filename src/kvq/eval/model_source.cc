#include "kvq/eval/model_source.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <sstream>

#include "kvq/core/error.h"

namespace kvq::eval {
namespace {

// The storage formats `--kv-cache` accepts (kernels::KvStorage). A packed format added to
// KvStorage is added here too.
constexpr std::array kKvStorages = {model::KvStorage::kF32, model::KvStorage::kBF16,
                                    model::KvStorage::kF16};

std::string supported_kv_names() {
  std::string s;
  for (model::KvStorage k : kKvStorages) {
    if (!s.empty()) s += ", ";
    s += kernels::kv_storage_name(k);
  }
  return s;
}

}  // namespace

std::vector<std::int64_t> ModelSource::eos_ids() const {
  std::vector<std::int64_t> ids = model->config().eos_token_ids;
  if (generation) {
    ids.insert(ids.end(), generation->eos_token_ids.begin(), generation->eos_token_ids.end());
  }
  if (tokenizer && tokenizer->eos_id()) ids.push_back(*tokenizer->eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<std::int64_t> ModelSource::chat_stop_ids() const {
  std::vector<std::int64_t> ids = eos_ids();
  if (tokenizer) {
    if (auto im_end = tokenizer->token_id("<|im_end|>")) ids.push_back(*im_end);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

ModelSource open_model_source(const std::filesystem::path& model_dir) {
  if (!std::filesystem::is_directory(model_dir)) {
    fail<IoError>(
        "{}: not a model directory (expected config.json, *.safetensors, "
        "tokenizer.json; convert a GGUF with `kvq convert`)",
        model_dir.string());
  }
  ModelSource src;
  src.dir = model_dir;
  src.model = model::LlamaModel::load(model_dir);
  src.tokenizer.emplace(tok::Tokenizer::from_dir(model_dir));
  src.generation = io::load_generation_config(model_dir);
  return src;
}

std::string KvCacheSpec::name() const {
  std::string s(kernels::kv_storage_name(storage));
  if (!granularity.empty()) s += ":" + granularity;
  return s;
}

KvCacheSpec parse_kv_cache_spec(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::string_view format = text.substr(0, colon);
  KvCacheSpec spec;
  const auto it = std::find_if(kKvStorages.begin(), kKvStorages.end(), [&](model::KvStorage k) {
    return kernels::kv_storage_name(k) == format;
  });
  if (it == kKvStorages.end()) {
    fail<InvalidArgument>("--kv-cache '{}': unknown KV cache format '{}' (supported: {})", text,
                          format, supported_kv_names());
  }
  spec.storage = *it;
  if (colon != std::string_view::npos) {
    spec.granularity = std::string(text.substr(colon + 1));
    if (spec.granularity != "tensor" && spec.granularity != "head") {
      fail<InvalidArgument>("--kv-cache '{}': scale granularity must be 'tensor' or 'head'", text);
    }
    fail<NotSupported>(
        "--kv-cache '{}': {} is stored unscaled; ':{}' scales apply to packed low-bit formats only",
        text, format, spec.granularity);
  }
  return spec;
}

std::string read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IoError>("{}: cannot open for reading", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail<IoError>("{}: read failed", path.string());
  return ss.str();
}

}  // namespace kvq::eval
