// kvq inspect: config, tensors and quantization_config of a GGUF file or HF directory.
#include "commands.h"
#include "kvq/core/error.h"

namespace kvq::cli {

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's config, tensors and quantization");
  cmd->callback([] { fail<NotSupported>("kvq inspect is not implemented yet"); });
}

}  // namespace kvq::cli
