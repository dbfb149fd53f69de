// `mla bench model` end to end on a tiny checkpoint: one segment per `--segment` decode steps, each
// with a probe on both sides; the figures agree with each other; bad input fails with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "temp_dir.h"

namespace {

using mla::test::run_mla;

class BenchModelCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto r = run_mla("make-tiny --family v2-lite --seed 4 --out '" + dir_.path() + "'", true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // The shortest measured run (2 decode steps, one segment, one probe sweep) with `flags`.
  mla::test::RunResult quick_json(const std::string& flags) const {
    return run_mla("bench model -m '" + dir_.path() +
                       "' --tokens 2 --segment 2 --warmup 0 --prompt-len 3 --sweeps 1 --json " +
                       flags,
                   false);
  }
  mla::test::TempDir dir_{"bench_model"};
};

TEST_F(BenchModelCli, EverySegmentIsHeldToTheProbesBesideIt) {
  // 7 steps in segments of 3: rounded up to 3 segments.
  const auto r = run_mla("bench model -m '" + dir_.path() +
                             "' --tokens 7 --segment 3 --warmup 1 --prompt-len 5 --sweeps 1 --json",
                         false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const double bytes = j.at("active_weight_bytes_per_token").get<double>();
  EXPECT_GT(bytes, 0.0);
  EXPECT_EQ(j.at("prompt_tokens").get<int>(), 5);
  EXPECT_GT(j.at("prefill_tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(j.at("prefill_gflops").get<double>(), 0.0);
  EXPECT_GT(j.at("peak_gflops").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j.at("prefill_fraction_of_peak").get<double>(),
                   j.at("prefill_gflops").get<double>() / j.at("peak_gflops").get<double>());
  const auto& segs = j.at("segments");
  ASSERT_EQ(segs.size(), 3u);
  double min_fraction = 1e30;
  for (const auto& s : segs) {
    EXPECT_EQ(s.at("tokens").get<int>(), 3);
    const double secs = s.at("seconds").get<double>(), tps = s.at("tokens_per_s").get<double>();
    ASSERT_GT(secs, 0.0);
    EXPECT_DOUBLE_EQ(tps, 3 / secs);
    EXPECT_DOUBLE_EQ(s.at("effective_gbps").get<double>(), tps * bytes * 1e-9);
    const double before = s.at("probe_gbps_before").get<double>();
    const double after = s.at("probe_gbps_after").get<double>();
    EXPECT_GT(before, 0.0);
    EXPECT_GT(after, 0.0);
    EXPECT_DOUBLE_EQ(s.at("fraction").get<double>(),
                     s.at("effective_gbps").get<double>() / std::max(before, after));
    min_fraction = std::min(min_fraction, s.at("fraction").get<double>());
  }
  // Consecutive segments share the probe between them.
  EXPECT_EQ(segs[0].at("probe_gbps_after"), segs[1].at("probe_gbps_before"));
  EXPECT_EQ(segs[1].at("probe_gbps_after"), segs[2].at("probe_gbps_before"));
  EXPECT_DOUBLE_EQ(j.at("fraction_min").get<double>(), min_fraction);
  EXPECT_GE(j.at("fraction").get<double>(), min_fraction);
}

// --lm-head-dtype fp8 / int8: lm_head (v2-lite: BF16, [vocab, D]) read as 1 byte per weight plus
// one FP32 scale per 128x128 block, so a decode token reads exactly that much less.
TEST_F(BenchModelCli, Fp8LmHeadReadsLessPerToken) {
  auto bytes = [&](const std::string& flag) {
    const auto r = quick_json(flag);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    return std::make_pair(j.at("active_weight_bytes_per_token").get<int64_t>(),
                          j.at("lm_head_dtype").get<std::string>());
  };
  const auto [base, base_dtype] = bytes("");
  const auto [fp8, fp8_dtype] = bytes("--lm-head-dtype fp8");
  EXPECT_EQ(base_dtype, "bf16");
  EXPECT_EQ(fp8_dtype, "fp8");
  const auto cfg = nlohmann::json::parse(std::ifstream(dir_.path() + "/config.json"));
  const int64_t v = cfg.at("vocab_size"), d = cfg.at("hidden_size");
  const int64_t scales = 4 * ((v + 127) / 128) * ((d + 127) / 128);
  EXPECT_EQ(base - fp8, v * d - scales);
  const auto [int8, int8_dtype] = bytes("--lm-head-dtype int8");
  EXPECT_EQ(int8_dtype, "int8");
  EXPECT_EQ(int8, fp8);
  EXPECT_NE(run_mla("bench model -m '" + dir_.path() + "' --lm-head-dtype int4", true).exit_code,
            0);
}

// --kv-dtype sets the cache's records (the JSON names them); a format it does not know is refused
// with the flag named.
TEST_F(BenchModelCli, KvDtypeIsTheCaches) {
  for (const char* kv : {"bf16", "int8"}) {
    const auto r = quick_json(std::string("--kv-dtype ") + kv);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out).at("kv_dtype").get<std::string>(), kv);
  }
  const auto bad = run_mla("bench model -m '" + dir_.path() + "' --kv-dtype int4", true);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("int4"), std::string::npos) << bad.out;
}

TEST_F(BenchModelCli, TableAndBadInput) {
  const auto r =
      run_mla("bench model -m '" + dir_.path() + "' --tokens 2 --segment 1 --sweeps 1", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* w : {"weights read per decode token", "effective GB/s", "fraction", "median"})
    EXPECT_NE(r.out.find(w), std::string::npos) << w;
  EXPECT_NE(run_mla("bench model -m '" + dir_.path() + "' --segment 0", true).exit_code, 0);
  const auto missing = run_mla("bench model -m '" + dir_.path() + "/nothing'", true);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.out.find("nothing"), std::string::npos) << missing.out;
}

}  // namespace
