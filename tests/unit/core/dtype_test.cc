// Exhaustive tests of the narrow float conversions in core/dtype.h against an independent
// reference.
#include "core/dtype.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/rng.h"

namespace mla {
namespace {

// How a format spends its top exponent.
enum class Specials {
  kIeee,  // all-ones exponent: inf (mantissa 0) or NaN
  kFn,    // only the all-ones pattern is NaN, no inf (OCP E4M3 "fn")
  kNone,  // every pattern is finite (E2M1)
};

// What a conversion must return for a NaN input (dtype.h documents each).
enum class NanRule {
  kAnyNanSignKept,  // some NaN pattern with the input's sign (payload unspecified)
  kFixedSignKept,   // exactly nan_pattern | sign
  kPositiveZero,    // +0: the format has no NaN
};

struct Format {
  const char* name;
  int exp_bits;
  int mant_bits;
  int bias;
  Specials specials;
  bool saturate;  // finite overflow and ±inf go to ±max instead of ±inf
  NanRule nan_rule;
  uint32_t nan_pattern;
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);

  int total_bits() const { return 1 + exp_bits + mant_bits; }
  uint32_t sign_bit() const { return 1u << (exp_bits + mant_bits); }
};

const Format kBf16{"bf16",
                   8,
                   7,
                   127,
                   Specials::kIeee,
                   false,
                   NanRule::kAnyNanSignKept,
                   0,
                   [](uint32_t e) { return bf16_to_f32(uint16_t(e)); },
                   [](float x) { return uint32_t(f32_to_bf16(x)); }};
const Format kF16{"f16",
                  5,
                  10,
                  15,
                  Specials::kIeee,
                  false,
                  NanRule::kAnyNanSignKept,
                  0,
                  [](uint32_t e) { return f16_to_f32(uint16_t(e)); },
                  [](float x) { return uint32_t(f32_to_f16(x)); }};
const Format kE4M3{"e4m3",
                   4,
                   3,
                   7,
                   Specials::kFn,
                   true,
                   NanRule::kFixedSignKept,
                   0x7f,
                   [](uint32_t e) { return fp8_e4m3_to_f32(uint8_t(e)); },
                   [](float x) { return uint32_t(f32_to_fp8_e4m3(x)); }};
const Format kE2M1{"e2m1",
                   2,
                   1,
                   1,
                   Specials::kNone,
                   true,
                   NanRule::kPositiveZero,
                   0,
                   [](uint32_t e) { return e2m1_to_f32(uint8_t(e)); },
                   [](float x) { return uint32_t(f32_to_e2m1(x)); }};

// The textbook value of a pattern: (-1)^s · 2^(e-bias) · 1.m, or (-1)^s · 2^(1-bias) · 0.m for
// e == 0. Exact in double for all four formats. Written from the format definitions, not from
// dtype.cc.
double ref_decode(const Format& f, uint32_t enc) {
  const uint32_t mant_max = (1u << f.mant_bits) - 1, exp_max = (1u << f.exp_bits) - 1;
  const uint32_t mant = enc & mant_max, exp = (enc >> f.mant_bits) & exp_max;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double mag;
  if (f.specials == Specials::kIeee && exp == exp_max) {
    mag = mant ? nan : std::numeric_limits<double>::infinity();
  } else if (f.specials == Specials::kFn && exp == exp_max && mant == mant_max) {
    mag = nan;
  } else if (exp == 0) {
    mag = std::ldexp(double(mant), 1 - f.bias - f.mant_bits);
  } else {
    mag = std::ldexp(1.0 + std::ldexp(double(mant), -f.mant_bits), int(exp) - f.bias);
  }
  return std::copysign(mag, (enc & f.sign_bit()) ? -1.0 : 1.0);
}

bool is_nan_pattern(const Format& f, uint32_t enc) {
  return std::isnan(ref_decode(f, enc));
}

// Round to nearest, ties to the pattern whose mantissa LSB is 0, by binary search over every
// finite non-negative value of the format. IEEE formats get one extra entry, 2^(emax+1) encoded
// as inf, so values from the midpoint above the largest finite value up overflow to inf exactly as
// IEEE 754 specifies; saturating formats clamp to their largest finite value first.
class RefRounder {
 public:
  struct Entry {
    double value;
    uint32_t enc;
  };

  explicit RefRounder(const Format& f) : f_(f) {
    for (uint32_t enc = 0; enc < f.sign_bit(); ++enc) {
      const double v = ref_decode(f, enc);
      if (std::isfinite(v)) table_.push_back({v, enc});
    }
    std::sort(table_.begin(), table_.end(),
              [](const Entry& a, const Entry& b) { return a.value < b.value; });
    max_ = table_.back();
    if (!f.saturate) {
      const uint32_t exp_max = (1u << f.exp_bits) - 1;
      table_.push_back({std::ldexp(1.0, int(exp_max) - f.bias), exp_max << f.mant_bits});
    }
  }

  // Expected pattern for a non-NaN input.
  uint32_t round(float x) const {
    const uint32_t sign = std::signbit(x) ? f_.sign_bit() : 0;
    double a = std::fabs(double(x));
    if (f_.saturate && a > max_.value) a = max_.value;
    if (a >= table_.back().value) return sign | table_.back().enc;
    auto it = std::upper_bound(table_.begin(), table_.end(), a,
                               [](double v, const Entry& e) { return v < e.value; });
    const Entry& lo = *(it - 1);
    if (lo.value == a) return sign | lo.enc;
    const Entry& hi = *it;
    const double mid = (lo.value + hi.value) / 2;  // exact: at most 12 significant bits
    if (a < mid) return sign | lo.enc;
    if (a > mid) return sign | hi.enc;
    return sign | ((lo.enc & 1) ? hi.enc : lo.enc);
  }

  // Finite non-negative values, ascending, plus the overflow entry for IEEE formats.
  const std::vector<Entry>& table() const { return table_; }
  const Entry& max() const { return max_; }

 private:
  const Format& f_;
  std::vector<Entry> table_;
  Entry max_{};
};

// Empty when `got` is the right pattern for input x, else a description of the mismatch.
std::string check_one(const Format& f, const RefRounder& ref, float x, uint32_t got) {
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
  bool ok;
  std::string want;
  if (!std::isnan(x)) {
    const uint32_t w = ref.round(x);
    ok = got == w;
    want = fmt::format("{:#x}", w);
  } else if (f.nan_rule == NanRule::kAnyNanSignKept) {
    ok = is_nan_pattern(f, got) && (got & f.sign_bit()) == sign;
    want = sign ? "a negative NaN" : "a positive NaN";
  } else if (f.nan_rule == NanRule::kFixedSignKept) {
    ok = got == (f.nan_pattern | sign);
    want = fmt::format("{:#x}", f.nan_pattern | sign);
  } else {
    ok = got == 0;
    want = "0x0";
  }
  if (ok) return {};
  return fmt::format("{}: input {:a} (f32 bits {:#010x}) gave {:#x}, want {}", f.name, x,
                     f32_bits(x), got, want);
}

// Converts every input and reports the first few mismatches (all of them would drown the log).
void expect_rounds_like_ref(const Format& f, const RefRounder& ref, const std::vector<float>& in) {
  int failures = 0;
  for (float x : in) {
    const uint32_t got = f.encode(x);
    ASSERT_LT(got, 1u << f.total_bits()) << f.name << ": pattern wider than the format";
    std::string msg = check_one(f, ref, x, got);
    if (msg.empty()) continue;
    if (++failures <= 10) ADD_FAILURE() << msg;
  }
  EXPECT_EQ(failures, 0) << f.name << ": mismatches in " << in.size() << " inputs";
}

// Names the format in test output instead of a pointer value.
void PrintTo(const Format* f, std::ostream* os) {
  *os << f->name;
}

class NarrowFloatTest : public ::testing::TestWithParam<const Format*> {
 protected:
  const Format& f() const { return *GetParam(); }
};

TEST_P(NarrowFloatTest, ReferenceTableHasEveryFiniteValueOnce) {
  const RefRounder ref(f());
  // Finite non-negative patterns: bf16 2^15 - 2^7, f16 2^15 - 2^10, e4m3 2^7 - 1, e2m1 2^3.
  const size_t finite = f().specials == Specials::kIeee
                            ? f().sign_bit() - (f().sign_bit() >> f().exp_bits)
                        : f().specials == Specials::kFn ? f().sign_bit() - 1
                                                        : f().sign_bit();
  const auto& t = ref.table();
  ASSERT_EQ(t.size(), finite + (f().saturate ? 0 : 1));
  for (size_t i = 1; i < t.size(); ++i) ASSERT_LT(t[i - 1].value, t[i].value) << "entry " << i;
}

TEST_P(NarrowFloatTest, DecodesEveryPattern) {
  int failures = 0;
  for (uint32_t enc = 0; enc < (1u << f().total_bits()); ++enc) {
    const float got = f().decode(enc);
    const double want = ref_decode(f(), enc);
    const bool ok = std::isnan(want)
                        ? std::isnan(got) && std::signbit(got) == std::signbit(want)
                        : f32_bits(got) == f32_bits(float(want));  // exact, and -0 keeps its sign
    if (!ok && ++failures <= 10)
      ADD_FAILURE() << f().name << " pattern " << fmt::format("{:#x}", enc) << " gave "
                    << fmt::format("{:a}", got) << ", want " << fmt::format("{:a}", want);
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(NarrowFloatTest, EveryPatternRoundTrips) {
  const RefRounder ref(f());
  int failures = 0;
  for (uint32_t enc = 0; enc < (1u << f().total_bits()); ++enc) {
    const float x = f().decode(enc);
    const uint32_t got = f().encode(x);
    // Non-NaN values are representable, so the reference gives back `enc`; NaN follows its rule.
    const bool ok = std::isnan(x) ? check_one(f(), ref, x, got).empty() : got == enc;
    if (!ok && ++failures <= 10)
      ADD_FAILURE() << f().name << " pattern " << fmt::format("{:#x}", enc) << " came back as "
                    << fmt::format("{:#x}", got);
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(NarrowFloatTest, RoundsEveryMidpointAndItsNeighbours) {
  const RefRounder ref(f());
  std::vector<RefRounder::Entry> t = ref.table();
  if (f().saturate) {
    // The value one step past max (480 for e4m3, 8 for e2m1) gives the midpoint where an
    // unsaturated conversion would start rounding up; it must still give max.
    const double step = t.back().value - t[t.size() - 2].value;
    t.push_back({t.back().value + step, 0});
  }
  std::vector<float> in;
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    const double mid = (t[i].value + t[i + 1].value) / 2;
    const float m = float(mid);
    ASSERT_EQ(double(m), mid) << "midpoint not representable in f32";
    const float inf = std::numeric_limits<float>::infinity();
    for (float x : {float(t[i].value), m, std::nextafter(m, 0.0f), std::nextafter(m, inf)}) {
      in.push_back(x);
      in.push_back(-x);
    }
  }
  expect_rounds_like_ref(f(), ref, in);
}

TEST_P(NarrowFloatTest, RoundsSpecialInputs) {
  const RefRounder ref(f());
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> in = {0.0f,     -0.0f,   inf,      -inf,         FLT_MAX,
                           -FLT_MAX, FLT_MIN, -FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN};
  // Quiet and signalling NaNs of both signs, including payloads only in the low 16 bits, which a
  // plain truncation to bf16 would turn into inf.
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7f808000u, 0x7fa00000u})
    for (uint32_t s : {0u, 0x80000000u}) in.push_back(f32_from_bits(bits | s));
  expect_rounds_like_ref(f(), ref, in);
}

TEST_P(NarrowFloatTest, RoundsRandomBitPatterns) {
  const RefRounder ref(f());
  // Uniform bits cover every f32 exponent, NaN payloads and subnormals. More for the 16-bit
  // formats, whose tables are larger; sized to keep the suite fast under ASan.
  const int n = f().total_bits() == 16 ? 2'000'000 : 500'000;
  Rng rng(0xd7e5'0000ull + f().total_bits());
  std::vector<float> in(n);
  for (int i = 0; i < n; i += 2) {
    const uint64_t r = rng.next_u64();
    in[i] = f32_from_bits(uint32_t(r));
    in[i + 1] = f32_from_bits(uint32_t(r >> 32));
  }
  expect_rounds_like_ref(f(), ref, in);
}

TEST_P(NarrowFloatTest, RoundsRandomValuesInRange) {
  const RefRounder ref(f());
  // Uniform bits mostly overflow or flush to zero in the small formats; these exponents span the
  // format's range (subnormals to past max) with a random 23-bit f32 mantissa.
  const int lo_exp = 1 - f().bias - f().mant_bits - 2;
  const int hi_exp = (1 << f().exp_bits) - f().bias + 1;
  Rng rng(0xa11ce ^ uint64_t(f().total_bits()));
  std::vector<float> in(500'000);
  for (float& x : in) {
    const uint64_t r = rng.next_u64();
    const int e = lo_exp + int(rng.below(uint64_t(hi_exp - lo_exp + 1)));
    const float mag = std::ldexp(1.0f + float(r & 0x7fffff) * 0x1p-23f, e);
    x = (r >> 63) ? -mag : mag;
  }
  expect_rounds_like_ref(f(), ref, in);
}

INSTANTIATE_TEST_SUITE_P(Formats, NarrowFloatTest, ::testing::Values(&kBf16, &kF16, &kE4M3, &kE2M1),
                         [](const auto& info) { return std::string(info.param->name); });

// Hand-written expectations: they check the reference as much as the code under test.

TEST(Bf16, KnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      // tie, 0x3f80 is even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie between 0x3f81 and 0x3f82
  EXPECT_EQ(f32_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(0x1p-134f), 0x0000);      // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_bf16(3 * 0x1p-134f), 0x0002);  // tie between 0x0001 and 0x0002
  EXPECT_EQ(f32_to_bf16(0x1.fep127f), 0x7f7f);    // largest finite bf16
  EXPECT_EQ(f32_to_bf16(0x1.ffp127f), 0x7f80);    // midpoint to 2^128: tie to even = inf
  EXPECT_EQ(f32_to_bf16(std::nextafter(0x1.ffp127f, 0.0f)), 0x7f7f);
  EXPECT_EQ(f32_to_bf16(FLT_MAX), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bf16_to_f32(0x0001), 0x1p-133f);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

TEST(F16, KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // midpoint to 2^16: overflows to inf
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // tie to 0
  EXPECT_EQ(f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);         // tie between 1 and 2
  EXPECT_EQ(f32_to_f16(5 * 0x1p-25f), 0x0002);         // tie between 2 and 3
  EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);  // tie between 0x3ff and min normal
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);
  EXPECT_EQ(f32_to_f16(-FLT_TRUE_MIN), 0x8000);
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(E4M3, KnownValuesPerOcpFnSpec) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x77), 240.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 is normal in "fn"
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), kFp8E4M3Max);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  int nans = 0, infs = 0;
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_e4m3_to_f32(uint8_t(b));
    if (std::isnan(v)) {
      ++nans;
      EXPECT_TRUE(b == 0x7f || b == 0xff) << b;
    }
    infs += std::isinf(v);
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(infs, 0);
}

TEST(E4M3, SaturatesAndRoundsToNearestEven) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e30f, FLT_MAX, inf}) {
    EXPECT_EQ(f32_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(f32_to_fp8_e4m3(-x), 0xfe) << -x;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(f32_to_fp8_e4m3(432.0f), 0x7e);    // tie between 416 (0x7d) and 448 (0x7e)
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-10f), 0x00);  // tie between 0 and 2^-9
  EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(3 * 0x1p-10f), 0x02);   // tie between 1 and 2 quanta
  EXPECT_EQ(f32_to_fp8_e4m3(15 * 0x1p-10f), 0x08);  // tie between 0x07 and min normal 0x08
  EXPECT_EQ(f32_to_fp8_e4m3(-0x1p-11f), 0x80);
}

TEST(E2M1, DecodesEveryNibble) {
  const float kWant[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int n = 0; n < 16; ++n) {
    const float want = (n & 8) ? -kWant[n & 7] : kWant[n & 7];
    EXPECT_EQ(f32_bits(e2m1_to_f32(uint8_t(n))), f32_bits(want)) << n;
    // Only the low nibble counts: the high one belongs to the neighbouring element.
    EXPECT_EQ(f32_bits(e2m1_to_f32(uint8_t(0xa0 | n))), f32_bits(want)) << n;
  }
  EXPECT_EQ(e2m1_to_f32(7), kE2M1Max);
}

TEST(E2M1, RoundsToNearestEvenAndSaturates) {
  const struct {
    float in;
    float want;
  } kCases[] = {{0.25f, 0.0f},   {0.75f, 1.0f},   {1.25f, 1.0f},
                {1.75f, 2.0f},   {2.5f, 2.0f},    {3.5f, 4.0f},
                {5.0f, 4.0f},    {5.0001f, 6.0f}, {4.9999f, 4.0f},
                {0.2499f, 0.0f}, {0.2501f, 0.5f}, {6.0f, 6.0f},
                {7.0f, 6.0f},    {1e30f, 6.0f},   {std::numeric_limits<float>::infinity(), 6.0f}};
  for (const auto& c : kCases) {
    EXPECT_EQ(e2m1_to_f32(f32_to_e2m1(c.in)), c.want) << c.in;
    EXPECT_EQ(e2m1_to_f32(f32_to_e2m1(-c.in)), -c.want) << -c.in;
  }
  EXPECT_EQ(f32_to_e2m1(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(f32_to_e2m1(-std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(f32_to_e2m1(-0.0f), 0x8);
}

constexpr DType kAllDTypes[] = {DType::kF64,    DType::kF32,  DType::kF16, DType::kBF16,
                                DType::kF8E4M3, DType::kE2M1, DType::kI64, DType::kI32,
                                DType::kI16,    DType::kI8,   DType::kU8,  DType::kBool};

TEST(DType, BitsAndSafetensorsNames) {
  const struct {
    DType t;
    int bits;
    const char* name;
  } kWant[] = {
      {DType::kF64, 64, "F64"},   {DType::kF32, 32, "F32"},       {DType::kF16, 16, "F16"},
      {DType::kBF16, 16, "BF16"}, {DType::kF8E4M3, 8, "F8_E4M3"}, {DType::kE2M1, 4, "F4"},
      {DType::kI64, 64, "I64"},   {DType::kI32, 32, "I32"},       {DType::kI16, 16, "I16"},
      {DType::kI8, 8, "I8"},      {DType::kU8, 8, "U8"},          {DType::kBool, 8, "BOOL"}};
  static_assert(std::size(kWant) == std::size(kAllDTypes));
  for (const auto& w : kWant) {
    EXPECT_EQ(dtype_bits(w.t), w.bits) << w.name;
    EXPECT_EQ(dtype_name(w.t), w.name);
  }
}

TEST(DType, NamesRoundTripAndAreDistinct) {
  for (DType t : kAllDTypes) {
    const auto back = dtype_from_name(dtype_name(t));
    ASSERT_TRUE(back.has_value()) << dtype_name(t);
    EXPECT_EQ(*back, t) << dtype_name(t);
    for (DType u : kAllDTypes) {
      if (u != t) {
        EXPECT_NE(dtype_name(t), dtype_name(u));
      }
    }
  }
}

TEST(DType, RejectsUnknownNames) {
  // Near misses: case, spacing, other spellings, formats safetensors has and we do not, and the
  // "?" that dtype_name returns for an invalid enum.
  for (const char* name : {"", "f32", "bf16", "FP32", "float32", "F8_E5M2", "F8_E4M3FN", "F4_E2M1",
                           "BF16 ", " BF16", "BF1", "BF166", "U16", "?"})
    EXPECT_FALSE(dtype_from_name(name).has_value()) << '"' << name << '"';
  EXPECT_EQ(dtype_name(DType(200)), "?");
  EXPECT_EQ(dtype_bits(DType(200)), 0);
}

}  // namespace
}  // namespace mla
