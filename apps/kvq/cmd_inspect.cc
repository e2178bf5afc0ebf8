// kvq inspect: config summary, every tensor, and quantization_config of a GGUF file or a Hugging
// Face directory. --json prints one object for scripts.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/io/gguf.h"
#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/convert_gguf.h"
#include "kvq/model/model_config.h"

namespace kvq::cli {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

bool is_scale_tensor(const std::string& name) {
  for (const char* suffix :
       {".q_scale", ".k_scale", ".v_scale", ".q_zero_point", ".k_zero_point", ".v_zero_point"}) {
    const std::string s(suffix);
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

json config_summary(const json& config) {
  json s = json::object();
  for (const char* key :
       {"architectures", "model_type", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "hidden_size", "intermediate_size", "vocab_size",
        "rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings", "rms_norm_eps",
        "tie_word_embeddings", "torch_dtype"}) {
    if (config.contains(key)) s[key] = config[key];
  }
  return s;
}

json inspect_gguf(const fs::path& path) {
  const io::GgufFile g = io::GgufFile::open(path);
  json out = {{"format", "gguf"},
              {"path", path.string()},
              {"gguf_version", g.version()},
              {"file_size", g.file_size()}};
  const std::string arch = g.find_string("general.architecture").value_or("?");
  out["architecture"] = arch;
  if (arch == "llama" || arch == "gemma3") {
    out["config"] = config_summary(model::gguf_config_json(g));
    out["config"].erase("torch_dtype");  // what `kvq convert` would write, not the GGUF's types
  } else {
    out["config"] = json::object();
  }
  json meta = json::object();
  for (const auto& kv : g.metadata()) meta[kv.key] = kv.value.summary(120);
  out["metadata"] = meta;
  std::int64_t params = 0;
  json tensors = json::array();
  json type_counts = json::object();
  for (const auto& t : g.tensors()) {
    params += t.numel();
    const std::string type(io::ggml_type_name(t.type));
    type_counts[type] = type_counts.value(type, 0) + 1;
    tensors.push_back({{"name", t.name},
                       {"dtype", type},
                       {"shape", t.shape()},
                       {"bytes", t.nbytes},
                       {"hf_name", model::gguf_to_hf_tensor_name(t.name, arch).value_or("")}});
  }
  out["parameters"] = params;
  out["tensor_types"] = type_counts;
  out["tensors"] = tensors;
  return out;
}

json inspect_hf(const fs::path& dir) {
  json out = {{"format", "huggingface"}, {"path", dir.string()}};
  const json config = io::read_json_file(dir / "config.json");
  model::load_model_config(dir);  // validates the fields kvq relies on
  out["architecture"] = config.value("model_type", "?");
  out["config"] = config_summary(config);
  if (config.contains("quantization_config")) {
    out["quantization_config"] = config["quantization_config"];
  }
  const auto model = io::SafetensorsModel::open(dir);
  std::uint64_t file_size = 0;
  for (const auto& f : model.files()) file_size += fs::file_size(f.path());
  out["file_size"] = file_size;
  std::int64_t params = 0;
  json tensors = json::array();
  json scales = json::array();
  json dtype_counts = json::object();
  for (const auto& name : model.names()) {
    const auto& info = model.info(name);
    params += shape_numel(info.shape);
    const std::string dtype(dtype_name(info.dtype));
    dtype_counts[dtype] = dtype_counts.value(dtype, 0) + 1;
    tensors.push_back({{"name", name},
                       {"dtype", dtype},
                       {"shape", info.shape},
                       {"bytes", info.end - info.begin}});
    if (is_scale_tensor(name)) scales.push_back(name);
  }
  out["parameters"] = params;
  out["tensor_types"] = dtype_counts;
  out["scale_tensors"] = scales;
  out["tensors"] = tensors;
  return out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return fmt::format("{:.1f} {}", b, units[u]);
}

void print_text(const json& r, bool show_tensors) {
  std::printf("%s (%s)\n", r["path"].get<std::string>().c_str(),
              r["format"].get<std::string>().c_str());
  const json& c = r["config"];
  const auto get = [&](const char* k) { return c.contains(k) ? c[k].dump() : std::string("?"); };
  std::printf("  architecture      %s %s\n", r["architecture"].get<std::string>().c_str(),
              c.contains("architectures") ? c["architectures"].dump().c_str() : "");
  std::printf("  layers            %s\n", get("num_hidden_layers").c_str());
  std::printf("  heads / kv heads  %s / %s\n", get("num_attention_heads").c_str(),
              get("num_key_value_heads").c_str());
  std::printf("  head_dim          %s\n", get("head_dim").c_str());
  std::printf("  hidden / ffn      %s / %s\n", get("hidden_size").c_str(),
              get("intermediate_size").c_str());
  std::printf("  vocab             %s\n", get("vocab_size").c_str());
  if (!c.contains("rope_theta") && c.contains("rope_parameters")) {
    // transformers 5 configs: theta and scaling live in rope_parameters (per layer type on Gemma
    // 3).
    std::printf("  rope_parameters   %s, max positions %s\n", get("rope_parameters").c_str(),
                get("max_position_embeddings").c_str());
  } else {
    std::printf("  rope_theta        %s (scaling %s), max positions %s\n",
                get("rope_theta").c_str(), get("rope_scaling").c_str(),
                get("max_position_embeddings").c_str());
  }
  if (c.contains("torch_dtype")) {
    std::printf("  dtype             %s; tensor types %s\n", get("torch_dtype").c_str(),
                r["tensor_types"].dump().c_str());
  } else {
    std::printf("  tensor types      %s\n", r["tensor_types"].dump().c_str());
  }
  std::printf("  parameters        %lld\n", r["parameters"].get<long long>());
  std::printf("  file size         %s\n", human_bytes(r["file_size"].get<double>()).c_str());
  if (r.contains("quantization_config")) {
    std::printf(
        "\nquantization_config:\n%s\n",
        r["quantization_config"].dump(2, ' ', false, json::error_handler_t::replace).c_str());
    std::printf("scale tensors (%zu):\n", r["scale_tensors"].size());
    for (const auto& s : r["scale_tensors"]) std::printf("  %s\n", s.get<std::string>().c_str());
  } else if (r["format"] == "huggingface") {
    std::printf("  quantization      none (no quantization_config)\n");
  }
  if (!show_tensors) return;
  std::size_t width = 4;
  for (const auto& t : r["tensors"]) width = std::max(width, t["name"].get<std::string>().size());
  std::printf("\n%zu tensors:\n  %-*s  %-6s  %-16s  %12s\n", r["tensors"].size(),
              static_cast<int>(width), "name", "dtype", "shape", "bytes");
  for (const auto& t : r["tensors"]) {
    std::string shape = "[";
    for (std::size_t i = 0; i < t["shape"].size(); ++i) {
      shape += (i ? ", " : "") + t["shape"][i].dump();
    }
    shape += "]";
    std::printf("  %-*s  %-6s  %-16s  %12llu\n", static_cast<int>(width),
                t["name"].get<std::string>().c_str(), t["dtype"].get<std::string>().c_str(),
                shape.c_str(), t["bytes"].get<unsigned long long>());
  }
}

bool has_gguf_magic(const fs::path& path) {
  const io::InputFile in = io::open_input_file(path);  // a FIFO or device: IoError, no hang
  char magic[4] = {};
  return ::pread(in.fd(), magic, 4, 0) == 4 && std::string(magic, 4) == "GGUF";
}

}  // namespace

void register_inspect(CLI::App& app) {
  struct Args {
    std::string path;
    bool json = false;
    bool tensors = true;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "inspect", "Show a model's config, tensors and quantization_config (GGUF file or HF dir)");
  cmd->add_option("PATH", args->path, "A .gguf file or a Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_flag("--tensors,!--no-tensors", args->tensors, "List every tensor (default: on)");
  cmd->callback([args] {
    const fs::path path(args->path);
    json report;
    if (fs::is_directory(path)) {
      report = inspect_hf(path);
    } else if (has_gguf_magic(path)) {
      report = inspect_gguf(path);
    } else {
      fail<InvalidArgument>("{}: neither a GGUF file nor a Hugging Face model directory",
                            path.string());
    }
    if (!args->tensors) report.erase("tensors");
    if (args->json) {
      // Metadata strings from a GGUF need not be valid UTF-8: replace bad bytes, never throw.
      std::printf("%s\n", report.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    } else {
      print_text(report, args->tensors);
    }
  });
}

}  // namespace kvq::cli
