// Token sampling from one row of logits: greedy, temperature, top-k, top-p (nucleus), logit bias,
// seeded. Deterministic: the same params, seed and logits give the same token sequence on every
// machine and thread count (one private RNG stream per Sampler, no global state).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "mla/status.h"

namespace mla {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties); else logits / temperature
  int top_k = 0;             // keep the k most likely tokens; 0 or >= vocab: all
  float top_p = 1.0f;        // keep the smallest set whose probability reaches top_p; 1: all
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit of that id first
};

// invalid_argument naming the field: temperature < 0 or not finite, top_k < 0, top_p outside
// (0, 1], a logit_bias id outside [0, vocab) or a non-finite bias.
Status validate(const SamplingParams& p, int64_t vocab);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  const SamplingParams& params() const { return params_; }
  // logits [vocab] fp32. NaN logits are never chosen; all-NaN/-inf rows give invalid_argument.
  Result<int32_t> sample(std::span<const float> logits);

 private:
  uint64_t next_u64();  // xoshiro256**

  SamplingParams params_;
  uint64_t state_[4];  // xoshiro256** seeded from params.seed by splitmix64
  std::vector<std::pair<float, int32_t>> scratch_;  // [vocab] (biased logit, id) candidates
  std::vector<double> weights_;                     // [candidates] unnormalised softmax, FP64
};

// log-softmax of `logits` (after no temperature: the model's own distribution, as OpenAI's
// logprobs report it) at `token`, and the k most likely (id, logprob) pairs, most likely first.
struct TokenLogprobs {
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int k);

}  // namespace mla
