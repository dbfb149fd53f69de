// Internal to ggml_dequant.cc / ggml_quantize*.cc and the AVX2 K-format kernel: the byte layout of
// each GGUF block format (offsets of its fields, all little-endian), the packing of the K formats'
// small scales, and fast bit-level FP16 conversions. docs/GGUF.md describes the same layouts in
// prose.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace mla::ggml {

inline constexpr int kQK = 256;  // values per K-format super-block

// Field offsets in bytes. "f16" fields are IEEE binary16 scales.
struct Q8_0 {  // 34 bytes, 32 values: v[i] = d · qs[i]
  static constexpr int kD = 0, kQs = 2;
};
struct Q4_0 {  // 18 bytes, 32 values: byte j holds v[j] (low nibble) and v[j + 16] (high)
  static constexpr int kD = 0, kQs = 2;
};
struct Q2_K {  // 84 bytes: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin
  static constexpr int kScales = 0, kQs = 16, kD = 80, kDmin = 82;
};
struct Q3_K {  // 110 bytes: hmask[32], qs[64], scales[12] (16 × 6 bits), d
  static constexpr int kHmask = 0, kQs = 32, kScales = 96, kD = 108;
};
struct Q4_K {  // 144 bytes: d, dmin, scales[12] (8 × 6-bit scale + 8 × 6-bit min), qs[128]
  static constexpr int kD = 0, kDmin = 2, kScales = 4, kQs = 16;
};
struct Q5_K {  // 176 bytes: as Q4_K with qh[32] (the fifth bit) between scales and qs
  static constexpr int kD = 0, kDmin = 2, kScales = 4, kQh = 16, kQs = 48;
};
struct Q6_K {  // 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (i8), d
  static constexpr int kQl = 0, kQh = 128, kScales = 192, kD = 208;
};

inline uint16_t load_u16(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}
inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

// Exact widening. NaN payloads are kept with the quiet bit set, as F16C's vcvtph2ps does.
// Branch-free (masks, no selects) so that row loops vectorise; subnormals go through an FP32
// multiply of normal operands, so a denormals-are-zero mode cannot change them.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = h & 0x7c00u, mant = h & 0x3ffu;
  const uint32_t normal = (uint32_t(h & 0x7fffu) << 13) + (112u << 23);
  const uint32_t quiet = ((mant + 0x3ffu) & 0x400u) << 12;  // 0x400000 when mant != 0
  const uint32_t special = 0x7f800000u | (mant << 13) | quiet;
  const uint32_t sub = f32_bits(float(int32_t(mant)) * 0x1p-24f);  // mant · 2^-24, exact
  const uint32_t is_special = 0u - uint32_t(exp == 0x7c00u), is_sub = 0u - uint32_t(exp == 0);
  return f32_from_bits(sign | (special & is_special) | (sub & is_sub) |
                       (normal & ~(is_special | is_sub)));
}
inline float load_half(const uint8_t* p) {
  return half_to_float(load_u16(p));
}

// Round to nearest even; overflow gives ±inf, NaN the quiet NaN 0x7e00 (sign kept): the same
// results as core/dtype.h's f32_to_f16, without its double arithmetic.
inline uint16_t float_to_half(float f) {
  uint32_t u = f32_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00u;
  if (u >= 0x477ff000u) return sign | 0x7c00u;  // ≥ 65520 = max + half an ulp: ties go up to inf
  if (u >= 0x38800000u) {                       // ≥ 2^-14: a normal half
    u += 0xfffu + ((u >> 13) & 1u);
    return sign | uint16_t((u >> 13) - (112u << 10));
  }
  // Subnormal half: adding 0.5 puts the 2^-24 quantum in the last place of the FP32 mantissa,
  // so the FPU's own round-to-nearest-even does the rounding.
  const float r = f32_from_bits(u) + 0.5f;
  return sign | uint16_t(f32_bits(r) - 0x3f000000u);
}
inline void store_half(uint8_t* p, float f) {
  store_u16(p, float_to_half(f));
}

// Q4_K / Q5_K: eight 6-bit scales sc[j] and mins m[j] in 12 bytes. Bytes 0-3 hold sc[0..3] in
// their low 6 bits, bytes 4-7 m[0..3]; for j = 4..7 byte 8 + (j - 4) holds the low 4 bits of
// sc[j] (low nibble) and of m[j] (high nibble), and the top 2 bits of sc[j] / m[j] sit in the
// top 2 bits of byte j - 4 / byte j.
inline void unpack_scale_min_k4(const uint8_t* p, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = p[j] & 63;
    m[j] = p[j + 4] & 63;
    sc[j + 4] = uint8_t((p[j + 8] & 0x0f) | ((p[j] >> 6) << 4));
    m[j + 4] = uint8_t((p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4));
  }
}
inline void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t* p) {
  for (int j = 0; j < 4; ++j) {
    p[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    p[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    p[j + 8] = uint8_t((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}

// Q3_K: sixteen 6-bit scales stored as s + 32 (s in [-32, 31]) in 12 bytes. The low 4 bits of
// scale j sit in byte j % 8 (low nibble for j < 8, high nibble for j ≥ 8); its top 2 bits in
// byte 8 + j % 4 at bit 2 · (j / 4).
inline void unpack_q3k_scales(const uint8_t* p, int sc[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (p[j % 8] >> (j < 8 ? 0 : 4)) & 0x0f;
    const int hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = (lo | (hi << 4)) - 32;
  }
}
inline void pack_q3k_scales(const int sc[16], uint8_t* p) {
  std::memset(p, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int v = sc[j] + 32;  // 0..63
    p[j % 8] |= uint8_t((v & 0x0f) << (j < 8 ? 0 : 4));
    p[8 + j % 4] |= uint8_t((v >> 4) << (2 * (j / 4)));
  }
}

// The integers of one K-format super-block as ggml_quantize_k.cc's search chooses them;
// ggml_quantize.cc packs them into the format's bytes.
struct KQuant {
  uint16_t dh = 0, mh = 0;       // FP16 bits of d and dmin (mh unused without a min)
  int ls[16] = {}, lm[16] = {};  // each sub-block's integer scale and min
  int8_t q[kQK] = {};            // codes: 0..nmax with a min, −nneg..nneg − 1 without
};

// t: a K format; x: kQK finite values; w: kQK non-negative weights, every sub-block's sum
// positive. False when a scale does not fit an FP16 (values beyond the format's range).
bool search_k_block(DType t, const float* x, const float* w, KQuant* out);

}  // namespace mla::ggml
