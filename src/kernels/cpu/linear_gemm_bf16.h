// The BF16 GEMM of linear_driver.h (LinearPath::kBf16 / kBf16Gemm): y [n, out] = x [n, in] ·
// W_realᵀ for n ≥ lin_gemm_min_rows on AVX512_BF16 dot products (vdpbf16ps: 16 FP32 lanes, each
// adding the products of one pair of adjacent BF16 values along the reduction axis), FP32
// accumulation.
//
// Layout:
//   x is rounded to BF16 once per product into rows of pairs, kp = ceil(in / 2) words a row:
//     panel[i][p] = bf16(x[i][2p]) | bf16(x[i][2p + 1]) << 16   (uint32; rows padded to 32)
//   and one pair of a row is broadcast (a 32-bit load) into all 16 lanes;
//   W rows are laid out per chunk as vectors of 16 rows, pair-interleaved (gemm_pack_w16), so one
//   64-byte load gives one pair of 16 W rows: BF16 as stored, FP8 widened exactly to BF16 as
//   value · 2^-8 (E4M3 has 4 significant bits), the block scale applied to each scale block's
//   partial sum in FP32; F32 rounded to BF16 (RNE). kBF16R16 weights (repacked at load,
//   core/ggml_repack.h) are that layout already and are read in place: the per-chunk packing read
//   16 rows at once from DRAM and stalled on it (~20% of a BF16 prefill in `perf`).
// A register tile is 8 x rows × 3 W vectors (48 W rows): 24 accumulators, 3 W vectors and the
// broadcast in the 32 zmm registers, 11 loads per 24 dot products (12 × 32 took 14 and was 5-10%
// slower; 6 × 64 slower still); x rows come in tiles of 8, 4, 2 and 1, so no product is spent on
// padding rows of x (an expert's ~48 tokens in prefill).
// The column loop is blocked so that a block of x rows and of the W vectors stay in L1 while the
// tiles read them; the sums of a block of x rows stay in L1 across the column blocks (`tot`).
// Numerics: x rounds once to BF16 (RNE, relative 2^-8; inputs below 2^-126 flush to 0); products
// of BF16 pairs are exact in FP32 and summed in FP32 lanes; FP8 adds one rounding per scale block
// (s · partial) and one per block sum; F32 weights round once to BF16 (RNE, relative 2^-8). The
// test bound is derived in linear_test.cc. Include after the ISA's `#pragma GCC target` with
// avx512bf16; internal linkage.
#pragma once

#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/linear_gemm_amx.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/weight_ahead.h"

namespace mla::cpu {
namespace {

constexpr int kGemmTileRows = 32;  // x rows packed per pool item
// W rows per chunk (a multiple of 48: whole register tiles): the chunk's BF16 vectors stay in L2
// while every block of x rows passes over them.
constexpr int64_t kGemmChunkBytes = 512 << 10;
constexpr int64_t kGemmMaxChunkRows = 96;
static_assert(kGemmMaxChunkRows <= kAmxMaxCols, "gemm_amx_rows sums a whole chunk's rows");
constexpr int64_t kGemmWidenAheadBytes = 8192;  // gemm_widen_fp8's prefetch distance

// Whether linear_driver's BF16 paths run products with this weight on the GEMM (those with
// enough rows: lin_gemm_min_rows): a weight whose pairs never straddle an FP8 scale block.
inline bool gemm_bf16_takes(const LinearWeight& w) {
  if (w.dtype == DType::kBF16 || w.dtype == DType::kBF16R16 || w.dtype == DType::kF32) return true;
  if (w.dtype == DType::kF8E4M3R16) return true;  // validate(): block_cols even
  return w.dtype == DType::kF8E4M3 && w.block_cols % 2 == 0;
}

inline int64_t gemm_bf16_chunk_rows(const LinearWeight& w, int threads) {
  constexpr int64_t g = 48;  // W rows of a register tile
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

// dst[k] = the BF16 pair (src[2k], src[2k + 1]) for k < (count + 1) / 2, rounded to nearest
// even (an odd count's last pair gets a 0 partner): rows of x for the GEMM's panels and the
// R16 dot products (linear_r16_dot.h), F32 weight rows for the GEMM's chunks.
inline void bf16_pairs(const float* src, int64_t count, uint32_t* dst) {
  for (int64_t k = 0; k < count; k += 32) {
    const int64_t left = std::min<int64_t>(32, count - k);
    const __mmask16 m0 = __mmask16(left >= 16 ? 0xFFFF : (1u << left) - 1);
    const __mmask16 m1 = __mmask16(left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1);
    const __m512 lo = _mm512_maskz_loadu_ps(m0, src + k);
    const __m512 hi = _mm512_maskz_loadu_ps(m1, src + k + 16);
    const int64_t words = (left + 1) / 2;
    _mm512_mask_storeu_epi32(dst + k / 2, __mmask16(words >= 16 ? 0xFFFF : (1u << words) - 1),
                             __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
  }
}

// Rows [32t, 32t + 32) of x (those below n) as BF16 pairs: see the layout above; the rows past n
// of the last tile are zero (the AMX tiles read whole blocks of 16 rows). Row i is read at
// x + (rows ? rows[i] : i) · in.
inline void gemm_pack_x_tile(const float* x, const int64_t* rows, int64_t n, int64_t in, int64_t t,
                             uint32_t* panel) {
  const int64_t kp = gemm_pairs(in);
  if (n < (t + 1) * kGemmTileRows)
    std::memset(panel + n * kp, 0, size_t(((t + 1) * kGemmTileRows - n) * kp) * 4);
  for (int64_t i = t * kGemmTileRows; i < std::min<int64_t>(n, (t + 1) * kGemmTileRows); ++i) {
    const float* xi = x + (rows ? rows[i] : i) * in;
    bf16_pairs(xi, in, panel + i * kp);
  }
}

// The byte tables below in registers (gemm_widen_fp8_run, and the kF8E4M3R16 GEMV).
struct F8Widen {
  __m512i order, sign, top0, top1, next0, next1;
  F8Widen() {
    // Lane L of the permuted bytes: columns 8L .. 8L + 7, then 32 + 8L .. 32 + 8L + 7.
    alignas(64) static constexpr uint8_t kOrder[64] = {
        0,  1,  2,  3,  4,  5,  6,  7,  32, 33, 34, 35, 36, 37, 38, 39,  //
        8,  9,  10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47,  //
        16, 17, 18, 19, 20, 21, 22, 23, 48, 49, 50, 51, 52, 53, 54, 55,  //
        24, 25, 26, 27, 28, 29, 30, 31, 56, 57, 58, 59, 60, 61, 62, 63};
    order = _mm512_load_si512(kOrder);
    sign = _mm512_set1_epi8(char(0x80));
    top0 = _mm512_load_si512(kFp8Fp32Bytes.top);
    top1 = _mm512_load_si512(kFp8Fp32Bytes.top + 64);
    next0 = _mm512_load_si512(kFp8Fp32Bytes.next);
    next1 = _mm512_load_si512(kFp8Fp32Bytes.next + 64);
  }
  // The BF16 pairs of the 64 codes in v: lo = codes 0 .. 31, hi = codes 32 .. 63, in order.
  void widen(__m512i v, __m512i& lo, __m512i& hi) const {
    const __m512i b = _mm512_permutexvar_epi8(order, v);
    const __m512i top =
        _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(top0, b, top1), b, sign, 0xF8);
    const __m512i next = _mm512_permutex2var_epi8(next0, b, next1);
    lo = _mm512_unpacklo_epi8(next, top);
    hi = _mm512_unpackhi_epi8(next, top);
  }
};

// d[0, count) BF16 = exact value · 2^-8 of the E4M3 codes at src (a row, or a kF8E4M3R16 group
// whose codes are in the GEMM's vector order already). 64 bytes per step: the
// byte tables of kFp8Fp32Bytes give the top two bytes of each FP32 value · 2^-8, which are its
// BF16 bits exactly (≤ 8 significant bits; NaN codes give a NaN); one byte permute puts the
// columns where the in-lane byte unpacks leave them in order: 6 shuffles per 64 values, against
// 18 through FP32 and a conversion. A chunk's rows are one run of bytes (by step: one run per
// vector and scale block), read 8 KiB ahead: the hardware prefetcher stops at each 4 KiB page,
// and the first load of every row had stalled on DRAM (11% of the FP8 GEMM in `perf`); prefill
// 512 of the 4-layer FP8 model went from 0.62-0.65 to 0.68-0.69 of the BF16 dot peak (no
// prefetch / 2 / 4 / 8 KiB ahead, alternated 3 times). `next` (by step): one line of the next
// chunk requested per 64 bytes widened.
inline void gemm_widen_fp8_run(const uint8_t* src, int64_t count, uint16_t* d,
                               WeightAhead* next = nullptr) {
  const F8Widen t;
  int64_t k = 0;
  for (; k + 64 <= count; k += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(src + k + kGemmWidenAheadBytes), _MM_HINT_T0);
    if (next) next->request(1);
    __m512i lo, hi;
    t.widen(_mm512_loadu_si512(src + k), lo, hi);
    _mm512_storeu_si512(d + k, lo);
    _mm512_storeu_si512(d + k + 32, hi);
  }
  for (; k < count; ++k)  // the tail: the same bits, one at a time
    d[k] = uint16_t(f32_bits(fp8_e4m3_to_f32(src[k]) * 0x1p-8f) >> 16);
}

// dst [rows, ldw] BF16 = the FP8 rows [o0, o0 + rows), widened as above; an odd in's last pair
// gets a 0 partner (columns past the last pair are never read).
inline void gemm_widen_fp8(const LinearWeight& w, int64_t o0, int64_t rows, int64_t ldw,
                           uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    gemm_widen_fp8_run(w.data + (o0 + r) * w.in, w.in, dst + r * ldw);
    if (w.in % 2) dst[r * ldw + w.in] = 0;
  }
}

// dst [rows, ldw] BF16 = the F32 rows [o0, o0 + rows) rounded to BF16 (RNE, relative 2^-9, as x;
// such as the FP32 kv_b_proj a GGUF file's split k_b / v_b are rebuilt into); an odd in's last
// pair gets a 0 partner.
inline void gemm_round_f32(const LinearWeight& w, int64_t o0, int64_t rows, int64_t ldw,
                           uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r)
    bf16_pairs(reinterpret_cast<const float*>(w.data) + (o0 + r) * w.in, w.in,
               reinterpret_cast<uint32_t*>(dst + r * ldw));
}

// dst [kp][16] words = pairs [0, kp) of 16 rows of BF16 values (row j at src + j · ld, `valid`
// rows, the rest zero), pair-interleaved: dst[p][j] = row j's pair p, so one 64-byte load gives
// pair p of 16 W rows. An odd in's last pair gets a 0 partner. 16 × 16 words per step, by the
// usual four-stage unpack / shuffle transpose.
inline void gemm_pack_w16(const uint16_t* src, int64_t ld, int valid, int64_t in, uint32_t* dst) {
  const int64_t kp = gemm_pairs(in);
  for (int64_t p0 = 0; p0 < kp; p0 += 16) {
    const int64_t left = std::min<int64_t>(32, in - 2 * p0);  // BF16 values of the step
    const __mmask32 m = __mmask32(left >= 32 ? 0xFFFFFFFFu : (1u << left) - 1);
    __m512i r[16], t[16];
    for (int j = 0; j < 16; ++j)
      r[j] =
          j < valid ? _mm512_maskz_loadu_epi16(m, src + j * ld + 2 * p0) : _mm512_setzero_si512();
    for (int j = 0; j < 16; j += 2) {
      t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
      t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
    }
    // t[j] (j even): per 128-bit lane, pairs 0 and 1 of rows j and j + 1; t[j + 1]: pairs 2, 3.
    for (int j = 0; j < 16; j += 4) {
      r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
      r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
      r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
      r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    // r[4a + b] holds, per 128-bit lane l, pair 4l + b of rows 4a .. 4a + 3.
    for (int a = 0; a < 4; a += 2)
      for (int b = 0; b < 4; ++b) {
        t[4 * a + b] = _mm512_shuffle_i32x4(r[4 * a + b], r[4 * a + 4 + b], 0x88);
        t[4 * a + 4 + b] = _mm512_shuffle_i32x4(r[4 * a + b], r[4 * a + 4 + b], 0xDD);
      }
    // t[4a + b] (a = 0, 2): lanes (rows 4a.., pair b), (rows 4a.., b + 8), (rows 4a + 4.., b),
    // (rows 4a + 4.., b + 8); t[4a + 4 + b]: the same for pairs b + 4 and b + 12.
    const int64_t steps = std::min<int64_t>(16, kp - p0);
    for (int q = 0; q < 16; ++q) {
      const int b = q % 4, hi = (q / 4) % 2, far = q / 8;  // pair q = b + 4·hi + 8·far
      const __m512i lo_rows = t[4 * hi + b], hi_rows = t[8 + 4 * hi + b];
      const __m512i v = far ? _mm512_shuffle_i32x4(lo_rows, hi_rows, 0xDD)
                            : _mm512_shuffle_i32x4(lo_rows, hi_rows, 0x88);
      if (q < steps) _mm512_store_si512(dst + (p0 + q) * 16, v);
    }
  }
}

// tot[g][16h ..] (+)= scale · Σ_p x[g] pair p · W vector h pair p, for G rows of x (row g at
// x + g · ldx words) and H vectors of 16 W rows (vector h at w + h · ldw words, pair p at 16p),
// pairs [0, np). BF16 (scale null): the sums continue from tot unless `first`. FP8 (scale: 16H
// per-row values, scale · 2^8): each call is one scale block, its sum scaled and added to tot in
// FP32. G·H accumulators, G broadcasts and H loads per pair.
// kAhead: H vectors at ahead + h · ldw to request into L2, one line each per pair, while this
// tile runs (the tiles of the first x rows over a block of a weight read in place). Into L2, not
// L1: the next block (24 KiB at H = 3) beside the current one and the x block overflowed L1
// (BF16_R16 at 40 rows of x from DRAM 3-4% faster, docs/BENCHMARKS.md "The prefill GEMMs at an
// expert's token counts"). A template flag, not a null test in the loop: with the test and the
// pointer live in every tile, GCC 12 kept two of the 8 x row offsets in xmm registers and two on
// the stack (two vmovq and two loads beside the 24 dot products of each pair): 0.88 → 0.94 of the
// vdpbf16ps peak on one core (docs/BENCHMARKS.md "The BF16 GEMM's loop without the prefetch test").
template <int G, int H, bool kAhead>
inline void gemm_bf16_tile(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t ldw,
                           int64_t np, const float* scale, bool first, float* tot, int64_t ldt,
                           const uint32_t* ahead, float* out, int64_t ldo) {
  // Every loop over the G × H accumulators is unrolled, the epilogue's branches taken outside its
  // loops: with a branch per accumulator GCC left that loop rolled and indexed acc in memory, so
  // the FP8 tile (an epilogue every scale block of 64 pairs) copied its 24 accumulators to the
  // stack and back each block (~10% of its `perf` samples; docs/BENCHMARKS.md "The FP8 GEMM's
  // epilogue in registers").
  __m512 acc[G][H];
#pragma GCC unroll 32
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h)
      acc[g][h] = scale || first ? _mm512_setzero_ps() : _mm512_load_ps(tot + g * ldt + 16 * h);
  for (int64_t p = 0; p < np; ++p) {
    if constexpr (kAhead)
      for (int h = 0; h < H; ++h) _mm_prefetch(ahead + h * ldw + 16 * p, _MM_HINT_T1);
    __m512bh wv[H];
    // Unaligned loads: a kBF16R16 weight is read in place (64-byte aligned when the loader made
    // it, not necessarily when a caller did).
    for (int h = 0; h < H; ++h) wv[h] = __m512bh(_mm512_loadu_si512(w + h * ldw + 16 * p));
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512bh xv = __m512bh(_mm512_set1_epi32(int(x[g * ldx + p])));
      for (int h = 0; h < H; ++h) acc[g][h] = _mm512_dpbf16_ps(acc[g][h], xv, wv[h]);
    }
  }
  if (!scale) {
#pragma GCC unroll 32
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) _mm512_storeu_ps(out + g * ldo + 16 * h, acc[g][h]);
    return;
  }
  __m512 s[H];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) s[h] = _mm512_load_ps(scale + 16 * h);
  if (first) {
#pragma GCC unroll 32
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h)
        _mm512_storeu_ps(out + g * ldo + 16 * h, _mm512_mul_ps(acc[g][h], s[h]));
  } else {
#pragma GCC unroll 32
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h)
        _mm512_storeu_ps(out + g * ldo + 16 * h,
                         _mm512_fmadd_ps(acc[g][h], s[h], _mm512_load_ps(tot + g * ldt + 16 * h)));
  }
}

// Rows [0, rows) of x in register tiles of G rows (the last ones in tiles of G / 2, .. 1 rows).
// Every tile requests `ahead` (see gemm_bf16_tile): requested by the first tile alone, the next
// block had not arrived when its first tile began (BF16_R16 at 40 rows of x, DRAM: 7-8% slower).
template <int G, int H>
void gemm_bf16_tiles(const uint32_t* x, int64_t ldx, int64_t rows, const uint32_t* w, int64_t ldw,
                     int64_t np, const float* scale, bool first, float* tot, int64_t ldt,
                     const uint32_t* ahead, float* out, int64_t ldo, WeightAhead* next,
                     int64_t per) {
  int64_t g = 0;
  for (; g + G <= rows; g += G) {
    next->request(per);
    if (ahead)
      gemm_bf16_tile<G, H, true>(x + g * ldx, ldx, w, ldw, np, scale, first, tot + g * ldt, ldt,
                                 ahead, out + g * ldo, ldo);
    else
      gemm_bf16_tile<G, H, false>(x + g * ldx, ldx, w, ldw, np, scale, first, tot + g * ldt, ldt,
                                  nullptr, out + g * ldo, ldo);
  }
  if constexpr (G > 1)
    if (g < rows)
      gemm_bf16_tiles<G / 2, H>(x + g * ldx, ldx, rows - g, w, ldw, np, scale, first, tot + g * ldt,
                                ldt, ahead, out + g * ldo, ldo, next, per);
}

// scales[b · ld + r] = the scale of W row r0 + r in scale block b (columns [b · block_cols,
// (b + 1) · block_cols)), with the 2^8 of the widening, for b < the grid's columns; rows ≥ rows
// (a ragged vector's padding) 0. Filled a run of rows sharing a scale row at a time: a division
// per entry (lin_block_scale) had been ~7% of the FP8 GEMM at 16 rows of x and V3's 2,048 × 7,168
// (56 blocks × 48 rows a chunk, `perf`).
inline void gemm_fp8_scales(const LinearWeight& w, int64_t r0, int64_t rows, int64_t ld,
                            float* scales) {
  const int64_t blocks = (w.in + w.block_cols - 1) / w.block_cols;
  for (int64_t r = 0; r < rows;) {
    const int64_t grid_row = (r0 + r) / w.block_rows;
    const int64_t end = std::min(rows, (grid_row + 1) * w.block_rows - r0);
    for (int64_t b = 0; b < blocks; ++b) {
      float s;
      std::memcpy(&s, w.scale_inv + 4 * (grid_row * blocks + b), 4);
      std::fill(scales + b * ld + r, scales + b * ld + end, s * 256.0f);
    }
    r = end;
  }
  for (int64_t b = 0; b < blocks; ++b)
    std::fill(scales + b * ld + rows, scales + (b + 1) * ld, 0.0f);
}

// Pairs per column block of BF16 weights: a block of x rows and of the W vectors stay in L1
// while every register tile reads them.
constexpr int64_t kGemmBlockPairs = 128;
constexpr int kGemmXRows = 8;    // x rows per register tile: 8 × 3 accumulators
constexpr int kGemmWVecs = 3;    // vectors of 16 W rows per register tile
constexpr int kGemmXBlock = 48;  // x rows whose sums sit in `tot` across the column blocks

// W rows [r0, r1) (r1 - r0 ≤ kGemmMaxChunkRows) against every row of x (all n rows, panels: BF16
// pairs row after row, kp words a row). D: kF8E4M3 (scaled column blocks) or kBF16 (unscaled: BF16
// weights, and F32 ones rounded). The chunk's rows are first laid out as pair-interleaved
// vectors of 16 rows (gemm_pack_w16; FP8 widened and F32 rounded to BF16 rows before), or, for
// a kF8E4M3R16 weight and one block of x rows off AMX (`by_step`), widened one step of 3 vectors
// × one scale block at a time; per block of kGemmXBlock x rows the sums sit in `tot` (L1) across
// the column blocks, the last block's to y.
// `next`: the weight bytes this thread reads next, requested a few lines per register tile where
// the chunk was widened from FP8 (by step: a line per 64 bytes widened), so that the next chunk's
// widening reads them from L2 (prefill 512 of the 4-layer FP8 model 2-3% faster; BF16 weights,
// read in place, measured 2% slower).
template <class L, DType D>
void gemm_bf16_chunk(const LinearWeight& w, int64_t n, const uint32_t* panels, float* y, int64_t r0,
                     int64_t r1, WeightAhead next) {
  static thread_local AlignedBuffer<uint16_t> rows_scratch;
  static thread_local AlignedBuffer<uint32_t> packed_scratch;
  static thread_local AlignedBuffer<float> scale_scratch;
  static thread_local AlignedBuffer<uint32_t> step_scratch;
  constexpr int64_t ldt = kGemmMaxChunkRows;
  alignas(64) float tot[kGemmXBlock * ldt];
  const int64_t rows = r1 - r0, kp = gemm_pairs(w.in), vecs = (rows + 15) / 16;
  const int64_t ldw = kp * 16;  // words from one vector of 16 W rows to the next
  // BF16_R16 is read in place (r0 is a multiple of 48); the others are laid out in scratch.
  const bool in_place = D == DType::kBF16 && w.dtype == DType::kBF16R16;
  bool amx = false;
  if constexpr (requires { L::kAmx; })
    amx = gemm_amx_fits(w.in, D == DType::kF8E4M3 ? w.block_cols : 0);
  // A kF8E4M3R16 weight against one block of x rows (an expert's few tokens) is widened one
  // (vectors, scale block) step at a time into L1 (`step_scratch`: 12 KiB for 128-column scale
  // blocks), just before its tiles: widened whole, the chunk's BF16 copy (48-96 rows × in × 2
  // bytes: 0.7-1.4 MB at V3's 7,168) went to L2 and back for the one or two tiles that read each
  // of its vectors.
  const bool by_step =
      D == DType::kF8E4M3 && w.dtype == DType::kF8E4M3R16 && !amx && n <= kGemmXBlock;
  uint32_t* dst =
      in_place || by_step ? nullptr : ensure_scratch(packed_scratch, size_t(vecs * ldw));
  const uint32_t* wp = in_place ? reinterpret_cast<const uint32_t*>(w.data + r0 * w.in * 2) : dst;
  if (D == DType::kBF16 && w.dtype == DType::kBF16) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data) + r0 * w.in;
    for (int64_t v = 0; v < vecs; ++v)
      gemm_pack_w16(src + v * 16 * w.in, w.in, int(std::min<int64_t>(16, rows - 16 * v)), w.in,
                    dst + v * ldw);
  } else if (by_step) {                       // widened in the loop below
  } else if (w.dtype == DType::kF8E4M3R16) {  // groups of 16 rows, widened in order
    gemm_widen_fp8_run(w.data + r0 * w.in, rows * w.in, reinterpret_cast<uint16_t*>(dst));
  } else if (!in_place) {
    // 16 rows at a time, widened (FP8) or rounded (F32) to BF16 rows first.
    const int64_t ldr = 2 * kp;
    uint16_t* wide = ensure_scratch(rows_scratch, size_t(16 * ldr));
    for (int64_t v = 0; v < vecs; ++v) {
      const int valid = int(std::min<int64_t>(16, rows - 16 * v));
      if (w.dtype == DType::kF32)
        gemm_round_f32(w, r0 + 16 * v, valid, ldr, wide);
      else
        gemm_widen_fp8(w, r0 + 16 * v, valid, ldr, wide);
      gemm_pack_w16(wide, ldr, valid, w.in, dst + v * ldw);
    }
  }
  // Column blocks in pairs: FP8 one per scale block (block_cols even), BF16 kGemmBlockPairs.
  const int64_t block = D == DType::kBF16 ? kGemmBlockPairs : w.block_cols / 2;
  const int64_t blocks = (kp + block - 1) / block;
  // FP8: the scale of every W row (padding rows 0) in every column block, [blocks][16 · vecs].
  float* scales = nullptr;
  if constexpr (D == DType::kF8E4M3) {
    scales = ensure_scratch(scale_scratch, size_t(blocks * vecs * 16));
    // blocks: the grid's columns (block_cols even).
    gemm_fp8_scales(w, r0, rows, 16 * vecs, scales);
  }
  // On AMX (traits with kAmx: linear.cpu.amx) every row of x runs on the tile unit
  // (linear_gemm_amx.h; the panel's rows past n are zero); weights whose rows or scale blocks
  // are not whole 16-pair steps take the tiles below.
  int64_t i_start = 0;
  if constexpr (requires { L::kAmx; }) {
    if (amx) {
      using T = typename L::AmxTiles;
      T::begin();
      for (int64_t i0 = 0; i0 < n; i0 += kAmxXRows)
        gemm_amx_rows<T>(panels, kp, i0, std::min(kAmxXRows, n - i0), wp, ldw, vecs, rows, scales,
                         block, y + r0, w.out);
      T::end();
      i_start = n;
    }
  }
  // Lines of `next` per register tile: the chunk runs ceil(x rows / kGemmXRows) tiles per
  // (vectors, column block) step (an estimate: the last tiles of a block may be smaller).
  const int64_t per = D == DType::kF8E4M3 && !by_step
                          ? next.per_step((n - i_start + kGemmXRows - 1) / kGemmXRows *
                                          ((vecs + kGemmWVecs - 1) / kGemmWVecs) * blocks)
                          : 0;
  uint32_t* step =
      by_step ? ensure_scratch(step_scratch, size_t(kGemmWVecs * 16 * block)) : nullptr;
  for (int64_t i0 = i_start; i0 < n; i0 += kGemmXBlock) {
    const int64_t x_rows = std::min<int64_t>(kGemmXBlock, n - i0);
    const uint32_t* xb = panels + i0 * kp;
    for (int64_t v = 0; v < vecs; v += kGemmWVecs) {
      const int64_t h = std::min<int64_t>(kGemmWVecs, vecs - v);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t p0 = b * block, np = std::min(kp, p0 + block) - p0;
        const float* sc = scales ? scales + b * vecs * 16 + v * 16 : nullptr;
        // by_step: vector j's pairs [p0, p0 + np) at step + j · 16 · block words.
        const uint32_t* wv = by_step ? step : wp + v * ldw + p0 * 16;
        const int64_t ldv = by_step ? 16 * block : ldw;
        for (int64_t j = 0; by_step && j < h; ++j)
          gemm_widen_fp8_run(w.data + (r0 + 16 * (v + j)) * w.in + 32 * p0, 32 * np,
                             reinterpret_cast<uint16_t*>(step + j * 16 * block), &next);
        float* t = tot + v * 16;
        // A weight read in place comes from DRAM on the first pass over x: its tiles request
        // the next block's lines (the next vectors' first block after the last).
        const uint32_t* ahead = nullptr;
        if (in_place && i0 == 0)
          ahead = b + 1 < blocks          ? wv + block * 16
                  : v + kGemmWVecs < vecs ? wp + (v + kGemmWVecs) * ldw
                                          : nullptr;
        // The last column block stores its sums in y itself (a copy of `tot` per row of x had
        // been ~1% of a BF16 prefill in libc's memmove) where its vectors are whole: a ragged
        // last vector's padding rows would land in the next chunk's columns, so it goes
        // through tot.
        const bool last = b + 1 == blocks && 16 * (v + h) <= rows;
        float* o = last ? y + i0 * w.out + r0 + v * 16 : t;
        const int64_t ldo = last ? w.out : ldt;
        if (h == 3)
          gemm_bf16_tiles<kGemmXRows, 3>(xb + p0, kp, x_rows, wv, ldv, np, sc, b == 0, t, ldt,
                                         ahead, o, ldo, &next, per);
        else if (h == 2)
          gemm_bf16_tiles<kGemmXRows, 2>(xb + p0, kp, x_rows, wv, ldv, np, sc, b == 0, t, ldt,
                                         ahead, o, ldo, &next, per);
        else
          gemm_bf16_tiles<kGemmXRows, 1>(xb + p0, kp, x_rows, wv, ldv, np, sc, b == 0, t, ldt,
                                         ahead, o, ldo, &next, per);
        if (b + 1 == blocks && !last)  // a ragged last vector: its live rows from tot
          for (int64_t i = 0; i < x_rows; ++i)
            std::memcpy(y + (i0 + i) * w.out + r0 + v * 16, tot + i * ldt + v * 16,
                        size_t(rows - v * 16) * sizeof(float));
      }
    }
  }
}

}  // namespace
}  // namespace mla::cpu
