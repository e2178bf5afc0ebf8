#include "kvq/eval/logits_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"

namespace kvq::eval {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'Q', 'L', 'O', 'G', 'I', 'T'};

std::string header_json(const LogitsCacheHeader& h) {
  nlohmann::json j;
  // Hashes as hex strings: JSON numbers lose 64-bit precision in many readers.
  j["model_hash"] = fmt::format("{:016x}", h.model_hash);
  j["tokens_hash"] = fmt::format("{:016x}", h.tokens_hash);
  j["ctx"] = h.ctx;
  j["stride"] = h.stride;
  j["max_windows"] = h.max_windows;
  j["top_k"] = h.top_k;
  j["vocab"] = h.vocab;
  j["window_scored"] = h.window_scored;
  j["record"] = "f64 nll, f32 log_rest, i32 ids[top_k], f32 logp[top_k]";
  return j.dump();
}

LogitsCacheHeader parse_header(const std::string& text, const std::filesystem::path& path) {
  try {
    const auto j = io::parse_json(text, path.string());
    LogitsCacheHeader h;
    h.model_hash = std::stoull(j.at("model_hash").get<std::string>(), nullptr, 16);
    h.tokens_hash = std::stoull(j.at("tokens_hash").get<std::string>(), nullptr, 16);
    h.ctx = j.at("ctx");
    h.stride = j.at("stride");
    h.max_windows = j.at("max_windows");
    h.top_k = j.at("top_k");
    h.vocab = j.at("vocab");
    h.window_scored = j.at("window_scored").get<std::vector<std::int64_t>>();
    if (h.top_k < 1 || h.top_k > h.vocab) {
      fail<FormatError>("{}: logits cache top_k {} outside [1, vocab {}]", path.string(), h.top_k,
                        h.vocab);
    }
    return h;
  } catch (const nlohmann::json::exception& e) {
    fail<FormatError>("{}: logits cache header is not valid: {}", path.string(), e.what());
  } catch (const std::logic_error& e) {  // stoull
    fail<FormatError>("{}: logits cache header hash is not hex: {}", path.string(), e.what());
  }
}

std::int64_t record_bytes(std::int64_t top_k) { return 8 + 4 + 8 * top_k; }

// Reads the header; leaves `in` at the first record. Returns the header and its byte size.
std::pair<LogitsCacheHeader, std::int64_t> read_header(std::ifstream& in,
                                                       const std::filesystem::path& path) {
  char magic[8];
  std::uint32_t version = 0, n = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&version), 4);
  in.read(reinterpret_cast<char*>(&n), 4);
  if (!in || std::memcmp(magic, kMagic, 8) != 0) {
    fail<FormatError>("{}: not a kvq logits cache (bad magic)", path.string());
  }
  if (version != kLogitsCacheVersion) {
    fail<FormatError>(
        "{}: logits cache format version {}, this kvq reads {}; delete the file to "
        "rebuild it",
        path.string(), version, kLogitsCacheVersion);
  }
  std::string text(n, '\0');
  in.read(text.data(), n);
  if (!in) fail<FormatError>("{}: truncated logits cache header", path.string());
  return {parse_header(text, path), 16 + static_cast<std::int64_t>(n)};
}

// Reads `count` records into `cache`.
void read_records(std::ifstream& in, std::int64_t count, LogitsCache& cache,
                  const std::filesystem::path& path) {
  const std::int64_t k = cache.top_k();
  std::vector<char> buf(static_cast<std::size_t>(record_bytes(k)));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(k));
  std::vector<float> logp(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < count; ++i) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (!in) fail<FormatError>("{}: truncated logits cache (record {})", path.string(), i);
    double nll;
    float log_rest;
    std::memcpy(&nll, buf.data(), 8);
    std::memcpy(&log_rest, buf.data() + 8, 4);
    std::memcpy(ids.data(), buf.data() + 12, static_cast<std::size_t>(4 * k));
    std::memcpy(logp.data(), buf.data() + 12 + 4 * k, static_cast<std::size_t>(4 * k));
    for (std::int32_t id : ids) {
      if (id < 0 || id >= cache.header().vocab) {
        fail<FormatError>("{}: record {} has token id {} outside the vocab", path.string(), i, id);
      }
    }
    cache.append(nll, log_rest, ids, logp);
  }
}

void write_all(int fd, const void* data, std::size_t size, const std::filesystem::path& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n <= 0) fail<IoError>("{}: write failed: {}", path.string(), std::strerror(errno));
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

std::int64_t LogitsCacheHeader::tokens_scored() const {
  return std::accumulate(window_scored.begin(), window_scored.end(), std::int64_t{0});
}

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t hash_tokens(std::span<const std::int32_t> tokens) {
  return fnv1a64(tokens.data(), tokens.size_bytes());
}

std::uint64_t model_fingerprint(const std::filesystem::path& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path canon = fs::canonical(model, ec);
  if (ec) fail<IoError>("{}: model path does not exist", model.string());
  std::string id = canon.string() + "\n";
  auto add_file = [&](const fs::path& f) {
    id += f.filename().string() + " " + std::to_string(fs::file_size(f)) + "\n";
  };
  if (fs::is_directory(canon)) {
    if (fs::exists(canon / "config.json")) id += io::read_file(canon / "config.json");
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(canon)) {
      const auto ext = e.path().extension();
      if (e.is_regular_file() && (ext == ".safetensors" || ext == ".gguf")) files.push_back(e);
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) add_file(f);
  } else {
    add_file(canon);
  }
  return fnv1a64(id.data(), id.size());
}

LogitsCache::LogitsCache(LogitsCacheHeader header) : header_(std::move(header)) {}

TopKView LogitsCache::token(std::int64_t i) const {
  KVQ_CHECK(i >= 0 && i < tokens(), "token {} of {}", i, tokens());
  const auto k = static_cast<std::size_t>(header_.top_k);
  const auto u = static_cast<std::size_t>(i);
  return {nll_[u], log_rest_[u], std::span<const std::int32_t>(ids_.data() + u * k, k),
          std::span<const float>(logp_.data() + u * k, k)};
}

void LogitsCache::append(double nll, float log_rest, std::span<const std::int32_t> ids,
                         std::span<const float> logp) {
  KVQ_CHECK(static_cast<std::int64_t>(ids.size()) == header_.top_k &&
                static_cast<std::int64_t>(logp.size()) == header_.top_k,
            "append: {} ids, {} logp for K = {}", ids.size(), logp.size(), header_.top_k);
  nll_.push_back(nll);
  log_rest_.push_back(log_rest);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  logp_.insert(logp_.end(), logp.begin(), logp.end());
}

LogitsCache LogitsCache::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IoError>("{}: cannot open logits cache", path.string());
  auto [header, header_bytes] = read_header(in, path);
  const std::int64_t expected = header_bytes + header.tokens_scored() * record_bytes(header.top_k);
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path));
  if (size != expected) {
    fail<FormatError>("{}: logits cache is {} bytes, its header implies {}", path.string(), size,
                      expected);
  }
  LogitsCache cache(header);
  read_records(in, header.tokens_scored(), cache, path);
  return cache;
}

std::optional<LogitsCache> LogitsCache::load_if_matching(const std::filesystem::path& path,
                                                         const LogitsCacheHeader& expected) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  LogitsCache cache = load(path);
  if (!(cache.header() == expected)) {
    log::info("{}: logits cache is for another model, text or settings; rebuilding", path.string());
    return std::nullopt;
  }
  return cache;
}

LogitsCacheWriter::LogitsCacheWriter(std::filesystem::path path, LogitsCacheHeader header)
    : path_(std::move(path)), header_(std::move(header)), resumed_(header_) {
  partial_ = path_;
  partial_ += ".partial";
  const std::int64_t rec = record_bytes(header_.top_k);
  // Resume: keep the complete windows of a partial file with the same header.
  std::int64_t keep_bytes = -1;
  if (std::filesystem::exists(partial_)) {
    try {
      std::ifstream in(partial_, std::ios::binary);
      auto [old, header_bytes] = read_header(in, partial_);
      if (old == header_) {
        const auto size = static_cast<std::int64_t>(std::filesystem::file_size(partial_));
        std::int64_t records = 0, offset = header_bytes;
        for (std::int64_t w : header_.window_scored) {
          if (offset + w * rec > size) break;
          offset += w * rec;
          records += w;
          ++windows_done_;
        }
        read_records(in, records, resumed_, partial_);
        keep_bytes = offset;
        log::info("{}: resuming after {} of {} windows", partial_.string(), windows_done_,
                  header_.window_scored.size());
      }
    } catch (const Error& e) {
      log::warn("{}: ignoring unreadable partial cache ({})", partial_.string(), e.what());
      windows_done_ = 0;
      resumed_ = LogitsCache(header_);
    }
  }
  if (keep_bytes >= 0) {
    fd_ = ::open(partial_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0 || ::ftruncate(fd_, keep_bytes) != 0 || ::lseek(fd_, keep_bytes, SEEK_SET) < 0) {
      fail<IoError>("{}: cannot reopen partial cache: {}", partial_.string(), std::strerror(errno));
    }
    return;
  }
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail<IoError>("{}: cannot create: {}", partial_.string(), std::strerror(errno));
  const std::string json = header_json(header_);
  const std::uint32_t version = kLogitsCacheVersion, n = static_cast<std::uint32_t>(json.size());
  write_all(fd_, kMagic, 8, partial_);
  write_all(fd_, &version, 4, partial_);
  write_all(fd_, &n, 4, partial_);
  write_all(fd_, json.data(), json.size(), partial_);
}

LogitsCacheWriter::~LogitsCacheWriter() {
  // An unfinished cache stays as "<path>.partial" on purpose: the next run resumes it.
  if (fd_ >= 0) ::close(fd_);
}

void LogitsCacheWriter::append_window(const LogitsCache& tokens) {
  if (windows_done_ >= static_cast<std::int64_t>(header_.window_scored.size())) {
    fail<InvalidArgument>("{}: all {} windows already written", partial_.string(), windows_done_);
  }
  const std::int64_t want = header_.window_scored[static_cast<std::size_t>(windows_done_)];
  if (tokens.tokens() != want || tokens.top_k() != header_.top_k) {
    fail<InvalidArgument>("{}: window {} needs {} records of K = {}, got {} of K = {}",
                          partial_.string(), windows_done_, want, header_.top_k, tokens.tokens(),
                          tokens.top_k());
  }
  const auto k = static_cast<std::size_t>(header_.top_k);
  std::vector<char> buf;
  buf.reserve(static_cast<std::size_t>(want * record_bytes(header_.top_k)));
  for (std::int64_t i = 0; i < want; ++i) {
    const TopKView t = tokens.token(i);
    const char* nll = reinterpret_cast<const char*>(&t.nll);
    const char* rest = reinterpret_cast<const char*>(&t.log_rest);
    buf.insert(buf.end(), nll, nll + 8);
    buf.insert(buf.end(), rest, rest + 4);
    const char* ids = reinterpret_cast<const char*>(t.ids.data());
    const char* logp = reinterpret_cast<const char*>(t.logp.data());
    buf.insert(buf.end(), ids, ids + 4 * k);
    buf.insert(buf.end(), logp, logp + 4 * k);
  }
  write_all(fd_, buf.data(), buf.size(), partial_);
  if (::fsync(fd_) != 0)
    fail<IoError>("{}: fsync failed: {}", partial_.string(), std::strerror(errno));
  ++windows_done_;
}

void LogitsCacheWriter::commit() {
  if (committed_) return;
  if (windows_done_ != static_cast<std::int64_t>(header_.window_scored.size())) {
    fail<InvalidArgument>("{}: {} of {} windows written; cannot commit", partial_.string(),
                          windows_done_, header_.window_scored.size());
  }
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    fd_ = -1;
    fail<IoError>("{}: cannot flush: {}", partial_.string(), std::strerror(errno));
  }
  fd_ = -1;
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  if (ec)
    fail<IoError>("{}: cannot rename to {}: {}", partial_.string(), path_.string(), ec.message());
  committed_ = true;
}

}  // namespace kvq::eval
