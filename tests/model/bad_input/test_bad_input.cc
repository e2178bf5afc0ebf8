// Bad inputs through the real `kvq` binary (issue 21), one test per class of failure: every run
// must exit non-zero (not by a signal, not by the timeout), name the file / tensor / flag in its
// message, leave nothing on disk and leave the existing files as they were. Label: bad_input.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/cli/cli_run.h"
#include "support/test_paths.h"
#include "unit/io_gguf/gguf_builder.h"

namespace kvq::test {
namespace {
namespace fs = std::filesystem;

std::string read(const fs::path& p) { return read_bytes(p); }

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// Every entry under `dir` (hidden ones included) with its content, or its size and mtime when
// large: equal snapshots mean nothing was added, removed or changed.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string rel = fs::relative(it->path(), dir).string();
    if (it->is_symlink()) {
      out[rel] = "-> " + fs::read_symlink(it->path()).string();
    } else if (it->is_regular_file()) {
      const auto size = it->file_size();
      out[rel] = size <= (1u << 20)
                     ? read(it->path())
                     : std::to_string(size) + " bytes, mtime " +
                           std::to_string(it->last_write_time().time_since_epoch().count());
    } else {
      out[rel] = it->is_directory() ? "dir" : "special";
    }
  }
  return out;
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override { KVQ_REQUIRE_DEFAULT_MODEL(); }

  // A model directory in tmp_ whose files link to the default model's, except `own` (which the
  // test writes).
  fs::path model_copy(const std::string& name, const std::vector<std::string>& own = {}) {
    const fs::path dir = tmp_ / name;
    fs::create_directory(dir);
    for (const auto& e : fs::directory_iterator(default_model_dir())) {
      const std::string f = e.path().filename().string();
      if (f.starts_with(".") || std::find(own.begin(), own.end(), f) != own.end()) continue;
      fs::create_symlink(e.path(), dir / f);
    }
    return dir;
  }

  fs::path recipe(const std::string& name, const std::string& text) {
    write(tmp_ / name, text);
    return tmp_ / name;
  }

  // Runs kvq; expects a clean refusal naming every one of `names`, and tmp_ unchanged.
  void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& names,
                      int timeout_s = 120) {
    const auto before = snapshot(tmp_.path());
    const CliResult r = run_kvq(args, timeout_s);
    const std::string what = ::testing::PrintToString(args).substr(0, 300);
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_NE(r.exit_code, 124) << "timed out: " << what;
    EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << what << "\n" << r.err.substr(0, 500);
    EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err.substr(0, 500);
    EXPECT_EQ(r.err.find("unexpected failure"), std::string::npos) << r.err.substr(0, 500);
    for (const std::string& n : names)
      EXPECT_NE(r.err.find(n), std::string::npos)
          << "no '" << n << "' in: " << r.err.substr(0, 500);
    EXPECT_EQ(snapshot(tmp_.path()), before) << "files changed by " << what;
  }

  std::vector<std::string> oneshot(const fs::path& recipe_path, const fs::path& dataset) {
    return {"oneshot",
            "--model",
            default_model_dir().string(),
            "--recipe",
            recipe_path.string(),
            "--dataset",
            dataset.string(),
            "--num-calibration-samples",
            "1",
            "--report",
            (tmp_ / "report.json").string()};
  }

  fs::path dataset() {
    write(tmp_ / "data.jsonl", "{\"text\": \"a calibration line\"}\n");
    return tmp_ / "data.jsonl";
  }

  TempDir tmp_;
};

constexpr const char* kRecipeBody = R"(
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      config_groups:
        attention:
          targets: [TARGET]
          input_activations: {num_bits: 8, type: float, strategy: tensor, symmetric: true,
                              dynamic: false, observer: static_minmax}
)";

std::string recipe_with_target(const std::string& target) {
  std::string r = kRecipeBody;
  r.replace(r.find("TARGET"), 6, target);
  return r;
}

// Nesting the JSON library would recurse on (stack overflow), in every JSON input, even under a
// key kvq never reads.
TEST_F(BadInput, DeeplyNestedJsonInEveryInput) {
  constexpr std::size_t kDepth = 1'000'000;
  const std::string config = read(default_model_dir() / "config.json");
  const std::string deep_config =
      config.substr(0, config.rfind('}')) + ", \"x\": " + nested(kDepth) + "}";
  const fs::path m1 = model_copy("m1", {"config.json"});
  write(m1 / "config.json", deep_config);
  expect_refused({"inspect", m1.string(), "--json"}, {"m1/config.json", "nested deeper"});

  const std::string tok = read(default_model_dir() / "tokenizer.json");
  const fs::path m2 = model_copy("m2", {"tokenizer.json"});
  write(m2 / "tokenizer.json", tok.substr(0, tok.rfind('}')) + ", \"x\": " + nested(kDepth) + "}");
  expect_refused({"generate", "--model", m2.string(), "--prompt", "Hi", "--max-new-tokens", "1"},
                 {"m2/tokenizer.json", "nested deeper"});

  const fs::path m3 = tmp_ / "m3";
  fs::create_directory(m3);
  fs::copy_file(test_data_dir() / "tiny_llama/gqa/config.json", m3 / "config.json");
  const std::string header =
      "{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, "
      "4], \"x\": " +
      nested(kDepth) + "}}";
  std::string st(8, '\0');
  for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write(m3 / "model.safetensors", st + header + std::string(4, '\0'));
  expect_refused({"inspect", m3.string()}, {"m3/model.safetensors", "nested deeper"});

  // 120,000 levels: within the 256 KB a recipe may have.
  const fs::path json_recipe = recipe("deep.json", "{\"x\": " + nested(120'000) + "}");
  expect_refused(oneshot(json_recipe, dataset()), {"deep.json", "nested deeper"});

  write(tmp_ / "deep.jsonl", "{\"text\": \"a\", \"x\": " + nested(kDepth) + "}\n");
  const fs::path ok_recipe = fs::path(KVQ_SOURCE_DIR) / "examples/recipes/kv_fp8_head.yaml";
  expect_refused(oneshot(ok_recipe, tmp_ / "deep.jsonl"), {"deep.jsonl:1", "nested deeper"});
}

// A number no double holds: an error naming the file, not "unexpected failure".
TEST_F(BadInput, NumbersOutOfRange) {
  const std::string config = read(default_model_dir() / "config.json");
  const fs::path m = model_copy("m", {"config.json"});
  write(m / "config.json", config.substr(0, config.rfind('}')) + ", \"rope_theta\": 1e400}");
  expect_refused({"inspect", m.string()}, {"m/config.json", "1e400"});
  write(tmp_ / "big.jsonl", "{\"text\": 1e400}\n");
  const fs::path ok_recipe = fs::path(KVQ_SOURCE_DIR) / "examples/recipes/kv_fp8_head.yaml";
  expect_refused(oneshot(ok_recipe, tmp_ / "big.jsonl"), {"big.jsonl:1", "1e400"});
  const fs::path json_recipe = recipe("big.json", "{\"x\": 1e400}");
  expect_refused(oneshot(json_recipe, dataset()), {"big.json", "1e400"});
}

// A FIFO or a directory where a file belongs: refused at once (a FIFO used to block forever).
TEST_F(BadInput, InputsMustBeRegularFiles) {
  const fs::path m1 = model_copy("m1", {"model.safetensors"});
  ASSERT_EQ(::mkfifo((m1 / "model.safetensors").c_str(), 0644), 0);
  expect_refused({"inspect", m1.string()}, {"m1/model.safetensors", "not a regular file"}, 60);
  ASSERT_EQ(::mkfifo((tmp_ / "model.gguf").c_str(), 0644), 0);
  expect_refused({"inspect", (tmp_ / "model.gguf").string()}, {"model.gguf", "not a regular file"},
                 60);
  const fs::path m2 = model_copy("m2", {"tokenizer.json"});
  fs::create_directory(m2 / "tokenizer.json");
  expect_refused({"generate", "--model", m2.string(), "--prompt", "Hi"},
                 {"m2/tokenizer.json", "not a regular file"}, 60);
}

// Names taken from files never reach a recursive matcher (std::regex overflowed the stack on a
// 40,000-character GGUF tensor name and on a long number in a recipe).
TEST_F(BadInput, LongNamesAndScalars) {
  GgufBuilder g;
  const std::string name = "blk.0." + std::string(100'000, 'a') + ".weight";
  g.header(3, 1, 1).key("general.architecture", 8).str("x");
  g.tensor(name, {32}, 0, 0).pad_to(32).zeros(128);
  write(tmp_ / "long.gguf", std::string(g.bytes.begin(), g.bytes.end()));
  expect_refused({"inspect", (tmp_ / "long.gguf").string()}, {"long.gguf", "tensor name"});

  std::string long_number = recipe_with_target("LlamaAttention");
  long_number.replace(long_number.find("num_bits: 8"), 11,
                      "num_bits: " + std::string(200'000, '1'));
  const fs::path r = recipe("long.yaml", long_number);
  expect_refused(oneshot(r, dataset()), {"long.yaml"});
}

// Limits: a GGUF metadata array whose values would take gigabytes of RAM, a YAML alias bomb, a
// backtracking `re:` target, absurd config.json sizes, a huge tokenizer id.
TEST_F(BadInput, ResourceLimits) {
  GgufBuilder g;
  g.header(3, 0, 1).key("big", 9).put<std::uint32_t>(0).put<std::uint64_t>(9'000'000);
  g.zeros(9'000'000);
  write(tmp_ / "big.gguf", std::string(g.bytes.begin(), g.bytes.end()));
  expect_refused({"inspect", (tmp_ / "big.gguf").string()}, {"big.gguf", "'big'"});

  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  expect_refused(
      oneshot(recipe("bomb.yaml", bomb + recipe_with_target("LlamaAttention")), dataset()),
      {"bomb.yaml", "nodes"}, 60);

  const fs::path bt = recipe("bt.yaml", recipe_with_target(R"x("re:([\\w.]+)+(?!)")x"));
  expect_refused(oneshot(bt, dataset()), {"re:([\\w.]+)+(?!)", "match limit"}, 60);

  const std::string config = read(default_model_dir() / "config.json");
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"num_hidden_layers", "1000000000"}, {"head_dim", "2147483648"}}) {
    const fs::path m = model_copy("m-" + key, {"config.json"});
    write(m / "config.json",
          config.substr(0, config.rfind('}')) + ", \"" + key + "\": " + value + "}");
    expect_refused({"generate", "--model", m.string(), "--prompt", "Hi"}, {"config.json", key}, 60);
  }
  std::string tok = read(default_model_dir() / "tokenizer.json");
  const std::string first_id = "\"id\": 0,";  // the first added token's
  ASSERT_NE(tok.find(first_id), std::string::npos);
  tok.replace(tok.find(first_id), first_id.size(), "\"id\": 2147483647,");
  const fs::path m = model_copy("m-tok", {"tokenizer.json"});
  write(m / "tokenizer.json", tok);
  expect_refused({"generate", "--model", m.string(), "--prompt", "Hi"},
                 {"tokenizer.json", "2147483647"}, 60);
}

// 100,000 header entries: parsed in linear time (it took minutes: quadratic insertion).
TEST_F(BadInput, ManySafetensorsEntriesLoadQuickly) {
  const fs::path m = tmp_ / "many";
  fs::create_directory(m);
  fs::copy_file(test_data_dir() / "tiny_llama/gqa/config.json", m / "config.json");
  std::string header = "{";
  constexpr int kEntries = 100'000;
  for (int i = 0; i < kEntries; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1]," +
              "\"data_offsets\":[" + std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  header += "}";
  std::string st(8, '\0');
  for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write(m / "model.safetensors", st + header + std::string(4 * kEntries, '\0'));
  const CliResult r = run_kvq({"inspect", m.string(), "--no-tensors"}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.err.substr(0, 500);
  EXPECT_NE(r.out.find("100000"), std::string::npos) << r.out.substr(0, 500);
}

// A GGUF token that is not UTF-8: refused naming the file and the token (it ended as a JSON
// type_error naming neither), before OUT_DIR exists.
TEST_F(BadInput, GgufTokenNotUtf8) {
  std::string gguf = read(default_gguf());
  const std::string token = std::string("\x0c\0\0\0\0\0\0\0", 8) + "<|im_start|>";
  const std::size_t at = gguf.find(token);
  ASSERT_NE(at, std::string::npos);
  gguf[at + 9] = '\xff';  // "<\xff|im_start|>"
  write(tmp_ / "bad.gguf", gguf);
  expect_refused({"convert", (tmp_ / "bad.gguf").string(), (tmp_ / "out").string()},
                 {"bad.gguf", "tokenizer.ggml.tokens", "<\\xff"});
}

// NaN / Inf weights: refused at load naming the tensor (perplexity used to print -nan, exit 0).
TEST_F(BadInput, NonFiniteWeights) {
  const fs::path m = tmp_ / "nan";
  fs::create_directory(m);
  const fs::path tiny = test_data_dir() / "tiny_llama/gqa";
  fs::copy_file(tiny / "config.json", m / "config.json");
  std::string st = read(tiny / "model.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(st[i]);
  const std::string name = "\"model.layers.1.mlp.up_proj.weight\"";
  const std::size_t key = st.find(name);
  ASSERT_LT(key, 8 + n);
  const std::size_t begin = std::stoull(st.substr(st.find('[', st.find("data_offsets", key)) + 1));
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(st.data() + 8 + n + begin + 4 * 7, &inf, 4);
  write(m / "model.safetensors", st);
  expect_refused({"bench", "--model", m.string(), "--no-machine", "--prefill", "4", "--contexts",
                  "4", "--repeats", "1", "--decode-steps", "1", "--threads", "1"},
                 {"model.layers.1.mlp.up_proj.weight", "inf"});
}

// Flag values are checked before any work (compare --decode-context -5 failed after the whole
// evaluation; --ctx 10^8 and bench --prefill 100000 ran for minutes).
TEST_F(BadInput, FlagsCheckedBeforeWork) {
  const std::string model = default_model_dir().string();
  expect_refused(
      {"compare", "--model", model, "--decode-context", "-5", "--out", (tmp_ / "out").string()},
      {"--decode-context"}, 30);
  expect_refused({"generate", "--model", model, "--prompt", "Hi", "--ctx", "100000000"}, {"--ctx"},
                 30);
  expect_refused({"bench", "--model", model, "--prefill", "100000", "--no-machine"}, {"--prefill"},
                 30);
  expect_refused(
      {"perplexity", "--model", model, "--text", (tmp_ / "t.txt").string(), "--ctx", "100000000"},
      {"--ctx"}, 30);
}

// kvq allocate: a base with exceptions or no format, an upgrade that is unknown or no larger, a
// downgrade that is unknown or no smaller, a budget below the base (or the downgrade), and an
// --out whose allocation.json is the --text: refused before any work, nothing written.
TEST_F(BadInput, AllocateRefusesBadPlans) {
  const std::vector<std::string> model = {"allocate", "--model", default_model_dir().string(),
                                          "--out", (tmp_ / "alloc").string()};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), model.begin(), model.end());
    return extra;
  };
  expect_refused(with({"--base", "int4_g32+v1=int8_g32"}), {"--base", "int4_g32+v1=int8_g32"}, 30);
  expect_refused(with({"--base", "auto"}), {"--base"}, 30);
  expect_refused(with({"--upgrade", "int9"}), {"--upgrade", "int9"}, 30);
  expect_refused(with({"--base", "int8_g32", "--upgrade", "int4_g32"}),
                 {"--upgrade int4_g32", "no larger than int8_g32"}, 30);
  expect_refused(with({"--base", "int4_g32", "--bits", "4.25"}), {"--bits", "4.5"}, 30);
  expect_refused(with({"--downgrade", "int2"}), {"--downgrade", "int2"}, 30);
  expect_refused(with({"--base", "nl3_g64", "--downgrade", "nl4_g64"}),
                 {"--downgrade nl4_g64", "no smaller than nl3_g64"}, 30);
  expect_refused(with({"--downgrade", "nl3_g64", "--bits", "3"}),
                 {"--bits 3", "--downgrade", "3.25"}, 30);
  fs::create_directory(tmp_ / "out");
  write(tmp_ / "out" / "allocation.json", "my notes\n");
  expect_refused({"allocate", "--model", default_model_dir().string(), "--text",
                  (tmp_ / "out" / "allocation.json").string(), "--out", (tmp_ / "out").string()},
                 {"--out", "--text", "allocation.json"}, 30);
}

// An output may not be an input: convert --force into the GGUF's own directory used to delete it.
TEST_F(BadInput, OutputIsNotAnInput) {
  fs::create_directory(tmp_ / "dir");
  fs::create_symlink(default_gguf(), tmp_ / "dir" / "model.gguf");
  expect_refused(
      {"convert", (tmp_ / "dir" / "model.gguf").string(), (tmp_ / "dir").string(), "--force"},
      {"OUT_DIR", "would replace", "model.gguf"});
  fs::create_directory(tmp_ / "out");
  write(tmp_ / "out" / "results.md", "my notes\n");
  expect_refused({"compare", "--model", default_model_dir().string(), "--text",
                  (tmp_ / "out" / "results.md").string(), "--out", (tmp_ / "out").string()},
                 {"--out", "--text", "results.md"}, 60);
}

// Two runs writing the same --output without --overwrite: the second to finish fails at its
// rename and the first's checkpoint stays (both used to succeed, the first's output gone).
TEST_F(BadInput, ConcurrentRunsDoNotReplaceEachOther) {
  const fs::path recipe_path = fs::path(KVQ_SOURCE_DIR) / "examples/recipes/kv_fp8_head.yaml";
  const fs::path data = dataset();
  const std::vector<std::string> args = {"oneshot",
                                         "--model",
                                         default_model_dir().string(),
                                         "--recipe",
                                         recipe_path.string(),
                                         "--dataset",
                                         data.string(),
                                         "--num-calibration-samples",
                                         "1",
                                         "--output",
                                         (tmp_ / "ckpt").string()};
  CliResult a, b;
  std::thread ta([&] { a = run_kvq(args, 300); });
  std::thread tb([&] { b = run_kvq(args, 300); });
  ta.join();
  tb.join();
  EXPECT_EQ((a.exit_code == 0) + (b.exit_code == 0), 1) << a.err << "\n---\n" << b.err;
  const CliResult& failed = a.exit_code == 0 ? b : a;
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  EXPECT_NE(failed.err.find("ckpt"), std::string::npos) << failed.err;
  EXPECT_TRUE(fs::exists(tmp_ / "ckpt" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(tmp_ / "ckpt" / "config.json"));
  for (const auto& e : fs::directory_iterator(tmp_.path()))
    EXPECT_FALSE(e.path().filename().string().starts_with(".ckpt.")) << e.path();
}

// SIGINT during a save removes the unfinished output and exits 130; a temporary left by a killed
// run (its pid gone) is removed by the next run writing the same target.
TEST_F(BadInput, InterruptsLeaveNothingBehind) {
  const fs::path out = tmp_ / "conv";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(kvq_binary().c_str(), "kvq", "-q", "convert", default_gguf().c_str(), out.c_str(),
            "--dtype", "bfloat16", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string temp_prefix = ".conv.tmpdir-" + std::to_string(pid) + "-";
  bool seen = false;
  for (int i = 0; i < 1200 && !seen; ++i) {  // up to 60 s
    for (const auto& e : fs::directory_iterator(tmp_.path()))
      seen = seen || e.path().filename().string().starts_with(temp_prefix);
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(seen) << "the convert never started writing";
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  if (WIFEXITED(status)) {
    EXPECT_EQ(WEXITSTATUS(status), 130);
  }
  EXPECT_TRUE(fs::is_empty(tmp_.path()))
      << "left behind: " << fs::directory_iterator(tmp_.path())->path();

  // A killed run's leftover: pid 2^31 - 2 exists nowhere.
  const fs::path leftover = tmp_ / ".conv.tmpdir-2147483646-abc";
  fs::create_directory(leftover);
  write(leftover / "model.safetensors", "half");
  const CliResult r =
      run_kvq({"convert", default_gguf().string(), out.string(), "--dtype", "bfloat16"}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_NE(r.err.find("interrupted kvq run (pid 2147483646)"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
}

}  // namespace
}  // namespace kvq::test
