// silu_mul (kernels/activation.h) against FP64 for values across FP32's range, NaN and ±inf,
// every tail length of the 16-lane loop, on the CPU's best ISA (and the scalar loop under
// MLA_ISA=scalar).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "kernels/activation.h"

namespace mla {
namespace {

TEST(Activation, SiluMulMatchesFp64) {
  Rng rng(7);
  for (int64_t n : {1, 15, 16, 17, 33, 1000}) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      // Magnitudes from 1e-6 to 1e2 (exp(-g) under- and overflows past ±88), both signs.
      g[size_t(i)] = float((rng.uniform() < 0.5 ? -1 : 1) * std::pow(10.0, -6 + 8 * rng.uniform()));
      u[size_t(i)] = float(rng.normal());
    }
    std::vector<float> out = g;
    silu_mul(out.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double x = g[size_t(i)], xu = x * u[size_t(i)], want = xu / (1.0 + std::exp(-x));
      // exp within 7e-9 before rounding, then one rounding each for exp, the add, the divide and
      // the two multiplies: |error| ≤ 6 · 2^-24 relative. Where e^-|x| < 2^-126 (x < −87.33)
      // the AVX-512 exp flushes it to 0: then |want| < |x · u| · 2^-126 is the allowance.
      const double flush = x < -87.33 ? std::abs(xu) * 0x1p-126 : 0.0;
      EXPECT_NEAR(out[size_t(i)], want, 6 * 0x1p-24 * std::abs(want) + flush)
          << "n " << n << " x " << x << " u " << u[size_t(i)];
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> g = {std::nanf(""), inf, -inf, 0.0f}, u = {1, 2, 3, 4};
  silu_mul(g.data(), u.data(), 4);
  EXPECT_TRUE(std::isnan(g[0]));
  EXPECT_EQ(g[1], inf);
  EXPECT_TRUE(std::isnan(g[2]));  // −inf · sigmoid(−inf) = −inf · 0
  EXPECT_EQ(g[3], 0.0f);
}

}  // namespace
}  // namespace mla
