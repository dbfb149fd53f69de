// Comparison of a kernel's output with the reference under an explicit, derived pass rule: the
// shared checking code of the ops harness, `mla verify` and the tests. See
// docs/kernels/mla_decode.md for where each bound comes from.
#pragma once

#include <cstdint>
#include <string>

namespace mla {

struct CompareRule {
  // Per element: pass if |Δ| ≤ atol or |Δ| ≤ rtol·|ref| (or |Δ| ≤ bound[i] when a bound is given).
  double atol = 0.0;
  double rtol = 0.0;
  double cos_min = -1.0;  // cosine similarity over the finite elements must be ≥ this
};

// FlashMLA's rule for BF16-output attention (docs/kernels/mla_decode.md §Pass rules): 8e-4 abs or
// 2.01/128 rel per element, cosine difference ≤ 5e-6.
CompareRule flashmla_out_rule();
// LSE: 1e-6 abs or 8.01/65536 rel (FP32 logsumexp of BF16-rounded scores).
CompareRule flashmla_lse_rule();

// Per-element bound of a variant that rounds the probabilities of P·V to BF16 (with the V
// scale of a quantised cache folded in): the rule's allowance plus u · Σ_t p_t |v_tc|, where
// abs_out holds that sum (from the reference) and u = 2^-8 (one BF16 rounding of p · s, relative:
// 8 significant bits) + 2^-22 (the FP32 roundings of p · s and of the reference's own code · s,
// with room).
inline constexpr double kBf16ProbsUnit = 0x1p-8 + 0x1p-22;
// sides = 2 when both outputs compared may round their probabilities.
void bf16_probs_bound(const float* ref, const float* abs_out, int64_t n, const CompareRule& rule,
                      double* bound, int sides = 1);

struct CompareStats {
  int64_t n = 0;
  double max_err = 0.0;  // over elements finite in both
  double mean_err = 0.0;
  double max_ref = 0.0;            // max |ref|, to judge max_err against
  double cos = 1.0;                // Σ ref·got / (‖ref‖‖got‖); 1 when both are all zero
  int64_t bad_elements = 0;        // failing the per-element rule
  int64_t nonfinite_mismatch = 0;  // inf/NaN where the other has a different value
  int64_t worst_index = -1;
  bool got_all_zero = true;
  bool pass = false;
  std::string to_string() const;
};

// got and ref hold n elements; bound (optional) gives a per-element absolute bound instead of
// atol / rtol. A non-finite element passes only where both hold the same value (NaN with NaN).
CompareStats compare(const float* ref, const float* got, int64_t n, const CompareRule& rule,
                     const double* bound = nullptr);
CompareStats compare(const double* ref, const float* got, int64_t n, const CompareRule& rule,
                     const double* bound = nullptr);

}  // namespace mla
