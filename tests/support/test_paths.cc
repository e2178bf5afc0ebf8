#include "support/test_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace kvq::test {
namespace fs = std::filesystem;

fs::path source_dir() { return KVQ_SOURCE_DIR; }
fs::path test_data_dir() { return KVQ_TEST_DATA_DIR; }
fs::path shared_data_dir() {
  if (const char* env = std::getenv("KVQ_SHARED_DATA")) return env;
  return KVQ_SHARED_DATA_DIR;
}
fs::path kvq_home() {
  if (const char* env = std::getenv("KVQ_HOME")) return env;
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "/tmp") / ".cache" / "kvq";
}
fs::path default_gguf() { return kvq_home() / "SmolLM2-135M-Instruct.Q4_1.gguf"; }
fs::path default_model_dir() { return kvq_home() / "SmolLM2-135M-Instruct"; }
fs::path gemma_model_dir() { return kvq_home() / "gemma-3-270m"; }
fs::path kvq_binary() { return KVQ_BINARY; }

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool require_model() {
  const char* env = std::getenv("KVQ_REQUIRE_MODEL");
  return env != nullptr && std::string(env) == "1";
}

TempDir::TempDir() {
  std::random_device rd;
  const fs::path base = fs::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path candidate =
        base / ("kvq-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    if (fs::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace kvq::test
