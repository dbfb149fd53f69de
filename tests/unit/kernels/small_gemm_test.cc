// gemm_xw and gemm_xwt (kernels/cpu/small_gemm.h, the absorbed path's per-head products) against
// an FP64 loop, on shapes with ragged edges (out and in not multiples of the 8 lanes or of the
// 16-column / 2-row blocks), every n from 0 to 9 (full and partial 4-row blocks) and row strides
// wider than the rows (the heads of one query row lie side by side).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/small_gemm.h"

namespace mla {
namespace {

// A dot product of `in` FP32 terms summed in any order (lanes, then across lanes, FMA or not):
// every term passes through at most `in` roundings, so |error| ≤ γ_in · Σ|x·w| with
// γ_k = k·u / (1 − k·u), u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, §3.1).
double bound(int in, double abs_sum) {
  const double u = std::ldexp(1.0, -24), k = double(in);
  return k * u / (1 - k * u) * abs_sum;
}

struct Shape {
  int in, out;
};

void run_case(bool transposed, int n, Shape s, Rng& rng) {
  const int64_t ldx = s.in + 5, ldy = s.out + 3;  // strided rows, padding left untouched
  std::vector<float> x(size_t(std::max(n, 1) * ldx)), w(size_t(s.in) * s.out);
  for (auto& v : x) v = float(rng.normal());
  for (auto& v : w) v = float(rng.normal());
  std::vector<float> y(size_t(std::max(n, 1) * ldy), -7.0f);
  if (transposed)
    cpu::gemm_xwt(n, s.in, s.out, x.data(), ldx, w.data(), y.data(), ldy);
  else
    cpu::gemm_xw(n, s.in, s.out, x.data(), ldx, w.data(), y.data(), ldy);
  const std::string what = std::string(transposed ? "xwt" : "xw") + " n " + std::to_string(n) +
                           " in " + std::to_string(s.in) + " out " + std::to_string(s.out);
  for (int i = 0; i < n; ++i) {
    for (int o = 0; o < s.out; ++o) {
      double want = 0, abs_sum = 0;
      for (int j = 0; j < s.in; ++j) {
        const double wv = transposed ? w[size_t(o) * s.in + j] : w[size_t(j) * s.out + o];
        want += double(x[size_t(i * ldx + j)]) * wv;
        abs_sum += std::abs(double(x[size_t(i * ldx + j)]) * wv);
      }
      const float got = y[size_t(i * ldy + o)];
      ASSERT_LE(std::abs(double(got) - want), bound(s.in, abs_sum))
          << what << " row " << i << " col " << o << ": got " << got << " want " << want;
    }
    for (int64_t o = s.out; o < ldy; ++o) ASSERT_EQ(y[size_t(i * ldy + o)], -7.0f) << what;
  }
  if (n == 0) {
    for (float v : y) ASSERT_EQ(v, -7.0f) << what;
  }
}

TEST(SmallGemm, MatchesFp64OnRaggedShapesStridesAndEveryRowCount) {
  const Shape shapes[] = {{1, 1},     {7, 5},     {8, 16},  {9, 17}, {16, 33},
                          {128, 512}, {512, 128}, {64, 31}, {30, 48}};
  Rng rng(11);
  for (bool transposed : {false, true})
    for (const Shape& s : shapes)
      for (int n = 0; n <= 9; ++n) run_case(transposed, n, s, rng);
}

}  // namespace
}  // namespace mla
