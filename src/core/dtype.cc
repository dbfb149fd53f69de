// Scalar conversions for the narrow float types; see dtype.h for the rounding contract.
#include "core/dtype.h"

#include <array>
#include <bit>
#include <cmath>

namespace mla {

int dtype_bits(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64:
      return 64;
    case DType::kF32:
    case DType::kI32:
      return 32;
    case DType::kF16:
    case DType::kBF16:
    case DType::kBF16R16:
    case DType::kI16:
      return 16;
    case DType::kF8E4M3:
    case DType::kF8E4M3R16:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 8;
    case DType::kE2M1:
      return 4;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_0R16:
    case DType::kQ4_KR16:
      return 0;
  }
  return 0;
}

DTypeBlock dtype_block(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ8_0R16:
      return {32, 34};
    case DType::kQ4_0:
      return {32, 18};
    case DType::kQ2_K:
      return {256, 84};
    case DType::kQ3_K:
      return {256, 110};
    case DType::kQ4_K:
    case DType::kQ4_KR16:
      return {256, 144};
    case DType::kQ5_K:
      return {256, 176};
    case DType::kQ6_K:
      return {256, 210};
    case DType::kE2M1:
      return {2, 1};
    default:
      return {1, dtype_bits(t) / 8};
  }
}

namespace {
struct NameEntry {
  DType type;
  std::string_view name;
};
constexpr NameEntry kNames[] = {
    {DType::kF64, "F64"},        {DType::kF32, "F32"}, {DType::kF16, "F16"}, {DType::kBF16, "BF16"},
    {DType::kF8E4M3, "F8_E4M3"}, {DType::kE2M1, "F4"}, {DType::kI64, "I64"}, {DType::kI32, "I32"},
    {DType::kI16, "I16"},        {DType::kI8, "I8"},   {DType::kU8, "U8"},   {DType::kBool, "BOOL"},
};
}  // namespace

constexpr NameEntry kBlockNames[] = {
    {DType::kQ8_0, "Q8_0"},
    {DType::kQ4_0, "Q4_0"},
    {DType::kQ2_K, "Q2_K"},
    {DType::kQ3_K, "Q3_K"},
    {DType::kQ4_K, "Q4_K"},
    {DType::kQ5_K, "Q5_K"},
    {DType::kQ6_K, "Q6_K"},
    {DType::kQ8_0R16, "Q8_0_R16"},
    {DType::kQ4_KR16, "Q4_K_R16"},
    {DType::kBF16R16, "BF16_R16"},
    {DType::kF8E4M3R16, "F8_E4M3_R16"},
};

std::string_view dtype_name(DType t) {
  for (const auto& e : kNames)
    if (e.type == t) return e.name;
  for (const auto& e : kBlockNames)
    if (e.type == t) return e.name;
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& e : kNames)
    if (e.name == name) return e.type;
  return std::nullopt;
}

// Round a finite, non-negative value to a float format with `mant` stored mantissa bits,
// exponent bias `bias` and minimum normal exponent 1 - bias, returning the bit pattern without
// sign, or -1 if it rounds past `max_bits` (the largest finite pattern). Ties go to even patterns.
static int round_to_small_float(double a, int mant, int bias, int max_bits) {
  if (a == 0.0) return 0;
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): unbiased exponent of a is e - 1
  int exp = e - 1;
  const int min_exp = 1 - bias;
  if (exp < min_exp) exp = min_exp;  // subnormal range: fixed quantum
  const double quantum = std::ldexp(1.0, exp - mant);
  double q = a / quantum;  // exact: power-of-two scaling
  double fl = std::floor(q);
  double rem = q - fl;
  long long m = (long long)fl;
  if (rem > 0.5 || (rem == 0.5 && (m & 1))) ++m;
  // m counts quanta at exponent `exp`; normal values carry the implicit bit 1 << mant.
  long long bits;
  if (m >= (2LL << mant)) {  // rounded up to the next binade
    m >>= 1;
    ++exp;
  }
  if (m < (1LL << mant)) {
    bits = m;  // subnormal (exp == min_exp)
  } else {
    bits = ((long long)(exp + bias) << mant) | (m - (1LL << mant));
  }
  if (bits > max_bits) return -1;
  return (int)bits;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0x1f)
    v = mant ? NAN : INFINITY;
  else if (exp == 0)
    v = std::ldexp(float(mant), -24);
  else
    v = std::ldexp(float(mant | 0x400u), int(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  const uint16_t sign = (f32_bits(f) >> 16) & 0x8000u;
  if (std::isnan(f)) return sign | 0x7e00u;
  double a = std::fabs(double(f));
  if (std::isinf(a)) return sign | 0x7c00u;
  int bits = round_to_small_float(a, 10, 15, 0x7bff);
  return bits < 0 ? (sign | 0x7c00u) : (sign | uint16_t(bits));
}

namespace {

// FP32 bits of E4M3 code b, by the definition (OCP FP8 §5.3.1): exponent bias 7, subnormals
// m · 2^-9, 0x7F / 0xFF NaN, no infinities. Built at compile time: model load widens ~10^8 codes.
constexpr uint32_t e4m3_f32_bits(uint32_t b) {
  const uint32_t sign = (b >> 7) << 31, exp = (b >> 3) & 0xfu, mant = b & 7u;
  if (exp == 0xf && mant == 7) return sign | 0x7fc00000u;
  if (exp == 0) {
    if (mant == 0) return sign;
    // m · 2^-9 = 1.f · 2^(k - 9) with k the position of m's top bit.
    const uint32_t k = mant >= 4 ? 2 : mant >= 2 ? 1 : 0;
    return sign | ((127 + k - 9) << 23) | (((mant << (3 - k)) & 7u) << 20);
  }
  return sign | ((exp - 7 + 127) << 23) | (mant << 20);
}

constexpr std::array<uint32_t, 256> kE4m3Bits = [] {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) t[b] = e4m3_f32_bits(b);
  return t;
}();

}  // namespace

float fp8_e4m3_to_f32(uint8_t b) {
  return std::bit_cast<float>(kE4m3Bits[b]);
}

uint8_t f32_to_fp8_e4m3(float f) {
  const uint8_t sign = (f32_bits(f) >> 24) & 0x80u;
  if (std::isnan(f)) return sign | 0x7fu;
  double a = std::fabs(double(f));
  if (std::isinf(a)) return sign | 0x7eu;
  int bits = round_to_small_float(a, 3, 7, 0x7e);
  return bits < 0 ? (sign | 0x7eu) : (sign | uint8_t(bits));
}

float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = kValues[nibble & 7u];
  return (nibble & 8u) ? -v : v;
}

uint8_t f32_to_e2m1(float f) {
  if (std::isnan(f)) return 0;
  const uint8_t sign = (f32_bits(f) >> 28) & 0x8u;
  double a = std::fabs(double(f));
  if (std::isinf(a)) return sign | 7u;
  int bits = round_to_small_float(a, 1, 1, 7);
  return bits < 0 ? (sign | 7u) : (sign | uint8_t(bits));
}

}  // namespace mla
