#include "kvq/lifecycle/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/float8.h"
#include "kvq/core/log.h"
#include "kvq/io/atomic_write.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/architecture.h"
#include "kvq/quant/recipe.h"

namespace kvq::lifecycle {
namespace fs = std::filesystem;
namespace {

// Files a model directory carries besides weights and config.json.
const char* const kCopiedFiles[] = {"generation_config.json",
                                    "tokenizer.json",
                                    "tokenizer_config.json",
                                    "special_tokens_map.json",
                                    "chat_template.jinja",
                                    "vocab.json",
                                    "merges.txt",
                                    "added_tokens.json"};

Tensor encode(const std::vector<float>& values, const Shape& shape, DType dtype) {
  Tensor t(dtype, shape);
  auto* p = static_cast<std::uint8_t*>(t.mutable_data());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    switch (dtype) {
      case DType::kF32:
        std::memcpy(p + 4 * i, &v, 4);
        break;
      case DType::kF64: {
        const double d = v;
        std::memcpy(p + 8 * i, &d, 8);
        break;
      }
      case DType::kBF16: {
        const std::uint16_t b = f32_to_bf16(v);
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case DType::kF16: {
        const std::uint16_t b = f32_to_fp16(v);
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case DType::kF8E4M3:
        p[i] = f32_to_e4m3(v);
        break;
      case DType::kI8: {
        const auto b = static_cast<std::int8_t>(std::lround(v));
        std::memcpy(p + i, &b, 1);
        break;
      }
      case DType::kI16: {
        const auto b = static_cast<std::int16_t>(std::lround(v));
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case DType::kI32: {
        const auto b = static_cast<std::int32_t>(std::lround(v));
        std::memcpy(p + 4 * i, &b, 4);
        break;
      }
      default:
        fail<NotSupported>("cannot write a qparam as {}", dtype_name(dtype));
    }
  }
  return t;
}

std::vector<float> decode(const Tensor& t, const std::string& what) {
  const auto* p = static_cast<const std::uint8_t*>(t.data());
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::kF32:
        std::memcpy(&out[i], p + 4 * i, 4);
        break;
      case DType::kF64: {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
        break;
      }
      case DType::kBF16: {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = bf16_to_f32(b);
        break;
      }
      case DType::kF16: {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = fp16_to_f32(b);
        break;
      }
      case DType::kF8E4M3:
        out[i] = e4m3_to_f32(p[i]);
        break;
      case DType::kI8: {
        std::int8_t b;
        std::memcpy(&b, p + i, 1);
        out[i] = b;
        break;
      }
      case DType::kI16: {
        std::int16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = b;
        break;
      }
      case DType::kI32: {
        std::int32_t b;
        std::memcpy(&b, p + 4 * i, 4);
        out[i] = static_cast<float>(b);
        break;
      }
      default:
        fail<FormatError>("{}: unsupported dtype {}", what, dtype_name(t.dtype()));
    }
  }
  return out;
}

// `t` converted to `dtype` (f32 or bf16, the dtypes kvq's checkpoints hold weights in).
Tensor in_dtype(const Tensor& t, DType dtype, const std::string& name) {
  const Tensor f = t.to_f32();
  if (dtype == DType::kF32) return f;
  if (dtype != DType::kBF16)
    fail<NotSupported>("save_pretrained: {} is {}; kvq writes fused weights as f32 or bf16", name,
                       dtype_name(dtype));
  Tensor out(DType::kBF16, f.shape());
  auto* dst = static_cast<std::uint16_t*>(out.mutable_data());
  for (std::int64_t i = 0; i < f.numel(); ++i) dst[i] = f32_to_bf16(f.f32()[i]);
  return out;
}

// A source whose Linears compressed-tensors stored quantized keeps them (their tensors are
// copied as stored): its config groups, verbatim, come first, then the lifecycle's attention
// groups (renamed when a name is taken); its top-level format and ignore list stay (the
// attention groups are "dense", which compressed-tensors leaves out of the top-level format).
quant::Json keep_weight_quantization(quant::Json out, const quant::Json& source) {
  quant::Json groups = source.value("config_groups", quant::Json::object());
  for (auto& [name, group] : out["config_groups"].items()) {
    std::string key = name;
    for (int i = 0; groups.contains(key); ++i) key = fmt::format("group_{}", i);
    groups[key] = group;
  }
  out["config_groups"] = groups;
  if (source.contains("format")) out["format"] = source["format"];
  quant::Json ignore = source.value("ignore", quant::Json::array());
  if (!ignore.is_array()) ignore = quant::Json::array();
  for (const auto& i : out.value("ignore", quant::Json::array()))
    if (std::find(ignore.begin(), ignore.end(), i) == ignore.end()) ignore.push_back(i);
  out["ignore"] = ignore;
  return out;
}

// What of a checkpoint's config the lifecycle applies: the groups that quantize weights belong
// to the Linears the load already dequantized (CausalLM::compressed_linears), not to it.
quant::QuantizationConfig lifecycle_part(quant::QuantizationConfig config,
                                         const model::CausalLM& model) {
  if (model.compressed_linears().empty()) return config;
  std::erase_if(config.config_groups, [](const auto& g) { return g.second.weights.has_value(); });
  return config;
}

}  // namespace

quant::QuantizationConfig checkpoint_config(const QuantizationLifecycle& lifecycle) {
  auto config = lifecycle.config_from_model();
  if (!config && lifecycle.config().transforms.empty())
    fail<InvalidArgument>("save_pretrained: the model has no quantized module and no transforms");
  if (!config) config.emplace();  // transforms only
  config->transforms = lifecycle.config().transforms;
  config->quantization_status = quant::QuantizationStatus::kCompressed;
  for (auto& [name, scheme] : config->config_groups)
    if (!scheme.format) scheme.format = quant::CompressionFormat::kDense;
  config->format = "dense";
  return *config;
}

quant::Json checkpoint_config_json(const QuantizationLifecycle& lifecycle) {
  return checkpoint_config(lifecycle).to_checkpoint_json();
}

void save_pretrained(const QuantizationLifecycle& lifecycle, const fs::path& source_model_dir,
                     const fs::path& out_dir,
                     const std::function<void(const fs::path& dir)>& write_extra, bool overwrite) {
  lifecycle.check_scales("save_pretrained");
  if (lifecycle.key_smoothing() != nullptr)
    fail<NotSupported>(
        "save_pretrained: the recipe's KeySmoothingModifier cannot be saved: neither "
        "compressed-tensors' transform_config nor vLLM has a per-channel key smoothing, so the "
        "checkpoint would run without it (evaluate it with kvq eval / compare instead)");
  for (const std::string& w : lifecycle.export_warnings()) log::warn("export: {}", w);

  const io::SafetensorsModel src = io::SafetensorsModel::open(source_model_dir);
  io::SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  const model::ModelConfig& model_config = lifecycle.model().config();
  // Linear weights with a fused rotation are written as the model now holds them, in the
  // checkpoint's dtype (compressed-tensors saves the fused weights too). A module whose rows the
  // checkpoint stacks with others' (Phi-3's v_proj in qkv_proj: model/architecture.h,
  // FusedLinear) goes back into its rows of that tensor; the other rows stay as stored.
  std::map<std::string, Tensor> fused;
  std::map<std::string, Tensor> stacks;  // such stacked tensors being rewritten, in fp32
  const model::Architecture& arch = lifecycle.model().architecture();
  const std::vector<const model::Module*> modules = lifecycle.model().root().named_modules();
  const auto rows_of = [&](const std::string& module) {
    for (const model::Module* m : modules) {
      if (m->name() == module) return m->weight().shape()[0];
    }
    KVQ_CHECK(false, "no module {}", module);
    return std::int64_t{0};
  };
  const auto& names = lifecycle.transforms().fused_modules();
  for (const model::Module* m : modules) {
    if (std::find(names.begin(), names.end(), m->name()) == names.end()) continue;
    const std::optional<model::FusedModule> stack = model::fused_module_of(arch, m->name());
    if (!stack) {
      const std::string name = m->name() + ".weight";
      fused[name] = in_dtype(m->weight(), src.tensor(name).dtype(), name);
      continue;
    }
    const std::string name = stack->name + ".weight";
    auto it = stacks.find(name);
    if (it == stacks.end()) it = stacks.emplace(name, src.tensor(name).to_f32().clone()).first;
    std::int64_t row = 0;  // m's first row in the stack
    for (const std::string& part : stack->parts) {
      if (part == m->name()) break;
      row += rows_of(part);
    }
    const Tensor w = m->weight().to_f32();
    Tensor& t = it->second;
    KVQ_CHECK(w.ndim() == 2 && t.ndim() == 2 && w.shape()[1] == t.shape()[1] &&
                  row + w.shape()[0] <= t.shape()[0],
              "{} does not fit its rows of {}", m->name(), name);
    std::memcpy(t.f32() + row * t.shape()[1], w.f32(), w.nbytes());
  }
  for (const auto& [name, t] : stacks) fused[name] = in_dtype(t, src.tensor(name).dtype(), name);
  for (const std::string& name : src.names()) {
    if (model::is_attention_qparam(model_config, name)) continue;  // stale ones are replaced below
    auto it = fused.find(name);
    writer.add(name, it != fused.end() ? it->second : src.tensor(name));
  }
  for (const auto& s : lifecycle.states())
    for (char base : {'q', 'k', 'v'}) {
      const auto& p = s->param(base);
      if (!p) continue;
      writer.add(p->tensor_name(s->name), encode(p->scale, p->shape, p->scale_dtype));
      if (p->zero_point)
        writer.add(p->zp_tensor_name(s->name), encode(*p->zero_point, p->shape, p->zp_dtype));
    }

  quant::Json cfg = quant::Json::parse(io::read_json_file(source_model_dir / "config.json").dump());
  cfg.erase("compression_config");
  const quant::Json source_config = cfg.value("quantization_config", quant::Json::object());
  cfg["quantization_config"] = checkpoint_config_json(lifecycle);
  if (!lifecycle.model().compressed_linears().empty())
    cfg["quantization_config"] =
        keep_weight_quantization(cfg["quantization_config"], source_config);

  io::AtomicDirectory dir(
      out_dir, overwrite ? io::ExistingDirectory::kReplace : io::ExistingDirectory::kRefuse);
  // Each source tensor's pages are dropped once copied: the model maps the same files, and a
  // second full mapping would double the resident set of a large checkpoint's save.
  writer.write(dir.path() / "model.safetensors", [&](const std::string& name) {
    if (src.contains(name)) src.release(name);
  });
  io::write_file_atomic(dir.path() / "config.json", quant::dump_sorted(cfg, 2) + "\n");
  for (const char* f : kCopiedFiles)
    if (fs::exists(source_model_dir / f)) {
      std::error_code ec;
      fs::copy_file(source_model_dir / f, dir.path() / f, ec);
      if (ec) fail<IoError>("{}: cannot copy {}: {}", out_dir.string(), f, ec.message());
    }
  if (write_extra) write_extra(dir.path());
  dir.commit();
}

std::unique_ptr<QuantizationLifecycle> load_quantized(model::CausalLM& model,
                                                      const fs::path& model_dir) {
  // The model holds what its directory gave it: config.json (raw) and the attention qparams, so
  // nothing is read twice.
  const fs::path config_path = model_dir / "config.json";
  const nlohmann::json& raw = model.config().raw;
  if (!raw.contains("quantization_config") && !raw.contains("compression_config"))
    fail<ConfigError>("{}: no quantization_config: not a quantized checkpoint",
                      config_path.string());
  const quant::QuantizationConfig config = lifecycle_part(
      quant::parse_quantization_config(quant::Json(raw), config_path.string()), model);
  // The weights hold the offline transforms already: only the online ones are applied.
  auto lc = apply_quantization_config(model, config, /*fuse_offline=*/false);
  const std::map<std::string, Tensor>& st = model.attention_qparams();

  std::set<std::string> expected;
  for (const auto& s : lc->states())
    for (char base : {'q', 'k', 'v'}) {
      auto& p = s->param(base);
      if (!p) continue;
      const std::string name = p->tensor_name(s->name);
      expected.insert(name);
      if (!st.contains(name))
        fail<FormatError>("{}: tensor {} is missing (the quantization_config quantizes {} of {})",
                          model_dir.string(), name, std::string(1, base), s->name);
      const Tensor& t = st.at(name);
      if (t.shape() != p->shape)
        fail<FormatError>("{}: tensor {} has shape {}, expected {} ({} strategy, {} heads)",
                          model_dir.string(), name, shape_str(t.shape()), shape_str(p->shape),
                          quant::to_string(s->args().strategy_or_tensor()), p->shape.front());
      if (t.dtype() != p->scale_dtype)
        fail<FormatError>("{}: tensor {} has dtype {}, expected the model dtype {}",
                          model_dir.string(), name, dtype_name(t.dtype()),
                          dtype_name(p->scale_dtype));
      p->scale = decode(t, name);
      for (std::size_t i = 0; i < p->scale.size(); ++i)
        if (!(std::isfinite(p->scale[i]) && p->scale[i] > 0.0f))
          fail<FormatError>("{}: tensor {}[{}] = {} is not a valid scale (finite, > 0)",
                            model_dir.string(), name, i, p->scale[i]);
      const std::string zp_name = p->zp_tensor_name(s->name);
      if (st.contains(zp_name)) {
        expected.insert(zp_name);
        const Tensor& z = st.at(zp_name);
        if (z.shape() != p->shape)
          fail<FormatError>("{}: tensor {} has shape {}, expected {}", model_dir.string(), zp_name,
                            shape_str(z.shape()), shape_str(p->shape));
        std::vector<float> zp = decode(z, zp_name);
        if (p->zero_point)
          p->zero_point = std::move(zp);
        else if (std::any_of(zp.begin(), zp.end(), [](float v) { return v != 0.0f; }))
          fail<FormatError>("{}: tensor {} holds non-zero zero points but the config is symmetric",
                            model_dir.string(), zp_name);
      }
    }
  for (const auto& [name, t] : st)
    if (!expected.count(name) && name.find("_zero_point") == std::string::npos)
      fail<FormatError>("{}: tensor {} is not quantized by the checkpoint's quantization_config",
                        model_dir.string(), name);
  lc->set_status(config.quantization_status);
  lc->set_quantization_enabled(true);
  return lc;
}

QuantizedModel QuantizedModel::load(const fs::path& model_dir, const model::LoadOptions& options) {
  QuantizedModel out;
  out.model = model::CausalLM::load(model_dir, options);
  const nlohmann::json& raw = out.model->config().raw;
  if (!raw.contains("quantization_config") && !raw.contains("compression_config")) return out;
  // A checkpoint that quantizes only its Linear weights (dequantized by the load) has nothing
  // for a lifecycle to do.
  const quant::QuantizationConfig c = lifecycle_part(
      quant::parse_quantization_config(quant::Json(raw), (model_dir / "config.json").string()),
      *out.model);
  if (out.model->compressed_linears().empty() || !c.config_groups.empty() || c.kv_cache_scheme ||
      !c.transforms.empty())
    out.lifecycle = load_quantized(*out.model, model_dir);
  return out;
}

}  // namespace kvq::lifecycle
