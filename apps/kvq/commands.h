// Each kvq subcommand lives in its own cmd_<name>.cc and registers itself on the CLI app through
// one of these functions (called explicitly from main.cc, in the order --help lists them).
#pragma once

#include <CLI/CLI.hpp>

namespace kvq::eval {
struct EvalOptions;
}

namespace kvq::cli {

void register_convert(CLI::App& app);
void register_inspect(CLI::App& app);
void register_generate(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_bench(CLI::App& app);
void register_oneshot(CLI::App& app);
void register_eval(CLI::App& app);
void register_compare(CLI::App& app);
void register_allocate(CLI::App& app);
void register_serve(CLI::App& app);

// --text and --kld of kvq eval and kvq compare (cmd_eval.cc); `options` must outlive `cmd`'s
// parse.
void add_text_options(CLI::App* cmd, eval::EvalOptions& options);

}  // namespace kvq::cli
