// Bounds of the numeric flags, checked by CLI11 while it parses the command line: a value out of
// range fails naming the flag before any file is read or any work starts (`compare
// --decode-context -5` used to fail after the whole evaluation). The upper bounds are sanity
// limits, far beyond any real run; memory is checked where it is allocated (the KV cache).
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace kvq::cli {

// A context, prompt, window or sample length in tokens: 1M tokens is 128x SmolLM2's context.
inline constexpr std::int64_t kMaxTokens = std::int64_t{1} << 20;
// A count of windows, samples, questions, steps or repeats.
inline constexpr std::int64_t kMaxCount = std::int64_t{1} << 20;
// Sequences decoded together (serve --max-seqs, bench --batch).
inline constexpr std::int64_t kMaxBatch = 1024;
// Threads: more than any machine kvq runs on has cores.
inline constexpr int kMaxThreads = 1024;

inline CLI::Range tokens_in(std::int64_t min) { return CLI::Range(min, kMaxTokens); }

// --weights of every command that loads a model (model::resolve_weight_dtype).
inline constexpr const char* kWeightsHelp =
    "Weight storage: auto (the checkpoint's: bf16 when its Linear weights and embeddings are\n"
    "bf16, else f32), f32, or bf16 (converted at load: half the bytes per decode step);\n"
    "activations and sums are fp32 either way";
inline CLI::Range count_in(std::int64_t min) { return CLI::Range(min, kMaxCount); }

}  // namespace kvq::cli
