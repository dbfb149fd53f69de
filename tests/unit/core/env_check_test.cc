// check_environment(): MLA_ISA and MLA_NUM_THREADS values the readers would silently ignore are
// errors naming the variable and the value; valid and unset ones pass.
#include "core/env_check.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace mla {
namespace {

// Sets `name` to `value` for one check, then restores what was there.
Status check_with(const char* name, const char* value) {
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  setenv(name, value, 1);
  const Status s = check_environment();
  if (old)
    setenv(name, saved.c_str(), 1);
  else
    unsetenv(name);
  return s;
}

TEST(EnvCheck, ValidValuesPass) {
  for (const char* isa : {"scalar", "avx2", "avx512", "avx512bf16"})
    EXPECT_TRUE(check_with("MLA_ISA", isa).ok()) << isa;
  for (const char* n : {"1", "2", "1024"}) EXPECT_TRUE(check_with("MLA_NUM_THREADS", n).ok()) << n;
}

TEST(EnvCheck, BadValuesNameTheVariableAndValue) {
  for (const char* isa : {"avx9", "", "AVX2", "avx2 "}) {
    const Status s = check_with("MLA_ISA", isa);
    ASSERT_FALSE(s.ok()) << isa;
    EXPECT_NE(s.message().find("MLA_ISA is \"" + std::string(isa) + "\""), std::string::npos)
        << s.message();
  }
  for (const char* n : {"0", "-3", "two", "8x", "", "1025"}) {
    const Status s = check_with("MLA_NUM_THREADS", n);
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_NE(s.message().find("MLA_NUM_THREADS is \"" + std::string(n) + "\""), std::string::npos)
        << s.message();
  }
}

}  // namespace
}  // namespace mla
