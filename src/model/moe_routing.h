// Expert selection of the DeepSeek-family MoE layers (docs/MODELS.md §MoE routing), one token at a
// time, all in FP32 as the reference computes it: V2 softmax scoring with greedy or
// group-limited-greedy choice, V3 sigmoid scoring with the FP32 correction bias used for choosing
// only (noaux_tc), and the norm_topk_prob / routed_scaling_factor semantics of each.
#pragma once

#include <cstdint>
#include <span>

#include "mla/status.h"
#include "model/model_config.h"

namespace mla {

enum class MoeScoring { kSoftmax, kSigmoid };
enum class MoeTopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };

struct MoeRouting {
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopkMethod method = MoeTopkMethod::kGreedy;
  int num_experts = 0;  // E
  int top_k = 0;        // K
  int n_group = 1;      // G (divides E)
  int topk_group = 1;   // G_k
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

// From the config's scoring_func / topk_method strings; invalid_argument naming the field for an
// unknown value or a combination the reference does not define (noaux_tc needs sigmoid scoring).
Result<MoeRouting> moe_routing_from_config(const ModelConfig& c);

// One token: router logits u [E] (x · W_gateᵀ in FP32), bias [E] (noaux_tc only, else empty) →
// the K chosen experts and their weights, ordered by selection score, highest first (ties: lower
// expert id first).
//   V2 (softmax): s = softmax(u); greedy: top-K of s; group_limited_greedy: group score = max s in
//     the group, keep the G_k best groups, others' s set to 0, then top-K. Weights = s at the
//     chosen experts; if K > 1 and norm_topk_prob: w / (Σw + 1e-20), else w · scaling.
//   V3 (sigmoid, noaux_tc): s = sigmoid(u), s' = s + bias; group score = sum of the two largest
//     s' in the group (one when a group has a single expert), keep G_k groups, others' s' = -inf,
//     top-K of s'. Weights = s (unbiased); if K > 1 and norm_topk_prob: w / (Σw + 1e-20); then
//     always w · scaling.
// `scratch` must hold 2·E floats. Never fails on finite inputs; NaN logits are never chosen
// over finite ones.
void route_token(const MoeRouting& r, std::span<const float> logits, std::span<const float> bias,
                 std::span<float> scratch, int32_t* experts, float* weights);

}  // namespace mla
