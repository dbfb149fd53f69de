// AMX-BF16 building blocks of the decode kernel: the tile configuration (eight 16 × 64-byte
// tiles), a 16 × 16 32-bit transpose, and the two tile products. Tiles: C accumulators tmm0-3
// (2 × 2 blocks of 16 × 16 FP32), A operands tmm4-5, B operands tmm6-7. tdpbf16ps computes
// C[16 × 16] += A[16 × 32 bf16] · B, B in pair layout [16 pairs][16 columns][2]. Include inside a
// target region with amx-tile, amx-bf16 and AVX-512. Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace mla::cpu {
namespace {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes; loaded per work item, released after it (the state is per
// thread, and a released thread saves no tile data on a context switch).
inline void amx_configure() {
  AmxTileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.rows[i] = 16;
    c.colsb[i] = 64;
  }
  _tile_loadconfig(&c);
}

// r[j][i] ← r[i][j] for a 16 × 16 block of 32-bit words.
inline void transpose16x16_epi32(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + c]: lane k holds column 4k + c of rows 4g .. 4g+3
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i w0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(v0, v1, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(v0, v1, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(w0, w1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(w0, w1, 0xDD);
  }
}

// C[k][j] (k < NK, j < NJ) = Σ_{s < steps} A_k(s) · B_j(s), stored (or, with kLoad, added to what
// c holds) at c + k·c_k + j·16 floats with row stride c_stride bytes.
//   A_k(s): 16 rows at a[k] + s·a_s (bytes), row stride a_stride bytes;
//   B_j(s): 16 pair rows at b + j·b_j + s·b_s (bytes), row stride b_stride bytes.
template <int NK, int NJ, bool kLoad>
inline void amx_product(const uint8_t* a0, const uint8_t* a1, int64_t a_s, int64_t a_stride,
                        const uint8_t* b, int64_t b_j, int64_t b_s, int64_t b_stride, int steps,
                        float* c, int64_t c_k, int64_t c_stride) {
  static_assert(NK >= 1 && NK <= 2 && NJ >= 1 && NJ <= 2, "2 × 2 accumulator tiles at most");
  auto cp = [&](int k, int j) { return c + k * c_k + j * 16; };
  if constexpr (kLoad) {
    _tile_loadd(0, cp(0, 0), c_stride);
    if constexpr (NJ > 1) _tile_loadd(1, cp(0, 1), c_stride);
    if constexpr (NK > 1) _tile_loadd(2, cp(1, 0), c_stride);
    if constexpr (NK > 1 && NJ > 1) _tile_loadd(3, cp(1, 1), c_stride);
  } else {
    _tile_zero(0);
    if constexpr (NJ > 1) _tile_zero(1);
    if constexpr (NK > 1) _tile_zero(2);
    if constexpr (NK > 1 && NJ > 1) _tile_zero(3);
  }
  for (int s = 0; s < steps; ++s) {
    _tile_loadd(4, a0 + s * a_s, a_stride);
    _tile_loadd(6, b + s * b_s, b_stride);
    if constexpr (NK > 1) _tile_loadd(5, a1 + s * a_s, a_stride);
    if constexpr (NJ > 1) _tile_loadd(7, b + b_j + s * b_s, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NJ > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NK > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (NK > 1 && NJ > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, cp(0, 0), c_stride);
  if constexpr (NJ > 1) _tile_stored(1, cp(0, 1), c_stride);
  if constexpr (NK > 1) _tile_stored(2, cp(1, 0), c_stride);
  if constexpr (NK > 1 && NJ > 1) _tile_stored(3, cp(1, 1), c_stride);
}

// The same over nk × nj blocks (any counts), two at a time in each direction; a_of(k) gives
// A block k's base address.
template <bool kLoad, class AOf>
inline void amx_product_grid(int nk, int nj, AOf a_of, int64_t a_s, int64_t a_stride,
                             const uint8_t* b, int64_t b_j, int64_t b_s, int64_t b_stride,
                             int steps, float* c, int64_t c_k, int64_t c_stride) {
  for (int k = 0; k < nk; k += 2) {
    const bool k2 = k + 1 < nk;
    const uint8_t* a0 = a_of(k);
    const uint8_t* a1 = k2 ? a_of(k + 1) : a0;
    for (int j = 0; j < nj; j += 2) {
      const uint8_t* bj = b + j * b_j;
      float* ckj = c + k * c_k + j * 16;
      if (k2 && j + 1 < nj)
        amx_product<2, 2, kLoad>(a0, a1, a_s, a_stride, bj, b_j, b_s, b_stride, steps, ckj, c_k,
                                 c_stride);
      else if (k2)
        amx_product<2, 1, kLoad>(a0, a1, a_s, a_stride, bj, b_j, b_s, b_stride, steps, ckj, c_k,
                                 c_stride);
      else if (j + 1 < nj)
        amx_product<1, 2, kLoad>(a0, a1, a_s, a_stride, bj, b_j, b_s, b_stride, steps, ckj, c_k,
                                 c_stride);
      else
        amx_product<1, 1, kLoad>(a0, a1, a_s, a_stride, bj, b_j, b_s, b_stride, steps, ckj, c_k,
                                 c_stride);
    }
  }
}

}  // namespace
}  // namespace mla::cpu
