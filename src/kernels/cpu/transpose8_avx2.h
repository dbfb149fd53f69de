// The 8 × 8 transpose of 32-bit lanes on AVX2 (FP32 values or int32 quads of codes: the float
// shuffles move bits unchanged). Include after the ISA's `#pragma GCC target` (avx2 or above);
// internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mla::cpu {
namespace {

// d[c · ld .. c · ld + 7] = column c of the 8 rows in r (8 lanes each), for c < 8; d and ld · 4
// bytes 32-byte aligned.
inline void transpose8x8_ps(const __m256 (&r)[8], float* d, int64_t ld) {
  __m256 u[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);  // r_i[0] r_i+1[0] r_i[1] r_i+1[1] | [4] .. [5]
    u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44);  // column 0 | 4 of rows i .. i + 3
    s[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xEE);
    s[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44);
    s[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    _mm256_store_ps(d + c * ld, _mm256_permute2f128_ps(s[c], s[c + 4], 0x20));
    _mm256_store_ps(d + (c + 4) * ld, _mm256_permute2f128_ps(s[c], s[c + 4], 0x31));
  }
}

}  // namespace
}  // namespace mla::cpu
