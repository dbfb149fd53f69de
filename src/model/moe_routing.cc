// Expert selection (docs/MODELS.md §MoE routing).
#include "model/moe_routing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace mla {
namespace {

// Orders by value, highest first, NaN last, ties by lower index.
bool ranks_before(float a, int ia, float b, int ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// The k best indices of v (k <= v.size()) into out, best first.
void top_k_indices(std::span<const float> v, int k, int32_t* out) {
  thread_local std::vector<int32_t> idx;
  idx.resize(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return ranks_before(v[a], a, v[b], b); });
  std::copy(idx.begin(), idx.begin() + k, out);
}

// Keeps the topk_group best groups by group_score and writes `masked` into the others' scores.
void mask_groups(const MoeRouting& r, std::span<float> scores, bool sum_top2, float masked) {
  const int per = r.num_experts / r.n_group;
  std::vector<float> group_score(r.n_group);
  for (int g = 0; g < r.n_group; ++g) {
    std::span<const float> s = scores.subspan(size_t(g) * per, per);
    if (sum_top2 && per >= 2) {
      int32_t best[2];
      top_k_indices(s, 2, best);
      group_score[g] = s[best[0]] + s[best[1]];
    } else {
      int32_t best;
      top_k_indices(s, 1, &best);
      group_score[g] = s[best];
    }
  }
  std::vector<int32_t> kept(r.topk_group);
  top_k_indices(group_score, r.topk_group, kept.data());
  std::vector<bool> keep(r.n_group, false);
  for (int32_t g : kept) keep[g] = true;
  for (int g = 0; g < r.n_group; ++g)
    if (!keep[g]) std::fill_n(scores.begin() + size_t(g) * per, per, masked);
}

}  // namespace

Result<MoeRouting> moe_routing_from_config(const ModelConfig& c) {
  MoeRouting r;
  if (c.scoring_func == "softmax") {
    r.scoring = MoeScoring::kSoftmax;
  } else if (c.scoring_func == "sigmoid") {
    r.scoring = MoeScoring::kSigmoid;
  } else {
    return invalid_argument(fmt::format(
        "config.json: field \"scoring_func\" must be \"softmax\" or \"sigmoid\", got \"{}\"",
        c.scoring_func));
  }
  if (c.topk_method == "greedy") {
    r.method = MoeTopkMethod::kGreedy;
  } else if (c.topk_method == "group_limited_greedy") {
    r.method = MoeTopkMethod::kGroupLimitedGreedy;
  } else if (c.topk_method == "noaux_tc") {
    r.method = MoeTopkMethod::kNoauxTc;
  } else {
    return invalid_argument(fmt::format(
        "config.json: field \"topk_method\" must be \"greedy\", \"group_limited_greedy\" or "
        "\"noaux_tc\", got \"{}\"",
        c.topk_method));
  }
  if (r.method == MoeTopkMethod::kNoauxTc && r.scoring != MoeScoring::kSigmoid)
    return invalid_argument(
        "config.json: topk_method \"noaux_tc\" needs scoring_func \"sigmoid\", got \"" +
        c.scoring_func + "\"");
  if (r.method != MoeTopkMethod::kNoauxTc && r.scoring != MoeScoring::kSoftmax)
    return invalid_argument(
        fmt::format("config.json: topk_method \"{}\" needs scoring_func \"softmax\", got \"{}\"",
                    c.topk_method, c.scoring_func));
  r.num_experts = c.n_routed_experts;
  r.top_k = c.num_experts_per_tok;
  r.n_group = c.n_group;
  r.topk_group = c.topk_group;
  r.norm_topk_prob = c.norm_topk_prob;
  r.routed_scaling_factor = float(c.routed_scaling_factor);
  if (r.num_experts < 1 || r.top_k < 1 || r.top_k > r.num_experts || r.n_group < 1 ||
      r.num_experts % r.n_group != 0 || r.topk_group < 1 || r.topk_group > r.n_group ||
      r.top_k > (r.num_experts / r.n_group) * r.topk_group)
    return invalid_argument(fmt::format(
        "config.json: routing needs 1 <= num_experts_per_tok ({}) <= experts in the kept groups "
        "(n_routed_experts {} / n_group {} · topk_group {})",
        r.top_k, r.num_experts, r.n_group, r.topk_group));
  return r;
}

void route_token(const MoeRouting& r, std::span<const float> logits, std::span<const float> bias,
                 std::span<float> scratch, int32_t* experts, float* weights) {
  const int E = r.num_experts;
  std::span<float> s = scratch.subspan(0, E);       // unbiased scores
  std::span<float> choice = scratch.subspan(E, E);  // what the top-K runs on
  if (r.scoring == MoeScoring::kSoftmax) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int e = 0; e < E; ++e)
      if (logits[e] > mx) mx = logits[e];
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += s[e] = std::exp(logits[e] - mx);
    for (int e = 0; e < E; ++e) s[e] /= sum;
  } else {
    for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int e = 0; e < E; ++e) choice[e] = s[e] + (bias.empty() ? 0.0f : bias[e]);
  if (r.method == MoeTopkMethod::kGroupLimitedGreedy && r.n_group > 1)
    mask_groups(r, choice, /*sum_top2=*/false, 0.0f);  // softmax scores are >= 0: 0 is safe
  if (r.method == MoeTopkMethod::kNoauxTc && r.n_group > 1)
    mask_groups(r, choice, /*sum_top2=*/true, -std::numeric_limits<float>::infinity());
  top_k_indices(choice, r.top_k, experts);
  float sum = 0.0f;
  for (int k = 0; k < r.top_k; ++k) sum += weights[k] = s[experts[k]];
  const bool normalise = r.top_k > 1 && r.norm_topk_prob;
  for (int k = 0; k < r.top_k; ++k) {
    if (normalise) weights[k] /= sum + 1e-20f;
    // V2 scales only weights it did not normalise; V3 (sigmoid) always scales.
    if (!normalise || r.scoring == MoeScoring::kSigmoid) weights[k] *= r.routed_scaling_factor;
  }
}

}  // namespace mla
