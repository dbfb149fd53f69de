// core/ggml_quant.h against the `gguf` package (goldens in tests/data/ggml_blocks, written by its
// make_goldens.py): the dequantisers bit for bit, Q8_0 / Q4_0 / F16 / BF16 quantisation byte for
// byte; the error bounds of Q8_0 and Q4_0; argument checks and edge cases of every type. The K
// formats' search is tested in ggml_quant_k_test.cc.
#include "core/ggml_quant.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/ggml_blocks.h"
#include "core/rng.h"

namespace mla {
namespace {

constexpr DType kBlockTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K,
                                 DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K,
                                 DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16,
                                 DType::kBF16, DType::kF32};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
std::vector<uint8_t> golden(const std::string& name) {
  return read_bytes(std::string(MLA_TEST_DATA_DIR) + "/ggml_blocks/" + name);
}
std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  if (!f.empty()) std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}
void write_bytes(const std::string& path, const void* p, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(p), std::streamsize(n));
}

size_t row_bytes(DType t, size_t n) {
  const DTypeBlock b = dtype_block(t);
  return n / size_t(b.elems) * size_t(b.bytes);
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, x.size()));
  const Status s = quantize_row(t, x, q.data());
  EXPECT_TRUE(s.ok()) << dtype_name(t) << ": " << s.to_string();
  return q;
}
std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  const Status s = dequantize_row(t, q.data(), int64_t(n), y.data());
  EXPECT_TRUE(s.ok()) << dtype_name(t) << ": " << s.to_string();
  return y;
}

// Gaussian rows whose magnitude changes every 256 values (1e-3 ... 1e3).
std::vector<float> gaussian_rows(uint64_t seed, size_t n) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = float(rng.normal() * std::pow(10.0, double(i / 256 % 7) - 3));
  return x;
}

TEST(GgmlDequant, BitExactWithGguf) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16}) {
    const std::string name(dtype_name(t));
    const std::vector<uint8_t> blocks = golden(name + ".blocks");
    const std::vector<float> want = as_floats(golden(name + ".f32"));
    ASSERT_FALSE(want.empty()) << name << ": golden missing";
    ASSERT_EQ(blocks.size(), row_bytes(t, want.size())) << name;
    const std::vector<float> got = dequantize(t, blocks, want.size());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (f32_bits(got[i]) != f32_bits(want[i]) && bad++ < 3)
        ADD_FAILURE() << name << " value " << i << ": " << got[i] << ", gguf " << want[i];
    }
    EXPECT_EQ(bad, 0) << name;
  }
}

TEST(GgmlDequant, F32IsACopy) {
  const std::vector<float> x = {1.5f, -0.0f, std::numeric_limits<float>::infinity(), 3e-42f};
  std::vector<uint8_t> b(16);
  std::memcpy(b.data(), x.data(), 16);
  const std::vector<float> y = dequantize(DType::kF32, b, 4);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), 16), 0);
}

TEST(GgmlDequant, RejectsOtherTypesAndPartialBlocks) {
  std::vector<uint8_t> b(1024);
  std::vector<float> y(512);
  for (DType t : {DType::kF64, DType::kF8E4M3, DType::kE2M1, DType::kI8, DType::kI32})
    EXPECT_EQ(dequantize_row(t, b.data(), 4, y.data()).code(), StatusCode::kInvalidArgument);
  for (DType t : kBlockTypes) {
    const int e = dtype_block(t).elems;
    EXPECT_EQ(dequantize_row(t, b.data(), e + 16, y.data()).code(), StatusCode::kInvalidArgument)
        << dtype_name(t);
    EXPECT_TRUE(dequantize_row(t, b.data(), 0, y.data()).ok());
  }
}

// The fast FP16 conversions of ggml_blocks.h against core/dtype.h's reference ones.
TEST(GgmlDequant, HalfConversionsMatchDtype) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = ggml::half_to_float(uint16_t(h)), b = f16_to_f32(uint16_t(h));
    if (std::isnan(b)) {  // payload kept, quiet bit set
      const uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13);
      ASSERT_EQ(f32_bits(a), want) << h;
    } else {
      ASSERT_EQ(f32_bits(a), f32_bits(b)) << h;
    }
  }
  // Every FP32 pattern in steps of 997, plus each f16 value and its neighbours ± 1 and
  // ± 0x1000 (the tie points) in FP32 bits.
  for (uint64_t u = 0; u < (1ull << 32); u += 997)
    ASSERT_EQ(ggml::float_to_half(f32_from_bits(uint32_t(u))),
              f32_to_f16(f32_from_bits(uint32_t(u))))
        << u;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const uint32_t c = f32_bits(f16_to_f32(uint16_t(h)));
    for (int64_t dlt : {-0x1001, -0x1000, -0xfff, -1, 0, 1, 0xfff, 0x1000, 0x1001}) {
      const uint32_t u = uint32_t(int64_t(c) + dlt);
      for (uint32_t s : {0u, 0x80000000u}) {
        const float f = f32_from_bits(u ^ s);
        ASSERT_EQ(ggml::float_to_half(f), f32_to_f16(f)) << std::hex << (u ^ s);
      }
    }
  }
}

TEST(GgmlQuantize, MatchesGgufRounding) {
  const std::vector<float> x = as_floats(golden("input.f32"));
  ASSERT_EQ(x.size(), 4096u);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kF16, DType::kBF16}) {
    const std::vector<uint8_t> want = golden(std::string(dtype_name(t)) + ".quant");
    const std::vector<uint8_t> got = quantize(t, x);
    ASSERT_EQ(got.size(), want.size()) << dtype_name(t);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << dtype_name(t) << " byte " << i;
  }
}

// Q8_0: d = amax / 127 in FP32 and codes q = round(x · fl(1 / d)). The product is x / d within
// two roundings, so |q − x / d| ≤ 1/2 + 127 · 2^-22; the stored d16 is d within half an f16 ulp,
// max(d · 2^-11, 2^-25); the value q · d16 is exact. Hence
//   |x̂ − x| ≤ |q| · |d16 − d| + d · |q − x / d| ≤ 127 · max(d · 2^-11, 2^-25) + d · (1/2 + 2^-15).
TEST(GgmlQuantize, Q8_0ErrorBound) {
  std::vector<float> x = gaussian_rows(11, 256 * 28);
  const std::vector<float> in = as_floats(golden("input.f32"));
  x.insert(x.end(), in.begin(), in.end());
  const std::vector<float> y = dequantize(DType::kQ8_0, quantize(DType::kQ8_0, x), x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const double d = amax / 127.0f;
    const double bound = 127 * std::max(d * 0x1p-11, 0x1p-25) + d * (0.5 + 0x1p-15);
    for (size_t i = b; i < b + 32; ++i)
      ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound) << "value " << i << " x " << x[i];
  }
}

// Q4_0: d = max / −8 carries the sign of the value of largest magnitude, which lands on code
// 0 (−8 · d) exactly; x / d ∈ [−8, 8] and code trunc(x / d + 8.5) is the nearest one, except
// that x / d > 7.5 clips to code 15 (7 · d), one step at most. With the same FP32 and FP16
// rounding terms as Q8_0 (|code − 8| ≤ 8, x / d + 8.5 rounded within 2^-19):
//   |x̂ − x| ≤ |d| · (t + 2^-18) + 8 · max(|d| · 2^-11, 2^-25),  t = 1/2, or 1 where x / d > 7.49.
TEST(GgmlQuantize, Q4_0ErrorBound) {
  std::vector<float> x = gaussian_rows(12, 256 * 28);
  const std::vector<float> in = as_floats(golden("input.f32"));
  x.insert(x.end(), in.begin(), in.end());
  const std::vector<float> y = dequantize(DType::kQ4_0, quantize(DType::kQ4_0, x), x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0, max = 0;
    for (size_t i = b; i < b + 32; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
    const double d = max / -8.0f;
    for (size_t i = b; i < b + 32; ++i) {
      const double t = d != 0 && x[i] / d > 7.49 ? 1.0 : 0.5;
      const double bound =
          std::fabs(d) * (t + 0x1p-18) + 8 * std::max(std::fabs(d) * 0x1p-11, 0x1p-25);
      ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound) << "value " << i << " x " << x[i];
    }
  }
}

TEST(GgmlQuantize, PlainFloatTypes) {
  const std::vector<float> x = {1.0f, -2.5f, 65504.0f, 1e-7f, 3.14159265f, -0.0f};
  const std::vector<float> f32 = dequantize(DType::kF32, quantize(DType::kF32, x), x.size());
  const std::vector<float> f16 = dequantize(DType::kF16, quantize(DType::kF16, x), x.size());
  const std::vector<float> bf16 = dequantize(DType::kBF16, quantize(DType::kBF16, x), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(f32_bits(f32[i]), f32_bits(x[i]));
    EXPECT_EQ(f32_bits(f16[i]), f32_bits(f16_to_f32(f32_to_f16(x[i]))));
    EXPECT_EQ(f32_bits(bf16[i]), f32_bits(round_to_bf16(x[i])));
  }
}

TEST(GgmlQuantize, CanQuantize) {
  for (DType t : kQuantTypes) EXPECT_TRUE(can_quantize(t)) << dtype_name(t);
  for (DType t : {DType::kF64, DType::kF8E4M3, DType::kE2M1, DType::kI8, DType::kBool}) {
    EXPECT_FALSE(can_quantize(t)) << dtype_name(t);
    std::vector<float> x(256);
    std::vector<uint8_t> q(2048);
    EXPECT_EQ(quantize_row(t, x, q.data()).code(), StatusCode::kInvalidArgument);
  }
}

TEST(GgmlQuantize, RejectsBadInput) {
  std::vector<uint8_t> q(4096);
  for (DType t : kQuantTypes) {
    const int e = dtype_block(t).elems;
    std::vector<float> x(512, 0.5f);
    EXPECT_TRUE(quantize_row(t, x, q.data()).ok()) << dtype_name(t);
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      x[259] = bad;
      const Status s = quantize_row(t, x, q.data());
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << dtype_name(t);
      EXPECT_NE(s.message().find("x[259]"), std::string::npos) << s.message();
    }
    x[259] = 0.5f;
    std::vector<float> imp(x.size(), 1.0f);
    imp[7] = -1;
    EXPECT_EQ(quantize_row(t, x, q.data(), imp).code(), StatusCode::kInvalidArgument);
    imp[7] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(quantize_row(t, x, q.data(), imp).code(), StatusCode::kInvalidArgument);
    imp.pop_back();
    EXPECT_EQ(quantize_row(t, x, q.data(), imp).code(), StatusCode::kInvalidArgument);
    if (e > 1) {
      const std::vector<float> partial(size_t(e) + 1, 0.5f);
      EXPECT_EQ(quantize_row(t, partial, q.data()).code(), StatusCode::kInvalidArgument)
          << dtype_name(t);
    }
  }
  // Values whose scale overflows FP16.
  const std::vector<float> huge(256, 3e9f);
  for (DType t : kBlockTypes)
    EXPECT_EQ(quantize_row(t, huge, q.data()).code(), StatusCode::kInvalidArgument)
        << dtype_name(t);
  const std::vector<float> big = {70000.0f};
  EXPECT_EQ(quantize_row(DType::kF16, big, q.data()).code(), StatusCode::kInvalidArgument);
}

// Blocks of one value: zero is exact in every format; a constant is one code times the f16
// scale(s), within a few f16 roundings (2^-9 relative covers the K formats' 6-bit products).
TEST(GgmlQuantize, ZeroAndConstantBlocks) {
  for (DType t : kQuantTypes) {
    for (float c : {0.0f, 0.375f, -1.25f, 1000.0f}) {
      const std::vector<float> x(256, c);
      const std::vector<float> y = dequantize(t, quantize(t, x), x.size());
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_LE(std::fabs(y[i] - c), std::fabs(c) * 0x1p-9) << dtype_name(t) << " " << c;
    }
  }
}

// One huge value among small ones: finite, and the outlier itself within a step of its block
// (the scale is set by it: a step is at most outlier / 3 for Q2_K, the coarsest).
TEST(GgmlQuantize, OneOutlier) {
  for (DType t : kQuantTypes) {
    std::vector<float> x = gaussian_rows(13, 256);
    for (float& v : x) v = v * 1e3f;  // the first row is N(0, 1e-3²): now N(0, 1)
    x[77] = 3e4f;
    const std::vector<float> y = dequantize(t, quantize(t, x), x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(t);
    EXPECT_LE(std::fabs(y[77] - x[77]), 0.17 * x[77]) << dtype_name(t);
    EXPECT_GT(y[77], 2e4f) << dtype_name(t);
  }
}

// Values so small that the f16 scales underflow (FP32 subnormals, and 1e-6 where the scales
// are f16 subnormals): no NaN or inf, no value moved further than the block's largest magnitude
// (a zero scale reconstructs zeros).
TEST(GgmlQuantize, TinyValues) {
  for (float mag : {1e-40f, 1e-30f, 1e-6f}) {
    std::vector<float> x = gaussian_rows(14, 256);  // N(0, 1e-3²)
    for (float& v : x) v *= mag * 1e3f;
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (DType t : kQuantTypes) {
      const std::vector<float> y = dequantize(t, quantize(t, x), x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(t);
        ASSERT_LE(std::fabs(y[i] - x[i]), amax) << dtype_name(t) << " " << mag << " " << i;
      }
    }
  }
}

// llama.cpp's tests/test-quantize-fns.cpp quantises 4096 values 0.1 + 2 cos(i) and bounds
// sqrt(Σ err²) / n: 0.002 for most types, 0.0075 for Q2_K, 0.004 for Q3_K. Measured here:
// Q8_0 0.000074, Q4_0 0.00112, Q2_K 0.00445, Q3_K 0.00245, Q4_K 0.00096, Q5_K 0.00051,
// Q6_K 0.00025 (llama.cpp's reference quantisers: the same for Q8_0 / Q4_0, 2-6% more for the K
// formats).
TEST(GgmlQuantize, LlamaCppQuantizeFnsThresholds) {
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f + 2.0f * std::cos(float(i));
  for (DType t : kBlockTypes) {
    const std::vector<float> y = dequantize(t, quantize(t, x), x.size());
    double se = 0;
    for (size_t i = 0; i < x.size(); ++i) se += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    const double limit = t == DType::kQ2_K ? 0.0075 : t == DType::kQ3_K ? 0.004 : 0.002;
    EXPECT_LE(std::sqrt(se) / double(x.size()), limit) << dtype_name(t);
  }
}

// Not a test of its own: with MLA_GGML_QUANT_DIR set (by make_goldens.py check), dequantises
// <T>.blocks found there into <T>.mla.f32, and quantises input.f32 to every type into
// <T>.mla.quant, dequantised again into <T>.mla.quant.f32, for the script to compare with gguf.
TEST(GgmlQuantLive, WriteForPython) {
  const char* dir_env = std::getenv("MLA_GGML_QUANT_DIR");
  if (!dir_env) GTEST_SKIP() << "MLA_GGML_QUANT_DIR not set";
  const std::string dir = std::string(dir_env) + "/";
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16}) {
    const std::string name(dtype_name(t));
    const std::vector<uint8_t> blocks = read_bytes(dir + name + ".blocks");
    if (blocks.empty()) continue;
    const DTypeBlock b = dtype_block(t);
    const size_t n = blocks.size() / size_t(b.bytes) * size_t(b.elems);
    const std::vector<float> y = dequantize(t, blocks, n);
    write_bytes(dir + name + ".mla.f32", y.data(), 4 * n);
  }
  const std::vector<float> x = as_floats(read_bytes(dir + "input.f32"));
  ASSERT_FALSE(x.empty());
  for (DType t : kQuantTypes) {
    if (t == DType::kF32) continue;
    const std::string name(dtype_name(t));
    const std::vector<uint8_t> q = quantize(t, x);
    write_bytes(dir + name + ".mla.quant", q.data(), q.size());
    const std::vector<float> y = dequantize(t, q, x.size());
    write_bytes(dir + name + ".mla.quant.f32", y.data(), 4 * y.size());
  }
}

}  // namespace
}  // namespace mla
