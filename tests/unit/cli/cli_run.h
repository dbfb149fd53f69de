// Runs the built `mla` binary for the CLI tests: CTest puts this build's binary in $MLA_BINARY.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mla::test {

// $MLA_BINARY if set, else the release build's binary.
inline std::string mla_binary() {
  if (const char* env = std::getenv("MLA_BINARY")) return env;
  return MLA_SOURCE_DIR "/build/release/bin/mla";
}

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout, or stdout and stderr together when merged
};

inline RunResult run_mla(const std::string& args, bool merge_stderr) {
  const std::string cmd =
      "'" + mla_binary() + "' " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace mla::test
