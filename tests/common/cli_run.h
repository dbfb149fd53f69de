// Runs the built `mla` binary for the CLI tests: CTest puts this build's binary in $MLA_BINARY.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace mla::test {

// $MLA_BINARY if set, else the release build's binary.
inline std::string mla_binary() {
  if (const char* env = std::getenv("MLA_BINARY")) return env;
  return MLA_SOURCE_DIR "/build/release/bin/mla";
}

// Single-quotes s for the shell.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct RunResult {
  int exit_code = -1;  // 128 + signal when the process was killed, so a crash is never a pass
  std::string out;     // stdout, or stdout and stderr together when merged
};

// Runs `mla <args>` (args already shell-quoted where needed).
inline RunResult run_mla(const std::string& args, bool merge_stderr) {
  const std::string cmd =
      shell_quote(mla_binary()) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.exit_code = 128 + WTERMSIG(status);
  return r;
}

// Runs `mla` with each argument quoted; stdout and stderr together.
inline RunResult run_mla(const std::vector<std::string>& args) {
  std::string joined;
  for (const std::string& a : args) joined += (joined.empty() ? "" : " ") + shell_quote(a);
  return run_mla(joined, true);
}

}  // namespace mla::test
