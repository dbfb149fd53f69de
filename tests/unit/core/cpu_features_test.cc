// Tests of run-time CPU feature detection: nesting of ISA levels, names, and the MLA_ISA cap.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mla {
namespace {

constexpr CpuIsa kAllIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                               CpuIsa::kAvx512Bf16};

TEST(CpuFeatures, ScalarIsAlwaysSupported) {
  EXPECT_TRUE(cpu_supports(CpuIsa::kScalar));
}

TEST(CpuFeatures, LevelsAreNested) {
  // Kernel dispatch picks the highest level and assumes every lower one.
  // a ⇒ b written as !a || b.
  EXPECT_TRUE(!cpu_supports(CpuIsa::kAvx512Bf16) || cpu_supports(CpuIsa::kAvx512));
  EXPECT_TRUE(!cpu_supports(CpuIsa::kAvx512) || cpu_supports(CpuIsa::kAvx2));
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(!f.avx512_bf16 || f.avx512);
  EXPECT_TRUE(!f.avx512 || f.avx2_fma);
}

TEST(CpuFeatures, SupportsMatchesFeatureFlags) {
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(cpu_supports(CpuIsa::kAvx2), f.avx2_fma);
  EXPECT_EQ(cpu_supports(CpuIsa::kAvx512), f.avx512);
  EXPECT_EQ(cpu_supports(CpuIsa::kAvx512Bf16), f.avx512_bf16);
  EXPECT_EQ(&f, &cpu_features());  // detected once
  EXPECT_FALSE(cpu_supports(CpuIsa(99)));
}

TEST(CpuFeatures, Names) {
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kScalar), "scalar");
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx2), "avx2");
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx512), "avx512");
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx512Bf16), "avx512bf16");
  EXPECT_STREQ(cpu_isa_name(CpuIsa(99)), "?");
  for (CpuIsa isa : kAllIsas) std::printf("%s: %d\n", cpu_isa_name(isa), int(cpu_supports(isa)));
}

#if defined(__x86_64__)
// What the hardware has, asked directly (not through cpu_features()), as the "avx2/avx512/bf16"
// flags string that a capped child process prints below.
std::string hardware_flags(int max_level) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  return std::string("flags=") + char('0' + (avx2 && max_level >= 1)) +
         char('0' + (avx512 && max_level >= 2)) + char('0' + (bf16 && max_level >= 3));
}

TEST(CpuFeatures, UncappedMatchesHardware) {
  if (std::getenv("MLA_ISA")) GTEST_SKIP() << "MLA_ISA is set for this run";
  const CpuFeatures& f = cpu_features();
  const std::string got = std::string("flags=") + char('0' + f.avx2_fma) + char('0' + f.avx512) +
                          char('0' + f.avx512_bf16);
  EXPECT_EQ(got, hardware_flags(3));
}

// Detection is cached on first use, so each cap is tried in a fresh process (the "threadsafe"
// death test style re-runs this binary) that prints what it sees.
void expect_capped(const char* cap, int max_level) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MLA_ISA", cap, 1);
        std::fprintf(stderr, "flags=%d%d%d\n", int(cpu_supports(CpuIsa::kAvx2)),
                     int(cpu_supports(CpuIsa::kAvx512)), int(cpu_supports(CpuIsa::kAvx512Bf16)));
        std::fflush(stderr);
        std::_Exit(cpu_supports(CpuIsa::kScalar) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), hardware_flags(max_level))
      << "MLA_ISA=" << cap;
}

TEST(CpuFeatures, MlaIsaCapsDetection) {
  expect_capped("scalar", 0);
  expect_capped("avx2", 1);
  expect_capped("avx512", 2);
  expect_capped("avx512bf16", 3);
  expect_capped("unknown-isa", 3);  // not a cap: full detection
}
#endif

}  // namespace
}  // namespace mla
