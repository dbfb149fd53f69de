// requantize_q8_0 (--weight-dtype q8_0) against the plain quantiser: every row is what
// quantize_row makes of the weight's real values (kernels/ref's reading of the source), byte for
// byte in Q8_0 and value for value in the repacked Q8_0_R16 layout, and within the Q8_0 rounding
// bound derived below of the real values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "model/weight_requant.h"

namespace mla {
namespace {

// A source weight [out, in]: Gaussian values (σ 0.05), one row spanning 2^-30 .. 2^4 and one
// 2^-12 times smaller (its d an f16 subnormal), stored as F32 or BF16; or block-scaled FP8 / INT8
// codes with a 128 x 128 scale grid (ragged at both edges for the shapes below; scales 2^-20 ..
// 2^-4, so that small blocks take f16's subnormal d too).
struct Source {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  LinearWeight w;
};

Source make_source(DType dt, int64_t out, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  Source s;
  s.w.dtype = dt;
  s.w.out = out;
  s.w.in = in;
  const size_t n = size_t(out * in);
  if (dt == DType::kF8E4M3 || dt == DType::kI8) {
    s.bytes.resize(n);
    for (uint8_t& c : s.bytes) {
      c = uint8_t(rng());
      if (dt == DType::kF8E4M3 && (c & 0x7F) == 0x7F) c &= 0xFE;  // no NaN code
    }
    s.scales.resize(size_t((out + 127) / 128 * ((in + 127) / 128)));
    for (float& v : s.scales) v = std::ldexp(1.0f + float(rng() % 8) / 8.0f, -5 - int(rng() % 16));
    s.w.scale_inv = reinterpret_cast<const uint8_t*>(s.scales.data());
  } else {
    std::vector<float> v(n);
    for (float& x : v) x = g(rng);
    for (int64_t j = 0; j < in; ++j)
      v[size_t(5 * in + j)] = std::ldexp(j % 2 ? -1.0f : 1.0f, int(j % 35) - 30);
    for (int64_t j = 0; j < in; ++j) v[size_t(6 * in + j)] *= std::ldexp(1.0f, -12);
    s.bytes.resize(n * (dt == DType::kF32 ? 4 : 2));
    for (size_t i = 0; i < n; ++i) {
      if (dt == DType::kF32) {
        std::memcpy(&s.bytes[4 * i], &v[i], 4);
      } else {
        const uint16_t h = f32_to_bf16(v[i]);
        std::memcpy(&s.bytes[2 * i], &h, 2);
      }
    }
  }
  s.w.data = s.bytes.data();
  return s;
}

// Row i's real values in FP32: the FP64 reading of kernels/ref rounded once. For a block-scaled
// code that is the FP32 product code · scale the requantiser forms (both are the exact product
// rounded once: at most 8 + 24 significant bits, exact in FP64).
std::vector<float> real_row(const LinearWeight& w, int64_t i) {
  std::vector<double> d(size_t(w.in));
  ref::linear_weight_row(w, i, d.data());
  return std::vector<float>(d.begin(), d.end());
}

class RequantQ8 : public ::testing::TestWithParam<DType> {};

// The Q8_0 rounding (core/ggml_quant.h): d = amax / 127 and its inverse in FP32, code =
// round(x · (1 / d)) within 1/2 + 127 · 3 · 2^-24 of x / d, stored d' = f16(d) within 2^-11 · d
// (a normal f16) or 2^-25 (a subnormal one), value d' · code exact in FP32. So
//   |value − x| ≤ |d' − d| · 127 + d · (1/2 + 2^-15) ≤ d · (1/2 + 127 · 2^-11 + 2^-15) + 127 ·
//   2^-25.
TEST_P(RequantQ8, RowsAreQuantizeRowsOfTheRealValues) {
  const int64_t out = 48, in = 320;  // 3 groups of 16 rows; 5 units of 64 values
  const Source src = make_source(GetParam(), out, in, 17);
  ThreadPool pool(2);
  const int64_t row_bytes = dtype_bytes(DType::kQ8_0, in);
  ASSERT_EQ(q8_0_weight_bytes(src.w), size_t(out * row_bytes + 63) / 64 * 64);
  AlignedBuffer<uint8_t> rows(q8_0_weight_bytes(src.w)), packed(q8_0_weight_bytes(src.w));
  auto q = requantize_q8_0(src.w, DType::kQ8_0, pool, rows.data(), "w", false);
  auto p = requantize_q8_0(src.w, DType::kQ8_0R16, pool, packed.data(), "w", false);
  ASSERT_TRUE(q.ok()) << q.status().message();
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(q->dtype, DType::kQ8_0);
  EXPECT_EQ(p->dtype, DType::kQ8_0R16);
  EXPECT_EQ(p->data, packed.data());
  EXPECT_EQ(p->scale_inv, nullptr);
  ASSERT_TRUE(validate(*p).ok());
  std::vector<uint8_t> want(static_cast<size_t>(row_bytes));
  std::vector<float> want_v(static_cast<size_t>(in)), got_v(static_cast<size_t>(in));
  int subnormal_d = 0;
  for (int64_t i = 0; i < out; ++i) {
    const std::vector<float> x = real_row(src.w, i);
    ASSERT_TRUE(quantize_row(DType::kQ8_0, x, want.data()).ok());
    ASSERT_EQ(std::memcmp(rows.data() + i * row_bytes, want.data(), want.size()), 0) << "row " << i;
    ASSERT_TRUE(dequantize_row(DType::kQ8_0, want.data(), in, want_v.data()).ok());
    dequantize_q8_0_r16_row(packed.data(), in, i, got_v.data());
    for (int64_t j = 0; j < in; ++j) {
      ASSERT_EQ(got_v[size_t(j)], want_v[size_t(j)]) << i << "," << j;
      float amax = 0;
      for (int64_t k = j / 32 * 32; k < j / 32 * 32 + 32; ++k)
        amax = std::max(amax, std::fabs(x[size_t(k)]));
      const double d = double(amax) / 127;
      if (j % 32 == 0 && d < std::ldexp(1.0, -14)) ++subnormal_d;
      const double bound = d * (0.5 + 127 * std::ldexp(1.0, -11) + std::ldexp(1.0, -15)) +
                           127 * std::ldexp(1.0, -25);
      ASSERT_LE(std::fabs(double(got_v[size_t(j)]) - x[size_t(j)]), bound) << i << "," << j;
    }
  }
  EXPECT_GT(subnormal_d, 0);  // the wide-range row (or the small scales) reached f16 subnormals
}

INSTANTIATE_TEST_SUITE_P(Sources, RequantQ8,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kI8),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// What cannot be requantised is refused, naming the weight: a GGUF block format, rows not of
// whole blocks of 32, a repacked layout the shape does not fill, a value quantize_row refuses
// (its row named).
TEST(RequantQ8Refusals, NameTheWeightAndWhy) {
  ThreadPool pool(2);
  std::vector<uint8_t> dst(1 << 16);
  auto refused = [&](const LinearWeight& w, DType to, const std::string& why) {
    auto r = requantize_q8_0(w, to, pool, dst.data(), "layer 3 o_proj", false);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_NE(r.status().message().find("layer 3 o_proj"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  Source ok = make_source(DType::kF32, 32, 64, 3);
  LinearWeight q8 = ok.w;
  q8.dtype = DType::kQ8_0;
  refused(q8, DType::kQ8_0, "Q8_0 is not requantised");
  Source ragged = make_source(DType::kF32, 16, 48, 4);
  refused(ragged.w, DType::kQ8_0, "48");
  Source rows40 = make_source(DType::kBF16, 40, 64, 5);
  refused(rows40.w, DType::kQ8_0R16, "[40, 64]");
  Source in96 = make_source(DType::kBF16, 16, 96, 6);
  refused(in96.w, DType::kQ8_0R16, "[16, 96]");
  Source nan = make_source(DType::kF32, 32, 64, 7);
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.bytes.data() + 4 * (9 * 64 + 5), &q, 4);
  refused(nan.w, DType::kQ8_0R16, "row 9");
  // The plain rows need no groups: 40 rows of 64 values are fine as Q8_0.
  auto r = requantize_q8_0(rows40.w, DType::kQ8_0, pool, dst.data(), "w", false);
  EXPECT_TRUE(r.ok()) << r.status().message();
}

}  // namespace
}  // namespace mla
