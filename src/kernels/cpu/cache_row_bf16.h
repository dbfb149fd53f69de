// Decoding of one cache row of any format of core/kv_format.h into BF16 values that are exact:
// the latent as BF16 codes without their FP32 block scale (FP8 E4M3 and INT8 codes are exactly
// representable in BF16; an NVFP4 value e2m1 · e4m3 scale has at most 6 significant bits), the
// scales returned separately, and the BF16 k_pe copied. The BF16-probability decode applies the
// scales once per key and block (scores) and once per probability (P·V), so decoding adds no
// rounding. AVX-512 (BW, BF16); include inside that target region. Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "kernels/cpu/load_f32.h"

namespace mla::cpu {
namespace {

// E4M3 magnitude code (7 bits) → BF16 bits, as four vectors of 32 words for two-source permutes;
// built from load_f32.h's exact code → FP32 table (NaN codes → NaN, subnormals exact).
struct Fp8Bf16Table {
  alignas(64) uint16_t w[128];
  alignas(64) uint8_t hi[128], lo[128];  // the same words split into bytes (byte permutes)
  Fp8Bf16Table() {
    for (int i = 0; i < 128; ++i) {
      w[i] = f32_to_bf16(narrow_tables().fp8[i]);
      hi[i] = uint8_t(w[i] >> 8);
      lo[i] = uint8_t(w[i] & 0xff);
    }
  }
};
inline const Fp8Bf16Table& fp8_bf16_table() {
  static const Fp8Bf16Table t;
  return t;
}

// Masks of the first n lanes (n ≤ 0: none).
inline __mmask32 first_n32(int n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : (__mmask32(1) << n) - 1;
}
inline __mmask16 first_n16(int n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// dst[0:n] = BF16 of the E4M3 codes src[0:n].
#ifdef __AVX512VBMI__
// 64 codes per step: two 128-entry byte lookups (high and low byte of each word), the sign into
// the high byte, and byte interleaves; the input's qwords are pre-ordered so that the
// interleaves (within 128-bit lanes) leave codes 0-31 and 32-63 in order.
inline void fp8_codes_to_bf16(const uint8_t* src, int n, uint16_t* dst) {
  const Fp8Bf16Table& t = fp8_bf16_table();
  const __m512i hi0 = _mm512_load_si512(t.hi), hi1 = _mm512_load_si512(t.hi + 64),
                lo0 = _mm512_load_si512(t.lo), lo1 = _mm512_load_si512(t.lo + 64);
  const __m512i order = _mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0);
  const __m512i mag_mask = _mm512_set1_epi8(0x7f), sign_mask = _mm512_set1_epi8(char(0x80));
  for (int i = 0; i < n; i += 64) {
    const int len = std::min(64, n - i);
    const __mmask64 m = len >= 64 ? ~__mmask64(0) : (__mmask64(1) << len) - 1;
    const __m512i x = _mm512_permutexvar_epi64(order, _mm512_maskz_loadu_epi8(m, src + i));
    const __m512i mag = _mm512_and_si512(x, mag_mask);
    const __m512i hb =
        _mm512_or_si512(_mm512_permutex2var_epi8(hi0, mag, hi1), _mm512_and_si512(x, sign_mask));
    const __m512i lb = _mm512_permutex2var_epi8(lo0, mag, lo1);
    _mm512_mask_storeu_epi16(dst + i, first_n32(len), _mm512_unpacklo_epi8(lb, hb));
    _mm512_mask_storeu_epi16(dst + i + 32, first_n32(len - 32), _mm512_unpackhi_epi8(lb, hb));
  }
}
#else
inline void fp8_codes_to_bf16(const uint8_t* src, int n, uint16_t* dst) {
  const Fp8Bf16Table& t = fp8_bf16_table();
  const __m512i t0 = _mm512_load_si512(t.w), t1 = _mm512_load_si512(t.w + 32),
                t2 = _mm512_load_si512(t.w + 64), t3 = _mm512_load_si512(t.w + 96);
  const __m512i mag_mask = _mm512_set1_epi16(0x7f), sign_mask = _mm512_set1_epi16(0x80),
                hi_bit = _mm512_set1_epi16(0x40);
  for (int i = 0; i < n; i += 32) {
    const __mmask32 m = first_n32(n - i);
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + i));
    const __m512i mag = _mm512_and_si512(x, mag_mask);
    const __m512i lo = _mm512_permutex2var_epi16(t0, mag, t1);  // index bits 0-5
    const __m512i hi = _mm512_permutex2var_epi16(t2, mag, t3);
    __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(mag, hi_bit), lo, hi);
    v = _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(x, sign_mask), 8));
    _mm512_mask_storeu_epi16(dst + i, m, v);
  }
}
#endif

// dst[0:n] = BF16 of the INT8 codes src[0:n] (|code| ≤ 127 < 2^8: exact).
inline void int8_codes_to_bf16(const uint8_t* src, int n, uint16_t* dst) {
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = first_n16(n - i);
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, src + i)));
    _mm256_mask_storeu_epi16(dst + i, m, (__m256i)_mm512_cvtneps_pbh(f));
  }
}

// dst[0:n] = BF16 of e2m1 · s for the NVFP4 codes (two per byte, low nibble first) and the
// e4m3 block scales of one row; n even.
inline void nvfp4_values_to_bf16(const uint8_t* codes, const uint8_t* scales, int n,
                                 uint16_t* dst) {
  const float* fp8 = narrow_tables().fp8;
  const __m512 e2m1 = _mm512_loadu_ps(narrow_tables().e2m1);
  const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  const __m512i nib = _mm512_set1_epi32(0xf);
  for (int i = 0; i < n; i += kNvfp4ScaleBlock) {
    static_assert(kNvfp4ScaleBlock == 16, "one vector per scale block");
    const int len = std::min(kNvfp4ScaleBlock, n - i);
    const __m128i bytes = _mm_maskz_loadu_epi8(first_n16((len + 1) / 2), codes + i / 2);
    const __m128i twice = _mm_unpacklo_epi8(bytes, bytes);  // byte k → lanes 2k, 2k + 1
    const __m512i idx =
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(twice), shifts), nib);
    const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(idx, e2m1),
                                   _mm512_set1_ps(fp8[scales[i / kNvfp4ScaleBlock]]));
    _mm256_mask_storeu_epi16(dst + i, first_n16(len), (__m256i)_mm512_cvtneps_pbh(v));
  }
}

// One row as BF16: the latent into dst [r], the rope into rope [d_r] (dst + r for a plain row);
// FP8 / INT8 block scales into scales [ceil(r / kFp8ScaleBlock)]. For NVFP4 the layer's global
// scale is left to the caller.
inline void decode_row_bf16(const CacheRowFormat& f, const uint8_t* row, uint16_t* dst,
                            uint16_t* rope, float* scales) {
  const uint8_t* codes = row + f.layout.latent_offset_bytes;
  switch (f.dtype) {
    case DType::kF8E4M3:
    case DType::kI8:
      if (f.dtype == DType::kF8E4M3)
        fp8_codes_to_bf16(codes, f.r, dst);
      else
        int8_codes_to_bf16(codes, f.r, dst);
      std::memcpy(scales, row + f.layout.scale_offset_bytes,
                  size_t((f.r + kFp8ScaleBlock - 1) / kFp8ScaleBlock) * 4);
      break;
    case DType::kE2M1:
      nvfp4_values_to_bf16(codes, row + f.layout.scale_offset_bytes, f.r, dst);
      break;
    default:  // BF16: copied as they are
      std::memcpy(dst, row, size_t(f.r) * 2);
      std::memcpy(rope, row + size_t(f.r) * 2, size_t(f.d_r) * 2);
      return;
  }
  std::memcpy(rope, row + f.layout.rope_offset_bytes, size_t(f.d_r) * 2);
}

}  // namespace
}  // namespace mla::cpu
