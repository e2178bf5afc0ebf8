// Runs the built `kvq` binary through the shell and captures stdout, stderr and the exit code.
// A run is killed after `timeout_s` seconds (exit code 124), so a hang fails a test instead of
// hanging ctest.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_paths.h"

namespace kvq::test {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string shell_quote(const std::string& s) {
  // Appends only: GCC 12 reports a false -Wrestrict on some std::string operator+ chains.
  std::string q(1, '\'');
  for (char c : s) {
    if (c == '\'') {
      q.append("'\\''");
    } else {
      q.push_back(c);
    }
  }
  q.push_back('\'');
  return q;
}

inline CliResult run_kvq(const std::vector<std::string>& args, int timeout_s = 1800) {
  TempDir tmp;
  std::string cmd = "timeout -k 5 " + std::to_string(timeout_s) + " ";
  cmd.append(shell_quote(kvq_binary().string()));
  for (const std::string& a : args) {
    cmd.push_back(' ');
    cmd.append(shell_quote(a));
  }
  cmd.append(" 2>");
  cmd.append(shell_quote((tmp / "stderr").string()));
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(tmp / "stderr", std::ios::binary);
  std::ostringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  return r;
}

}  // namespace kvq::test
