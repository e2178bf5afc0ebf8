// kvq convert: GGUF -> Hugging Face directory. (Placeholder until the GGUF converter lands.)
#include "commands.h"
#include "kvq/core/error.h"

namespace kvq::cli {

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Convert a GGUF model into a Hugging Face directory");
  cmd->callback([] { fail<NotSupported>("kvq convert is not implemented yet"); });
}

}  // namespace kvq::cli
