// The cosine of two logit vectors, for model checks that no rounding bound covers (a routing
// near-tie flips an expert under FP32-level noise): it tells the same model (0.9 and above over
// the families measured) from a wrong layout, scale or wiring (independent vectors: near 0).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mla::test {

// cos(a, b) in FP64 for vectors of one size; a non-finite value in either fails the test and
// gives NaN.
inline double logit_cosine(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      ADD_FAILURE() << "logit " << i << " is not finite: " << a[i] << " vs " << b[i];
      return std::numeric_limits<double>::quiet_NaN();
    }
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return dot / std::sqrt(na * nb);
}

// The median over rows of cos(row of a, row of b), a and b being `rows` rows of logits each: a
// routing near-tie that flips an expert moves its row (and, through attention, a few after it)
// by O(1) while the other rows stay the same model; a wrong layout, scale or wiring moves every
// row (median near 0).
inline double logit_cosine_median(const std::vector<float>& a, const std::vector<float>& b,
                                  size_t rows) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_TRUE(rows > 0 && a.size() % rows == 0) << a.size() << " logits in " << rows << " rows";
  if (rows == 0 || a.size() != b.size() || a.size() % rows) return 0.0;
  const size_t v = a.size() / rows;
  std::vector<double> c(rows);
  for (size_t r = 0; r < rows; ++r)
    c[r] = logit_cosine(std::vector<float>(a.begin() + r * v, a.begin() + (r + 1) * v),
                        std::vector<float>(b.begin() + r * v, b.begin() + (r + 1) * v));
  std::sort(c.begin(), c.end());
  return rows % 2 ? c[rows / 2] : (c[rows / 2 - 1] + c[rows / 2]) / 2;
}

}  // namespace mla::test
