// Sampler penalties, min_p and min_tokens against plain re-statements of vLLM's documented
// formulas: repetition_penalty (prompt and output tokens: positive logits divided, negative
// multiplied), frequency_penalty · count + presence_penalty (output tokens), min_p (tokens below
// min_p · p_max dropped before top-k / top-p), min_tokens (the blocked ids at -inf until that
// many tokens were sampled); validation of each field.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/rng.h"
#include "model/sampler.h"

namespace mla {
namespace {

std::vector<float> random_logits(int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (float& v : l) v = float(rng.normal()) * 3.0f;
  return l;
}

// Logits that make greedy decoding pick `id` whatever the penalties (a 1e4 margin).
std::vector<float> forcing(int vocab, int32_t id) {
  std::vector<float> l(static_cast<size_t>(vocab), 0.0f);
  l[size_t(id)] = 1e4f;
  return l;
}

// The reference: vLLM's order (bias, then repetition, then frequency / presence), in FP64.
std::vector<double> reference(const std::vector<float>& logits, const SamplingParams& p,
                              const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& output) {
  std::map<int32_t, int> count;
  for (int32_t t : output) ++count[t];
  const std::set<int32_t> seen_prompt(prompt.begin(), prompt.end());
  std::vector<double> r(logits.begin(), logits.end());
  for (const auto& [id, bias] : p.logit_bias) r[size_t(id)] += bias;
  for (size_t i = 0; i < r.size(); ++i) {
    const int32_t id = int32_t(i);
    if (seen_prompt.count(id) || count.count(id))
      r[i] = r[i] > 0 ? r[i] / p.repetition_penalty : r[i] * p.repetition_penalty;
    if (count.count(id)) r[i] -= count[id] * double(p.frequency_penalty) + p.presence_penalty;
  }
  return r;
}

TEST(SamplerPenalties, AdjustedLogitsFollowTheFormulas) {
  const int V = 40;
  SamplingParams p;
  p.repetition_penalty = 1.7f;
  p.frequency_penalty = 0.6f;
  p.presence_penalty = -0.4f;
  p.logit_bias = {{3, 2.5f}, {9, -1.0f}};
  const std::vector<int32_t> prompt = {1, 3, 3, 7, 20};
  const std::vector<int32_t> output = {7, 9, 9, 9, 30, 1};  // in the prompt too: 7 and 1
  Sampler s(p);
  s.set_prompt(prompt);
  for (int32_t t : output) {
    Result<int32_t> got = s.sample(forcing(V, t));
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, t);
  }
  EXPECT_EQ(s.sampled(), int64_t(output.size()));
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<float> l = random_logits(V, seed);
    const std::vector<float> got = s.adjusted_logits(l);
    const std::vector<double> want = reference(l, p, prompt, output);
    for (int i = 0; i < V; ++i)  // FP32 arithmetic: a few roundings of values up to ~20
      EXPECT_NEAR(got[size_t(i)], want[size_t(i)], 1e-5) << "id " << i;
  }
}

TEST(SamplerPenalties, GreedyDecodingSeesThePenalties) {
  // Token 0 leads token 1 by 1.5: a frequency penalty of 2 after one 0 hands the lead to 1, and
  // after one 1 as well, back to 0.
  std::vector<float> l = {1.5f, 0.0f, -5.0f};
  SamplingParams p;
  p.frequency_penalty = 2.0f;
  Sampler s(p);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(*s.sample(l));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 0, 1}));
  // Without penalties greedy keeps choosing 0.
  Sampler plain(SamplingParams{});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(*plain.sample(l), 0);
}

TEST(SamplerPenalties, RepetitionPenaltyCountsThePromptOnce) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  s.set_prompt(std::vector<int32_t>{0, 0, 0, 2});
  const std::vector<float> got = s.adjusted_logits(std::vector<float>{4.0f, 3.0f, -1.0f});
  EXPECT_EQ(got, (std::vector<float>{2.0f, 3.0f, -2.0f}));
  EXPECT_EQ(*s.sample(std::vector<float>{4.0f, 3.0f, -1.0f}), 1);  // 0 fell to 2, below 1's 3
}

TEST(SamplerPenalties, MinTokensBlocksTheStopIdsUntilReached) {
  SamplingParams p;
  p.min_tokens = 3;
  p.min_tokens_blocked = {0, 4};
  const std::vector<float> l = {5.0f, 1.0f, 0.5f, -1.0f, 6.0f};  // 4 then 0 lead
  Sampler s(p);
  std::vector<int32_t> got;
  for (int i = 0; i < 5; ++i) got.push_back(*s.sample(l));
  EXPECT_EQ(got, (std::vector<int32_t>{1, 1, 1, 4, 4}));
  // All candidates blocked: nothing can be sampled, a clear error and not a blocked id.
  SamplingParams all = p;
  all.min_tokens_blocked = {0, 1, 2, 3, 4};
  Sampler none(all);
  EXPECT_FALSE(none.sample(l).ok());
}

// min_p = 0.3 at temperature 1 over logits {0, -0.5, -3, -10}: p_i / p_max = e^(z_i - z_max)
// keeps ids 0 (1) and 1 (0.61), drops 2 (0.05) and 3. The two kept share the mass in the ratio
// 1 : e^-0.5, so id 0 comes up with probability 1 / (1 + e^-0.5) = 0.6225.
TEST(SamplerPenalties, MinPKeepsTokensAboveTheFractionOfTheMostLikely) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.3f;
  p.seed = 7;
  Sampler s(p);
  const std::vector<float> l = {0.0f, -0.5f, -3.0f, -10.0f};
  const int n = 4000;
  int zeros = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t t = *s.sample(l);
    ASSERT_TRUE(t == 0 || t == 1) << t;
    zeros += t == 0;
  }
  const double q = 1.0 / (1.0 + std::exp(-0.5)), sd = std::sqrt(n * q * (1 - q));
  EXPECT_NEAR(zeros, n * q, 5 * sd);  // 5 standard deviations: fails by chance ~1 in 1.7M runs
  // With min_p 0 every id stays possible (id 3 has p ≈ 0.016 at temperature 3).
  SamplingParams wide = p;
  wide.min_p = 0.0f;
  wide.temperature = 3.0f;
  Sampler w(wide);
  std::set<int32_t> seen;
  for (int i = 0; i < 3000; ++i) seen.insert(*w.sample(l));
  EXPECT_EQ(seen.size(), 4u);
}

TEST(SamplerPenalties, ValidationNamesTheField) {
  const auto message = [](auto set) {
    SamplingParams p;
    set(p);
    return validate(p, 10).message();
  };
  EXPECT_NE(message([](SamplingParams& p) { p.repetition_penalty = 0; }).find("repetition_penalty"),
            std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.frequency_penalty = 2.5f; }).find("frequency"),
            std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.presence_penalty = -3; }).find("presence"),
            std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.min_p = 1.5f; }).find("min_p"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.min_tokens = -1; }).find("min_tokens"),
            std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.min_tokens_blocked = {10}; }).find("min_tokens"),
            std::string::npos);
  EXPECT_TRUE(validate(SamplingParams{}, 10).ok());
}

}  // namespace
}  // namespace mla
