// `kvq serve` as a process on the tiny model: it prints where it listens, answers, and on
// SIGTERM finishes what runs and exits 0; bad flags fail before loading.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "support/test_paths.h"
#include "support/tiny_chat_model.h"

namespace kvq::test {
namespace {

using namespace std::chrono_literals;

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Exit code of `pid` within `timeout`, or -1 (then it is killed).
int wait_exit(pid_t pid, std::chrono::seconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CliServe, AnswersAndExitsZeroOnSigterm) {
  TempDir dir;
  write_tiny_chat_model(dir.path());
  const std::filesystem::path log = dir / "stderr";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    const std::string bin = kvq_binary().string(), model = dir.path().string();
    execl(bin.c_str(), bin.c_str(), "serve", "--model", model.c_str(), "--port", "0", "--kv-cache",
          "int8", "--kv-cache-memory", "4", "--block-size", "32", "--preemption-mode", "recompute",
          nullptr);
    _exit(127);
  }
  // "[kvq serve] NAME on http://127.0.0.1:PORT ..."
  int port = 0;
  const std::string listening = "on http://127.0.0.1:";
  for (int i = 0; i < 600 && port == 0; ++i) {
    const std::string text = read_all(log);
    if (const std::size_t at = text.find(listening); at != std::string::npos) {
      port = std::atoi(text.c_str() + at + listening.size());
    }
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_GT(port, 0) << read_all(log);
  EXPECT_NE(read_all(log).find("int8:head"), std::string::npos) << read_all(log);
  EXPECT_NE(read_all(log).find("blocks of 32 positions"), std::string::npos) << read_all(log);

  httplib::Client c("127.0.0.1", port);
  const nlohmann::json body = {{"prompt", "Hello"}, {"max_tokens", 8}, {"temperature", 0}};
  const auto res = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;

  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, 30s), 0) << read_all(log);
  EXPECT_NE(read_all(log).find("finishing the running requests"), std::string::npos);
}

TEST(CliServe, BadFlagsFailBeforeLoading) {
  const CliResult r = run_kvq({"serve", "--model", "/nonexistent", "--kv-cache-memory", "0"}, 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--kv-cache-memory"), std::string::npos) << r.err;
  const CliResult b = run_kvq({"serve", "--model", "/nonexistent", "--block-size", "0"}, 60);
  EXPECT_NE(b.exit_code, 0);
  EXPECT_NE(b.err.find("--block-size"), std::string::npos) << b.err;
  const CliResult m =
      run_kvq({"serve", "--model", "/nonexistent", "--preemption-mode", "swap"}, 60);
  EXPECT_NE(m.exit_code, 0);
  EXPECT_NE(m.err.find("--preemption-mode"), std::string::npos) << m.err;
  const CliResult k = run_kvq({"serve", "--model", "/nonexistent", "--kv-cache", "int9"}, 60);
  EXPECT_NE(k.exit_code, 0);
  EXPECT_NE(k.err.find("int9"), std::string::npos) << k.err;
}

}  // namespace
}  // namespace kvq::test
