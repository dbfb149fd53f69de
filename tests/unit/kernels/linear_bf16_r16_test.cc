// BF16 weights repacked at load (DType::kBF16R16, core/ggml_repack.h): the repacked rows decode to
// the BF16 rows bit for bit; linear() on them, on every CPU variant and path, stays inside the
// bound of the kernel that runs it (the FP32 products of linear_bf16_r16.h, the BF16 GEMM reading
// the layout in place, FP32 decoding on variants without them); a row of x gets the same bits
// alone as in a decode batch; linear_many equals linear; and the layout is asked for only where it
// fits and the variant runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/ggml_repack.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "linear_bounds.h"
#include "linear_run.h"
#include "linear_test_weight.h"

namespace mla {
namespace {

// A BF16 weight and its repacked copy (at `offset` bytes past an allocation, as the BF16 one).
struct Repacked {
  TestWeight bf16;
  std::vector<uint8_t> bytes;
  LinearWeight w;
};

Repacked make_repacked(Rng& rng, int64_t out, int64_t in, int offset) {
  Repacked r;
  r.bf16 = make_weight(rng, DType::kBF16, out, in, offset);
  r.bytes.resize(size_t(offset + out * in * 2));
  repack_rows(DType::kBF16R16, r.bf16.w.data, out, in, r.bytes.data() + offset);
  r.w = r.bf16.w;
  r.w.dtype = DType::kBF16R16;
  r.w.data = r.bytes.data() + offset;
  return r;
}

TEST(Bf16R16, RowsDecodeAsTheBf16RowsBitForBit) {
  Rng rng(1);
  for (auto [out, in] : {std::pair<int64_t, int64_t>{16, 2}, {32, 78}, {48, 2048}}) {
    const Repacked r = make_repacked(rng, out, in, 3);
    std::vector<float> a(static_cast<size_t>(in)), b(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
      ASSERT_TRUE(dequantize_weight_row(DType::kBF16, r.bf16.w.data, in, o, a.data()).ok());
      ASSERT_TRUE(dequantize_weight_row(DType::kBF16R16, r.w.data, in, o, b.data()).ok());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "row " << o;
    }
  }
}

TEST(Bf16R16, EveryCpuVariantAndPathMatchesTheReference) {
  ThreadPool pool(3);  // more threads than this machine's cores: chunks interleave
  Rng rng(7);
  // in: a single pair, not a multiple of 16 or 32, over one L2 chunk; out: one group, 3 (one
  // GEMM register tile), 5 (a partial GEMM tile), 10 (two FP32 tiles of 8 vectors and a rest).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {16, 2}, {48, 78}, {80, 300}, {160, 2100}, {96, 2048}};
  // Around the register tiles (1-4 rows of x), the FP32 / GEMM threshold (16) and every GEMM
  // tile height (23 = 16 + 4 + 2 + 1).
  const std::vector<int64_t> ns = {1, 2, 3, 4, 5, 9, 16, 17, 23, 64};
  int offset = 0;
  for (auto [out, in] : shapes) {
    const Repacked r = make_repacked(rng, out, in, offset++ % 4);
    const TestWeight a = abs_weight(r.bf16);
    std::vector<double> w_abs_sum(static_cast<size_t>(out));  // Σ_j |w_j| per output
    ref::linear(a.w, 1, std::vector<float>(size_t(in), 1.0f).data(), w_abs_sum.data());
    for (int64_t n : ns) {
      std::vector<float> x(size_t(n * in)), xa(x.size());
      for (size_t k = 0; k < x.size(); ++k) xa[k] = std::abs(x[k] = float(rng.normal()));
      std::vector<double> want(size_t(n * out)), abs_sum(want.size()), want_r16(want.size());
      ref::linear(r.bf16.w, n, x.data(), want.data());
      ref::linear(r.w, n, x.data(), want_r16.data());
      ASSERT_EQ(want, want_r16) << "the reference reads the repacked rows as the BF16 ones";
      ref::linear(a.w, n, xa.data(), abs_sum.data());
      for (const LinearVariant* v : cpu_linear_variants_here())
        for (LinearPath p : {LinearPath::kAuto, LinearPath::kDot, LinearPath::kBf16}) {
          std::vector<float> y(want.size(), -12345.0f);
          run_product(*v, r.w, n, x.data(), y.data(), pool, p);
          const bool gemm = takes_bf16_gemm(v->compute, p, n, r.w);
          int bad = 0;
          for (size_t k = 0; k < y.size(); ++k) {
            const double b = gemm ? bound_bf16(in, abs_sum[k], w_abs_sum[k % size_t(out)], 1.0)
                                  : bound(in, abs_sum[k]);
            if (!(std::abs(double(y[k]) - want[k]) <= b) && ++bad <= 3)
              ADD_FAILURE() << v->name << " path " << int(p) << " [" << out << ", " << in << "] n "
                            << n << " element " << k << ": " << y[k] << " want " << want[k] << " ± "
                            << b;
          }
          ASSERT_EQ(bad, 0);
        }
    }
  }
}

// Decode batches: the engine's greedy output must not depend on what else is running.
TEST(Bf16R16, ARowOfXGetsTheSameOutputAloneAndInABatch) {
  ThreadPool pool(3);
  Rng rng(11);
  for (auto [out, in] : {std::pair<int64_t, int64_t>{304, 2100}, {144, 260}}) {
    const Repacked r = make_repacked(rng, out, in, 1);
    for (const LinearVariant* v : cpu_linear_variants_here())
      for (LinearPath p : {LinearPath::kAuto, LinearPath::kBf16})
        for (int64_t n : {2, 5, 16}) {
          std::vector<float> x(size_t(n * in)), y(size_t(n * out)), one(static_cast<size_t>(out));
          for (auto& e : x) e = float(rng.normal());
          run_product(*v, r.w, n, x.data(), y.data(), pool, p);
          for (int64_t i = 0; i < n; ++i) {
            run_product(*v, r.w, 1, x.data() + i * in, one.data(), pool, p);
            for (int64_t o = 0; o < out; ++o)
              ASSERT_EQ(y[size_t(i * out + o)], one[size_t(o)])
                  << v->name << " out " << out << " n " << n << " row " << i << " output " << o;
          }
        }
  }
}

// Next to a plain BF16 weight on the same x: each job as linear() computes it.
TEST(Bf16R16, LinearManyEqualsLinear) {
  ThreadPool pool(2);
  Rng rng(5);
  const int64_t in = 256;
  const Repacked a = make_repacked(rng, 64, in, 0);
  const TestWeight b = make_weight(rng, DType::kBF16, 24, in, 2);
  for (int64_t n : {1, 4, 20}) {
    std::vector<float> x(size_t(n * in));
    for (float& v : x) v = float(rng.normal());
    std::vector<float> ya(size_t(n * 64)), yb(size_t(n * 24)), ma(ya.size()), mb(yb.size());
    for (DType math : {DType::kF32, DType::kBF16}) {
      ASSERT_TRUE(linear(a.w, n, x.data(), ya.data(), pool, "cpu", math).ok());
      ASSERT_TRUE(linear(b.w, n, x.data(), yb.data(), pool, "cpu", math).ok());
      const LinearJob jobs[] = {{&a.w, n, x.data(), ma.data()}, {&b.w, n, x.data(), mb.data()}};
      ASSERT_TRUE(linear_many(jobs, pool, "cpu", math).ok());
      EXPECT_EQ(ya, ma);
      EXPECT_EQ(yb, mb);
    }
  }
}

TEST(Bf16R16, RefusesShapesItCannotHold) {
  uint8_t bytes[16 * 4 * 2] = {};
  LinearWeight w{DType::kBF16R16, bytes, 16, 4};
  EXPECT_TRUE(validate(w).ok());
  w.out = 8;  // not whole groups of 16 rows
  EXPECT_FALSE(validate(w).ok());
  w.out = 16;
  w.in = 3;  // an odd row: its last value has no pair
  const Status s = validate(w);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("BF16_R16"), std::string::npos) << s.message();
}

TEST(Bf16R16, PreferredWhereItFitsOnTheVariantWithTheBf16Gemm) {
  const bool repacks = cpu_linear_variants_here().front()->repacks_bf16;
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 2048, 2048),
            repacks ? DType::kBF16R16 : DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 2048, 2048, "ref"), DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 40, 2048), DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 2048, 77), DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kF16, 2048, 2048), DType::kF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kF8E4M3, 2048, 2048), DType::kF8E4M3);
}

}  // namespace
}  // namespace mla
