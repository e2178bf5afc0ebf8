// kvq convert: GGUF -> Hugging Face directory (Llama or Gemma 3; config, safetensors, tokenizer).
#include <chrono>
#include <cstdio>
#include <string>

#include "commands.h"
#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/model/convert_gguf.h"

namespace kvq::cli {

void register_convert(CLI::App& app) {
  struct Args {
    std::string gguf;
    std::string out_dir;
    std::string dtype = "float32";
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert a GGUF model (llama or gemma3 architecture) into a Hugging Face directory: "
      "config.json, generation_config.json, model.safetensors, tokenizer.json, "
      "tokenizer_config.json");
  cmd->add_option("MODEL", args->gguf, "Input .gguf file")->required()->check(CLI::ExistingFile);
  cmd->add_option("OUT_DIR", args->out_dir, "Output directory (written atomically)")->required();
  cmd->add_option("--dtype", args->dtype, "Weight dtype in model.safetensors")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  cmd->add_flag("--force", args->force, "Replace OUT_DIR when it exists and is not empty");
  cmd->callback([args] {
    model::ConvertOptions options;
    options.dtype = args->dtype == "bfloat16" ? DType::kBF16 : DType::kF32;
    options.force = args->force;
    const auto start = std::chrono::steady_clock::now();
    const auto r = model::convert_gguf_to_hf(args->gguf, args->out_dir, options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("wrote %s: %lld tensors, %lld parameters (%s, %.1f MB) in %.2f s\n",
                r.out_dir.string().c_str(), static_cast<long long>(r.num_tensors),
                static_cast<long long>(r.num_parameters), args->dtype.c_str(),
                static_cast<double>(r.safetensors_bytes) / 1e6, seconds);
  });
}

}  // namespace kvq::cli
