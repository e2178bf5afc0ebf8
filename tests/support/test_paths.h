// Where tests find their inputs. The default model lives under $KVQ_HOME (default
// ~/.cache/kvq), where scripts/fetch-model.sh puts it; shared data under ../shared/data.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kvq::test {

std::filesystem::path source_dir();
std::filesystem::path test_data_dir();      // tests/data
std::filesystem::path shared_data_dir();    // ../shared/data (or $KVQ_SHARED_DATA)
std::filesystem::path kvq_home();           // $KVQ_HOME or ~/.cache/kvq
std::filesystem::path default_gguf();       // kvq_home()/SmolLM2-135M-Instruct.Q4_1.gguf
std::filesystem::path default_model_dir();  // kvq_home()/SmolLM2-135M-Instruct (converted)
std::filesystem::path gemma_model_dir();    // kvq_home()/gemma-3-270m (fetch-model.sh --gemma)
std::filesystem::path kvq_binary();         // the built CLI
// The whole file as bytes ("" when it cannot be read): for checking that outputs left inputs alone.
std::string read_bytes(const std::filesystem::path& path);

// Model tests skip when the default model is absent, unless KVQ_REQUIRE_MODEL=1 (set by
// scripts/test.sh, which fetches it first), in which case they fail.
bool require_model();

// A fresh empty temporary directory, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvq::test

// Skips (or fails, when the model is required) a test that needs the default model.
#define KVQ_REQUIRE_DEFAULT_MODEL()                                                   \
  do {                                                                                \
    if (!std::filesystem::exists(::kvq::test::default_model_dir() / "config.json")) { \
      if (::kvq::test::require_model()) {                                             \
        FAIL() << "default model missing at " << ::kvq::test::default_model_dir()     \
               << " (run scripts/fetch-model.sh)";                                    \
      }                                                                               \
      GTEST_SKIP() << "default model not fetched (scripts/fetch-model.sh)";           \
    }                                                                                 \
  } while (0)

// Skips a test that needs the second model (gemma-3-270m, scripts/fetch-model.sh --gemma), or
// fails when it is required: KVQ_REQUIRE_GEMMA=1 (the default model's KVQ_REQUIRE_MODEL does
// not require it; the README's two commands do not fetch it).
#define KVQ_REQUIRE_GEMMA_MODEL()                                                            \
  do {                                                                                       \
    if (!std::filesystem::exists(::kvq::test::gemma_model_dir() / "config.json")) {          \
      const char* required = std::getenv("KVQ_REQUIRE_GEMMA");                               \
      if (required != nullptr && std::string(required) == "1") {                             \
        FAIL() << "gemma model missing at " << ::kvq::test::gemma_model_dir()                \
               << " (run scripts/fetch-model.sh --gemma)";                                   \
      }                                                                                      \
      GTEST_SKIP() << "gemma-3-270m not fetched (scripts/fetch-model.sh --gemma); skipping"; \
    }                                                                                        \
  } while (0)
