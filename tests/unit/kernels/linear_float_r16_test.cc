// BF16 and block-FP8 weights repacked at load (DType::kBF16R16, kF8E4M3R16, core/ggml_repack.h):
// the repacked rows hold the stored rows bit for bit; linear() on them, on every CPU variant and
// path, stays inside the bound of the kernel that runs it (the FP32 products of linear_bf16_r16.h
// / linear_f8_r16.h, the BF16 dot products of linear_r16_dot.h below the GEMM's minimum on path
// kBf16Gemm, the BF16 GEMM reading the layout, FP32 decoding on variants without them);
// an FP8 NaN code makes its output NaN; a row of x gets the same bits alone as in a decode batch;
// linear_many equals linear; and the layouts are asked for only where they fit and the variant
// runs them.
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

// A BF16 or block-FP8 weight (`stored`) and its repacked copy (at `offset` bytes past an
// allocation, as the stored one), which shares the stored one's scale grid.
struct Repacked {
  TestWeight stored;
  std::vector<uint8_t> bytes;
  LinearWeight w;
};

Repacked make_repacked(Rng& rng, DType t, int64_t out, int64_t in, int offset, int block_rows = 128,
                       int block_cols = 128) {
  Repacked r;
  r.stored = make_weight(rng, t, out, in, offset, block_rows, block_cols);
  const DType to = repacked_dtype(t);
  r.bytes.resize(size_t(offset + dtype_bytes(t, in) * out));
  repack_rows(to, r.stored.w.data, out, in, r.bytes.data() + offset);
  r.w = r.stored.w;
  r.w.dtype = to;
  r.w.data = r.bytes.data() + offset;
  return r;
}

TEST(FloatR16, RowsHoldTheStoredRowsBitForBit) {
  Rng rng(1);
  for (auto [out, in] : {std::pair<int64_t, int64_t>{16, 2}, {32, 78}, {48, 2048}}) {
    const Repacked r = make_repacked(rng, DType::kBF16, out, in, 3);
    std::vector<float> a(static_cast<size_t>(in)), b(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
      ASSERT_TRUE(dequantize_weight_row(DType::kBF16, r.stored.w.data, in, o, a.data()).ok());
      ASSERT_TRUE(dequantize_weight_row(DType::kBF16R16, r.w.data, in, o, b.data()).ok());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "row " << o;
    }
    const Repacked f = make_repacked(rng, DType::kF8E4M3, out, in, 1);
    std::vector<uint8_t> codes(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
      gather_f8_r16_row(f.w.data, in, o, codes.data());
      ASSERT_EQ(0, std::memcmp(codes.data(), f.stored.w.data + o * in, size_t(in))) << o;
    }
    // Its values need the scale grid: the scale-less row decoder refuses it.
    EXPECT_FALSE(dequantize_weight_row(DType::kF8E4M3R16, f.w.data, in, 0, a.data()).ok());
  }
}

struct Shape {
  DType t;
  int64_t out, in;
  int block_rows = 128, block_cols = 128;
};

TEST(FloatR16, EveryCpuVariantAndPathMatchesTheReference) {
  ThreadPool pool(3);  // more threads than this machine's cores: chunks interleave
  Rng rng(7);
  // in: a single pair, 2 mod 4 (a lone pair at the end of an FP8 group), not a multiple of 16 or
  // 32, over one L2 chunk; out: one group, 3 (one GEMM register tile), 5 (a partial one), 10.
  // FP8 scale blocks: one group of rows by one pair, ragged at both edges, DeepSeek's 128², and
  // 16 rows under rows so short that a thread's chunk spans many scale rows.
  const std::vector<Shape> shapes = {{DType::kBF16, 16, 2},
                                     {DType::kBF16, 48, 78},
                                     {DType::kBF16, 80, 300},
                                     {DType::kBF16, 160, 2100},
                                     {DType::kBF16, 96, 2048},
                                     {DType::kF8E4M3, 16, 2, 16, 2},
                                     {DType::kF8E4M3, 48, 78, 32, 24},
                                     {DType::kF8E4M3, 80, 300, 16, 64},
                                     {DType::kF8E4M3, 160, 2100},
                                     {DType::kF8E4M3, 96, 2048},
                                     {DType::kF8E4M3, 512, 64, 16, 32}};
  // Around the register tiles (1-4 rows of x), the FP32 / GEMM threshold (16) and every GEMM
  // tile height (23 = 16 + 4 + 2 + 1).
  const std::vector<int64_t> ns = {1, 2, 3, 4, 5, 9, 16, 17, 23, 64};
  int offset = 0;
  for (const Shape& sh : shapes) {
    const int64_t out = sh.out, in = sh.in;
    const Repacked r =
        make_repacked(rng, sh.t, out, in, offset++ % 4, sh.block_rows, sh.block_cols);
    ASSERT_TRUE(validate(r.w).ok());
    const TestWeight a = abs_weight(r.stored);
    const double unit = gemm_unit(r.stored);
    std::vector<double> w_abs_sum(static_cast<size_t>(out));  // Σ_j |w_j| per output
    ref::linear(a.w, 1, std::vector<float>(size_t(in), 1.0f).data(), w_abs_sum.data());
    for (int64_t n : ns) {
      std::vector<float> x(size_t(n * in)), xa(x.size());
      for (size_t k = 0; k < x.size(); ++k) xa[k] = std::abs(x[k] = float(rng.normal()));
      std::vector<double> want(size_t(n * out)), abs_sum(want.size()), want_r16(want.size());
      ref::linear(r.stored.w, n, x.data(), want.data());
      ref::linear(r.w, n, x.data(), want_r16.data());
      ASSERT_EQ(want, want_r16) << "the reference reads the repacked rows as the stored ones";
      ref::linear(a.w, n, xa.data(), abs_sum.data());
      for (const LinearVariant* v : cpu_linear_variants_here())
        for (LinearPath p :
             {LinearPath::kAuto, LinearPath::kDot, LinearPath::kBf16, LinearPath::kBf16Gemm}) {
          std::vector<float> y(want.size(), -12345.0f);
          run_product(*v, r.w, n, x.data(), y.data(), pool, p);
          const bool gemm = takes_bf16_gemm(v->compute, p, n, r.w);
          int bad = 0;
          for (size_t k = 0; k < y.size(); ++k) {
            const double b = gemm ? bound_bf16(in, abs_sum[k], w_abs_sum[k % size_t(out)], unit)
                                  : bound(in, abs_sum[k]);
            if (!(std::abs(double(y[k]) - want[k]) <= b) && ++bad <= 3)
              ADD_FAILURE() << v->name << " " << dtype_name(r.w.dtype) << " path " << int(p) << " ["
                            << out << ", " << in << "] n " << n << " element " << k << ": " << y[k]
                            << " want " << want[k] << " ± " << b;
          }
          ASSERT_EQ(bad, 0);
        }
    }
  }
}

// An FP8 NaN code (0x7F / 0xFF) makes its row's output NaN on every path, as the stored layout's.
TEST(FloatR16, AnFp8NanCodeMakesItsOutputNan) {
  ThreadPool pool(2);
  Rng rng(3);
  const int64_t out = 48, in = 300;
  Repacked r = make_repacked(rng, DType::kF8E4M3, out, in, 0);
  for (auto [row, col, code] : {std::tuple{5, 7, 0x7F}, {37, 299, 0xFF}}) {
    // Where the code of (row, col) sits in the layout: group row / 16, pair col / 2.
    r.bytes[size_t(row / 16 * 16 * in + col / 2 * 32 + row % 16 * 2 + col % 2)] = uint8_t(code);
  }
  for (int64_t n : {1, 3, 20}) {
    std::vector<float> x(size_t(n * in), 0.5f), y(size_t(n * out));
    for (const LinearVariant* v : cpu_linear_variants_here())
      for (LinearPath p : {LinearPath::kAuto, LinearPath::kBf16, LinearPath::kBf16Gemm}) {
        run_product(*v, r.w, n, x.data(), y.data(), pool, p);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t o = 0; o < out; ++o)
            ASSERT_EQ(std::isnan(y[size_t(i * out + o)]), o == 5 || o == 37)
                << v->name << " n " << n << " row " << o;
      }
  }
}

// Decode batches: the engine's greedy output must not depend on what else is running (and an
// expert's few tokens of a prefill chunk get the bits each would get alone).
TEST(FloatR16, ARowOfXGetsTheSameOutputAloneAndInABatch) {
  ThreadPool pool(3);
  Rng rng(11);
  for (auto [t, out, in] : {std::tuple{DType::kBF16, 304, 2100},
                            {DType::kBF16, 144, 260},
                            {DType::kF8E4M3, 304, 2100},
                            {DType::kF8E4M3, 144, 260}}) {
    const Repacked r = make_repacked(rng, t, out, in, 1, 16, 64);
    for (const LinearVariant* v : cpu_linear_variants_here())
      for (LinearPath p : {LinearPath::kAuto, LinearPath::kBf16, LinearPath::kBf16Gemm})
        for (int64_t n : {2, 3, 4, 5, 16}) {
          // kBf16Gemm keeps the property only below the GEMM's minimum (BF16 4 rows, FP8 5): its
          // dot products of 1-4 rows (cpu/linear_r16_dot.h) treat each row alone.
          if (p == LinearPath::kBf16Gemm && n >= (t == DType::kBF16 ? 4 : 5)) continue;
          std::vector<float> x(size_t(n * in)), y(size_t(n * out)), one(static_cast<size_t>(out));
          for (auto& e : x) e = float(rng.normal());
          run_product(*v, r.w, n, x.data(), y.data(), pool, p);
          for (int64_t i = 0; i < n; ++i) {
            run_product(*v, r.w, 1, x.data() + i * in, one.data(), pool, p);
            for (int64_t o = 0; o < out; ++o)
              ASSERT_EQ(y[size_t(i * out + o)], one[size_t(o)])
                  << v->name << " " << dtype_name(t) << " out " << out << " n " << n << " row " << i
                  << " output " << o;
          }
        }
  }
}

// The GEMM widens an FP8 weight's chunk whole for more than one block of x rows (48) and one
// (vectors, scale block) step at a time for fewer: the same BF16 values through the same tiles,
// so a row of x gets the same bits in a product of 8, 17, 48 or 64 rows (a prefill chunk's
// experts hold any number of tokens). Rows of 160 (a ragged last chunk) and scale blocks of 16
// rows (several scale rows a chunk) by 64 columns (2,100: a ragged last block).
TEST(FloatR16, AGemmRowGetsTheSameOutputWhateverTheRowsAroundIt) {
  ThreadPool pool(3);
  Rng rng(13);
  for (auto [t, out, in] : {std::tuple{DType::kF8E4M3, 160, 2100}, {DType::kBF16, 160, 2100}}) {
    const Repacked r = make_repacked(rng, t, out, in, 2, 16, 64);
    std::vector<float> x(size_t(64 * in));
    for (auto& e : x) e = float(rng.normal());
    for (const LinearVariant* v : cpu_linear_variants_here()) {
      std::vector<float> all(size_t(64 * out));
      run_product(*v, r.w, 64, x.data(), all.data(), pool, LinearPath::kBf16Gemm);
      for (int64_t n : {8, 17, 48}) {
        std::vector<float> y(size_t(n * out));
        run_product(*v, r.w, n, x.data() + (64 - n) * in, y.data(), pool, LinearPath::kBf16Gemm);
        for (size_t k = 0; k < y.size(); ++k)
          ASSERT_EQ(y[k], all[size_t((64 - n) * out) + k])
              << v->name << " " << dtype_name(t) << " n " << n << " element " << k;
      }
    }
  }
}

// Next to a plain BF16 weight on the same x: each job as linear() computes it.
TEST(FloatR16, LinearManyEqualsLinear) {
  ThreadPool pool(2);
  Rng rng(5);
  const int64_t in = 256;
  for (DType t : {DType::kBF16, DType::kF8E4M3}) {
    const Repacked a = make_repacked(rng, t, 64, in, 0);
    const TestWeight b = make_weight(rng, DType::kBF16, 24, in, 2);
    EXPECT_EQ(linear_many_difference(a.w, b.w, in, pool), "");
  }
}

TEST(FloatR16, RefusesShapesItCannotHold) {
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
  float scale = 1.0f;
  LinearWeight f{DType::kF8E4M3R16, bytes, 16, 4, reinterpret_cast<const uint8_t*>(&scale), 16, 2};
  EXPECT_TRUE(validate(f).ok());
  f.block_rows = 8;  // a group of 16 rows across two scale rows
  const Status fs = validate(f);
  EXPECT_FALSE(fs.ok());
  EXPECT_NE(fs.message().find("F8_E4M3_R16"), std::string::npos) << fs.message();
  f.block_rows = 16;
  f.block_cols = 3;  // a pair across two scale columns
  EXPECT_FALSE(validate(f).ok());
  f.block_cols = 2;
  f.scale_inv = nullptr;
  EXPECT_FALSE(validate(f).ok());
}

TEST(FloatR16, PreferredWhereTheyFitOnTheVariantWithTheBf16Gemm) {
  const bool repacks = cpu_linear_variants_here().front()->repacks_floats;
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 2048, 2048),
            repacks ? DType::kBF16R16 : DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 2048, 2048, "ref"), DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 40, 2048), DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kBF16, 2048, 77), DType::kBF16);
  EXPECT_EQ(linear_preferred_dtype(DType::kF16, 2048, 2048), DType::kF16);
  // FP8 only where the scale grid is known and holds whole groups and pairs.
  EXPECT_EQ(linear_preferred_dtype(DType::kF8E4M3, 2048, 2048), DType::kF8E4M3);
  const uint8_t byte = 0;
  LinearWeight f{DType::kF8E4M3, &byte, 2048, 2048, &byte, 128, 128};
  EXPECT_EQ(linear_preferred_dtype(f), repacks ? DType::kF8E4M3R16 : DType::kF8E4M3);
  EXPECT_EQ(linear_preferred_dtype(f, "ref"), DType::kF8E4M3);
  f.block_rows = 24;
  EXPECT_EQ(linear_preferred_dtype(f), DType::kF8E4M3);
  f.block_rows = 128;
  f.block_cols = 3;
  EXPECT_EQ(linear_preferred_dtype(f), DType::kF8E4M3);
  f.block_cols = 128;
  f.out = 40;
  EXPECT_EQ(linear_preferred_dtype(f), DType::kF8E4M3);
}

}  // namespace
}  // namespace mla
