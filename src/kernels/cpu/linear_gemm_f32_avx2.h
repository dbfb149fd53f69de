// The FP32 GEMM of linear_driver.h for CPUs without BF16 dot products (linear.cpu.avx2: Zen 2 / 3,
// Haswell to Alder Lake): y [n, out] = x [n, in] · W_realᵀ on the BF16 paths (kBf16 above
// kLinearBatchInvariantRows rows, kBf16Gemm from kF32GemmMinRows), x kept in FP32.
//
// Why: the dot products (lin_dot_rows) hold 4 rows of x against 2 W rows, 8 FMAs for 6 loads, and
// widen every W vector again for each group of 4 rows of x; they ran prefill products at about
// half of the FMA units' rate. Here a register tile is 6 rows of x × 16 W rows (12 accumulators,
// 2 W vectors and a broadcast of x in the 16 ymm registers): 8 loads per 12 FMAs, every W value
// widened once per product.
//
// Layout: for each block of kF32GemmKc columns, the chunk's W rows are widened to FP32 in
// registers (exact for BF16 / F16, code · scale rounded once for FP8 and int8, as lin_widen) and
// transposed 8 × 8 into panels of 16 rows, panel[k][c] = W_real[r0 + 16g + c][k0 + k] (rows past
// the chunk are zero): one 64-byte line per column. A panel (16 KiB) and a tile's 6 rows of x (6
// KiB) stay in L1 while the tile runs; the chunk's panels (≤ 64 KiB) in L2 while every tile of x
// passes over them. Numerics: each output's column block is an FMA chain over its columns in order,
// from 0, and the blocks are added to y in order: the same operations for a row alone or among
// others and for any cut of the weight rows; any summation order of `in` terms is inside the FP32
// bound (tests/common/linear_bounds.h). Include after `#pragma GCC target("avx2,fma,f16c")` and
// linear_driver.h; internal linkage.
#pragma once

#include "kernels/cpu/transpose8_avx2.h"

namespace mla::cpu {
namespace {

constexpr int kF32GemmMr = 6;                 // x rows per register tile
constexpr int kF32GemmNr = 16;                // W rows per register tile (two vectors)
constexpr int64_t kF32GemmKc = 256;           // columns per block (a multiple of 8)
constexpr int64_t kF32GemmMaxChunkRows = 64;  // W rows per chunk: 4 panels
// The fewest rows of x the GEMM takes on path kBf16Gemm (a prefill chunk's experts); path kBf16
// takes it above kLinearBatchInvariantRows. At 8 and 16 rows the dot products were faster (0.45x
// and 0.75x), at 40 the GEMM (1.05-1.2x): docs/BENCHMARKS.md "Prefill on CPUs without BF16 dot
// products".
constexpr int64_t kF32GemmMinRows = 32;

// The dtypes lin_widen reads (the R16 and GGUF layouts keep their own kernels).
inline bool f32_gemm_takes(const LinearWeight& w) {
  return w.dtype == DType::kF32 || w.dtype == DType::kBF16 || w.dtype == DType::kF16 ||
         w.dtype == DType::kF8E4M3 || w.dtype == DType::kI8;
}

// W rows per chunk: whole panels, about 4 chunks per thread, at most kF32GemmMaxChunkRows.
inline int64_t f32_gemm_chunk_rows(const LinearWeight& w, int threads) {
  const int64_t by_threads = (w.out + 4 * threads - 1) / (4 * threads);
  const int64_t rows = std::min(by_threads, kF32GemmMaxChunkRows);
  return std::max<int64_t>(kF32GemmNr, (rows + kF32GemmNr - 1) / kF32GemmNr * kF32GemmNr);
}

// panel[k][c] = W_real[r0 + c][k0 + k] for c < 16 (0 for c ≥ rows), k < kc rounded up to 8 (0
// past kc). Whole 8-column steps are widened in registers straight from the weight (a block
// scale is constant over a step when block_cols is a multiple of 8); the ragged end of a row and
// other scale grids go through lin_widen's zero-padded rows.
template <class L, DType D>
void f32_gemm_pack(const LinearWeight& w, int64_t r0, int64_t rows, int64_t k0, int64_t kc,
                   float* panel) {
  constexpr int64_t kB = kLinBytes<D>;
  constexpr bool kScaled = linear_block_scaled(D);
  const int64_t fast_end = !kScaled || w.block_cols % 8 == 0 ? kc / 8 * 8 : 0;
  for (int64_t h = 0; h < kF32GemmNr / 8; ++h) {
    const int64_t base = r0 + 8 * h, live = std::clamp<int64_t>(rows - 8 * h, 0, 8);
    __m256 r[8], sc[8];
    for (int i = 0; i < 8; ++i) r[i] = sc[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < fast_end; k += 8) {
      const int64_t j = k0 + k;
      if (kScaled && (k == 0 || j % w.block_cols == 0))
        for (int64_t i = 0; i < live; ++i) sc[i] = _mm256_set1_ps(lin_block_scale(w, base + i, j));
      for (int64_t i = 0; i < live; ++i) {
        const __m256 v = L::template widen<D>(w.data + ((base + i) * w.in + j) * kB).v;
        r[i] = kScaled ? _mm256_mul_ps(v, sc[i]) : v;
      }
      transpose8x8_ps(r, panel + k * kF32GemmNr + 8 * h, kF32GemmNr);
    }
    if (fast_end == (kc + 7) / 8 * 8) continue;
    alignas(32) float t[8][kF32GemmKc] = {};
    for (int64_t i = 0; i < live; ++i)
      lin_widen<L, D>(w, base + i, 1, k0 + fast_end, kc - fast_end, t[i]);
    for (int64_t k = fast_end; k < kc; k += 8) {
      for (int i = 0; i < 8; ++i) r[i] = _mm256_load_ps(t[i] + (k - fast_end));
      transpose8x8_ps(r, panel + k * kF32GemmNr + 8 * h, kF32GemmNr);
    }
  }
}

// y[i][c] (= or +=) Σ_k x[i][k] · panel[k][c] for i < M, c < cols (≤ 16), k < kc.
template <int M>
inline void f32_gemm_tile(const float* x, int64_t ldx, const float* panel, int64_t kc, float* y,
                          int64_t ldy, int64_t cols, bool add) {
  // Two arrays of named registers, every index a constant after unrolling: with acc[M][2] and a
  // loop over the two vectors in the epilogue, GCC kept half the accumulators on the stack and
  // stored them at every column (half the FMA rate).
  __m256 a0[M], a1[M];
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) a0[i] = a1[i] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 w0 = _mm256_load_ps(panel + k * kF32GemmNr);
    const __m256 w1 = _mm256_load_ps(panel + k * kF32GemmNr + 8);
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      const __m256 b = _mm256_broadcast_ss(x + i * ldx + k);
      a0[i] = _mm256_fmadd_ps(w0, b, a0[i]);
      a1[i] = _mm256_fmadd_ps(w1, b, a1[i]);
    }
  }
  if (cols == kF32GemmNr) {
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      float* yi = y + i * ldy;
      _mm256_storeu_ps(yi, add ? _mm256_add_ps(_mm256_loadu_ps(yi), a0[i]) : a0[i]);
      _mm256_storeu_ps(yi + 8, add ? _mm256_add_ps(_mm256_loadu_ps(yi + 8), a1[i]) : a1[i]);
    }
    return;
  }
  alignas(32) float buf[M][kF32GemmNr];
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) {
    _mm256_store_ps(buf[i], a0[i]);
    _mm256_store_ps(buf[i] + 8, a1[i]);
  }
  for (int i = 0; i < M; ++i)
    for (int64_t c = 0; c < cols; ++c)
      y[i * ldy + c] = add ? y[i * ldy + c] + buf[i][c] : buf[i][c];
}

inline void f32_gemm_tiles(int64_t m, const float* x, int64_t ldx, const float* panel, int64_t kc,
                           float* y, int64_t ldy, int64_t cols, bool add) {
  switch (m) {
    case 1:
      return f32_gemm_tile<1>(x, ldx, panel, kc, y, ldy, cols, add);
    case 2:
      return f32_gemm_tile<2>(x, ldx, panel, kc, y, ldy, cols, add);
    case 3:
      return f32_gemm_tile<3>(x, ldx, panel, kc, y, ldy, cols, add);
    case 4:
      return f32_gemm_tile<4>(x, ldx, panel, kc, y, ldy, cols, add);
    case 5:
      return f32_gemm_tile<5>(x, ldx, panel, kc, y, ldy, cols, add);
    default:
      return f32_gemm_tile<6>(x, ldx, panel, kc, y, ldy, cols, add);
  }
}

// Rows [r0, r1) of y [n, w.out] for x [n, w.in] (both row-major).
template <class L, DType D>
void f32_gemm_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                    int64_t r1) {
  static thread_local AlignedBuffer<float> panel_store;
  const int64_t rows = r1 - r0, groups = (rows + kF32GemmNr - 1) / kF32GemmNr;
  float* panels = ensure_scratch(panel_store, size_t(groups * kF32GemmNr * kF32GemmKc));
  for (int64_t k0 = 0; k0 < w.in; k0 += kF32GemmKc) {
    const int64_t kc = std::min(kF32GemmKc, w.in - k0);
    for (int64_t g = 0; g < groups; ++g)
      f32_gemm_pack<L, D>(w, r0 + g * kF32GemmNr, rows - g * kF32GemmNr, k0, kc,
                          panels + g * kF32GemmNr * kF32GemmKc);
    for (int64_t i0 = 0; i0 < n; i0 += kF32GemmMr) {
      const int64_t m = std::min<int64_t>(kF32GemmMr, n - i0);
      for (int64_t g = 0; g < groups; ++g)
        f32_gemm_tiles(m, x + i0 * w.in + k0, w.in, panels + g * kF32GemmNr * kF32GemmKc, kc,
                       y + i0 * w.out + r0 + g * kF32GemmNr, w.out,
                       std::min<int64_t>(kF32GemmNr, rows - g * kF32GemmNr), k0 > 0);
    }
  }
}

// The dtype switch of f32_gemm_chunk (the weights f32_gemm_takes).
template <class L>
void f32_gemm_rows(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                   int64_t r1) {
  switch (w.dtype) {
    case DType::kF32:
      return f32_gemm_chunk<L, DType::kF32>(w, n, x, y, r0, r1);
    case DType::kF16:
      return f32_gemm_chunk<L, DType::kF16>(w, n, x, y, r0, r1);
    case DType::kF8E4M3:
      return f32_gemm_chunk<L, DType::kF8E4M3>(w, n, x, y, r0, r1);
    case DType::kI8:
      return f32_gemm_chunk<L, DType::kI8>(w, n, x, y, r0, r1);
    default:
      return f32_gemm_chunk<L, DType::kBF16>(w, n, x, y, r0, r1);
  }
}

}  // namespace
}  // namespace mla::cpu
