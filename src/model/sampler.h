// Token sampling from one row of logits: greedy, temperature, top-k, top-p (nucleus), logit bias,
// seeded. Deterministic: the same params, seed and logits give the same token sequence on every
// machine and thread count (one private RNG stream per Sampler, no global state).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "mla/status.h"
#include "model/token_constraint.h"

namespace mla {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties); else logits / temperature
  int top_k = 0;             // keep the k most likely tokens; 0 or >= vocab: all
  float top_p = 1.0f;        // keep the smallest set whose probability reaches top_p; 1: all
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit of that id first
  // Penalties with vLLM's meaning (docs/SERVING.md "Sampling"), after logit_bias and before
  // temperature (greedy decoding sees them too):
  //  - repetition_penalty > 0 (1: off): a token of the prompt or of the output so far has a
  //    positive logit divided by it, a negative one multiplied;
  //  - frequency_penalty and presence_penalty in [-2, 2]: a token the output holds c > 0 times
  //    loses c · frequency_penalty + presence_penalty.
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // Keep only tokens whose probability (after temperature) is at least min_p times the most
  // likely one's, before top-k and top-p; 0: off.
  float min_p = 0.0f;
  // Until min_tokens tokens have been sampled, the ids in min_tokens_blocked (the engine puts the
  // EOS ids and the request's stop_token_ids there) cannot be.
  int min_tokens = 0;
  std::vector<int32_t> min_tokens_blocked;
  // Constrained decoding (token_constraint.h, docs/SERVING.md §Structured output): every Sampler
  // starts its own state from the spec and draws only tokens it allows, after the bias and the
  // penalties. The engine puts the ids that end a reply (EOS, stop_token_ids) in
  // constraint_end_ids.
  std::shared_ptr<const TokenConstraintSpec> constraint;
  std::vector<int32_t> constraint_end_ids;
};

// invalid_argument naming the field: temperature < 0 or not finite, top_k < 0, top_p outside
// (0, 1], a logit_bias id outside [0, vocab) or a non-finite bias, repetition_penalty not > 0,
// frequency / presence penalty outside [-2, 2], min_p outside [0, 1], min_tokens < 0, a
// min_tokens_blocked id outside [0, vocab).
Status validate(const SamplingParams& p, int64_t vocab);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  const SamplingParams& params() const { return params_; }
  // The prompt's tokens, for repetition_penalty (call before the first sample).
  void set_prompt(std::span<const int32_t> prompt);
  // logits [vocab] fp32. NaN logits are never chosen; all-NaN/-inf rows give invalid_argument.
  // The token returned counts as output for the penalties and min_tokens from then on.
  Result<int32_t> sample(std::span<const float> logits);
  // logits [vocab] as sample() sees them before temperature: logit_bias added (FP32), the
  // min_tokens ids at -inf while they are blocked, then the penalties, then the constraint's
  // mask.
  std::vector<float> adjusted_logits(std::span<const float> logits) const;
  int64_t sampled() const { return sampled_; }

 private:
  uint64_t next_u64();  // xoshiro256**
  void adjust(std::span<float> logits) const;
  Result<int32_t> pick(std::span<const float> logits);

  SamplingParams params_;
  std::unique_ptr<TokenConstraint> constraint_;         // from params_.constraint
  std::vector<int32_t> prompt_tokens_;                  // sorted, unique (repetition_penalty)
  std::vector<std::pair<int32_t, int>> output_counts_;  // sorted by id: (id, times sampled)
  int64_t sampled_ = 0;
  uint64_t state_[4];            // xoshiro256** seeded from params.seed by splitmix64
  std::vector<float> adjusted_;  // [vocab] adjust()'s row, reused per token
  std::vector<std::pair<float, int32_t>> scratch_;  // [vocab] (biased logit, id) candidates
  std::vector<double> weights_;                     // [candidates] unnormalised softmax, FP64
};

// log-softmax of `logits` (after no temperature: the model's own distribution, as OpenAI's
// logprobs report it) at `token`, and the k most likely (id, logprob) pairs, most likely first.
struct TokenLogprobs {
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  int64_t rank = 1;    // 1 + the tokens with a higher logit (vLLM's prompt_logprobs report it)
  int32_t token = -1;  // the token whose logprob this is
};
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int k);

}  // namespace mla
