// compare(): element rule, cosine and non-finite positions, accumulated in FP64.
#include "kernels/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace mla {

CompareRule flashmla_out_rule() {
  return {8e-4, 2.01 / 128, 1.0 - 5e-6};
}
CompareRule flashmla_lse_rule() {
  return {1e-6, 8.01 / 65536, -1.0};
}

namespace {

template <typename R>
CompareStats compare_impl(const R* ref, const float* got, int64_t n, const CompareRule& rule,
                          const double* bound) {
  CompareStats s;
  s.n = n;
  double dot = 0, rr = 0, gg = 0, sum_err = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = double(ref[i]), b = double(got[i]);
    if (b != 0.0) s.got_all_zero = false;
    if (!std::isfinite(a) || !std::isfinite(b)) {
      const bool same = (std::isnan(a) && std::isnan(b)) || a == b;
      if (!same) {
        ++s.nonfinite_mismatch;
        if (s.worst_index < 0) s.worst_index = i;
      }
      continue;
    }
    const double d = std::fabs(a - b);
    ++finite;
    sum_err += d;
    s.max_ref = std::max(s.max_ref, std::fabs(a));
    if (d > s.max_err) {
      s.max_err = d;
      if (s.nonfinite_mismatch == 0) s.worst_index = i;
    }
    dot += a * b;
    rr += a * a;
    gg += b * b;
    const bool ok = bound ? d <= bound[i] : (d <= rule.atol || d <= rule.rtol * std::fabs(a));
    if (!ok) ++s.bad_elements;
  }
  s.mean_err = finite ? sum_err / double(finite) : 0.0;
  s.cos = (rr == 0.0 && gg == 0.0)   ? 1.0
          : (rr == 0.0 || gg == 0.0) ? 0.0
                                     : dot / std::sqrt(rr * gg);
  s.pass = s.bad_elements == 0 && s.nonfinite_mismatch == 0 && s.cos >= rule.cos_min;
  return s;
}

}  // namespace

CompareStats compare(const float* ref, const float* got, int64_t n, const CompareRule& rule,
                     const double* bound) {
  return compare_impl(ref, got, n, rule, bound);
}
CompareStats compare(const double* ref, const float* got, int64_t n, const CompareRule& rule,
                     const double* bound) {
  return compare_impl(ref, got, n, rule, bound);
}

void bf16_probs_bound(const float* ref, const float* abs_out, int64_t n, const CompareRule& rule,
                      double* bound, int sides) {
  for (int64_t i = 0; i < n; ++i)
    bound[i] = std::max(rule.atol, rule.rtol * std::fabs(double(ref[i]))) +
               sides * kBf16ProbsUnit * double(abs_out[i]);
}

std::string CompareStats::to_string() const {
  return fmt::format(
      "max_err {:.3e} (|ref| max {:.3e}) mean_err {:.3e} cos {:.9f} bad {} nonfinite_mismatch {}",
      max_err, max_ref, mean_err, cos, bad_elements, nonfinite_mismatch);
}

}  // namespace mla
