// The cosine of two logit vectors, for model checks that no rounding bound covers (a routing
// near-tie flips an expert under FP32-level noise): it tells the same model (0.9 and above over
// the families measured) from a wrong layout, scale or wiring (independent vectors: near 0).
#pragma once

#include <gtest/gtest.h>

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

}  // namespace mla::test
