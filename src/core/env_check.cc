#include "core/env_check.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

namespace mla {

Status check_environment() {
  if (const char* isa = std::getenv("MLA_ISA")) {
    bool known = false;
    for (const char* v : {"scalar", "avx2", "avx512", "avx512bf16"})
      known = known || !std::strcmp(isa, v);
    if (!known)
      return invalid_argument(fmt::format(
          "MLA_ISA is \"{}\"; it must be scalar, avx2, avx512 or avx512bf16 (or unset)", isa));
  }
  if (const char* env = std::getenv("MLA_NUM_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > 1024)
      return invalid_argument(fmt::format(
          "MLA_NUM_THREADS is \"{}\"; it must be an integer from 1 to 1024 (or unset)", env));
  }
  return Status();
}

}  // namespace mla
