// Sampler: greedy (ties, NaN), seeded determinism, top-k / top-p / logit_bias exclusion, draw
// frequencies against the softmax within a binomial bound, validation messages, token_logprobs.
#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"

namespace mla {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

int32_t sample_once(const SamplingParams& p, const std::vector<float>& logits) {
  Sampler s(p);
  Result<int32_t> r = s.sample(logits);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : -1;
}

std::vector<int32_t> draws(const SamplingParams& p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    Result<int32_t> r = s.sample(logits);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    out.push_back(r.ok() ? *r : -1);
  }
  return out;
}

std::vector<float> random_logits(Rng& rng, int vocab) {
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) x = float(2.0 * rng.normal());
  return v;
}

// Probabilities of softmax(logits / t), in FP64.
std::vector<double> softmax(const std::vector<float>& logits, double t) {
  double m = -1e300, sum = 0;
  for (float x : logits) m = std::max(m, x / t);
  std::vector<double> p;
  for (float x : logits) p.push_back(std::exp(x / t - m)), sum += p.back();
  for (double& x : p) x /= sum;
  return p;
}

// Each count of n independent draws is Binomial(n, p_i): its standard deviation is
// sqrt(n p_i (1 - p_i)). A correct sampler leaves any one bin more than 5 of them from n p_i with
// probability 5.7e-7, so a failure here means a wrong distribution, not bad luck (and the seed
// is fixed, so the test is deterministic either way).
void expect_frequencies(const std::vector<int32_t>& got, const std::vector<double>& p) {
  const double n = double(got.size());
  std::vector<double> count(p.size(), 0.0);
  for (int32_t id : got) {
    ASSERT_GE(id, 0);
    ASSERT_LT(size_t(id), p.size());
    count[size_t(id)] += 1;
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const double sd = std::sqrt(n * p[i] * (1 - p[i]));
    EXPECT_LE(std::fabs(count[i] - n * p[i]), 5 * sd + 1e-9)
        << "token " << i << ": " << count[i] << " draws, expected " << n * p[i];
  }
}

TEST(Sampler, GreedyIsArgmax) {
  EXPECT_EQ(sample_once(params(0), {0.5f, 3.0f, -1.0f, 2.9f}), 1);
  EXPECT_EQ(sample_once(params(0), {-5.0f}), 0);
  Rng rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> v = random_logits(rng, 97);
    const int32_t want = int32_t(std::max_element(v.begin(), v.end()) - v.begin());
    EXPECT_EQ(sample_once(params(0, 0, 1.0f, uint64_t(trial)), v), want);
  }
}

TEST(Sampler, GreedyTiesGoToTheLowestId) {
  EXPECT_EQ(sample_once(params(0), {1.0f, 7.0f, 7.0f, 7.0f}), 1);
  EXPECT_EQ(sample_once(params(0), {2.0f, 2.0f}), 0);
  EXPECT_EQ(sample_once(params(0), {-kInf, 0.0f, 0.0f}), 1);
}

TEST(Sampler, NaNIsNeverChosen) {
  EXPECT_EQ(sample_once(params(0), {kNaN, 1.0f, kNaN, 0.5f}), 1);
  EXPECT_EQ(sample_once(params(0), {0.0f, kNaN}), 0);
  for (int32_t id : draws(params(1.0f, 0, 1.0f, 9), {kNaN, 0.0f, kNaN, 0.0f}, 2000))
    EXPECT_TRUE(id == 1 || id == 3) << id;
  for (int32_t id : draws(params(0.7f, 0, 0.5f, 9), {kNaN, 0.0f, kNaN, 0.0f}, 500))
    EXPECT_TRUE(id == 1 || id == 3) << id;
}

TEST(Sampler, NothingToChooseIsAnError) {
  for (const std::vector<float>& v : {std::vector<float>{kNaN, kNaN}, {-kInf, -kInf, kNaN}, {}})
    for (float t : {0.0f, 1.0f}) {
      Sampler s(params(t));
      Result<int32_t> r = s.sample(v);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
}

TEST(Sampler, InfiniteLogitsTakeAllTheMass) {
  EXPECT_EQ(sample_once(params(0), {1.0f, kInf, 3.0f, kInf}), 1);
  std::set<int32_t> seen;
  for (int32_t id : draws(params(1.0f, 0, 1.0f, 4), {1.0f, kInf, 3.0f, kInf}, 400)) seen.insert(id);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  Rng rng(11);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 200; ++i) rows.push_back(random_logits(rng, 50));
  const auto run = [&](const SamplingParams& p) {
    Sampler s(p);
    std::vector<int32_t> out;
    for (const auto& row : rows) out.push_back(s.sample(row).value());
    return out;
  };
  for (const SamplingParams& base :
       {params(1.0f), params(0.8f, 10), params(1.3f, 0, 0.9f), params(0.6f, 20, 0.95f)}) {
    SamplingParams a = base, b = base;
    a.seed = 1234;
    b.seed = 1235;
    EXPECT_EQ(run(a), run(a));
    EXPECT_NE(run(a), run(b));
  }
}

TEST(Sampler, TopKOneIsGreedy) {
  Rng rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> v = random_logits(rng, 33);
    v[size_t(trial % 33)] = v[size_t((trial * 7) % 33)] = 9.0f;  // a tie for the maximum
    EXPECT_EQ(sample_once(params(1.5f, 1, 1.0f, uint64_t(trial)), v), sample_once(params(0), v));
  }
}

TEST(Sampler, TinyTopPIsGreedy) {
  Rng rng(6);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> v = random_logits(rng, 33);
    if (trial % 2) v[3] = v[20] = 8.0f;  // a tie for the maximum
    EXPECT_EQ(sample_once(params(2.0f, 0, 1e-6f, uint64_t(trial)), v), sample_once(params(0), v));
  }
}

TEST(Sampler, FrequenciesMatchTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, -0.5f, 2.0f};
  constexpr int kDraws = 20000;
  for (float t : {1.0f, 0.5f, 2.0f}) {
    SCOPED_TRACE(t);
    expect_frequencies(draws(params(t, 0, 1.0f, 77), logits, kDraws), softmax(logits, t));
  }
  // top-k = 2 keeps ids 3 and 0 and renormalises over them.
  const std::vector<double> p2 = softmax({1.0f, -kInf, -kInf, 2.0f}, 1.0);
  expect_frequencies(draws(params(1.0f, 2, 1.0f, 78), logits, kDraws), p2);
  // At t = 1 the probabilities are .232, .085, .052, .631: top-p .85 keeps ids 3 and 0
  // (.631 < .85 <= .863).
  expect_frequencies(draws(params(1.0f, 0, 0.85f, 79), logits, kDraws), p2);
}

TEST(Sampler, TopKNeverSamplesOutsideTheKeptSet) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f, 1.8f, -3.0f, 0.5f};
  std::map<int32_t, int> seen;
  for (int32_t id : draws(params(3.0f, 3, 1.0f, 21), logits, 5000)) ++seen[id];
  EXPECT_EQ(seen.size(), 3u);
  for (int32_t id : {1, 3, 5}) EXPECT_GT(seen[id], 0) << id;
}

TEST(Sampler, TopPNeverSamplesOutsideTheNucleus) {
  // Probabilities .5, .3, .15, .05 (logits are their logs): top-p .75 keeps {0, 1}; .9 adds 2.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  for (auto [top_p, kept] : {std::pair{0.75f, 2u}, std::pair{0.9f, 3u}}) {
    std::map<int32_t, int> seen;
    for (int32_t id : draws(params(1.0f, 0, top_p, 22), logits, 5000)) ++seen[id];
    EXPECT_EQ(seen.size(), kept) << top_p;
    for (const auto& [id, n] : seen) EXPECT_LT(uint32_t(id), kept) << top_p;
  }
  // top-k and top-p together: top-k 3 renormalises to .526, .316, .158, so top-p .8 keeps {0, 1}.
  std::set<int32_t> seen;
  for (int32_t id : draws(params(1.0f, 3, 0.8f, 23), logits, 3000)) seen.insert(id);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(Sampler, LogitBiasIsAppliedFirst) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplingParams p = params(0);
  p.logit_bias = {{1, -1e30f}};
  EXPECT_EQ(sample_once(p, logits), 2);
  p.logit_bias = {{3, 10.0f}};
  EXPECT_EQ(sample_once(p, logits), 3);
  p.logit_bias = {{0, 1.0f}, {0, 1.0f}};  // repeated ids add up: 1 + 2 = 3 ties id 1
  EXPECT_EQ(sample_once(p, logits), 0);
  // A large negative bias excludes the token at any temperature, as -inf would.
  p = params(5.0f, 0, 1.0f, 31);
  p.logit_bias = {{1, -1e30f}, {2, -1e9f}};
  std::set<int32_t> seen;
  for (int32_t id : draws(p, logits, 5000)) seen.insert(id);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 3}));
  // Biasing every token away leaves the least-biased ones (still finite), not an error.
  p = params(1.0f, 0, 1.0f, 32);
  p.logit_bias = {{0, -1e30f}, {1, -1e30f}, {2, -1e30f}};
  for (int32_t id : draws(p, logits, 100)) EXPECT_EQ(id, 3);
}

TEST(Sampler, ValidationNamesTheFieldAndValue) {
  const auto message = [](const SamplingParams& p, int64_t vocab = 320) {
    const Status st = validate(p, vocab);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return st.message();
  };
  EXPECT_TRUE(validate(params(0), 320).ok());
  EXPECT_TRUE(validate(params(1e6f, 320, 1.0f), 320).ok());
  EXPECT_EQ(message(params(-1.0f)), "temperature must be >= 0 and finite, got -1");
  EXPECT_EQ(message(params(kNaN)), "temperature must be >= 0 and finite, got nan");
  EXPECT_EQ(message(params(kInf)), "temperature must be >= 0 and finite, got inf");
  EXPECT_EQ(message(params(1.0f, -2)), "top_k must be >= 0, got -2");
  EXPECT_EQ(message(params(1.0f, 0, 0.0f)), "top_p must be in (0, 1], got 0");
  EXPECT_EQ(message(params(1.0f, 0, 1.5f)), "top_p must be in (0, 1], got 1.5");
  EXPECT_EQ(message(params(1.0f, 0, kNaN)), "top_p must be in (0, 1], got nan");
  SamplingParams p = params(1.0f);
  p.logit_bias = {{5, 1.0f}, {320, 1.0f}};
  EXPECT_EQ(message(p), "logit_bias[1]: token id must be in [0, 320), got 320");
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_EQ(message(p), "logit_bias[0]: token id must be in [0, 320), got -1");
  p.logit_bias = {{7, -kInf}};
  EXPECT_EQ(message(p), "logit_bias[0]: bias for token 7 must be finite, got -inf");
  // sample() refuses the same parameters instead of sampling with them.
  p.logit_bias = {{4, 1.0f}};
  Sampler s(p);
  Result<int32_t> r = s.sample(std::vector<float>{0.0f, 1.0f});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "logit_bias[0]: token id must be in [0, 2), got 4");
}

TEST(TokenLogprobs, LogSoftmaxAndTopList) {
  const std::vector<float> logits = {1.0f, 3.0f, kNaN, 3.0f, -2.0f, -kInf};
  const std::vector<double> p = softmax({1.0f, 3.0f, -kInf, 3.0f, -2.0f, -kInf}, 1.0);
  const TokenLogprobs r = token_logprobs(logits, 4, 10);
  // FP64 arithmetic rounded once to FP32: within 1e-6 relative of the exact value.
  EXPECT_NEAR(r.logprob, std::log(p[4]), 1e-6 * std::fabs(std::log(p[4])));
  ASSERT_EQ(r.top.size(), 5u);  // NaN is not a candidate; -inf is, with logprob -inf
  const std::vector<int32_t> order = {1, 3, 0, 4, 5};
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(r.top[i].first, order[i]);
    if (order[i] == 5) {
      EXPECT_EQ(r.top[i].second, -kInf);
    } else {
      EXPECT_NEAR(r.top[i].second, std::log(p[size_t(order[i])]), 1e-6);
    }
  }
  EXPECT_EQ(token_logprobs(logits, 2, 0).logprob, -kInf);  // NaN: probability 0
  EXPECT_TRUE(token_logprobs(logits, 1, 0).top.empty());
  const TokenLogprobs two = token_logprobs(logits, 0, 2);
  ASSERT_EQ(two.top.size(), 2u);
  EXPECT_EQ(two.top[0].first, 1);  // the tie 1 / 3 goes to the lower id
  EXPECT_EQ(two.top[1].first, 3);
}

TEST(TokenLogprobs, ProbabilitiesSumToOne) {
  Rng rng(8);
  const std::vector<float> v = random_logits(rng, 1000);
  double sum = 0;
  for (int32_t id = 0; id < 1000; ++id) sum += std::exp(double(token_logprobs(v, id, 0).logprob));
  // Each logprob (|logprob| < 20 here) is FP32-rounded: an absolute error of at most 20 · 2^-24,
  // so each probability is off by a relative 1.2e-6 at most, and so is their sum.
  EXPECT_NEAR(sum, 1.0, 2e-6);
}

// The rank vLLM's prompt_logprobs report: 1 + the tokens with a strictly higher logit (ties
// share a rank, NaN never outranks), and the token itself.
TEST(TokenLogprobs, RankAndToken) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, std::nanf(""), -2.0f, 0.5f};
  EXPECT_EQ(token_logprobs(logits, 1, 0).rank, 1);
  EXPECT_EQ(token_logprobs(logits, 2, 0).rank, 1);
  EXPECT_EQ(token_logprobs(logits, 0, 0).rank, 3);
  EXPECT_EQ(token_logprobs(logits, 4, 2).rank, 5);
  EXPECT_EQ(token_logprobs(logits, 4, 2).token, 4);
}

}  // namespace
}  // namespace mla
