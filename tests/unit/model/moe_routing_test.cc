// Expert selection against hand-computed goldens (docs/MODELS.md §MoE routing, §Routing tests).
#include "model/moe_routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mla {
namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(const MoeRouting& r, std::vector<float> logits, std::vector<float> bias = {}) {
  Routed out{std::vector<int32_t>(size_t(r.top_k)), std::vector<float>(size_t(r.top_k))};
  std::vector<float> scratch(2 * size_t(r.num_experts));
  route_token(r, logits, bias, scratch, out.experts.data(), out.weights.data());
  return out;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// FP32 softmax / sigmoid of O(1) logits: a few ulps of relative error.
constexpr float kTol = 1e-6f;

TEST(MoeRouting, V2GreedySoftmaxScalesUnnormalisedWeights) {
  MoeRouting r{MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, 4, 2, 1, 1, false, 16.0f};
  const Routed o = route(r, {1, 2, 3, 0});
  const double sum = std::exp(0) + std::exp(1) + std::exp(2) + std::exp(3);
  EXPECT_EQ(o.experts, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(o.weights[0], 16 * std::exp(3) / sum, 16 * kTol);
  EXPECT_NEAR(o.weights[1], 16 * std::exp(2) / sum, 16 * kTol);
}

TEST(MoeRouting, V2NormTopkProbNormalisesAndDoesNotScale) {
  MoeRouting r{MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, 4, 2, 1, 1, true, 16.0f};
  const Routed o = route(r, {1, 2, 3, 0});
  EXPECT_NEAR(o.weights[0], std::exp(3) / (std::exp(3) + std::exp(2)), kTol);
  EXPECT_NEAR(o.weights[0] + o.weights[1], 1.0f, kTol);
}

TEST(MoeRouting, V2GroupLimitedKeepsTheGroupsWithTheBestMax) {
  // 4 groups of 2; group maxima 5, 4, 4.5, 0 → groups 0 and 2 kept. Unlimited greedy would take
  // expert 2 or 3 (logit 4) third; the group limit takes expert 1 (logit -4) instead.
  MoeRouting r{MoeScoring::kSoftmax, MoeTopkMethod::kGroupLimitedGreedy, 8, 3, 4, 2, false, 1.0f};
  const std::vector<float> u = {5, -4, 4, 4, 4.5f, -5, 0, 0};
  const Routed o = route(r, u);
  EXPECT_EQ(o.experts, (std::vector<int32_t>{0, 4, 1}));
  double sum = 0;
  for (float x : u) sum += std::exp(x);
  EXPECT_NEAR(o.weights[2], std::exp(-4) / sum, kTol);  // softmax over all 8, unmasked
}

TEST(MoeRouting, V3NoauxTcMasksDroppedGroupsWithMinusInfinity) {
  // Bias -2 makes every biased score negative: masking dropped groups with 0 would pick their
  // experts; -inf must not. Group score = sum of the top two biased scores.
  MoeRouting r{MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, 8, 2, 4, 2, true, 2.5f};
  const std::vector<float> u = {3, 2.9f, -3, -3, 0, 0.1f, -1, -1};
  const std::vector<float> bias(8, -2.0f);
  const Routed o = route(r, u, bias);
  // Groups: {0,1} sum high, {2,3} low, {4,5} middle, {6,7} lower than {4,5} → keep groups 0, 2.
  EXPECT_EQ(o.experts, (std::vector<int32_t>{0, 1}));
  const double s0 = sigmoid(3), s1 = sigmoid(2.9);
  EXPECT_NEAR(o.weights[0], 2.5 * s0 / (s0 + s1), 2.5 * kTol);
  EXPECT_NEAR(o.weights[1], 2.5 * s1 / (s0 + s1), 2.5 * kTol);
}

TEST(MoeRouting, V3BiasChoosesButDoesNotWeigh) {
  MoeRouting r{MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, 3, 2, 1, 1, true, 2.0f};
  const Routed o = route(r, {0, 1, 2}, {3, 0, 0});
  EXPECT_EQ(o.experts, (std::vector<int32_t>{0, 2}));  // s' = 3.5, 1.73, 1.88
  const double s0 = 0.5, s2 = sigmoid(2);
  EXPECT_NEAR(o.weights[0], 2 * s0 / (s0 + s2), 2 * kTol);
  EXPECT_NEAR(o.weights[1], 2 * s2 / (s0 + s2), 2 * kTol);
}

TEST(MoeRouting, V3WithoutNormalisationStillScales) {
  MoeRouting r{MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, 3, 1, 1, 1, false, 2.0f};
  const Routed o = route(r, {0, 1, 2}, {0, 0, 0});
  EXPECT_EQ(o.experts, (std::vector<int32_t>{2}));
  EXPECT_NEAR(o.weights[0], 2 * sigmoid(2), 2 * kTol);
}

TEST(MoeRouting, TiesGoToTheLowerExpertAndNaNIsNeverChosen) {
  MoeRouting r{MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, 4, 2, 1, 1, true, 1.0f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Routed o = route(r, {1, nan, 1, 1}, {0, 0, 0, 0});
  EXPECT_EQ(o.experts, (std::vector<int32_t>{0, 2}));
}

TEST(MoeRouting, FromConfigRejectsUnknownAndInconsistentMethods) {
  ModelConfig c;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.scoring_func = "softmax";
  c.topk_method = "noaux_tc";
  auto r = moe_routing_from_config(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("noaux_tc"), std::string::npos);
  c.scoring_func = "sigmoid";
  EXPECT_TRUE(moe_routing_from_config(c).ok());
  c.topk_method = "mystery";
  EXPECT_FALSE(moe_routing_from_config(c).ok());
  c.topk_method = "noaux_tc";
  c.n_group = 4;
  c.topk_group = 1;
  c.num_experts_per_tok = 3;  // only 2 experts in one kept group
  EXPECT_FALSE(moe_routing_from_config(c).ok());
}

}  // namespace
}  // namespace mla
