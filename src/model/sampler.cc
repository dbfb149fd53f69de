// Sampler (see sampler.h). Order of operations: min_tokens mask, logit_bias, penalties, drop NaN
// and -inf, then greedy argmax (temperature 0) or logits / temperature → min_p → top-k → softmax
// over the kept set (FP64, max subtracted) → top-p prefix → one draw. Every ordering uses the total
// order (logit descending, id ascending), so the kept set and the walk order do not depend on the
// standard library; the only platform input is libm's exp, which affects a draw only when it lands
// within an ulp of a bucket edge.
#include "model/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace mla {
namespace {

uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

// Higher logit first, then lower id: a strict total order on (logit, id) pairs without NaN.
bool before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first != b.first ? a.first > b.first : a.second < b.second;
}

}  // namespace

Status validate(const SamplingParams& p, int64_t vocab) {
  if (vocab <= 0)
    return invalid_argument(fmt::format("sampling: vocab must be > 0, got {}", vocab));
  if (!(std::isfinite(p.temperature) && p.temperature >= 0))
    return invalid_argument(
        fmt::format("temperature must be >= 0 and finite, got {}", p.temperature));
  if (p.top_k < 0) return invalid_argument(fmt::format("top_k must be >= 0, got {}", p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1))
    return invalid_argument(fmt::format("top_p must be in (0, 1], got {}", p.top_p));
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0))
    return invalid_argument(
        fmt::format("repetition_penalty must be > 0 and finite, got {}", p.repetition_penalty));
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    return invalid_argument(
        fmt::format("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty));
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    return invalid_argument(
        fmt::format("presence_penalty must be in [-2, 2], got {}", p.presence_penalty));
  if (!(p.min_p >= 0 && p.min_p <= 1))
    return invalid_argument(fmt::format("min_p must be in [0, 1], got {}", p.min_p));
  if (p.min_tokens < 0)
    return invalid_argument(fmt::format("min_tokens must be >= 0, got {}", p.min_tokens));
  for (int32_t id : p.min_tokens_blocked)
    if (id < 0 || id >= vocab)
      return invalid_argument(
          fmt::format("min_tokens: blocked token id must be in [0, {}), got {}", vocab, id));
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto [id, bias] = p.logit_bias[i];
    if (id < 0 || id >= vocab)
      return invalid_argument(
          fmt::format("logit_bias[{}]: token id must be in [0, {}), got {}", i, vocab, id));
    if (!std::isfinite(bias))
      return invalid_argument(
          fmt::format("logit_bias[{}]: bias for token {} must be finite, got {}", i, id, bias));
  }
  return Status();
}

Sampler::Sampler(SamplingParams params) : params_(std::move(params)) {
  if (params_.constraint) constraint_ = params_.constraint->start(params_.constraint_end_ids);
  uint64_t x = params_.seed;
  for (uint64_t& s : state_) s = splitmix64(&x);
}

uint64_t Sampler::next_u64() {  // xoshiro256**
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  prompt_tokens_.assign(prompt.begin(), prompt.end());
  std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
  prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()),
                       prompt_tokens_.end());
}

// In FP32, as the logits are. Order as vLLM's sampler: min_tokens mask, bias, then the penalties.
void Sampler::adjust(std::span<float> l) const {
  const int64_t vocab = int64_t(l.size());
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (sampled_ < params_.min_tokens)
    for (int32_t id : params_.min_tokens_blocked)
      if (id >= 0 && id < vocab) l[size_t(id)] = -kInf;
  for (const auto& [id, bias] : params_.logit_bias) l[size_t(id)] += bias;
  const float rp = params_.repetition_penalty;
  const auto repeat = [&](int32_t id) {
    if (id < 0 || id >= vocab) return;
    float& v = l[size_t(id)];
    v = v > 0 ? v / rp : v * rp;
  };
  if (rp != 1.0f) {
    // A token in both the prompt and the output is penalised once.
    for (int32_t id : prompt_tokens_) repeat(id);
    for (const auto& [id, n] : output_counts_)
      if (!std::binary_search(prompt_tokens_.begin(), prompt_tokens_.end(), id)) repeat(id);
  }
  if (params_.frequency_penalty != 0 || params_.presence_penalty != 0)
    for (const auto& [id, n] : output_counts_)
      if (id >= 0 && id < vocab)
        l[size_t(id)] -= float(n) * params_.frequency_penalty + params_.presence_penalty;
}

std::vector<float> Sampler::adjusted_logits(std::span<const float> logits) const {
  std::vector<float> l(logits.begin(), logits.end());
  adjust(l);
  if (constraint_) constraint_->mask(l);
  return l;
}

Result<int32_t> Sampler::sample(std::span<const float> logits) {
  MLA_ASSIGN_OR_RETURN(const int32_t token, pick(logits));
  if (constraint_ && !constraint_->accept(token))
    return invalid_argument(
        fmt::format("sample: token {} broke the constraint it was drawn under", token));
  ++sampled_;
  const auto at = std::lower_bound(output_counts_.begin(), output_counts_.end(),
                                   std::pair<int32_t, int>{token, 0});
  if (at != output_counts_.end() && at->first == token)
    ++at->second;
  else
    output_counts_.insert(at, {token, 1});
  return token;
}

Result<int32_t> Sampler::pick(std::span<const float> logits) {
  const int64_t vocab = int64_t(logits.size());
  MLA_RETURN_IF_ERROR(validate(params_, vocab));
  // One draw per non-greedy call, whatever the logits: the stream position depends only on how
  // many tokens were sampled.
  const double u = params_.temperature > 0 ? double(next_u64() >> 11) * 0x1.0p-53 : 0.0;

  // Candidates: adjusted logits, without NaN and -inf (probability 0). Bias and penalties are
  // applied in FP32, as the logits are; a sum that overflows to -inf removes the token, to +inf
  // makes it certain.
  const bool plain = params_.logit_bias.empty() && params_.repetition_penalty == 1.0f &&
                     params_.frequency_penalty == 0 && params_.presence_penalty == 0 &&
                     sampled_ >= params_.min_tokens && !constraint_;
  std::span<const float> row = logits;
  if (!plain) {
    adjusted_.assign(logits.begin(), logits.end());
    adjust(adjusted_);
    if (constraint_ && !constraint_->mask(adjusted_))
      return invalid_argument(
          "sample: no token can continue the reply under its response format (the grammar "
          "allows none of this vocabulary's tokens here)");
    row = adjusted_;
  }
  std::vector<std::pair<float, int32_t>>& c = scratch_;
  c.resize(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) c[size_t(i)] = {row[size_t(i)], int32_t(i)};
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::erase_if(c, [](const auto& e) { return std::isnan(e.first) || e.first == -kInf; });
  if (c.empty())
    return invalid_argument(
        fmt::format("sample: all {} logits are NaN or -inf (after logit_bias)", vocab));

  // Greedy: the first maximum in id order.
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i)
    if (c[i].first > c[best].first) best = i;
  if (params_.temperature == 0) return c[best].second;
  // +inf logits: those tokens share all the mass equally.
  if (c[best].first == kInf) {
    std::erase_if(c, [](const auto& e) { return e.first != kInf; });
    for (auto& e : c) e.first = 0;
  }

  // min_p: p_i ≥ min_p · p_max ⇔ z_i − z_max ≥ log(min_p) with z = logit / temperature (FP64).
  if (params_.min_p > 0) {
    const double inv_t = 1.0 / double(params_.temperature);
    double z_max = -std::numeric_limits<double>::infinity();  // c changed if +inf logits were
    for (const auto& e : c) z_max = std::max(z_max, double(e.first) * inv_t);
    const double floor = std::log(double(params_.min_p));
    std::erase_if(c, [&](const auto& e) { return double(e.first) * inv_t - z_max < floor; });
  }

  // Top-k: the k first in (logit desc, id asc) order, kept in that order.
  const bool nucleus = params_.top_p < 1.0f;
  if (params_.top_k > 0 && size_t(params_.top_k) < c.size()) {
    const auto kth = c.begin() + params_.top_k;
    std::nth_element(c.begin(), kth, c.end(), before);
    c.erase(kth, c.end());
    std::sort(c.begin(), c.end(), before);
  } else if (nucleus) {
    std::sort(c.begin(), c.end(), before);
  }

  // Softmax weights in FP64 with the maximum subtracted (logits scaled by 1 / temperature in FP64).
  const double inv_t = 1.0 / double(params_.temperature);
  double max_z = -std::numeric_limits<double>::infinity();
  for (const auto& e : c) max_z = std::max(max_z, double(e.first) * inv_t);
  std::vector<double>& w = weights_;
  w.resize(c.size());
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    w[i] = std::exp(double(c[i].first) * inv_t - max_z);
    total += w[i];
  }
  // Top-p: the shortest prefix (c is sorted here) whose mass reaches top_p; at least one token.
  size_t kept = c.size();
  if (nucleus) {
    const double target = double(params_.top_p) * total;
    double mass = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      mass += w[i];
      if (mass >= target) {
        kept = i + 1;
        break;
      }
    }
    if (kept < c.size()) total = mass;
  }

  // One draw: the first token whose cumulative weight exceeds u · total. Zero weights (underflow)
  // can never be picked; rounding past the end falls back to the last token with weight.
  const double target = u * total;
  double acc = 0;
  size_t last_positive = 0;
  for (size_t i = 0; i < kept; ++i) {
    if (w[i] <= 0) continue;
    last_positive = i;
    acc += w[i];
    if (acc > target) return c[i].second;
  }
  return c[last_positive].second;
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int k) {
  MLA_CHECK(token >= 0 && size_t(token) < logits.size(), "token_logprobs: token {} of vocab {}",
            token, logits.size());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // NaN logits count as -inf; +inf ones share all the mass.
  double m = -kInf;
  for (float v : logits)
    if (!std::isnan(v)) m = std::max(m, double(v));
  const auto shifted = [&](float v) -> double {
    if (std::isnan(v) || m == -kInf) return -kInf;
    if (m == kInf) return v == float(kInf) ? 0.0 : -kInf;
    return double(v) - m;
  };
  double sum = 0;
  for (float v : logits) sum += std::exp(shifted(v));
  const double log_sum = std::log(sum);  // log(0) = -inf when nothing is finite
  const auto logprob = [&](float v) {
    const double s = shifted(v);
    return s == -kInf ? -std::numeric_limits<float>::infinity() : float(s - log_sum);
  };

  TokenLogprobs r;
  r.token = token;
  r.logprob = logprob(logits[size_t(token)]);
  const float own = logits[size_t(token)];
  for (float v : logits) r.rank += v > own;  // NaN compares false
  if (k <= 0) return r;
  std::vector<std::pair<float, int32_t>> order;
  order.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isnan(logits[i])) order.push_back({logits[i], int32_t(i)});
  const size_t n = std::min(order.size(), size_t(k));
  std::partial_sort(order.begin(), order.begin() + n, order.end(), before);
  r.top.reserve(n);
  for (size_t i = 0; i < n; ++i) r.top.push_back({order[i].second, logprob(order[i].first)});
  return r;
}

}  // namespace mla
