// LinAvx512Vbmi, the linear_driver.h traits of linear.cpu.avx512vbmi: LinAvx512 with the FP8
// GEMV (n = 1) decoding E4M3 by byte-table lookups; shared with linear.cpu.avx512bf16. Include
// after the ISA's `#pragma GCC target` (avx512vbmi among it); internal linkage.
#pragma once

#include "kernels/cpu/linear_avx512_traits.h"

namespace mla::cpu {
namespace {

struct LinAvx512Vbmi : LinAvx512 {
  // FP8 dot steps of 64 columns at n = 1 (n > 1 keeps LinAvx512's 16-column steps: there the
  // FMAs, not the decoding, bound the loop).
  static constexpr int kFp8Cols = 64;

  // 64 E4M3 bytes → out[q] = value · 2^-8 of bytes 16q .. 16q + 15, what 4 calls of
  // widen<kF8E4M3> give (NaN bytes come out NaN, from the table: a NaN accumulator, one byte add
  // and one max per step, cost ~10% of the L3 rate), in 1 byte permute, 2 two-table byte lookups
  // (VPERMT2B: 128 entries, the index's bit 7 ignored), 1 logic op for the sign and 6 in-lane
  // unpacks (the FP16 route takes 4 ops, one a conversion, for each 16). The lookups give the top
  // two bytes of each FP32 value (kFp8Fp32Bytes); unpacking bytes, then words with zeros, makes
  // them bytes 3 and 2 of each lane. The unpacks work within 128-bit lanes, so the bytes are first
  // permuted (VPERMB) to where they come out in column order. It replaced two GF2P8AFFINEQB bit
  // matrices and a multiply by 2^112 per vector (4 more ops on the FMA ports): one Zen 5 core,
  // L3-resident weights, 22–29 → 38 GB/s (docs/BENCHMARKS.md "FP8 decoding by byte-table lookups").
  static void widen_fp8_cols(const uint8_t* p, Vec (&out)[4]) {
    // Lane L (16 bytes) of the permuted vector: columns 4L .. 4L + 3 of vectors 0, 1, 2, 3.
    alignas(64) static constexpr uint8_t kOrder[64] = {
        0,  1,  2,  3,  16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,  //
        4,  5,  6,  7,  20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,  //
        8,  9,  10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,  //
        12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63};
    const uint8_t* const top_t = kFp8Fp32Bytes.top;
    const uint8_t* const next_t = kFp8Fp32Bytes.next;
    const __m512i b = _mm512_permutexvar_epi8(_mm512_load_si512(kOrder), _mm512_loadu_si512(p));
    // top | (b & 0x80): the sign bit joins the looked-up exponent bits.
    const __m512i top = _mm512_ternarylogic_epi32(
        _mm512_permutex2var_epi8(_mm512_load_si512(top_t), b, _mm512_load_si512(top_t + 64)), b,
        _mm512_set1_epi8(char(0x80)), 0xF8);
    const __m512i next =
        _mm512_permutex2var_epi8(_mm512_load_si512(next_t), b, _mm512_load_si512(next_t + 64));
    // Per 128-bit lane L: words next | top << 8 of columns 4L.. of vectors 0 and 1, then 2 and 3.
    const __m512i w01 = _mm512_unpacklo_epi8(next, top), w23 = _mm512_unpackhi_epi8(next, top);
    const __m512i z = _mm512_setzero_si512();
    out[0] = {_mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w01))};
    out[1] = {_mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w01))};
    out[2] = {_mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w23))};
    out[3] = {_mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w23))};
  }
};

}  // namespace
}  // namespace mla::cpu
