// `mla bench offline` end to end on a tiny checkpoint: the JSON has the documented keys and sane
// figures, a pool too small for the load preempts and still finishes, bad flags fail.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "temp_dir.h"

namespace {

using mla::test::run_mla;

class BenchOfflineCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto r = run_mla("make-tiny --family v3 --seed 3 --out '" + dir_.path() + "'", true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  mla::test::TempDir dir_{"bench_offline"};
};

TEST_F(BenchOfflineCli, JsonHasTheDocumentedKeys) {
  const auto r = run_mla("bench offline -m '" + dir_.path() +
                             "' --num-prompts 6 --input-len 40 --output-len 5 --prefix-len 32 "
                             "--max-num-seqs 3 --num-blocks 9 --page-size 16 --json",
                         false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"requests_per_s", "input_tokens_per_s", "output_tokens_per_s"})
    EXPECT_GT(j.at(k).get<double>(), 0.0) << k;
  for (const char* k : {"ttft_ms", "tpot_ms"})
    for (const char* s : {"mean", "p50", "p99"}) EXPECT_GT(j.at(k).at(s).get<double>(), 0.0) << k;
  EXPECT_LE(j.at("ttft_ms").at("p50").get<double>(), j.at("ttft_ms").at("p99").get<double>());
  EXPECT_GE(j.at("preemptions").get<int>(), 0);
  // 3 at a time: the later ones find the 32-token prefix (two pages) cached.
  EXPECT_GT(j.at("prefix_cache_hit_rate").get<double>(), 0.0);
  EXPECT_LE(j.at("prefix_cache_hit_rate").get<double>(), 1.0);
  EXPECT_NEAR(j.at("output_tokens_per_s").get<double>() / j.at("requests_per_s").get<double>(), 5,
              1e-6);
}

TEST_F(BenchOfflineCli, TableAndBadFlags) {
  const auto r = run_mla(
      "bench offline -m '" + dir_.path() + "' --num-prompts 2 --input-len 8 --output-len 2", false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* w : {"requests/s", "output tok/s", "TTFT", "TPOT", "preemptions"})
    EXPECT_NE(r.out.find(w), std::string::npos) << w;
  EXPECT_NE(run_mla("bench offline --num-prompts 2", true).exit_code, 0);  // no model
  const auto big = run_mla("bench offline -m '" + dir_.path() +
                               "' --input-len 100 --output-len 100 --num-blocks 2 --page-size 16",
                           true);
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE(big.out.find("KV pages"), std::string::npos) << big.out;
}

}  // namespace
