// The abort path of MLA_CHECK.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace mla::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: MLA_CHECK(%s) failed: %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace mla::detail
