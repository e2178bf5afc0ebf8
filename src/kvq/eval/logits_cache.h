// On-disk cache of a baseline model's next-token distributions, compact enough to keep (top-K).
//
// Full log-softmax rows do not fit (8 windows × 2047 tokens × 49152 × 2 bytes = 1.6 GB even in
// fp16), so per scored token we keep:
//   nll          -log p(target), exact (float64 math, stored as float64: the baseline's PPL is
//                computed from these, equal to the bit to a pass over the same windows)
//   log_rest     log(1 - sum of the top-K probabilities), the tail mass (computed as a log-sum-exp
//                over the non-top-K logits, not by subtraction, so it stays accurate near 0)
//   ids[K]       the K most likely token ids, most likely first (ties: lower id first)
//   logp[K]      their log-probabilities
// = 12 + 8K bytes per token (K = 64: 524 B; 8 × 511 tokens ≈ 2.1 MB). kld.h says what this
// gives (exact top-1 and baseline PPL; a lower and an upper bound on the KL divergence).
//
// File layout (little-endian): "KVQLOGIT" | u32 format version | u32 n | n bytes of JSON header
// | records, window after window, in scored-token order. The header holds what the records
// depend on: a fingerprint of the model, a hash of the token ids, ctx, stride, max_windows, K,
// vocab and the scored-token count of every window. A cache is reused only when all match.
//
// Writing is atomic and resumable: records go to "<path>.partial" (same header), fsynced after
// every window; a later run with the same header continues after the last complete window;
// commit() renames the finished file into place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvq::eval {

inline constexpr std::uint32_t kLogitsCacheVersion = 2;  // 2: nll as f64

struct LogitsCacheHeader {
  std::uint64_t model_hash = 0;   // model_fingerprint() of the baseline
  std::uint64_t tokens_hash = 0;  // fnv1a64 over the token ids
  std::int64_t ctx = 0, stride = 0, max_windows = 0;
  std::int64_t top_k = 0, vocab = 0;
  std::vector<std::int64_t> window_scored;  // [windows] scored tokens per window

  std::int64_t tokens_scored() const;
  bool operator==(const LogitsCacheHeader&) const = default;
};

// 64-bit FNV-1a.
std::uint64_t fnv1a64(const void* data, std::size_t size,
                      std::uint64_t seed = 0xcbf29ce484222325ULL);
std::uint64_t hash_tokens(std::span<const std::int32_t> tokens);
// Identifies a model directory's contents cheaply: its canonical path, config.json's bytes and
// the names and sizes of its *.safetensors / *.gguf files (or of a single model file).
// IoError when the path does not exist.
std::uint64_t model_fingerprint(const std::filesystem::path& model);

// The cached baseline distribution of one scored token.
struct TopKView {
  double nll = 0.0;
  float log_rest = 0.0f;
  std::span<const std::int32_t> ids;  // [K]
  std::span<const float> logp;        // [K]
};

class LogitsCache {
 public:
  LogitsCache() = default;
  explicit LogitsCache(LogitsCacheHeader header);

  const LogitsCacheHeader& header() const { return header_; }
  std::int64_t tokens() const { return static_cast<std::int64_t>(nll_.size()); }
  std::int64_t top_k() const { return header_.top_k; }
  TopKView token(std::int64_t i) const;  // i in [0, tokens())

  void append(double nll, float log_rest, std::span<const std::int32_t> ids,
              std::span<const float> logp);

  // Reads a complete cache file. IoError if unreadable, FormatError naming the file when the
  // magic, version or sizes are wrong.
  static LogitsCache load(const std::filesystem::path& path);
  // The cache at `path` when it exists and its header equals `expected`; nullopt (with a log
  // line saying why) when it is absent or stale. Corrupt files throw as load() does.
  static std::optional<LogitsCache> load_if_matching(const std::filesystem::path& path,
                                                     const LogitsCacheHeader& expected);

 private:
  friend class LogitsCacheWriter;
  LogitsCacheHeader header_;
  std::vector<double> nll_;        // [tokens]
  std::vector<float> log_rest_;    // [tokens]
  std::vector<std::int32_t> ids_;  // [tokens, K]
  std::vector<float> logp_;        // [tokens, K]
};

// Writes a cache window by window into "<path>.partial", resuming a previous partial file with
// the same header; commit() renames it to `path`.
class LogitsCacheWriter {
 public:
  LogitsCacheWriter(std::filesystem::path path, LogitsCacheHeader header);
  ~LogitsCacheWriter();
  LogitsCacheWriter(const LogitsCacheWriter&) = delete;
  LogitsCacheWriter& operator=(const LogitsCacheWriter&) = delete;

  // Windows already complete (from a resumed partial file); their records are in resumed().
  std::int64_t windows_done() const { return windows_done_; }
  const LogitsCache& resumed() const { return resumed_; }
  // Appends the records of the next window (`tokens` must hold exactly its scored count).
  void append_window(const LogitsCache& tokens);
  // Renames the partial file into place. InvalidArgument when windows are missing.
  void commit();

 private:
  std::filesystem::path path_, partial_;
  LogitsCacheHeader header_;
  LogitsCache resumed_;
  std::int64_t windows_done_ = 0;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace kvq::eval
