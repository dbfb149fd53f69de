// Runs the built `mla make-tiny` ($MLA_BINARY, set by CTest): a family is written and loads; bad
// flags exit non-zero with a message.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "checkpoint_test_util.h"
#include "cli_run.h"
#include "model/model_weights.h"

namespace mla {
namespace {

class MakeTinyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::mla_binary()))
        << test::mla_binary() << " is not built";
  }
  testing_model::TempDir dir_;
};

TEST_F(MakeTinyCli, WritesALoadableCheckpoint) {
  const std::string out = dir_.file("k2");
  const test::RunResult r =
      test::run_mla("make-tiny --family kimi-k2 --layers 2 --seed 5 --out '" + out + "'", true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("kimi_k2"), std::string::npos) << r.out;
  Result<ModelWeights> w = load_model_weights(out);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->config.num_hidden_layers, 2);
  EXPECT_TRUE(w->layers[1].kv_b_proj.fp8());
}

// --no-mtp: config.json holds no MTP layer and the files no tensor of one (V3's follows the
// decoder layers: model.layers.<num_hidden_layers>.*), where the default writes both.
TEST_F(MakeTinyCli, NoMtpWritesNoMultiTokenPredictionLayer) {
  for (const bool mtp : {true, false}) {
    const std::string out = dir_.file(mtp ? "with" : "without");
    const test::RunResult r = test::run_mla(
        "make-tiny --family v3 --layers 2 --out '" + out + "'" + (mtp ? "" : " --no-mtp"), true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    Result<ModelWeights> w = load_model_weights(out);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(w->config.num_nextn_predict_layers, mtp ? 1 : 0);
    EXPECT_EQ(w->checkpoint.find("model.layers.2.eh_proj.weight") != nullptr, mtp) << out;
    EXPECT_EQ(w->checkpoint.find("model.layers.2.mlp.experts.0.up_proj.weight") != nullptr, mtp);
  }
}

TEST_F(MakeTinyCli, BadFlagsFail) {
  for (const std::string args :
       {"make-tiny --family v9 --out x", "make-tiny --family v3",
        "make-tiny --family v3 --fp8 --bf16 --out x", "make-tiny --family v3 --layers 0 --out x"}) {
    const test::RunResult r = test::run_mla(args, true);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_FALSE(r.out.empty()) << args;
  }
}

}  // namespace
}  // namespace mla
