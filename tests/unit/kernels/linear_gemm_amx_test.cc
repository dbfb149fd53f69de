// The AMX GEMM's operand addressing (kernels/cpu/linear_gemm_amx.h) on every CPU: gemm_amx_rows
// over a plain-loop tile policy with amx_product_grid's contract (tdpbf16ps: C[16 × 16] +=
// A[16 rows × 32 BF16] · B[16 pairs][16 columns][2]) against an FP64 product of the same BF16
// values, for 1 and 2 blocks of 16 x rows, 1-6 weight vectors, padding rows in the last vector,
// and FP8-style scale blocks. On CPUs with AMX the linear tests run the tile unit itself
// (linear.cpu.amx among the variants of linear_test.cc and linear_float_r16_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "amx_loop_tiles.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cpu/linear_gemm_amx.h"

namespace mla {
namespace {

struct Case {
  int64_t n, out, in, block_cols;  // block_cols 0: unscaled (BF16)
};

TEST(GemmAmxRows, MatchesTheProductOfItsOperands) {
  Rng rng(23);
  // n: whole blocks of 16 rows, and 17 / 45 (a partial last block, run on the tiles too).
  for (const Case& c : {Case{16, 16, 32, 0}, Case{32, 96, 64, 0}, Case{48, 40, 96, 0},
                        Case{17, 48, 64, 0}, Case{32, 80, 256, 64}, Case{16, 96, 160, 32},
                        Case{45, 40, 128, 64}, Case{64, 24, 128, 128}}) {
    const int64_t kp = c.in / 2, vecs = (c.out + 15) / 16, ldw = kp * 16;
    // x [n, in] and W [out, in] as BF16 values; their panels as the GEMM lays them out (x rows
    // past n zero, up to a multiple of 32, as gemm_pack_x_tile leaves them).
    std::vector<float> x(size_t(c.n * c.in)), w(size_t(c.out * c.in));
    std::vector<uint32_t> panel(size_t((c.n + 31) / 32 * 32 * kp), 0), wp(size_t(vecs * ldw), 0);
    for (float& v : x) v = round_to_bf16(float(rng.normal()));
    for (float& v : w) v = round_to_bf16(float(rng.normal()));
    auto bits = [](float v) { return uint32_t(f32_to_bf16(v)); };
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t p = 0; p < kp; ++p)
        panel[size_t(i * kp + p)] =
            bits(x[size_t(i * c.in + 2 * p)]) | bits(x[size_t(i * c.in + 2 * p + 1)]) << 16;
    for (int64_t o = 0; o < c.out; ++o)  // rows past out stay 0: the last vector's padding
      for (int64_t p = 0; p < kp; ++p)
        wp[size_t(o / 16 * ldw + 16 * p + o % 16)] =
            bits(w[size_t(o * c.in + 2 * p)]) | bits(w[size_t(o * c.in + 2 * p + 1)]) << 16;
    // FP8-style: a scale per weight row and column block of block_cols values.
    const int64_t block = c.block_cols / 2, blocks = block ? (kp + block - 1) / block : 1;
    std::vector<float> scales;
    for (int64_t b = 0; block && b < blocks; ++b)
      for (int64_t r = 0; r < 16 * vecs; ++r)
        scales.push_back(r < c.out ? float(0.5 + rng.uniform()) : 0.0f);
    const float sentinel = -7.0f;
    const int64_t ldy = c.out + 3;  // the chunk's columns inside a wider y
    std::vector<float> y(size_t(c.n * ldy), sentinel);
    for (int64_t i0 = 0; i0 < c.n; i0 += cpu::kAmxXRows)
      cpu::gemm_amx_rows<test::AmxLoopTiles>(
          panel.data(), kp, i0, std::min(cpu::kAmxXRows, c.n - i0), wp.data(), ldw, vecs, c.out,
          block ? scales.data() : nullptr, block, y.data(), ldy);
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t o = 0; o < c.out; ++o) {
        double want = 0, mag = 0;
        for (int64_t j = 0; j < c.in; ++j) {
          const double s = block ? scales[size_t(j / c.block_cols * 16 * vecs + o)] : 1.0;
          const double t = double(x[size_t(i * c.in + j)]) * w[size_t(o * c.in + j)] * s;
          want += t;
          mag += std::abs(t);
        }
        // FP32 sums of exact products: ≤ 2·in roundings, plus one scaling and one block sum
        // per scale block: γ_m · Σ|terms| with m = 2·in + 2·blocks (u = 2^-24).
        const double m = double(2 * c.in + 2 * blocks), u = std::ldexp(1.0, -24);
        const double bound = m * u / (1 - m * u) * mag;
        ASSERT_NEAR(y[size_t(i * ldy + o)], want, bound)
            << "n " << c.n << " out " << c.out << " in " << c.in << " y[" << i << "][" << o << "]";
      }
      for (int64_t o = c.out; o < ldy; ++o)
        ASSERT_EQ(y[size_t(i * ldy + o)], sentinel) << "a padding row was stored, column " << o;
    }
  }
}

TEST(GemmAmxRows, FitsWholeStepsOnly) {
  EXPECT_TRUE(cpu::gemm_amx_fits(2048, 0));
  EXPECT_TRUE(cpu::gemm_amx_fits(2048, 128));
  EXPECT_FALSE(cpu::gemm_amx_fits(2040, 0));   // a partial 16-pair step
  EXPECT_FALSE(cpu::gemm_amx_fits(2048, 48));  // scale blocks of 24 pairs
  EXPECT_TRUE(cpu::gemm_amx_fits(1408, 128));  // V2-Lite down_proj rows
}

}  // namespace
}  // namespace mla
