// requantize_weight (--lm-head-dtype) against kernels/ref's FP64 reading of both matrices, with
// the rounding bound of each format derived in the comments.
#include "model/weight_requant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "linear_ggml_bounds.h"

namespace mla {
namespace {

struct Source {
  std::vector<uint8_t> bytes;
  LinearWeight w;
};

// [out, in] F32 or BF16 weights: Gaussian rows, a row spanning 2^-30 .. 2^4 (values far below
// the block's amax land in E4M3's subnormals), an all-zero 128x128 block, a NaN.
Source make_source(DType dt, int64_t out, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> v(size_t(out * in));
  for (float& x : v) x = g(rng);
  if (out > 7) {
    for (int64_t j = 0; j < in; ++j)
      v[size_t(5 * in + j)] = std::ldexp(j % 2 ? -1.0f : 1.0f, int(j % 35) - 30);
    v[size_t(7 * in + 3)] = std::numeric_limits<float>::quiet_NaN();
  }
  for (int64_t i = 128; i < std::min<int64_t>(out, 256); ++i)
    for (int64_t j = 0; j < std::min<int64_t>(in, 128); ++j) v[size_t(i * in + j)] = 0.0f;
  Source s;
  s.bytes.resize(v.size() * size_t(dt == DType::kF32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::kF32) {
      std::memcpy(&s.bytes[4 * i], &v[i], 4);
    } else {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(&s.bytes[2 * i], &h, 2);
    }
  }
  s.w.dtype = dt;
  s.w.data = s.bytes.data();
  s.w.out = out;
  s.w.in = in;
  return s;
}

class WeightRequantTest : public ::testing::TestWithParam<DType> {};

// FP8: code = e4m3(w / s) by round to nearest even, s = amax / 448 of the 128x128 block.
// w / s rounds once in FP32 (relative 2^-24); a normal E4M3 value has 4 significant bits, so the
// code is within half an ulp, 2^-4 relatively, of w / s; a subnormal one (spacing 2^-9) within
// 2^-10. |w / s| ≤ 448 (+ one FP32 rounding), so nothing saturates. Decoding code · s is exact in
// FP64 (kernels/ref). Hence |w' − w| ≤ 2^-4·|w|·(1 + 2^-23) + 2^-10·s.
TEST_P(WeightRequantTest, Fp8BlocksStayWithinTheirRoundingBound) {
  const int64_t out = 300, in = 200;  // ragged blocks both ways
  Source src = make_source(GetParam(), out, in, 11);
  ThreadPool pool(2);
  auto r = requantize_weight(src.w, DType::kF8E4M3, pool, "test lm_head");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const LinearWeight& q = r->weight;
  ASSERT_TRUE(validate(q).ok());
  EXPECT_EQ(q.dtype, DType::kF8E4M3);
  EXPECT_EQ(q.block_rows, kRequantBlock);
  EXPECT_EQ(q.block_cols, kRequantBlock);
  std::vector<double> a(static_cast<size_t>(in)), b(static_cast<size_t>(in));
  int subnormal_checked = 0;
  for (int64_t i = 0; i < out; ++i) {
    ref::linear_weight_row(src.w, i, a.data());
    ref::linear_weight_row(q, i, b.data());
    for (int64_t j = 0; j < in; ++j) {
      if (std::isnan(a[size_t(j)])) {
        EXPECT_TRUE(std::isnan(b[size_t(j)])) << i << "," << j;
        continue;
      }
      float s;
      std::memcpy(&s, q.scale_inv + 4 * ((i / 128) * 2 + j / 128), 4);
      const double bound = std::ldexp(std::fabs(a[size_t(j)]), -4) * (1 + std::ldexp(1.0, -23)) +
                           std::ldexp(double(s), -10);
      ASSERT_LE(std::fabs(b[size_t(j)] - a[size_t(j)]), bound) << i << "," << j;
      if (a[size_t(j)] != 0 && std::fabs(a[size_t(j)]) < std::ldexp(double(s), -6))
        ++subnormal_checked;
      if (i >= 128 && i < 256 && j < 128) EXPECT_EQ(b[size_t(j)], 0.0) << "all-zero block";
    }
  }
  EXPECT_GT(subnormal_checked, 0);  // the wide-range row reached E4M3's subnormals
}

// INT8: q = w / s rounds once in FP32 (|q| ≤ 127, so within 127·2^-24 < 2^-17), the code is q
// rounded to the nearest integer (within 1/2), and code · s is exact in FP64: |w' − w| ≤
// s · (1/2 + 2^-17). A NaN makes its whole block NaN (int8 has no NaN code).
TEST_P(WeightRequantTest, Int8BlocksStayWithinHalfAStep) {
  const int64_t out = 300, in = 200;
  Source src = make_source(GetParam(), out, in, 14);
  ThreadPool pool(2);
  auto r = requantize_weight(src.w, DType::kI8, pool, "test lm_head");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const LinearWeight& q = r->weight;
  ASSERT_TRUE(validate(q).ok());
  EXPECT_EQ(q.dtype, DType::kI8);
  std::vector<double> a(static_cast<size_t>(in)), b(static_cast<size_t>(in));
  for (int64_t i = 0; i < out; ++i) {
    ref::linear_weight_row(src.w, i, a.data());
    ref::linear_weight_row(q, i, b.data());
    for (int64_t j = 0; j < in; ++j) {
      if (i < 128 && j < 128) {  // the block holding the NaN at (7, 3)
        EXPECT_TRUE(std::isnan(b[size_t(j)])) << i << "," << j;
        continue;
      }
      float s;
      std::memcpy(&s, q.scale_inv + 4 * ((i / 128) * 2 + j / 128), 4);
      ASSERT_LE(std::fabs(b[size_t(j)] - a[size_t(j)]), double(s) * (0.5 + std::ldexp(1.0, -17)))
          << i << "," << j;
      if (i >= 128 && i < 256 && j < 128) EXPECT_EQ(b[size_t(j)], 0.0) << "all-zero block";
    }
  }
}

// BF16: round to nearest even, 8 significant bits: |w' − w| ≤ 2^-8·|w| (0 for BF16 sources).
TEST_P(WeightRequantTest, Bf16RoundsToNearest) {
  const int64_t out = 130, in = 70;
  Source src = make_source(GetParam(), out, in, 12);
  ThreadPool pool(2);
  auto r = requantize_weight(src.w, DType::kBF16, pool, "test lm_head");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<double> a(static_cast<size_t>(in)), b(static_cast<size_t>(in));
  for (int64_t i = 0; i < out; ++i) {
    ref::linear_weight_row(src.w, i, a.data());
    ref::linear_weight_row(r->weight, i, b.data());
    for (int64_t j = 0; j < in; ++j) {
      if (std::isnan(a[size_t(j)])) {
        EXPECT_TRUE(std::isnan(b[size_t(j)]));
        continue;
      }
      const double bound =
          GetParam() == DType::kBF16 ? 0.0 : std::ldexp(std::fabs(a[size_t(j)]), -8);
      ASSERT_LE(std::fabs(b[size_t(j)] - a[size_t(j)]), bound) << i << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sources, WeightRequantTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// An FP8 source (a V3 checkpoint's 128x128 blocks) re-blocked is the same matrix: its codes
// fit E4M3 again at the same scale, so the round trip is exact.
TEST(WeightRequant, Fp8SourceRoundTripsExactly) {
  Source src = make_source(DType::kF32, 256, 256, 13);
  ThreadPool pool(2);
  auto once = requantize_weight(src.w, DType::kF8E4M3, pool, "a");
  ASSERT_TRUE(once.ok());
  auto twice = requantize_weight(once->weight, DType::kF8E4M3, pool, "b");
  ASSERT_TRUE(twice.ok());
  std::vector<double> a(256), b(256);
  for (int64_t i = 0; i < 256; ++i) {
    ref::linear_weight_row(once->weight, i, a.data());
    ref::linear_weight_row(twice->weight, i, b.data());
    for (int j = 0; j < 256; ++j)
      if (!std::isnan(a[size_t(j)])) ASSERT_EQ(a[size_t(j)], b[size_t(j)]) << i << "," << j;
  }
}

TEST(WeightRequant, RefusesOtherTargetsNamingThem) {
  Source src = make_source(DType::kF32, 4, 4, 1);
  ThreadPool pool(1);
  auto r = requantize_weight(src.w, DType::kI16, pool, "m/lm_head");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("m/lm_head"), std::string::npos);
  EXPECT_NE(r.status().message().find("I16"), std::string::npos) << r.status().message();
}

// repack_weight (--repack) on per-head views into one tensor, as the loader repacks a GGUF
// file's attn_k_b / attn_v_b heads: each head becomes Q8_0_R16 in its own buffer, the source
// bytes stay as they were, and the heads' products (one linear_many, as the absorbed path runs
// them) match the file layout's. Both kernels sum the same exact int32 block sums and differ only
// in FP32 order, so each output is within twice the Q8_0 GEMV's bound of the other
// (linear_ggml_bounds.h vnni_bound; the FP32 route of non-VNNI variants is inside it too).
TEST(WeightRepack, PerHeadViewsKeepTheirProducts) {
  constexpr int H = 3;
  constexpr int64_t out = 64, in = 128;
  const int64_t row_bytes = dtype_bytes(DType::kQ8_0, in), head_bytes = out * row_bytes;
  std::vector<uint8_t> tensor(size_t(H * head_bytes) + 1);  // +1: heads at odd addresses
  std::mt19937 rng(21);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<std::vector<float>> rows(size_t(H * out), std::vector<float>(size_t(in)));
  for (int64_t r = 0; r < H * out; ++r) {
    std::vector<float> v(static_cast<size_t>(in));
    for (float& e : v) e = g(rng);
    uint8_t* at = tensor.data() + 1 + r * row_bytes;
    ASSERT_TRUE(quantize_row(DType::kQ8_0, v, at).ok());
    ASSERT_TRUE(dequantize_row(DType::kQ8_0, at, in, rows[size_t(r)].data()).ok());
  }
  const std::vector<uint8_t> before = tensor;
  ThreadPool pool(2);
  std::vector<uint8_t> arena(size_t(H * head_bytes));
  std::vector<LinearWeight> file(H), packed(H);
  for (int h = 0; h < H; ++h) {
    file[size_t(h)].dtype = DType::kQ8_0;
    file[size_t(h)].data = tensor.data() + 1 + h * head_bytes;
    file[size_t(h)].out = out;
    file[size_t(h)].in = in;
    auto r = repack_weight(file[size_t(h)], DType::kQ8_0R16, pool, arena.data() + h * head_bytes,
                           "head " + std::to_string(h), /*drop_source=*/false);
    ASSERT_TRUE(r.ok()) << r.status().message();
    packed[size_t(h)] = *r;
    EXPECT_EQ(packed[size_t(h)].dtype, DType::kQ8_0R16);
    EXPECT_EQ(packed[size_t(h)].data, arena.data() + h * head_bytes);
  }
  EXPECT_EQ(tensor, before);
  for (int64_t n : {1, 3}) {
    std::vector<float> x(size_t(H * n * in));
    for (float& e : x) e = g(rng) * 20.0f;
    std::vector<float> a(size_t(H * n * out)), b(a.size());
    std::vector<LinearJob> ja, jb;
    for (int h = 0; h < H; ++h) {
      ja.push_back({&file[size_t(h)], n, x.data() + h * n * in, a.data() + h * n * out});
      jb.push_back({&packed[size_t(h)], n, x.data() + h * n * in, b.data() + h * n * out});
    }
    ASSERT_TRUE(linear_many(ja, pool).ok());
    ASSERT_TRUE(linear_many(jb, pool).ok());
    for (int h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const float* xi = x.data() + (h * n + i) * in;
        const std::vector<float> xv(xi, xi + in);
        for (int64_t o = 0; o < out; ++o) {
          const std::vector<float>& w = rows[size_t(h * out + o)];
          const size_t at = size_t((h * n + i) * out + o);
          EXPECT_NEAR(a[at], b[at], 2 * test::vnni_bound(xv, w))
              << "head " << h << " n " << n << " row " << i << " output " << o;
        }
      }
  }
  // A head whose rows are not whole 64-value units is refused, naming the weight.
  LinearWeight odd = file[0];
  odd.in = 96;
  odd.out = 16;
  const auto r = repack_weight(odd, DType::kQ8_0R16, pool, arena.data(), "attn_k_b head 0", false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("attn_k_b head 0"), std::string::npos);
}

// Block-FP8 repacked as F8_E4M3_R16 keeps its scale grid (the same blocks, copied beside the
// values: the products stay right with the source's scales gone) and its products against the FP64
// reference within the FP32 GEMV bound (linear_bounds.h: γ_(in+2), the scale's rounding included);
// scale blocks that split a group of 16 rows are refused, naming the weight. BF16 keeps its byte
// count.
TEST(WeightRepack, Fp8KeepsItsScaleGridAndRefusesBlocksAcrossGroups) {
  constexpr int64_t out = 64, in = 256;
  std::mt19937 rng(5);
  std::vector<uint8_t> codes(size_t(out * in));
  for (uint8_t& c : codes) c = uint8_t(rng() % 0x7F) | uint8_t(rng() % 2 ? 0x80 : 0);
  std::vector<float> scales(size_t(out / 32 * (in / 64)));
  for (float& v : scales) v = std::ldexp(1.0f + float(rng() % 8) / 8.0f, -int(rng() % 6));
  LinearWeight w{DType::kF8E4M3,
                 codes.data(),
                 out,
                 in,
                 reinterpret_cast<const uint8_t*>(scales.data()),
                 32,
                 64};
  ThreadPool pool(2);
  // The values, then a copy of the scale grid (owned by the arena, not the file's pages).
  ASSERT_EQ(repacked_weight_bytes(w), (codes.size() + scales.size() * 4 + 63) / 64 * 64);
  AlignedBuffer<uint8_t> arena(repacked_weight_bytes(w));
  auto r = repack_weight(w, DType::kF8E4M3R16, pool, arena.data(), "expert 3 up_proj", false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->dtype, DType::kF8E4M3R16);
  EXPECT_EQ(r->scale_inv, arena.data() + codes.size());
  EXPECT_EQ(std::memcmp(r->scale_inv, scales.data(), scales.size() * 4), 0);
  const std::vector<float> kept = scales;  // the reference's; the "file's" copy is then clobbered
  scales.assign(scales.size(), std::numeric_limits<float>::quiet_NaN());
  w.scale_inv = reinterpret_cast<const uint8_t*>(kept.data());
  EXPECT_EQ(r->block_rows, 32);
  EXPECT_EQ(r->block_cols, 64);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t n : {1, 5, 24}) {
    std::vector<float> x(size_t(n * in)), xa(x.size()), y(size_t(n * out));
    for (size_t k = 0; k < x.size(); ++k) xa[k] = std::fabs(x[k] = g(rng));
    std::vector<double> want(y.size()), abs_sum(y.size());
    ref::linear(w, n, x.data(), want.data());
    LinearWeight a = w;  // |W|: the sign bits cleared
    std::vector<uint8_t> abs_codes(codes);
    for (uint8_t& c : abs_codes) c &= 0x7F;
    a.data = abs_codes.data();
    ref::linear(a, n, xa.data(), abs_sum.data());
    ASSERT_TRUE(linear(*r, n, x.data(), y.data(), pool, "cpu", DType::kF32).ok());
    const double u = std::ldexp(1.0, -24), k = double(in + 2);
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_NEAR(y[i], want[i], k * u / (1 - k * u) * abs_sum[i] + k * std::ldexp(1.0, -149))
          << "n " << n << " output " << i;
  }
  LinearWeight split = w;
  split.block_rows = 8;  // a group of 16 rows across two scale rows
  const auto bad =
      repack_weight(split, DType::kF8E4M3R16, pool, arena.data(), "expert 3 up_proj", false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expert 3 up_proj"), std::string::npos);
  EXPECT_NE(bad.status().message().find("F8_E4M3_R16"), std::string::npos);
  std::vector<uint16_t> bf16(size_t(out * in), 0x3F80);
  LinearWeight b{DType::kBF16, reinterpret_cast<const uint8_t*>(bf16.data()), out, in};
  std::vector<uint8_t> b_arena(repacked_weight_bytes(b));
  const auto rb = repack_weight(b, DType::kBF16R16, pool, b_arena.data(), "q_proj", false);
  ASSERT_TRUE(rb.ok()) << rb.status().message();
  EXPECT_EQ(dtype_bytes(rb->dtype, in) * out, int64_t(b_arena.size()));
}

}  // namespace
}  // namespace mla
