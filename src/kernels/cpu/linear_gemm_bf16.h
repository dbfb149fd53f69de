// The BF16 GEMM of linear_driver.h (LinearPath::kBf16): y [n, out] = x [n, in] · W_realᵀ for
// n > kLinWidenMinRows on AVX512_BF16 dot products (vdpbf16ps: 16 FP32 lanes, each adding the
// products of one pair of adjacent BF16 values along the reduction axis), FP32 accumulation.
//
// Layout (docs/kernels/linear.md "BF16 GEMM"):
//   x is rounded to BF16 once per product and transposed into panels of kGemmTileRows rows:
//     panel[t][p][r] = bf16(x[32t + r][2p]) | bf16(x[32t + r][2p + 1]) << 16   (uint32)
//   so one 64-byte load gives the pair p of 16 rows of x;
//   W rows are read as BF16 pairs and broadcast (one 32-bit load per row and pair): BF16 weights
//   as stored (no copy), FP8 weights widened once per chunk into an exact BF16 copy of
//   value · 2^-8 (E4M3 has 4 significant bits), the block scale applied to each scale block's
//   partial sum in FP32.
// A register tile is kGemmGroup W rows × 32 x rows (2 vectors): 24 accumulators, 2 panel vectors
// and the broadcast in the 32 zmm registers.
// Numerics: x rounds once to BF16 (RNE, relative 2^-8; inputs below 2^-126 flush to 0); products
// of BF16 pairs are exact in FP32 and summed in FP32 lanes; FP8 adds one rounding per scale block
// (s · partial) and one per block sum. The test bound is derived in linear_test.cc.
// Include after the ISA's `#pragma GCC target` with avx512bf16; internal linkage.
#pragma once

#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

namespace mla::cpu {
namespace {

constexpr int kGemmTileRows = 32;  // x rows per panel (2 vectors of FP32 accumulators)
constexpr int kGemmGroup = 12;     // W rows per register tile
// W rows per chunk (a multiple of kGemmGroup): the chunk's BF16 rows stay in L2 while every
// panel of x passes over them.
constexpr int64_t kGemmChunkBytes = 512 << 10;

// Whether linear_driver's kBf16 path runs this product on the GEMM: more rows than a decode batch
// (those keep the FP32 products, bit for bit the same for a row alone or in a batch), and a
// weight whose pairs never straddle an FP8 scale block.
inline bool gemm_bf16_takes(const LinearWeight& w, int64_t n) {
  if (n <= kLinWidenMinRows) return false;
  if (w.dtype == DType::kBF16) return true;
  return w.dtype == DType::kF8E4M3 && w.block_cols % 2 == 0;
}

inline int64_t gemm_bf16_chunk_rows(const LinearWeight& w, int threads) {
  const int64_t g = kGemmGroup;
  const int64_t by_threads = ((w.out + 4 * threads - 1) / (4 * threads) + g - 1) / g * g;
  const int64_t by_cache = std::max<int64_t>(g, kGemmChunkBytes / (2 * w.in) / g * g);
  return std::max<int64_t>(g, std::min(by_threads, by_cache));
}

// Pairs of x per panel row: ceil(in / 2).
inline int64_t gemm_pairs(int64_t in) {
  return (in + 1) / 2;
}
inline int64_t gemm_panel_words(int64_t n, int64_t in) {
  return (n + kGemmTileRows - 1) / kGemmTileRows * gemm_pairs(in) * kGemmTileRows;
}

// Panel t of x (rows [32t, 32t + 32) of x, zero past n): see the layout above.
inline void gemm_pack_x_tile(const float* x, int64_t n, int64_t in, int64_t t, uint32_t* panel) {
  const int64_t kp = gemm_pairs(in);
  uint32_t* dst = panel + t * kp * kGemmTileRows;
  alignas(64) uint32_t row[16];
  for (int r = 0; r < kGemmTileRows; ++r) {
    const int64_t i = t * kGemmTileRows + r;
    if (i >= n) {
      for (int64_t p = 0; p < kp; ++p) dst[p * kGemmTileRows + r] = 0;
      continue;
    }
    const float* xi = x + i * in;
    for (int64_t k = 0; k < in; k += 32) {
      const int64_t left = std::min<int64_t>(32, in - k);
      const __mmask16 m0 = __mmask16(left >= 16 ? 0xFFFF : (1u << left) - 1);
      const __mmask16 m1 = __mmask16(left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, xi + k);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, xi + k + 16);
      _mm512_store_si512(row, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
      const int64_t p0 = k / 2, words = (left + 1) / 2;
      for (int64_t q = 0; q < words; ++q) dst[(p0 + q) * kGemmTileRows + r] = row[q];
    }
  }
}

// dst [rows, ldw] BF16 = exact value · 2^-8 of the FP8 rows [o0, o0 + rows), zero-padded to ldw.
template <class L>
void gemm_widen_fp8(const LinearWeight& w, int64_t o0, int64_t rows, int64_t ldw, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = w.data + (o0 + r) * w.in;
    uint16_t* d = dst + r * ldw;
    int64_t k = 0;
    for (; k + 32 <= w.in; k += 32) {
      const auto lo = L::template widen<DType::kF8E4M3>(src + k);
      const auto hi = L::template widen<DType::kF8E4M3>(src + k + 16);
      _mm512_storeu_si512(d + k, __m512i(_mm512_cvtne2ps_pbh(hi.v, lo.v)));
    }
    for (; k < ldw; ++k)  // the tail and the pad: the same bits, one at a time
      d[k] = k < w.in ? uint16_t(f32_bits(fp8_e4m3_to_f32(src[k]) * 0x1p-8f) >> 16) : 0;
  }
}

// acc[g][h] += Σ_p W[g] pair p · panel pair p (rows 16h .. 16h + 15), p in [0, kp). w: G rows at
// stride ldw (BF16 elements), any alignment. `odd`: the last pair has one column (in is odd and
// W is the stored weight: its pair partner is the next row's first element, read as 0 instead).
template <int G>
inline void gemm_bf16_tile(const uint32_t* panel, const uint16_t* w, int64_t ldw, int64_t kp,
                           bool odd, __m512 (&acc)[G][2]) {
  const int64_t full = odd ? kp - 1 : kp;
  for (int64_t p = 0; p < full; ++p) {
    const __m512bh x0 = __m512bh(_mm512_load_si512(panel + p * kGemmTileRows));
    const __m512bh x1 = __m512bh(_mm512_load_si512(panel + p * kGemmTileRows + 16));
#pragma GCC unroll 12
    for (int g = 0; g < G; ++g) {
      uint32_t pair;
      std::memcpy(&pair, w + g * ldw + 2 * p, 4);
      const __m512bh wv = __m512bh(_mm512_set1_epi32(int(pair)));
      acc[g][0] = _mm512_dpbf16_ps(acc[g][0], x0, wv);
      acc[g][1] = _mm512_dpbf16_ps(acc[g][1], x1, wv);
    }
  }
  if (odd) {
    const int64_t p = kp - 1;
    const __m512bh x0 = __m512bh(_mm512_load_si512(panel + p * kGemmTileRows));
    const __m512bh x1 = __m512bh(_mm512_load_si512(panel + p * kGemmTileRows + 16));
    for (int g = 0; g < G; ++g) {
      const __m512bh wv = __m512bh(_mm512_set1_epi32(int(w[g * ldw + 2 * p])));
      acc[g][0] = _mm512_dpbf16_ps(acc[g][0], x0, wv);
      acc[g][1] = _mm512_dpbf16_ps(acc[g][1], x1, wv);
    }
  }
}

// W rows [o0, o0 + G) against panel t: y[32t + r][o0 + g] for the rows of x below n.
//  BF16: one pass over all pairs. FP8: one pass per scale block of columns, whose sum is scaled
//  (scale · 2^8: the copy holds value · 2^-8) and added to the running total in FP32.
template <class L, DType D, int G>
void gemm_bf16_group(const LinearWeight& w, const uint16_t* rows, int64_t ldw, int64_t o0,
                     const uint32_t* panel, int64_t t, int64_t n, float* y) {
  const int64_t kp = gemm_pairs(w.in);
  __m512 acc[G][2];
  alignas(64) float tot[G][kGemmTileRows];
  if constexpr (D == DType::kBF16) {
    for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm512_setzero_ps();
    gemm_bf16_tile<G>(panel, rows, ldw, kp, w.in % 2 != 0, acc);
    for (int g = 0; g < G; ++g) {
      _mm512_store_ps(tot[g], acc[g][0]);
      _mm512_store_ps(tot[g] + 16, acc[g][1]);
    }
  } else {
    for (int g = 0; g < G; ++g) std::memset(tot[g], 0, sizeof(tot[g]));
    for (int64_t c0 = 0; c0 < w.in; c0 += w.block_cols) {
      const int64_t p0 = c0 / 2, p1 = std::min(kp, (c0 + w.block_cols) / 2);
      for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm512_setzero_ps();
      gemm_bf16_tile<G>(panel + p0 * kGemmTileRows, rows + 2 * p0, ldw, p1 - p0, false, acc);
      for (int g = 0; g < G; ++g) {
        const __m512 s = _mm512_set1_ps(lin_fp8_scale(w, o0 + g, c0));
        _mm512_store_ps(tot[g], _mm512_fmadd_ps(acc[g][0], s, _mm512_load_ps(tot[g])));
        _mm512_store_ps(tot[g] + 16, _mm512_fmadd_ps(acc[g][1], s, _mm512_load_ps(tot[g] + 16)));
      }
    }
  }
  const int64_t r1 = std::min<int64_t>(kGemmTileRows, n - t * kGemmTileRows);
  for (int64_t r = 0; r < r1; ++r) {
    float* yr = y + (t * kGemmTileRows + r) * w.out + o0;
    for (int g = 0; g < G; ++g) yr[g] = tot[g][r];
  }
}

template <class L, DType D, int G>
void gemm_bf16_groups(const LinearWeight& w, const uint16_t* rows, int64_t ldw, int64_t o0,
                      int64_t o1, const uint32_t* panel, int64_t t, int64_t n, float* y) {
  int64_t o = o0;
  for (; o + G <= o1; o += G)
    gemm_bf16_group<L, D, G>(w, rows + (o - o0) * ldw, ldw, o, panel, t, n, y);
  // The chunk's last rows (1 .. G - 1): tiles of G / 2, G / 4, .. rows.
  if constexpr (G > 1)
    if (o < o1) gemm_bf16_groups<L, D, G / 2>(w, rows + (o - o0) * ldw, ldw, o, o1, panel, t, n, y);
}

// W rows [r0, r1) against every panel of x (all n rows).
template <class L, DType D>
void gemm_bf16_chunk(const LinearWeight& w, int64_t n, const uint32_t* panels, float* y,
                     int64_t r0, int64_t r1) {
  static thread_local AlignedBuffer<uint16_t> scratch;
  const uint16_t* rows;
  int64_t ldw;
  if constexpr (D == DType::kBF16) {
    rows = reinterpret_cast<const uint16_t*>(w.data) + r0 * w.in;
    ldw = w.in;
  } else {
    ldw = 2 * gemm_pairs(w.in);
    uint16_t* wide = ensure_scratch(scratch, size_t((r1 - r0) * ldw));
    gemm_widen_fp8<L>(w, r0, r1 - r0, ldw, wide);
    rows = wide;
  }
  const int64_t tiles = (n + kGemmTileRows - 1) / kGemmTileRows;
  const int64_t tile_words = gemm_pairs(w.in) * kGemmTileRows;
  for (int64_t t = 0; t < tiles; ++t)
    gemm_bf16_groups<L, D, kGemmGroup>(w, rows, ldw, r0, r1, panels + t * tile_words, t, n, y);
}

}  // namespace
}  // namespace mla::cpu
