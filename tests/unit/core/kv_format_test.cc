// Tests of the KV cache record codec (core/kv_format.h): byte layouts, exact round trips of
// representable rows, per-element error bounds derived from each format, zero blocks, padding,
// NVFP4 saturation and what happens to non-finite inputs.
#include "core/kv_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"

namespace mla {
namespace {

constexpr int kR = 512, kDr = 64;  // DeepSeek-V3: kv_lora_rank, qk_rope_head_dim
constexpr KvCacheDtype kQuantised[] = {KvCacheDtype::kFP8E4M3, KvCacheDtype::kINT8,
                                       KvCacheDtype::kNVFP4};

std::vector<uint8_t> quantize(KvCacheDtype d, int r, int d_r, const std::vector<float>& x,
                              float g = kNvfp4DefaultGlobalScale) {
  // 0xAA everywhere first, so that a byte the codec forgets to write shows up.
  std::vector<uint8_t> rec(size_t(kv_bytes_per_token(d, r, d_r)), 0xAA);
  quantize_kv_row(d, r, d_r, x.data(), g, rec.data());
  return rec;
}
std::vector<float> dequantize(KvCacheDtype d, int r, int d_r, const std::vector<uint8_t>& rec,
                              float g = kNvfp4DefaultGlobalScale) {
  std::vector<float> y(size_t(r + d_r));
  dequantize_kv_row(d, r, d_r, rec.data(), g, y.data());
  return y;
}

float fp32_scale(const KvRecordLayout& l, const std::vector<uint8_t>& rec, int blk) {
  float s;
  std::memcpy(&s, rec.data() + l.scale_offset_bytes + 4 * blk, 4);
  return s;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << "element " << i << ": got " << got[i] << ", want " << want[i];
}

// ---- layouts ----

TEST(KvFormatLayout, DeepSeekDims) {
  const KvRecordLayout bf = kv_record_layout(KvCacheDtype::kBF16, kR, kDr);
  EXPECT_EQ(bf.record_bytes, 1152);
  EXPECT_EQ(bf.rope_offset_bytes, 1024);
  for (KvCacheDtype d : {KvCacheDtype::kFP8E4M3, KvCacheDtype::kINT8}) {
    const KvRecordLayout l = kv_record_layout(d, kR, kDr);
    EXPECT_EQ(l.latent_offset_bytes, 0);
    EXPECT_EQ(l.latent_bytes, 512);
    EXPECT_EQ(l.scale_offset_bytes, 512);
    EXPECT_EQ(l.scale_bytes, 16);  // 4 fp32 scales
    EXPECT_EQ(l.rope_offset_bytes, 528);
    EXPECT_EQ(l.rope_bytes, 128);
    EXPECT_EQ(l.record_bytes, 656);
  }
  const KvRecordLayout nv = kv_record_layout(KvCacheDtype::kNVFP4, kR, kDr);
  EXPECT_EQ(nv.latent_offset_bytes, 0);
  EXPECT_EQ(nv.latent_bytes, 256);
  EXPECT_EQ(nv.scale_offset_bytes, 256);
  EXPECT_EQ(nv.scale_bytes, 32);  // 32 e4m3 scales
  EXPECT_EQ(nv.rope_offset_bytes, 288);
  EXPECT_EQ(nv.record_bytes, 416);
  for (KvCacheDtype d : kQuantised) EXPECT_EQ(kv_bytes_per_token(d, kR, kDr) % 16, 0);
}

TEST(KvFormatLayout, Nvfp4LowNibbleFirstAndScaleByte) {
  // Block 0 holds +0.5, -6 (codes 0x1 and 0xF) and zeros: amax 6 → block scale e4m3(6) = 0x4C
  // with g = 1/6 (6 · g = 1 in fp32), so the stored codes are the e2m1 values themselves.
  std::vector<float> x(kR + kDr, 0.0f);
  x[0] = 0.5f;
  x[1] = -6.0f;
  const auto rec = quantize(KvCacheDtype::kNVFP4, kR, kDr, x);
  EXPECT_EQ(rec[0], 0xF1);
  EXPECT_EQ(rec[256], f32_to_fp8_e4m3(6.0f));
  EXPECT_EQ(rec[256], 0x4C);
}

// ---- exact round trips ----

// Per-block exponents covering tiny, unit and large scales.
constexpr int kExps[] = {-40, -3, 0, 17};

void fill_bf16_rope(Rng& rng, std::vector<float>& x, int r) {
  for (size_t i = size_t(r); i < x.size(); ++i) x[i] = round_to_bf16(float(4.0 * rng.normal()));
}

TEST(KvFormatRoundTrip, Bf16ValuesAreExact) {
  Rng rng(1);
  std::vector<float> x(kR + kDr);
  for (int i = 0; i < kR; ++i) x[i] = round_to_bf16(float(std::ldexp(rng.normal(), i % 60 - 30)));
  x[3] = -0.0f;
  x[4] = bf16_to_f32(0x0001);  // smallest BF16 subnormal
  fill_bf16_rope(rng, x, kR);
  expect_same_bits(
      dequantize(KvCacheDtype::kBF16, kR, kDr, quantize(KvCacheDtype::kBF16, kR, kDr, x)), x);
}

TEST(KvFormatRoundTrip, Fp8CodesTimesPowerOfTwoAreExact) {
  // Block amax 448·2^k makes scale = 2^k exactly, so x / scale is the e4m3 code value itself.
  Rng rng(2);
  for (int k : kExps) {
    std::vector<float> x(kR + kDr);
    for (int i = 0; i < kR; ++i) {
      uint8_t c = uint8_t(rng.below(256));
      if ((c & 0x7f) == 0x7f) c = 0x00;  // NaN patterns
      x[i] = std::ldexp(fp8_e4m3_to_f32(c), k + (i / 128) % 2);
    }
    for (int b = 0; b < 4; ++b) x[b * 128 + 5] = std::ldexp(b % 2 ? -448.0f : 448.0f, k + b % 2);
    fill_bf16_rope(rng, x, kR);
    const auto rec = quantize(KvCacheDtype::kFP8E4M3, kR, kDr, x);
    const KvRecordLayout l = kv_record_layout(KvCacheDtype::kFP8E4M3, kR, kDr);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(fp32_scale(l, rec, b), std::ldexp(1.0f, k + b % 2));
    expect_same_bits(dequantize(KvCacheDtype::kFP8E4M3, kR, kDr, rec), x);
  }
}

TEST(KvFormatRoundTrip, Int8IntegersTimesPowerOfTwoAreExact) {
  // Block amax 127·2^k makes scale = 2^k exactly. (-0 is not used: int8 has no -0 and stores +0.)
  Rng rng(3);
  for (int k : kExps) {
    std::vector<float> x(kR + kDr);
    for (int i = 0; i < kR; ++i) x[i] = std::ldexp(float(int(rng.below(255)) - 127), k - i / 128);
    for (int b = 0; b < 4; ++b) x[b * 128 + 77] = std::ldexp(b % 2 ? -127.0f : 127.0f, k - b);
    fill_bf16_rope(rng, x, kR);
    const auto rec = quantize(KvCacheDtype::kINT8, kR, kDr, x);
    const KvRecordLayout l = kv_record_layout(KvCacheDtype::kINT8, kR, kDr);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(fp32_scale(l, rec, b), std::ldexp(1.0f, k - b));
    expect_same_bits(dequantize(KvCacheDtype::kINT8, kR, kDr, rec), x);
  }
}

TEST(KvFormatRoundTrip, Nvfp4E2m1TimesBlockScaleAreExact) {
  // The values an NVFP4 record represents are (e · s) · g (e2m1 e, e4m3 s, fp32 products). A
  // block holding ±(6 · s) · g has amax (s · 6) · g, which is exactly the quantiser's no-clip test
  // value, so the block scale comes out as s and every other value as its own e2m1 code.
  // g = 1/6 (the default: 6 · g rounds to 1, block scale = block amax), a power of two, an
  // arbitrary calibrated value and 1.
  Rng rng(4);
  for (float g : {kNvfp4DefaultGlobalScale, 0.0625f, 0.0123f, 1.0f}) {
    std::vector<float> x(kR + kDr);
    std::vector<uint8_t> s_code(kR / 16);
    for (auto& c : s_code) c = uint8_t(1 + rng.below(0x7e));  // any positive finite non-zero e4m3
    for (int i = 0; i < kR; ++i) {
      const uint8_t e = uint8_t(i % 16 == 9 ? 0x7 | (rng.below(2) << 3) : rng.below(16));
      x[i] = (e2m1_to_f32(e) * fp8_e4m3_to_f32(s_code[i / 16])) * g;
    }
    fill_bf16_rope(rng, x, kR);
    const auto rec = quantize(KvCacheDtype::kNVFP4, kR, kDr, x, g);
    for (int b = 0; b < kR / 16; ++b) ASSERT_EQ(rec[256 + b], s_code[b]) << "block " << b;
    expect_same_bits(dequantize(KvCacheDtype::kNVFP4, kR, kDr, rec, g), x);
  }
}

// ---- random rows: per-element error within a bound derived from the format ----

enum class Kind { kNormal, kStudentT3, kOutliers };

std::vector<float> random_row(Rng& rng, Kind kind) {
  std::vector<float> x(kR + kDr);
  for (float& v : x) {
    double z = rng.normal();
    if (kind == Kind::kStudentT3) {
      double a = rng.normal(), b = rng.normal(), c = rng.normal();
      z /= std::sqrt((a * a + b * b + c * c) / 3.0);
    }
    v = float(z);
  }
  if (kind == Kind::kOutliers)
    for (int c : {37, 166, 290, 451}) x[c] *= 50.0f;  // one per 128-block: every FP8 scale is hit
  return x;
}

// Worst error of rounding a value of magnitude y (in units of the scale) to each grid.
double fp8_half_ulp(double y) {  // e4m3: 3 mantissa bits; subnormal quantum 2^-9
  return y >= 0x1p-6 ? 0x1p-4 * y : 0x1p-10;
}
double e2m1_half_step(double y) {  // e2m1 grid 0, .5, 1, 1.5, 2, 3, 4, 6
  return y <= 2.0 ? 0.25 : y <= 4.0 ? 0.5 : 1.0;
}

// Quantises x [r + d_r] and checks the scale rules and every element's error.
void check_random_row(KvCacheDtype d, int r, int d_r, const std::vector<float>& x, float g) {
  const KvRecordLayout l = kv_record_layout(d, r, d_r);
  const auto rec = quantize(d, r, d_r, x, g);
  const auto y = dequantize(d, r, d_r, rec, g);
  auto block_amax = [&](int i0, int n) {
    float a = 0.0f;
    for (int j = i0; j < std::min(i0 + n, r); ++j) a = std::max(a, std::fabs(x[size_t(j)]));
    return a;
  };
  for (int i = 0; i < r; ++i) {
    const double ax = std::fabs(double(x[i])), err = std::fabs(double(y[i]) - x[i]);
    double bound = 0.0;
    switch (d) {
      case KvCacheDtype::kF32:  // exact: bound 0
        break;
      case KvCacheDtype::kBF16:
        // RNE to 8 significant bits: half an ulp is 2^-8 of the binade's lower end ≤ |x|.
        bound = 0x1p-8 * ax;
        break;
      case KvCacheDtype::kFP8E4M3:
      case KvCacheDtype::kINT8: {
        const float s = fp32_scale(l, rec, i / 128);
        if (i % 128 == 0) {  // the scale rule itself
          const float amax = block_amax(i, 128);
          ASSERT_EQ(s, amax / (d == KvCacheDtype::kINT8 ? 127.0f : 448.0f)) << "block " << i / 128;
        }
        // Rounding to the code grid (e4m3 half-ulp, or half an integer) in units of s, plus
        // 2^-20 · y for the two fp32 roundings (x / s, code · s; 2^-24 each), with margin.
        const double yv = ax / s;
        bound = s * ((d == KvCacheDtype::kINT8 ? 0.5 : fp8_half_ulp(yv)) + 0x1p-20 * yv);
        break;
      }
      case KvCacheDtype::kNVFP4: {
        const uint8_t code = rec[size_t(l.scale_offset_bytes + i / 16)];
        const double sg = double(fp8_e4m3_to_f32(code)) * g, yv = ax / sg;
        if (i % 16 == 0) {
          const float amax = block_amax(i, 16);
          const uint8_t nearest = f32_to_fp8_e4m3(amax / (6.0f * g));
          // Nearest e4m3 to amax / (6 g), one code up only when nearest would clip the amax.
          ASSERT_TRUE(code == nearest ||
                      (code == nearest + 1 && fp8_e4m3_to_f32(nearest) * 6.0f * g < amax))
              << "block " << i / 16;
        }
        // No clipping: the round-up rule keeps every |x| / (s · g) within the e2m1 range.
        ASSERT_LE(yv, 6.0 * (1.0 + 0x1p-20)) << "element " << i;
        // Half the e2m1 step at that magnitude, in units of s · g, plus the fp32 roundings of
        // s · g, x / (s · g) and (e · s) · g.
        bound = sg * (e2m1_half_step(yv) + 0x1p-20 * (yv + 6.0));
        break;
      }
    }
    ASSERT_LE(err, bound) << kv_cache_dtype_name(d) << " element " << i << ": x " << x[i] << " got "
                          << y[i];
  }
  for (int i = r; i < r + d_r; ++i)  // rope: BF16 RNE in every format, relative 2^-8 as above
    ASSERT_LE(std::fabs(double(y[i]) - x[i]), 0x1p-8 * std::fabs(x[i])) << "rope " << i - r;
}

TEST(KvFormatError, RandomRowsWithinDerivedBounds) {
  for (Kind kind : {Kind::kNormal, Kind::kStudentT3, Kind::kOutliers}) {
    Rng rng(100 + int(kind));
    for (int row = 0; row < 64; ++row) {
      const std::vector<float> x = random_row(rng, kind);
      for (KvCacheDtype d : kAllKvCacheDtypes) {
        SCOPED_TRACE(testing::Message() << "kind " << int(kind) << " row " << row);
        check_random_row(d, kR, kDr, x, kNvfp4DefaultGlobalScale);
      }
      // A global scale calibrated on the data (g ≥ amax / 2688, here with headroom) obeys the
      // same bound.
      float amax = 0.0f;
      for (int i = 0; i < kR; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
      check_random_row(KvCacheDtype::kNVFP4, kR, kDr, x, amax / 2048.0f);
    }
  }
}

TEST(KvFormatError, RequantisingIsIdempotentForFp8AndInt8) {
  // The dequantised block amax is 448 · s (127 · s), so the scale and every code come back.
  Rng rng(7);
  for (KvCacheDtype d : {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3, KvCacheDtype::kINT8}) {
    const std::vector<float> x = random_row(rng, Kind::kStudentT3);
    const auto rec = quantize(d, kR, kDr, x);
    EXPECT_EQ(quantize(d, kR, kDr, dequantize(d, kR, kDr, rec)), rec) << kv_cache_dtype_name(d);
  }
}

// ---- zeros, padding, saturation, non-finite inputs ----

TEST(KvFormatEdge, AllZeroBlocksGiveZeroScalesAndValues) {
  Rng rng(8);
  std::vector<float> x = random_row(rng, Kind::kNormal);
  std::fill(x.begin() + 128, x.begin() + 256, 0.0f);  // FP8/INT8 block 1, NVFP4 blocks 8..15
  for (KvCacheDtype d : kQuantised) {
    const KvRecordLayout l = kv_record_layout(d, kR, kDr);
    const auto rec = quantize(d, kR, kDr, x);
    const auto y = dequantize(d, kR, kDr, rec);
    if (d == KvCacheDtype::kNVFP4) {
      for (int b = 8; b < 16; ++b) EXPECT_EQ(rec[size_t(l.scale_offset_bytes + b)], 0);
      for (int i = 64; i < 128; ++i) EXPECT_EQ(rec[size_t(i)], 0);
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(fp32_scale(l, rec, 1)), 0u);
      for (int i = 128; i < 256; ++i) EXPECT_EQ(rec[size_t(i)], 0);
    }
    for (int i = 128; i < 256; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(y[size_t(i)]), 0u);
  }
}

TEST(KvFormatEdge, PaddingAndUnusedNibbleAreZero) {
  // r = 201 leaves partial last blocks and an unused high nibble; with d_r = 5 every quantised
  // format has padding (FP8/INT8: 3 bytes before the fp32 scales and 2 at the end; NVFP4: 4).
  const int r = 201, d_r = 5;
  Rng rng(9);
  std::vector<float> x(r + d_r);
  for (float& v : x) v = float(rng.normal());
  for (KvCacheDtype d : kQuantised) {
    const KvRecordLayout l = kv_record_layout(d, r, d_r);
    const auto rec = quantize(d, r, d_r, x);
    auto inside = [&](int64_t b) {
      return (b >= l.latent_offset_bytes && b < l.latent_offset_bytes + l.latent_bytes) ||
             (b >= l.scale_offset_bytes && b < l.scale_offset_bytes + l.scale_bytes) ||
             (b >= l.rope_offset_bytes && b < l.rope_offset_bytes + l.rope_bytes);
    };
    int padding = 0;
    for (int64_t b = 0; b < l.record_bytes; ++b) {
      if (inside(b)) continue;
      ++padding;
      EXPECT_EQ(rec[size_t(b)], 0) << kv_cache_dtype_name(d) << " byte " << b;
    }
    EXPECT_GT(padding, 0) << kv_cache_dtype_name(d);
    if (d == KvCacheDtype::kNVFP4) {
      EXPECT_EQ(rec[size_t(l.latent_bytes - 1)] >> 4, 0);
    }
    check_random_row(d, r, d_r, x, kNvfp4DefaultGlobalScale);  // partial last blocks
  }
}

TEST(KvFormatEdge, Nvfp4SaturatesBeyond2688TimesG) {
  // Block scale saturates at e4m3 448 and codes at e2m1 6: the largest value is (6 · 448) · g.
  for (float g : {kNvfp4DefaultGlobalScale, 1.0f}) {
    const float top = (6.0f * 448.0f) * g;  // 448 for g = 1/6, 2688 for g = 1
    std::vector<float> x(kR + kDr, 0.0f);
    x[0] = 3.0f * top;
    x[1] = -1e30f;
    x[2] = 0.5f * top;  // in range, quantised with the saturated block scale
    const auto rec = quantize(KvCacheDtype::kNVFP4, kR, kDr, x, g);
    EXPECT_EQ(rec[256], 0x7E);
    const auto y = dequantize(KvCacheDtype::kNVFP4, kR, kDr, rec, g);
    EXPECT_EQ(y[0], top);
    EXPECT_EQ(y[1], -top);
    EXPECT_LE(std::fabs(y[2] - x[2]), 0.5 * 448.0 * g);  // half step at y = 3, s = 448
  }
}

TEST(KvFormatEdge, NonFiniteValuesPoisonTheirBlockOnly) {
  // The policy of kv_format.h: a NaN or an infinity makes its whole scale block read back NaN (a
  // NaN scale), in every quantised format; other blocks are untouched; the BF16 rope keeps the
  // value itself.
  auto run = [](KvCacheDtype d, std::vector<float> x) {
    return dequantize(d, kR, kDr, quantize(d, kR, kDr, x));
  };
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> x(kR + kDr, 0.0f);
    x[0] = bad;
    x[1] = 1.0f;
    x[200] = 2.0f;  // another block (of 128 and of 16)
    x[kR] = bad;
    for (KvCacheDtype d : {KvCacheDtype::kFP8E4M3, KvCacheDtype::kINT8, KvCacheDtype::kNVFP4}) {
      const auto y = run(d, x);
      EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1])) << kv_cache_dtype_name(d) << " " << bad;
      EXPECT_EQ(y[200], 2.0f) << kv_cache_dtype_name(d) << " " << bad;
      EXPECT_TRUE(std::isnan(y[kR]) ? std::isnan(bad) : y[kR] == bad) << kv_cache_dtype_name(d);
    }
    const auto b = run(KvCacheDtype::kBF16, x);  // BF16 stores each value as is
    EXPECT_TRUE(std::isnan(bad) ? std::isnan(b[0]) : b[0] == bad);
    EXPECT_EQ(b[1], 1.0f);
  }
}

}  // namespace
}  // namespace mla

namespace mla {
namespace {

// The verification format: the kernels' plain F32 row, stored and read back bit for bit.
TEST(KvFormatF32, IsTheExactPlainRow) {
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kF32, 512, 64), 2304);
  EXPECT_EQ(kv_row_bytes(DType::kF32, 512, 64), 2304);
  auto parsed = parse_kv_cache_dtype("f32");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, KvCacheDtype::kF32);
  EXPECT_EQ(kv_cache_latent_dtype(KvCacheDtype::kF32), DType::kF32);
  std::vector<float> row = {1.0f, -0x1.234568p-7f, 3e-39f, 65504.5f, -0.0f, 7.25f};
  std::vector<uint8_t> rec(size_t(kv_bytes_per_token(KvCacheDtype::kF32, 4, 2)));
  quantize_kv_row(KvCacheDtype::kF32, 4, 2, row.data(), 1.0f, rec.data());
  std::vector<float> back(6);
  dequantize_kv_row(KvCacheDtype::kF32, 4, 2, rec.data(), 1.0f, back.data());
  EXPECT_EQ(std::memcmp(back.data(), row.data(), 24), 0);
  EXPECT_EQ(std::memcmp(rec.data(), row.data(), 24), 0);  // the kernels read it as F32 rows
}

}  // namespace
}  // namespace mla
