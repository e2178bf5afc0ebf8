// kvq: attention and KV-cache quantization for LLMs, natively in C++.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/threading.h"
#include "kvq/io/atomic_write.h"

int main(int argc, char** argv) {
  // First, before any thread exists: SIGINT / SIGTERM remove unfinished outputs, exit 128 + sig.
  kvq::io::install_interrupt_cleanup();
  CLI::App app{
      "kvq — quantize the attention and KV cache of LLMs (compressed-tensors compatible)\n\n"
      "Typical flow:\n"
      "  kvq convert model.gguf out/          GGUF -> Hugging Face directory\n"
      "  kvq inspect out/                     config, tensors, quantization_config\n",
      "kvq"};
  app.require_subcommand(1);
  // Flag errors read like every other error ("error: --ctx: Value ... not in range ...").
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    return "error: " + CLI::FailureMessage::simple(failed, e);
  });
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  int threads = 0;
  bool verbose = false;
  bool quiet = false;
  app.add_option("--threads", threads, "Threads for kernels and BLAS (default: all cores)")
      ->check(CLI::Range(0, kvq::cli::kMaxThreads));
  app.add_flag("-v,--verbose", verbose, "Print debug messages");
  app.add_flag("-q,--quiet", quiet, "Only print warnings and errors");
  app.parse_complete_callback([&] {
    if (verbose) kvq::log::set_level(kvq::log::Level::kDebug);
    if (quiet) kvq::log::set_level(kvq::log::Level::kWarn);
    if (threads > 0) kvq::set_num_threads(threads);
  });

  kvq::cli::register_convert(app);
  kvq::cli::register_inspect(app);
  kvq::cli::register_generate(app);
  kvq::cli::register_perplexity(app);
  kvq::cli::register_bench(app);
  kvq::cli::register_oneshot(app);
  kvq::cli::register_eval(app);
  kvq::cli::register_compare(app);
  kvq::cli::register_allocate(app);
  kvq::cli::register_serve(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvq::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "error: out of memory (a context, prompt or batch too large for this machine?)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: unexpected failure: %s\n", e.what());
    return 2;
  }
  return 0;
}
