// The BF16 GEMM of linear_driver.h (LinearPath::kBf16): y [n, out] = x [n, in] · W_realᵀ for
// n > kLinWidenMinRows on AVX512_BF16 dot products (vdpbf16ps: 16 FP32 lanes, each adding the
// products of one pair of adjacent BF16 values along the reduction axis), FP32 accumulation.
//
// Layout:
//   x is rounded to BF16 once per product and transposed into panels of kGemmTileRows rows:
//     panel[t][p][r] = bf16(x[32t + r][2p]) | bf16(x[32t + r][2p + 1]) << 16   (uint32)
//   so one 64-byte load gives the pair p of 16 rows of x;
//   W rows are read as BF16 pairs and broadcast (one 32-bit load per row and pair) from a copy
//   of the chunk's rows at a padded stride: BF16 as stored, FP8 widened exactly to BF16 as
//   value · 2^-8 (E4M3 has 4 significant bits), the block scale applied to each scale block's
//   partial sum in FP32; F32 rounded to BF16 (RNE).
// A register tile is kGemmGroup W rows × 32 x rows (2 vectors): 24 accumulators, 2 panel vectors
// and the broadcast in the 32 zmm registers; next to a last panel of ≤ 16 rows, 24 W rows × 16.
// The column loop is blocked so that a block of the x panel stays in L1 while every tile of the
// chunk reads it; the chunk's sums for one panel stay in L1 too (`tot`).
// Numerics: x rounds once to BF16 (RNE, relative 2^-8; inputs below 2^-126 flush to 0); products
// of BF16 pairs are exact in FP32 and summed in FP32 lanes; FP8 adds one rounding per scale block
// (s · partial) and one per block sum; F32 weights round once to BF16 (RNE, relative 2^-8). The
// test bound is derived in linear_test.cc. Include after the ISA's `#pragma GCC target` with
// avx512bf16; internal linkage.
#pragma once

#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

namespace mla::cpu {
namespace {

constexpr int kGemmTileRows = 32;  // x rows per panel (2 vectors of FP32 accumulators)
constexpr int kGemmGroup = 12;     // W rows per register tile (24 next to a half panel)
constexpr int kGemmRowPad = 32;    // BF16 values past each W row of the chunk's copy
// W rows per chunk (a multiple of kGemmGroup): the chunk's BF16 rows stay in L2 while every
// panel of x passes over them, and its sums for one panel (kGemmMaxChunkRows × 32 FP32) in L1.
constexpr int64_t kGemmChunkBytes = 512 << 10;
constexpr int64_t kGemmMaxChunkRows = 96;

// Whether linear_driver's kBf16 path runs this product on the GEMM: more rows than a decode batch
// (those keep the FP32 products, bit for bit the same for a row alone or in a batch), and a
// weight whose pairs never straddle an FP8 scale block.
inline bool gemm_bf16_takes(const LinearWeight& w, int64_t n) {
  if (n <= kLinWidenMinRows) return false;
  if (w.dtype == DType::kBF16 || w.dtype == DType::kF32) return true;
  return w.dtype == DType::kF8E4M3 && w.block_cols % 2 == 0;
}

inline int64_t gemm_bf16_chunk_rows(const LinearWeight& w, int threads) {
  const int64_t g = kGemmGroup;
  const int64_t by_threads = ((w.out + 4 * threads - 1) / (4 * threads) + g - 1) / g * g;
  const int64_t by_cache = std::max<int64_t>(g, kGemmChunkBytes / (2 * w.in) / g * g);
  return std::max<int64_t>(g, std::min({by_threads, by_cache, kGemmMaxChunkRows}));
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
      const __mmask16 m1 = __mmask16(left >= 32   ? 0xFFFF
                                     : left <= 16 ? 0
                                                  : (1u << (left - 16)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, xi + k);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, xi + k + 16);
      _mm512_store_si512(row, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
      const int64_t p0 = k / 2, words = (left + 1) / 2;
      for (int64_t q = 0; q < words; ++q) dst[(p0 + q) * kGemmTileRows + r] = row[q];
    }
  }
}

// dst [rows, ldw] BF16 = exact value · 2^-8 of the FP8 rows [o0, o0 + rows); an odd in's last
// pair gets a 0 partner (columns past the last pair are never read).
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
    for (; k < 2 * gemm_pairs(w.in); ++k)  // the tail: the same bits, one at a time
      d[k] = k < w.in ? uint16_t(f32_bits(fp8_e4m3_to_f32(src[k]) * 0x1p-8f) >> 16) : 0;
  }
}

// dst [rows, ldw] BF16 = the F32 rows [o0, o0 + rows) rounded to BF16 (RNE, relative 2^-9, as x;
// such as the FP32 kv_b_proj a GGUF file's split k_b / v_b are rebuilt into); an odd in's last
// pair gets a 0 partner.
inline void gemm_round_f32(const LinearWeight& w, int64_t o0, int64_t rows, int64_t ldw,
                           uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = reinterpret_cast<const float*>(w.data) + (o0 + r) * w.in;
    uint16_t* d = dst + r * ldw;
    for (int64_t k = 0; k < 2 * gemm_pairs(w.in); k += 32) {
      const int64_t left = w.in - k;
      const __mmask16 m0 = __mmask16(left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1);
      const __mmask16 m1 = __mmask16(left >= 32   ? 0xFFFF
                                     : left <= 16 ? 0
                                                  : (1u << (left - 16)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, src + k),
                   hi = _mm512_maskz_loadu_ps(m1, src + k + 16);
      const __m512i v = __m512i(_mm512_cvtne2ps_pbh(hi, lo));
      const int64_t words = std::min<int64_t>(32, 2 * gemm_pairs(w.in) - k);
      _mm512_mask_storeu_epi16(d + k, __mmask32(words >= 32 ? 0xFFFFFFFFu : (1u << words) - 1), v);
    }
  }
}

// tot[g][0 .. 16H) (+)= scale_g · Σ_p W[g] pair p · panel pair p (x rows 0 .. 16H - 1 of the
// panel), p in [0, kp), H = 2 (a full panel) or 1 (a last panel of at most 16 rows: half the
// work of a padded one, with twice the W rows per tile). w: G rows at stride ldw (BF16
// elements). BF16 (scale null): the sums continue from tot unless `first`. FP8 (scale: G values,
// scale · 2^8): each call is one scale block, its sum scaled and added to tot in FP32.
template <int G, int H>
inline void gemm_bf16_tile(const uint32_t* panel, const uint16_t* w, int64_t ldw, int64_t kp,
                           const float* scale, bool first, float (*tot)[kGemmTileRows]) {
  __m512 acc[G][H];
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < H; ++h)
      acc[g][h] = scale || first ? _mm512_setzero_ps() : _mm512_load_ps(tot[g] + 16 * h);
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh xv[H];
    for (int h = 0; h < H; ++h)
      xv[h] = __m512bh(_mm512_load_si512(panel + p * kGemmTileRows + 16 * h));
#pragma GCC unroll 24
    for (int g = 0; g < G; ++g) {
      uint32_t pair;
      std::memcpy(&pair, w + g * ldw + 2 * p, 4);
      const __m512bh wv = __m512bh(_mm512_set1_epi32(int(pair)));
      for (int h = 0; h < H; ++h) acc[g][h] = _mm512_dpbf16_ps(acc[g][h], xv[h], wv);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < H; ++h) {
      __m512 v = acc[g][h];
      if (scale) {
        const __m512 s = _mm512_set1_ps(scale[g]);
        v = first ? _mm512_mul_ps(v, s) : _mm512_fmadd_ps(v, s, _mm512_load_ps(tot[g] + 16 * h));
      }
      _mm512_store_ps(tot[g] + 16 * h, v);
    }
}

// Rows [0, rows) of the chunk in register tiles of G rows (the last ones in tiles of G / 2,
// G / 4, .. rows), pairs [p0, p1) of one column block.
template <int G, int H>
void gemm_bf16_tiles(const uint32_t* panel, const uint16_t* w, int64_t ldw, int64_t rows,
                     int64_t p0, int64_t p1, const float* scale, bool first,
                     float (*tot)[kGemmTileRows]) {
  int64_t g = 0;
  for (; g + G <= rows; g += G)
    gemm_bf16_tile<G, H>(panel + p0 * kGemmTileRows, w + g * ldw + 2 * p0, ldw, p1 - p0,
                         scale ? scale + g : nullptr, first, tot + g);
  if constexpr (G > 1)
    if (g < rows)
      gemm_bf16_tiles<G / 2, H>(panel, w + g * ldw, ldw, rows - g, p0, p1,
                                scale ? scale + g : nullptr, first, tot + g);
}

// Pairs per column block of BF16 weights: the block of 32 x rows (16 KiB) stays in L1 while
// every register tile of the chunk reads it.
constexpr int64_t kGemmBlockPairs = 128;

// W rows [r0, r1) (r1 - r0 ≤ kGemmMaxChunkRows) against every panel of x (all n rows). D: kF8E4M3
// (scaled column blocks) or kBF16 (unscaled: BF16 weights, and F32 ones rounded). Per
// panel: the chunk's sums for its 32 x rows sit in `tot` (L1) across the column blocks, then go to
// y.
template <class L, DType D>
void gemm_bf16_chunk(const LinearWeight& w, int64_t n, const uint32_t* panels, float* y, int64_t r0,
                     int64_t r1) {
  static thread_local AlignedBuffer<uint16_t> scratch;
  alignas(64) float tot[kGemmMaxChunkRows][kGemmTileRows];
  alignas(64) float scale[kGemmMaxChunkRows];
  const int64_t rows = r1 - r0, kp = gemm_pairs(w.in);
  // The chunk's rows at a stride of ldw = 2·kp + 32 BF16 values: the rows of a register tile then
  // fall in different L1 sets (at in = 2048 the stored stride is 4 KiB, and 12 rows plus the x
  // block's lines overflowed one 12-way set). FP8 rows are widened into it.
  const int64_t ldw = 2 * kp + kGemmRowPad;
  uint16_t* wide = ensure_scratch(scratch, size_t(rows * ldw));
  if (w.dtype == DType::kF32) {
    gemm_round_f32(w, r0, rows, ldw, wide);
  } else if constexpr (D == DType::kBF16) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(wide + r * ldw, w.data + (r0 + r) * w.in * 2, size_t(w.in) * 2);
      wide[r * ldw + w.in] = 0;  // an odd in's last pair: its partner column (x pads it with 0)
    }
  } else {
    gemm_widen_fp8<L>(w, r0, rows, ldw, wide);
  }
  const uint16_t* wr = wide;
  // Column blocks in pairs: FP8 one per scale block (block_cols even), BF16 kGemmBlockPairs.
  const int64_t block = D == DType::kBF16 ? kGemmBlockPairs : w.block_cols / 2;
  const int64_t tiles = (n + kGemmTileRows - 1) / kGemmTileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    const uint32_t* panel = panels + t * kp * kGemmTileRows;
    const int64_t x_rows = std::min<int64_t>(kGemmTileRows, n - t * kGemmTileRows);
    for (int64_t p0 = 0; p0 < kp; p0 += block) {
      const int64_t p1 = std::min(kp, p0 + block);
      if constexpr (D == DType::kF8E4M3)
        for (int64_t r = 0; r < rows; ++r) scale[r] = lin_block_scale(w, r0 + r, 2 * p0);
      const float* sc = D == DType::kF8E4M3 ? scale : nullptr;
      if (x_rows > 16)
        gemm_bf16_tiles<kGemmGroup, 2>(panel, wr, ldw, rows, p0, p1, sc, p0 == 0, tot);
      else
        gemm_bf16_tiles<2 * kGemmGroup, 1>(panel, wr, ldw, rows, p0, p1, sc, p0 == 0, tot);
    }
    for (int64_t i = 0; i < x_rows; ++i) {
      float* yi = y + (t * kGemmTileRows + i) * w.out + r0;
      for (int64_t r = 0; r < rows; ++r) yi[r] = tot[r][i];
    }
  }
}

}  // namespace
}  // namespace mla::cpu
