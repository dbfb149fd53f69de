// `mla bench` and `mla tune` end to end on tiny shapes: the JSON other tools read has its keys,
// figures are positive, selections by flag work, and bad flags fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

using mla::test::run_mla;

TEST(BenchCli, MachineJsonHasTheDocumentedKeys) {
  const auto r = run_mla("bench machine --quick --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const auto* obj : {&j, &j.at("single_thread")}) {
    EXPECT_GE(obj->at("threads").get<int>(), 1);
    EXPECT_GT(obj->at("fp32_fma_gflops").get<double>(), 0.0);
    EXPECT_GE(obj->at("bf16_dot_gflops").get<double>(), 0.0);  // 0 without AVX512_BF16
    EXPECT_GT(obj->at("mem_bw_gbps").get<double>(), 0.0);
  }
}

TEST(BenchCli, DecodeJsonSelectsCasesByFlag) {
  const auto r = run_mla(
      "bench decode --json --b 1,2 --s-q 1 --h-q 16 --s-kv 128 --kv-dtype bf16,int8 --reps 1",
      false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 4u);  // 2 batch sizes × 2 formats
  for (const auto& c : j) {
    for (const char* k : {"b", "s_q", "h_q", "s_kv", "kv_dtype", "path", "us_per_call", "gflops",
                          "gbps", "pct_of_bf16_peak", "pct_of_roofline"})
      EXPECT_TRUE(c.contains(k)) << k;
    EXPECT_EQ(c.at("h_q"), 16);
    EXPECT_EQ(c.at("s_kv"), 128);
    EXPECT_GT(c.at("us_per_call").get<double>(), 0.0);
    EXPECT_GT(c.at("gflops").get<double>(), 0.0);
  }
}

TEST(BenchCli, PrefillJsonTimesThePathsAsked) {
  auto paths = [](const std::string& flag) {
    const auto r = run_mla("bench prefill --json --m 8 --l 32 --h-q 2 --reps 1" + flag, false);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    std::vector<std::string> out;
    for (const auto& c : nlohmann::json::parse(r.out)) {
      EXPECT_GT(c.at("ms_per_call").get<double>(), 0.0);
      out.push_back(c.at("path").get<std::string>());
    }
    return out;
  };
  EXPECT_EQ(paths(""), (std::vector<std::string>{"absorbed", "decompressed"}));
  EXPECT_EQ(paths(" --path decompressed"), std::vector<std::string>{"decompressed"});
  EXPECT_EQ(paths(" --path absorbed"), std::vector<std::string>{"absorbed"});
  EXPECT_NE(run_mla("bench prefill --path both,absorbed", false).exit_code, 0);
}

// --attention-dtype int8 times the decompressed path on the int8 tiles, stated against the
// int8 dot product's peak where the CPU has one (0 otherwise, and for the BF16 tiles); the
// crossover sweeps keep f32 | bf16.
TEST(BenchCli, PrefillStatesTheInt8TilesAgainstTheInt8Peak) {
  auto pct = [](const std::string& dtype) {
    const auto r = run_mla(
        "bench prefill --json --m 24 --l 32 --h-q 2 --reps 1 --path decompressed "
        "--attention-dtype " +
            dtype,
        false);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    return j.at(0).at("pct_of_int8_peak").get<double>();
  };
  EXPECT_EQ(pct("bf16"), 0.0);
  if (__builtin_cpu_supports("avx512vnni")) EXPECT_GT(pct("int8"), 0.0);
  EXPECT_NE(run_mla("tune --m 8 --l 64 --h-q 2 --attention-dtype int8", false).exit_code, 0);
}

TEST(BenchCli, TuneWritesTheThresholdFile) {
  const std::string path = testing::TempDir() + "/mla_tune_test.json";
  std::filesystem::remove(path);
  setenv("MLA_TUNE_FILE", path.c_str(), 1);  // never the user's own tuning file
  const auto t = run_mla("tune --m 8,16 --l 64 --h-q 4", false);
  unsetenv("MLA_TUNE_FILE");
  ASSERT_EQ(t.exit_code, 0) << t.out;
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  const auto j = nlohmann::json::parse(in);
  // The default sweep is BF16 attention (the engine's default): its own figure, within the swept
  // range 0 (decompressed always) .. 16 (absorbed always); the FP32 field keeps its default.
  // Stored is the engine's rule's T for the measured crossover over 64 cached tokens: at most
  // ⌈16 · (128 + 16) / 128⌉ = 18 (BenchCli.ThresholdFitsTheEnginesRule has the relation).
  const int bf16 = j.at("prefill_absorption_threshold_bf16").get<int>();
  EXPECT_GE(bf16, 0);
  EXPECT_LE(bf16, 18);

  // An FP32-attention sweep writes the FP32 figure and keeps the BF16 one.
  setenv("MLA_TUNE_FILE", path.c_str(), 1);
  const auto b = run_mla("tune --m 8,16 --l 64 --h-q 4 --attention-dtype f32", false);
  unsetenv("MLA_TUNE_FILE");
  ASSERT_EQ(b.exit_code, 0) << b.out;
  std::ifstream in2(path);
  const auto j2 = nlohmann::json::parse(in2);
  EXPECT_EQ(j2.at("prefill_absorption_threshold_bf16").get<int>(), bf16);
  const int threshold = j2.at("prefill_absorption_threshold").get<int>();
  EXPECT_GE(threshold, 0);
  EXPECT_LE(threshold, 18);
}

// Per swept context l, the crossover m measured there and the T stored for it satisfy the
// engine's rule (absorbed iff s_q (2 prior + s_q) <= 2 T prior) at its smallest T:
// m (2l + m) <= 2 T l < m (2l + m) + 2l; the figure written is the smallest over the contexts.
// A sweep over no cached context cannot set the rule's T: an error that says so.
TEST(BenchCli, ThresholdFitsTheEnginesRule) {
  const auto r = run_mla("bench threshold --m 4,8,16 --l 16,64 --h-q 4 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  int smallest = 1 << 30;
  for (const auto& c : j.at("contexts")) {
    const int64_t l = c.at("l"), m = c.at("crossover"), t = c.at("threshold");
    EXPECT_LE(m * (2 * l + m), 2 * t * l) << c.dump();
    EXPECT_LT(2 * t * l, m * (2 * l + m) + 2 * l) << c.dump();
    smallest = std::min(smallest, int(t));
  }
  EXPECT_EQ(j.at("threshold").get<int>(), smallest);
  const auto none = run_mla("bench threshold --m 4 --l 0 --h-q 4", true);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.out.find("cached"), std::string::npos) << none.out;
}

TEST(BenchCli, BadFlagsFail) {
  EXPECT_NE(run_mla("bench decode --kv-dtype fp4 --s-kv 64 --h-q 4", true).exit_code, 0);
  EXPECT_NE(run_mla("bench decode --s-kv 0", true).exit_code, 0);
  EXPECT_NE(run_mla("bench nothing", true).exit_code, 0);
}

}  // namespace
