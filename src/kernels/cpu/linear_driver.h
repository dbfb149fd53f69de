// The CPU weight product y [n, out] = x [n, in] · W_realᵀ (kernels/linear.h) for one ISA, written
// once over a traits type L that the ISA translation unit defines:
//   Vec                 FP32 lanes (vec_<isa>.h): zero, set1, load, reduce_add, fma, *
//   kW                  lanes per Vec
//   widen<D, nan>(p)    kW weights of dtype D from p (any alignment) as FP32; FP8 E4M3 comes out
//                       as value · 2^-8 (E4M3 bits placed in an FP16), NaN for 0x7F / 0xFF
//                       unless nan = false (the caller has checked the bytes with fp8_nan);
//                       int8 as its integer (exact)
//   fp8_nan(p, count)   whether any of count E4M3 bytes is a NaN (0x7F / 0xFF)
//   rows<N>()           W rows per register block next to N rows of x
//   optional, a wider FP8 step for n = 1 (kFp8Cols columns):
//     widen_fp8_cols(p, Vec (&)[kFp8Cols / kW])  what kFp8Cols / kW calls of widen<kF8E4M3>
//                         give: NaN bytes decode to NaN, so the products carry them to the
//                         outputs and the step needs no byte scan
// Include after the ISA's `#pragma GCC target` (and linear_cpu.h, scratch.h before it); all of it
// has internal linkage. Numerics: weights are widened exactly (FP8 · scale rounds once in FP32),
// products are accumulated in FP32 lanes and summed across lanes at the end of a row.
#pragma once

#include <algorithm>
#include <atomic>

#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "kernels/activation.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/weight_ahead.h"

namespace mla::cpu {
namespace {

template <DType D>
constexpr int kLinBytes = D == DType::kF32 ? 4 : (linear_block_scaled(D) ? 1 : 2);

// Rows of x handled per pass over a block of W rows (the accumulators live in registers). 4 rows
// against 4 W rows (16 accumulators) ran ~2× faster per FLOP on Zen 4 than 8 against 2 or 3: GCC
// feeds x to the FMAs as memory operands, so loads per FMA fall only with more W rows.
constexpr int kLinGroup = 4;
// For n > kLinGroup the dot path re-reads a chunk of W once per group of x rows: keep the chunk
// (as stored, or widened to FP32) in a core's L2 (1 MiB on Zen 4) with room for x beside it.
constexpr int64_t kLinL2Bytes = 256 << 10;
// FP8 and F16 chunks are widened to FP32 scratch once per chunk above this many x rows: at
// out = in = 2048 on one Zen 4 core, FP8 took 1.12 / 3.68 / 7.17 ms at n = 8 / 32 / 64 in
// registers and 1.23 / 3.46 / 6.41 ms widened (equal at n = 16).
constexpr int64_t kLinWidenMinRows = 16;

// The fewest rows of x a BF16 path runs on a GEMM (the BF16 one, or the int8 one of the GGUF
// formats) for weights of dtype t; 0 for the FP32 paths. On path kBf16,
// kLinearBatchInvariantRows + 1: decode batches keep the FP32 products (the same bits for a row
// alone or in a batch). On path kBf16Gemm, where the GEMM overtakes the FP32 products (2 threads,
// the 1,408 × 2,048 and 2,048 × 1,408 expert shapes of `mla_bench_linear`, Zen 4:
// docs/BENCHMARKS.md "Experts with few tokens on the GEMMs"): BF16 from 4 rows (1.3x there, 2x at 8
// and 16), FP8 from 5 (where the FP32 products pass over W twice, 4 rows and 1: repacked 1.3-1.5x
// at V2-Lite's and V3's expert shapes, row-major 1.1-1.3x; even at 4: docs/BENCHMARKS.md "The
// FP8 GEMM at an expert's few tokens"), the int8 GEMM of the GGUF formats from 16 (1.15x; even
// at 8).
inline int64_t lin_gemm_min_rows(LinearPath path, DType t) {
  if (path == LinearPath::kBf16) return kLinearBatchInvariantRows + 1;
  if (path != LinearPath::kBf16Gemm) return 0;
  if (t == DType::kF8E4M3 || t == DType::kF8E4M3R16) return 5;
  if (dtype_is_ggml_block(t)) return 16;
  return 4;
}

// Columns per NaN scan of FP8 rows in the dot path (a multiple of every kW; the scanned bytes are
// in L1 when the dot loop reads them).
constexpr int64_t kLinScanCols = 512;

// Portable fp8_nan (and the tails of the vector ones).
inline bool lin_fp8_nan_scalar(const uint8_t* p, int64_t count) {
  uint8_t hit = 0;
  for (int64_t k = 0; k < count; ++k) hit |= uint8_t((p[k] & 0x7F) == 0x7F);
  return hit != 0;
}

// weight_scale_inv[i / block_rows][j / block_cols], times 2^8 for FP8: widen<kF8E4M3> yields
// value · 2^-8, so the scale carries the 2^8 (exact: a power of two; it would overflow only for
// a scale above 2^119, which no quantiser writes); int8 widens to its integer. The scale grid
// comes from an mmap'd file: unaligned.
inline float lin_block_scale(const LinearWeight& w, int64_t i, int64_t j) {
  const int64_t cols = (w.in + w.block_cols - 1) / w.block_cols;
  float s;
  std::memcpy(&s, w.scale_inv + 4 * ((i / w.block_rows) * cols + j / w.block_cols), 4);
  return w.dtype == DType::kF8E4M3 || w.dtype == DType::kF8E4M3R16 ? s * 256.0f : s;
}

// xs[i · in + j] = x[i · in + j] · scale(row rs's scale row, column j) for i < nx: a block-scaled
// weight's scale moved onto x, once per scale row of the weight rows a GEMV reads (the product
// still rounds once, as w · scale would).
inline void lin_scale_x(const LinearWeight& w, int64_t rs, int64_t nx, const float* x, float* xs) {
  for (int64_t c0 = 0; c0 < w.in; c0 += w.block_cols) {
    const int64_t c1 = std::min(w.in, c0 + w.block_cols);
    const float s = lin_block_scale(w, rs, c0);
    for (int64_t i = 0; i < nx; ++i)
      for (int64_t j = c0; j < c1; ++j) xs[i * w.in + j] = x[i * w.in + j] * s;
  }
}

// acc[r][i] += widen(wp[r]) · x[i · ldx ..], one Vec of columns: R widened rows shared by N rows
// of x, R + N loads for R·N FMAs. FP8 comes without scale (the caller scaled x) and without the
// NaN mask (the caller scans the bytes).
template <class L, DType D, int R, int N>
inline void lin_step(typename L::Vec (&acc)[R][N], const uint8_t* const (&wp)[R], const float* x,
                     int64_t ldx) {
  using V = typename L::Vec;
  V wv[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) wv[r] = L::template widen<D, false>(wp[r]);
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) {
    const V xv = V::load(x + i * ldx);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][i] = fma(wv[r], xv, acc[r][i]);
  }
}

// Columns per FP8 dot step: L::kFp8Cols where the traits decode several vectors at once.
template <class L>
constexpr int lin_fp8_cols() {
  if constexpr (requires { L::kFp8Cols; })
    return L::kFp8Cols;
  else
    return L::kW;
}

// lin_step<L, kF8E4M3, R, 1> over lin_fp8_cols<L>() columns: acc[r] takes the decoded vectors
// in column order, as successive kW steps would, so the output bits are the same. The row of x
// stays in registers for all R weight rows.
template <class L, int R>
inline void lin_step_fp8_wide(typename L::Vec (&acc)[R][1], const uint8_t* const (&wp)[R],
                              const float* x, const uint8_t* ahead) {
  using V = typename L::Vec;
  constexpr int Q = lin_fp8_cols<L>() / L::kW;
  constexpr int kAheadLines = lin_fp8_cols<L>() / 64;  // 64-byte lines per row and step
  V xv[Q];
#pragma GCC unroll 8
  for (int q = 0; q < Q; ++q) xv[q] = V::load(x + q * L::kW);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // The next block's bytes (R · kFp8Cols of them) are requested a line per row, between the
    // rows' decoding, rather than in one burst per step.
    if (ahead)
      for (int b = r * kAheadLines; b < (r + 1) * kAheadLines; ++b)
        __builtin_prefetch(ahead + 64 * b, 0, 0);
    V wv[Q];
    L::widen_fp8_cols(wp[r], wv);
#pragma GCC unroll 8
    for (int q = 0; q < Q; ++q) acc[r][0] = fma(wv[q], xv[q], acc[r][0]);
  }
}

// Weight rows as the dot kernels see them: row r at data + r · in · bytes (the weight itself, or
// a widened FP32 copy of some of its rows); output r of x row i at y[i · ldy + r].
// `prefetch_rows`: for the weight as stored (read once), its row count: every block prefetches
// the next one below that, also across the cuts a chunk gets at each scale-row boundary (the
// first block after a cut used to wait on DRAM). 0 for a widened copy: it sits in L2 already,
// where prefetching cost 5–15% at n = 64 and 512.
struct LinRows {
  const uint8_t* data;
  int64_t in, ldy;
  int64_t prefetch_rows;
};

// y[i · ldy + o0 + r] = Σ_j x[i][j] · W[o0 + r][j] for r < R, i < N, W as stored (FP8: value ·
// 2^-8, a NaN byte makes the output NaN).  x [N, in] row stride in
// `next` (or null): the rows the caller reads after these (R · in · kB bytes from there), fetched
// into cache while these are multiplied. The R rows here are R short streams (2 KiB for an FP8
// row of 2048): the hardware prefetcher ramps up too late on each, and DRAM reads stalled the
// FP8 GEMV at ~14 GB/s. Requested with the non-temporal hint (prefetchnta): with prefetcht2 (into
// L2) the whole-model decode read 0.67-0.70 of the probe in the host's fast spells, with nta
// 0.72-0.74, and 0.82 -> 0.84 in the other segments (docs/BENCHMARKS.md "prefetchnta").
// prefetcht0 had cost BF16 a third of its rate at L3 (it evicted the rows being read); nta does
// not (`mla_bench_linear` n1, the same rates).
template <class L, DType D, int R, int N>
void lin_dot_rows(const LinRows& w, int64_t o0, const float* x, float* y,
                  const uint8_t* next = nullptr) {
  using V = typename L::Vec;
  constexpr int kW = L::kW, kB = kLinBytes<D>;
  // Next-block bytes per step of kW columns: the whole next block is requested by the last step.
  constexpr int64_t kAheadBytes = int64_t(R) * kW * kB;
  const int64_t in = w.in;
  const uint8_t* row[R];
  V acc[R][N];
  bool nan[R] = {};
  for (int r = 0; r < R; ++r) {
    row[r] = w.data + (o0 + r) * in * kB;
    for (int i = 0; i < N; ++i) acc[r][i] = V::zero();
  }
  // FP8 at n = 1 with a wide decoding step: the whole row in one loop (NaN bytes decode to NaN,
  // so no scan); the segments below take what is left (< kFp8Cols columns).
  int64_t wide_end = 0;
  if constexpr (D == DType::kF8E4M3 && N == 1 && lin_fp8_cols<L>() > kW) {
    constexpr int kC = lin_fp8_cols<L>();
    wide_end = in / kC * kC;
    for (int64_t j = 0; j < wide_end; j += kC) {
      const uint8_t* wp[R];
      for (int r = 0; r < R; ++r) wp[r] = row[r] + j;
      lin_step_fp8_wide<L, R>(acc, wp, x + j, next ? next + (j / kW) * kAheadBytes : nullptr);
    }
  }
  for (int64_t c0 = wide_end; c0 < in; c0 += kLinScanCols) {
    const int64_t c1 = std::min(in, c0 + kLinScanCols);
    int64_t j = c0;
    for (; j + kW <= c1; j += kW) {
      if (next) {
        const uint8_t* p = next + (j / kW) * kAheadBytes;
        for (int64_t b = 0; b < kAheadBytes; b += 64) __builtin_prefetch(p + b, 0, 0);
      }
      const uint8_t* wp[R];
      for (int r = 0; r < R; ++r) wp[r] = row[r] + j * kB;
      lin_step<L, D, R, N>(acc, wp, x + j, in);
    }
    if (j < c1) {
      // Ragged tail (t < kW columns, last segment only): zero-padded copies, so the padding lanes
      // add 0 · 0 and nothing past the row or x is read.
      const int64_t t = c1 - j;
      alignas(64) uint8_t wbuf[R][kW * kB] = {};
      alignas(64) float xbuf[N][kW] = {};
      const uint8_t* wp[R];
      for (int r = 0; r < R; ++r) {
        std::memcpy(wbuf[r], row[r] + j * kB, size_t(t) * kB);
        wp[r] = wbuf[r];
      }
      for (int i = 0; i < N; ++i) std::memcpy(xbuf[i], x + i * in + j, sizeof(float) * t);
      lin_step<L, D, R, N>(acc, wp, &xbuf[0][0], kW);
    }
    // A NaN weight makes its output NaN for every x: a byte scan instead of a mask per vector,
    // after the dot loop so that it reads L1 (scanning first stalled on DRAM: −25% at n = 1).
    if constexpr (D == DType::kF8E4M3)
      for (int r = 0; r < R; ++r) nan[r] |= L::fp8_nan(row[r] + c0, c1 - c0);
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < N; ++i)
      y[i * w.ldy + o0 + r] =
          nan[r] ? std::numeric_limits<float>::quiet_NaN() : acc[r][i].reduce_add();
}

// Rows [r0, r1) against nx ≤ kLinGroup rows of x, in register blocks of L::rows<N>() rows.
template <class L, DType D, int N>
void lin_dot_group(const LinRows& w, int64_t r0, int64_t r1, const float* x, float* y) {
  constexpr int R = L::template rows<N>();
  int64_t o = r0;
  constexpr int kB = kLinBytes<D>;
  for (; o + R <= r1; o += R)
    lin_dot_rows<L, D, R, N>(w, o, x, y,
                             o + R < w.prefetch_rows ? w.data + (o + R) * w.in * kB : nullptr);
  for (; o < r1; ++o) lin_dot_rows<L, D, 1, N>(w, o, x, y);
}

template <class L, DType D>
void lin_dot_group_n(int64_t nx, const LinRows& w, int64_t r0, int64_t r1, const float* x,
                     float* y) {
  switch (nx) {
    case 1:
      return lin_dot_group<L, D, 1>(w, r0, r1, x, y);
    case 2:
      return lin_dot_group<L, D, 2>(w, r0, r1, x, y);
    case 3:
      return lin_dot_group<L, D, 3>(w, r0, r1, x, y);
    default:
      return lin_dot_group<L, D, 4>(w, r0, r1, x, y);
  }
}

template <class L, DType D>
void lin_widen(const LinearWeight& w, int64_t o0, int64_t rows, int64_t k0, int64_t kc, float* dst);

// W rows [r0, r1) against all n rows of x, kLinGroup rows of x at a time.
//  - n ≤ kLinGroup (decode): W is read once, as stored. FP8: the scale moves onto x,
//    xs[i][j] = x[i][j] · scale[row block][j / block_cols] · 2^8, once per scale row, so the
//    inner loop has no multiply (the product still rounds once, as w · scale would).
//  - FP8 and F16 with n > kLinWidenMinRows: the rows are widened once into FP32 scratch
//    (L2-sized; scales and NaNs applied) and every group of x reads that, so the inner loop is
//    loads and FMAs only. BF16 widens with one shift: faster in registers even at n = 512.
template <class L, DType D>
void lin_dot_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                   int64_t r1) {
  static thread_local AlignedBuffer<float> scratch;
  const LinRows stored{w.data, w.in, w.out, w.out};
  if (D != DType::kF32 && D != DType::kBF16 && n > kLinWidenMinRows) {
    float* wide = ensure_scratch(scratch, size_t((r1 - r0) * w.in));
    lin_widen<L, D>(w, r0, r1 - r0, 0, w.in, wide);
    const LinRows rows{reinterpret_cast<const uint8_t*>(wide), w.in, w.out, 0};
    for (int64_t i0 = 0; i0 < n; i0 += kLinGroup)
      lin_dot_group_n<L, DType::kF32>(std::min<int64_t>(kLinGroup, n - i0), rows, 0, r1 - r0,
                                      x + i0 * w.in, y + i0 * w.out + r0);
    return;
  }
  for (int64_t i0 = 0; i0 < n; i0 += kLinGroup) {
    const int64_t nx = std::min<int64_t>(kLinGroup, n - i0);
    const float* xg = x + i0 * w.in;
    float* yg = y + i0 * w.out;
    if constexpr (!linear_block_scaled(D)) {
      lin_dot_group_n<L, D>(nx, stored, r0, r1, xg, yg);
    } else {
      float* xs = ensure_scratch(scratch, size_t(kLinGroup * w.in));
      // The scale rows come from the mapped file, each a cache miss that stalled the chunk at
      // its scale-row boundary (1.3% of a 27-layer decode in `perf`): requested all at once.
      if (i0 == 0)
        for (int64_t rs = r0; rs < r1; rs = (rs / w.block_rows + 1) * w.block_rows) {
          const int64_t cols = (w.in + w.block_cols - 1) / w.block_cols;
          const uint8_t* row = w.scale_inv + 4 * (rs / w.block_rows) * cols;
          for (int64_t b = 0; b < 4 * cols; b += 64) __builtin_prefetch(row + b, 0, 3);
          __builtin_prefetch(row + 4 * cols - 1, 0, 3);
        }
      for (int64_t rs = r0; rs < r1;) {
        const int64_t re = std::min(r1, (rs / w.block_rows + 1) * w.block_rows);
        lin_scale_x(w, rs, nx, xg, xs);
        lin_dot_group_n<L, D>(nx, stored, rs, re, xs, yg);
        rs = re;
      }
    }
  }
}

// GGUF block formats (Q8_0, Q4_K, ...: core/ggml_quant.h) and the repacked layouts where the
// variant has no kernel of their own: the chunk's rows are decoded into FP32 scratch (8 rows at
// a time for decode-sized n, which then sit in L1 / L2; the whole L2-sized chunk for more rows of
// x, which all read it) and multiplied by the FP32 dot kernels. The decoded values are exact FP32
// reconstructions (kF8E4M3R16: code · scale, rounded once, as lin_widen).
template <class L>
void lin_ggml_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                    int64_t r1) {
  static thread_local AlignedBuffer<float> scratch;
  static thread_local AlignedBuffer<uint8_t> codes;
  const int64_t step = n <= kLinGroup ? 8 : r1 - r0;
  float* wide = ensure_scratch(scratch, size_t(std::min(step, r1 - r0) * w.in));
  for (int64_t o = r0; o < r1; o += step) {
    const int64_t rows = std::min(step, r1 - o);
    for (int64_t r = 0; r < rows; ++r) {
      float* d = wide + r * w.in;
      if (w.dtype == DType::kF8E4M3R16) {
        uint8_t* c = ensure_scratch(codes, size_t(w.in));
        gather_f8_r16_row(w.data, w.in, o + r, c);
        for (int64_t j = 0; j < w.in; ++j)
          d[j] = fp8_e4m3_to_f32(c[j]) * (lin_block_scale(w, o + r, j) * 0x1p-8f);
        continue;
      }
      // Cannot fail: validate() checked dtype and row length.
      (void)dequantize_weight_row(w.dtype, w.data, w.in, o + r, d);
    }
    const LinRows lr{reinterpret_cast<const uint8_t*>(wide), w.in, w.out, 0};
    for (int64_t i0 = 0; i0 < n; i0 += kLinGroup)
      lin_dot_group_n<L, DType::kF32>(std::min<int64_t>(kLinGroup, n - i0), lr, 0, rows,
                                      x + i0 * w.in, y + i0 * w.out + o);
  }
}

// Output rows per chunk of one product, for `threads` threads.
//  - n > kLinGroup: about 8 chunks per thread even out uneven progress, and a chunk's widened
//    FP32 rows must stay in L2 across the x groups. FP8 chunks that are not widened (n ≤ 16)
//    are whole scale rows where they can be (x is scaled once per scale row).
//  - n ≤ kLinGroup (weights streamed from DRAM once): chunks of about kLinStreamChunkBytes of
//    weights, their number a multiple of the threads (so the last ones end together) and at
//    most 8 per thread, in multiples of the 8 rows of the n = 1 register block. Each chunk
//    starts a new stream (no prefetch in flight yet; the rows after it may be another thread's):
//    88-row chunks of a V2-Lite expert (176 KiB) held two Zen 5 cores' FP8 decode at ~42 GB/s
//    when the read probe gave 75 (docs/BENCHMARKS.md "Model runtime").
//  - Row-interleaved weights (kQ8_0R16) are cut at their groups of 16 rows.
constexpr int64_t kLinStreamChunkBytes = 2048 << 10;
inline int64_t lin_row_unit(const LinearWeight& w, int64_t fallback) {
  return dtype_is_row_interleaved(w.dtype) ? kR16Rows : fallback;
}
inline int64_t lin_chunk_rows(const LinearWeight& w, int64_t n, int threads) {
  if (n <= kLinGroup) {
    const int64_t row_bytes = dtype_bytes(w.dtype, w.in), unit = lin_row_unit(w, 8);
    const int64_t per_chunk = std::max<int64_t>(1, kLinStreamChunkBytes / row_bytes);
    int64_t chunks = (w.out + per_chunk - 1) / per_chunk;
    chunks = std::min<int64_t>((chunks + threads - 1) / threads * threads, 8 * threads);
    return ((w.out + chunks - 1) / chunks + unit - 1) / unit * unit;
  }
  int64_t rows = (w.out + 8 * threads - 1) / (8 * threads);
  rows = std::min(rows, kLinL2Bytes / (w.in * 4));  // FP32 bytes: the larger
  const int64_t unit = linear_block_scaled(w.dtype) && n <= kLinWidenMinRows && w.block_rows <= rows
                           ? w.block_rows
                           : lin_row_unit(w, 4);
  return (std::max<int64_t>(rows, unit) + unit - 1) / unit * unit;
}

// dst [rows, kc] fp32 = W_real[o0 .., k0 ..].
template <class L, DType D>
void lin_widen(const LinearWeight& w, int64_t o0, int64_t rows, int64_t k0, int64_t kc,
               float* dst) {
  using V = typename L::Vec;
  constexpr int kW = L::kW, kB = kLinBytes<D>;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = w.data + (o0 + r) * w.in * kB;
    float* d = dst + r * kc;  // d[j - k0] for j in [k0, k0 + kc)
    if constexpr (D == DType::kF32) {
      std::memcpy(d, src + k0 * 4, sizeof(float) * kc);
      continue;
    }
    const int64_t seg = linear_block_scaled(D) ? w.block_cols : w.in;
    for (int64_t c0 = k0; c0 < k0 + kc;) {
      const int64_t c1 = std::min(k0 + kc, (c0 / seg + 1) * seg);
      const V sc = V::set1(linear_block_scaled(D) ? lin_block_scale(w, o0 + r, c0) : 1.0f);
      auto wide = [&sc](const uint8_t* p) {
        if constexpr (linear_block_scaled(D)) return L::template widen<D>(p) * sc;
        return L::template widen<D>(p);
      };
      int64_t j = c0;
      for (; j + kW <= c1; j += kW) wide(src + j * kB).store(d + j - k0);
      if (j < c1) {  // ragged tail through a zero-padded copy: nothing past the row is read
        alignas(64) uint8_t wbuf[kW * kB] = {};
        alignas(64) float out[kW];
        std::memcpy(wbuf, src + j * kB, size_t(c1 - j) * kB);
        wide(wbuf).store(out);
        std::memcpy(d + j - k0, out, sizeof(float) * (c1 - j));
      }
      c0 = c1;
    }
  }
}

// Several products in one parallel_for: the chunks of every job (lin_chunk_rows) are the loop's
// items, taken in order. A chunk's outputs do not depend on where it is cut, so each output is
// the same however the jobs are grouped.
// Decode-sized jobs: the last `threads` chunks of the pass are cut into kLinTailSplit pieces
// each (whole 8-row blocks). The threads reach the end of the pass up to one chunk apart; with
// ~2 MiB chunks one of them then waited ~60 µs at every pass, six passes a layer.
// paths kBf16 / kBf16Gemm in a variant whose traits have the BF16 GEMM (L::kBf16Gemm,
// linear_gemm_bf16.h; jobs of at least lin_gemm_min_rows rows):
// the jobs it takes get their x as BF16 panels first (one parallel pass; jobs with the same x
// share them), and their chunks run on the GEMM.
// A SwiGLU job (LinearJob::up) makes each chunk of rows of its gate and of its up product on the
// same x layout, then silu(gate) · up of those columns: no second pass over the products (which
// had read ~5.8 MB of them back from L3 per 512 tokens of a V2-Lite MoE layer).
constexpr int64_t kLinTailSplit = 4;

// The bytes of rows [r0, r1) of w (whole groups of a row-interleaved weight lie together).
inline WeightAhead weight_rows_ahead(const LinearWeight& w, int64_t r0, int64_t r1) {
  const int64_t row_bytes = dtype_bytes(w.dtype, w.in);
  const char* p = reinterpret_cast<const char*>(w.data) + r0 * row_bytes;
  return {p, p + (r1 - r0) * row_bytes};
}

// Rows of x per block of a GEMM job: about kLinGemmXBlockBytes of x as the GEMM reads it, at
// least kLinGemmXBlockMinRows, a multiple of 96 (whole 6-row tiles of the int8 GEMM, 32-row
// panel tiles of the BF16 one), or all n rows when that is at most half a block more. Every
// weight chunk passes over one block before the next block starts, so both threads read the
// block from cache; all 2,048 rows of a prefill chunk at once (4.4-8 MB of x at d 2,048) were
// re-read from beyond L2 for every chunk of weight rows: 2,048 x 2,048 BF16_R16 products ran at
// 330 GFLOP/s against 390 at 512 rows, and 1-2 MB blocks recovered it (docs/BENCHMARKS.md,
// "x in blocks of rows"). Each block reads the whole weight again: at 384 rows that is one
// weight byte per 384 FLOPs (BF16), above the AMX Xeon's balance of 274 FLOP per DRAM byte.
constexpr int64_t kLinGemmXBlockBytes = 2048 << 10;
constexpr int64_t kLinGemmXBlockMinRows = 384;
inline int64_t lin_gemm_x_block(int64_t x_row_bytes, int64_t n) {
  const int64_t rows =
      std::max<int64_t>(kLinGemmXBlockMinRows, kLinGemmXBlockBytes / x_row_bytes / 96 * 96);
  return rows * 3 / 2 >= n ? n : rows;
}

template <class L>
void run_linear_many(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path) {
  struct Item {
    int32_t job;
    int64_t r0, r1;
    bool up = false;  // rows of the job's up product alone (a decode-sized SwiGLU job)
    int64_t i0, i1;   // rows of x: [i0, i1)
  };
  const int threads = pool.num_threads();
  // The pass's plan, kept between calls on the calling thread so that a pass allocates nothing
  // once warm; the names below are local references, since a lambda run on a worker would name
  // the worker's own thread_locals.
  struct Plan {
    std::vector<int32_t> panel_of;
    std::vector<size_t> panel_at, owner;
    std::vector<std::pair<int32_t, int64_t>> tiles;
    std::vector<int64_t> xq_at;
    std::vector<uint8_t> xq_gemm;
    std::vector<std::pair<size_t, int64_t>> rows;
    std::vector<Item> items, pieces;
    std::vector<const float*> x_of;
    std::vector<std::pair<size_t, float*>> gathered;
    std::vector<uint8_t> f32_gemm;
  };
  static thread_local Plan plan_store;
  Plan& plan = plan_store;
  // Paths kBf16 / kBf16Gemm only (empty otherwise): per job, its index into panel_at, -1 for
  // FP32 products.
  // The panels live in one per-thread buffer kept between calls (as large as the largest pass
  // so far: a prefill chunk's x in BF16): fresh buffers per call cost ~3% of a prefill in page
  // faults.
  std::vector<int32_t>& panel_of = plan.panel_of;
  std::vector<size_t>& panel_at = plan.panel_at;  // word offset of each panel in panel_store
  panel_of.clear();
  panel_at.clear();
  static thread_local AlignedBuffer<uint32_t> panel_store;
  uint32_t* store = nullptr;  // the caller's panel_store (a lambda on a worker names its own)
  if constexpr (requires { L::kBf16Gemm; }) {
    if (path == LinearPath::kBf16 || path == LinearPath::kBf16Gemm) {
      panel_of.assign(jobs.size(), -1);
      std::vector<size_t>& owner = plan.owner;  // the job whose x each panel holds
      owner.clear();
      size_t panel_end = 0;
      for (size_t j = 0; j < jobs.size(); ++j) {
        const LinearJob& job = jobs[j];
        if (job.n < lin_gemm_min_rows(path, job.w->dtype) || !L::gemm_takes(*job.w)) continue;
        for (size_t p = 0; p < owner.size() && panel_of[j] < 0; ++p) {
          const LinearJob& o = jobs[owner[p]];
          if (o.x == job.x && o.x_rows == job.x_rows && o.n == job.n && o.w->in == job.w->in)
            panel_of[j] = int32_t(p);
        }
        if (panel_of[j] >= 0) continue;
        panel_of[j] = int32_t(panel_at.size());
        owner.push_back(j);
        const size_t start = panel_at.empty() ? 0 : panel_end;
        panel_at.push_back(start);
        // 64-byte aligned panels: word counts rounded up to 16.
        panel_end = start + (size_t(L::gemm_panel_words(job.n, job.w->in)) + 15) / 16 * 16;
      }
      if (panel_store.size() < panel_end) panel_store = AlignedBuffer<uint32_t>(panel_end);
      store = panel_store.data();
      std::vector<std::pair<int32_t, int64_t>>& tiles = plan.tiles;  // (panel, tile)
      tiles.clear();
      for (size_t p = 0; p < owner.size(); ++p)
        for (int64_t t = 0; t * L::kGemmTileRows < jobs[owner[p]].n; ++t)
          tiles.push_back({int32_t(p), t});
      pool.parallel_for(int64_t(tiles.size()), [&](int64_t c, int) {
        const auto [p, t] = tiles[size_t(c)];
        const LinearJob& job = jobs[owner[size_t(p)]];
        L::gemm_pack_x_tile(job.x, job.x_rows, job.n, job.w->in, t, store + panel_at[size_t(p)]);
      });
    }
  }
  // GGUF block formats on integer dot products (traits with L::kGgmlInt: linear_ggml_vnni*.h,
  // linear_ggml_avx2.h): each job's x quantised once, jobs with the same x and the same x layout
  // (L::ggml_x_layout: the GEMV's per weight block size, 32 or 256 values, or the int8 GEMM's for
  // the BF16 paths from lin_gemm_min_rows rows) sharing it. Empty when no job takes the path
  // (nothing is allocated).
  std::vector<int64_t>& xq_at = plan.xq_at;      // per job: byte offset into xq_store, -1: other
  std::vector<uint8_t>& xq_gemm = plan.xq_gemm;  // per job: runs on the int8 GEMM
  xq_at.clear();
  xq_gemm.clear();
  static thread_local AlignedBuffer<uint8_t> xq_store;
  uint8_t* xq = nullptr;
  if constexpr (requires { L::kGgmlInt; }) {
    int64_t end = 0;
    std::vector<std::pair<size_t, int64_t>>& rows = plan.rows;  // (job, row) to quantise
    rows.clear();
    for (size_t j = 0; j < jobs.size(); ++j) {
      const LinearJob& job = jobs[j];
      if (job.n == 0 || !L::ggml_takes(job.w->dtype)) continue;
      if (!panel_of.empty() && panel_of[j] >= 0) continue;  // on the BF16 GEMM
      if (xq_at.empty()) {
        xq_at.assign(jobs.size(), -1);
        xq_gemm.assign(jobs.size(), 0);
      }
      const int64_t min_rows = lin_gemm_min_rows(path, job.w->dtype);
      const bool gemm = min_rows > 0 && job.n >= min_rows && L::ggml_gemm_takes(*job.w, job.n);
      xq_gemm[j] = gemm;
      const int layout = L::ggml_x_layout(job.w->dtype, gemm);
      for (size_t p = 0; p < j && xq_at[j] < 0; ++p)
        if (xq_at[p] >= 0 && jobs[p].x == job.x && jobs[p].x_rows == job.x_rows &&
            jobs[p].n == job.n && jobs[p].w->in == job.w->in &&
            L::ggml_x_layout(jobs[p].w->dtype, xq_gemm[p]) == layout)
          xq_at[j] = xq_at[p];
      if (xq_at[j] >= 0) continue;
      xq_at[j] = end;
      for (int64_t r = 0; r < job.n; ++r) rows.push_back({j, r});
      end += job.n * L::ggml_x_bytes(job.w->dtype, job.w->in, gemm);
    }
    if (!rows.empty()) {
      xq = ensure_scratch(xq_store, size_t(end));
      // Blocks of rows, each row's lines requested while the one before it is quantised: a
      // routed expert's rows are scattered tokens, and each row's first loads had waited on L3.
      const auto row_of = [&](size_t c) {
        const auto [j, r] = rows[c];
        const LinearJob& job = jobs[j];
        return job.x + (job.x_rows ? job.x_rows[r] : r) * job.w->in;
      };
      constexpr int64_t kRowBlock = 8;
      const int64_t count = int64_t(rows.size());
      pool.parallel_for((count + kRowBlock - 1) / kRowBlock, [&](int64_t blk, int) {
        for (int64_t c = blk * kRowBlock; c < std::min(count, (blk + 1) * kRowBlock); ++c) {
          const auto [j, r] = rows[size_t(c)];
          const LinearJob& job = jobs[j];
          if (c + 1 < count) {
            const char* next = reinterpret_cast<const char*>(row_of(size_t(c + 1)));
            const int64_t bytes = jobs[rows[size_t(c + 1)].first].w->in * int64_t(sizeof(float));
            for (int64_t l = 0; l < bytes; l += 64) _mm_prefetch(next + l, _MM_HINT_T0);
          }
          L::ggml_quantize_x(
              job.w->dtype, row_of(size_t(c)), job.w->in, xq_gemm[j],
              xq + xq_at[j] + r * L::ggml_x_bytes(job.w->dtype, job.w->in, xq_gemm[j]));
        }
      });
    }
  }
  // x of each job as the FP32 paths read it: a gathered copy for a job with x_rows that neither
  // GEMM above laid out (a decode-sized expert, FP32 math), else its own x.
  std::vector<const float*>& x_of = plan.x_of;
  std::vector<std::pair<size_t, float*>>& gathered = plan.gathered;  // (job, its copy)
  x_of.resize(jobs.size());
  gathered.clear();
  size_t gather_floats = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    x_of[j] = job.x;
    if (!job.x_rows || job.n == 0 || (!panel_of.empty() && panel_of[j] >= 0) ||
        (!xq_at.empty() && xq_at[j] >= 0))
      continue;
    gathered.push_back({j, nullptr});
    gather_floats += size_t(job.n * job.w->in);
  }
  if (!gathered.empty()) {
    static thread_local AlignedBuffer<float> gather_store;
    float* at = ensure_scratch(gather_store, gather_floats);
    for (auto& [j, copy] : gathered) {
      x_of[j] = copy = at;
      at += jobs[j].n * jobs[j].w->in;
    }
    auto gather = [&](int64_t c) {
      const auto [j, dst] = gathered[size_t(c)];
      const LinearJob& job = jobs[j];
      for (int64_t i = 0; i < job.n; ++i)
        std::memcpy(dst + i * job.w->in, job.x + job.x_rows[i] * job.w->in,
                    size_t(job.w->in) * sizeof(float));
    };
    if (gather_floats < (size_t(1) << 18)) {  // a decode step's experts: cheaper than waking
      for (size_t c = 0; c < gathered.size(); ++c) gather(int64_t(c));
    } else {
      pool.parallel_for(int64_t(gathered.size()), [&](int64_t c, int) { gather(c); });
    }
  }
  // The FP32 GEMM (traits with L::f32_gemm_rows: linear_gemm_f32_avx2.h) for the jobs of the BF16
  // paths that no other GEMM took: above kLinearBatchInvariantRows rows on path kBf16, from
  // L::kF32GemmMinRows on path kBf16Gemm.
  std::vector<uint8_t>& f32_gemm = plan.f32_gemm;  // per job: runs on it
  f32_gemm.assign(jobs.size(), 0);
  if constexpr (requires { &L::template f32_gemm_rows<L>; })
    for (size_t j = 0; j < jobs.size(); ++j) {
      const LinearJob& job = jobs[j];
      const int64_t min_rows = path == LinearPath::kBf16Gemm ? L::kF32GemmMinRows
                               : path == LinearPath::kBf16   ? kLinearBatchInvariantRows + 1
                                                             : 0;
      f32_gemm[j] = min_rows > 0 && job.n >= min_rows && L::f32_gemm_takes(*job.w) &&
                    (panel_of.empty() || panel_of[j] < 0) && (xq_at.empty() || xq_at[j] < 0);
    }
  std::vector<Item>& items = plan.items;
  items.clear();
  bool decode = true;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    if (job.n == 0) continue;
    decode = decode && job.n <= kLinGroup;
    int64_t rows = lin_chunk_rows(*job.w, job.n, threads);
    bool gemm = false;
    int64_t x_bytes = 0;  // bytes of one row of x as the GEMM reads it
    if constexpr (requires { L::kBf16Gemm; })
      if (!panel_of.empty() && panel_of[j] >= 0) {
        rows = L::gemm_chunk_rows(*job.w, threads);
        gemm = true;
        x_bytes = L::gemm_row_words(job.w->in) * 4;
      }
    if constexpr (requires { L::kGgmlInt; })
      if (!xq_gemm.empty() && xq_gemm[j]) {
        rows = L::ggml_gemm_chunk_rows(*job.w, threads);
        gemm = true;
        x_bytes = L::ggml_x_bytes(job.w->dtype, job.w->in, true);
      }
    if constexpr (requires { &L::template f32_gemm_rows<L>; })
      if (f32_gemm[j]) {
        rows = L::f32_gemm_chunk_rows(*job.w, threads);
        gemm = true;
        x_bytes = job.w->in * int64_t(sizeof(float));
      }
    // On a GEMM, x in blocks of rows that stay in cache while the weight chunks pass over them.
    const int64_t block = gemm ? lin_gemm_x_block(x_bytes, job.n) : job.n;
    for (int64_t i0 = 0; i0 < job.n; i0 += block)
      for (int64_t r0 = 0; r0 < job.w->out; r0 += rows)
        items.push_back({int32_t(j), r0, std::min(job.w->out, r0 + rows), false, i0,
                         std::min(job.n, i0 + block)});
    // A decode-sized SwiGLU job streams its up weight as items of their own (one weight per
    // item, as the chunk sizes assume: the two in one item were 2-4% slower in moe_decode) and
    // takes the SiLU after the pass.
    if (job.up && job.n <= kLinGroup)
      for (int64_t r0 = 0; r0 < job.w->out; r0 += rows)
        items.push_back({int32_t(j), r0, std::min(job.w->out, r0 + rows), true, 0, job.n});
  }
  if (decode && threads > 1) {
    const size_t tail = std::min(items.size(), size_t(threads));
    std::vector<Item>& pieces = plan.pieces;
    pieces.clear();
    for (size_t i = items.size() - tail; i < items.size(); ++i) {
      const Item it = items[i];
      const int64_t unit = lin_row_unit(*jobs[size_t(it.job)].w, 8);
      const int64_t step =
          std::max<int64_t>(unit, ((it.r1 - it.r0) / kLinTailSplit + unit - 1) / unit * unit);
      for (int64_t r0 = it.r0; r0 < it.r1; r0 += step)
        pieces.push_back({it.job, r0, std::min(it.r1, r0 + step), it.up, it.i0, it.i1});
    }
    items.resize(items.size() - tail);
    items.insert(items.end(), pieces.begin(), pieces.end());
  }
  // Rows [r0, r1) of one weight of job j (its w, or its up with the same x layout) into y; the
  // int8 GEMM, and the BF16 GEMM where it widens FP8, request `next` (the weight bytes this
  // thread reads next) while they run (BF16 weights measured 2% slower with it: read in place,
  // their column blocks already overlap their reads).
  auto run_rows = [&](size_t j, const LinearWeight& w, float* y, int64_t r0, int64_t r1,
                      WeightAhead next, int64_t i0, int64_t i1) {
    const LinearJob& job = jobs[j];
    if constexpr (requires { L::kBf16Gemm; })
      if (!panel_of.empty() && panel_of[j] >= 0) {
        // x rows [i0, i1) of the panel (rows of gemm_row_words; i0 a multiple of its tiles).
        const uint32_t* xp = store + panel_at[size_t(panel_of[j])] + i0 * L::gemm_row_words(w.in);
        float* yb = y + i0 * w.out;
        if (w.dtype == DType::kF8E4M3 || w.dtype == DType::kF8E4M3R16)
          return L::template gemm_chunk<DType::kF8E4M3>(w, i1 - i0, xp, yb, r0, r1, next);
        return L::template gemm_chunk<DType::kBF16>(w, i1 - i0, xp, yb, r0, r1, next);
      }
    if constexpr (requires { L::kGgmlInt; })
      if (!xq_at.empty() && xq_at[j] >= 0) {
        const int64_t row = L::ggml_x_bytes(w.dtype, w.in, xq_gemm[j]);
        return L::ggml_chunk(w, i1 - i0, xq_gemm[j], xq + xq_at[j] + i0 * row, y + i0 * w.out, r0,
                             r1, next);
      }
    if constexpr (requires { &L::template f32_gemm_rows<L>; })
      if (f32_gemm[j])
        return L::template f32_gemm_rows<L>(w, i1 - i0, x_of[j] + i0 * w.in, y + i0 * w.out, r0,
                                            r1);
    // Path kBf16Gemm below the GEMM's minimum rows: the R16 layouts on BF16 dot products.
    if constexpr (requires { &L::r16_dot_chunk; })
      if (path == LinearPath::kBf16Gemm &&
          (w.dtype == DType::kBF16R16 || w.dtype == DType::kF8E4M3R16))
        return L::r16_dot_chunk(w, job.n, x_of[j], y, r0, r1);
    switch (w.dtype) {
      case DType::kBF16:
        return lin_dot_chunk<L, DType::kBF16>(w, job.n, x_of[j], y, r0, r1);
      case DType::kF16:
        return lin_dot_chunk<L, DType::kF16>(w, job.n, x_of[j], y, r0, r1);
      case DType::kF32:
        return lin_dot_chunk<L, DType::kF32>(w, job.n, x_of[j], y, r0, r1);
      case DType::kF8E4M3:
        return lin_dot_chunk<L, DType::kF8E4M3>(w, job.n, x_of[j], y, r0, r1);
      case DType::kI8:
        return lin_dot_chunk<L, DType::kI8>(w, job.n, x_of[j], y, r0, r1);
      // The variant that asks for the R16 layouts has their kernels (FP32 products here).
      case DType::kBF16R16:
        if constexpr (requires { &L::bf16_r16_chunk; })
          return L::bf16_r16_chunk(w, job.n, x_of[j], y, r0, r1);
        return lin_ggml_chunk<L>(w, job.n, x_of[j], y, r0, r1);
      case DType::kF8E4M3R16:
        if constexpr (requires { &L::f8_r16_chunk; })
          return L::f8_r16_chunk(w, job.n, x_of[j], y, r0, r1);
        return lin_ggml_chunk<L>(w, job.n, x_of[j], y, r0, r1);
      default:  // validate() admits the dtypes above, the GGUF block formats and their repacks
        return lin_ggml_chunk<L>(w, job.n, x_of[j], y, r0, r1);
    }
  };
  auto run_item = [&](const Item& it, WeightAhead next) {
    const LinearJob& job = jobs[size_t(it.job)];
    const int64_t i0 = it.i0, i1 = it.i1;
    if (it.up) return run_rows(size_t(it.job), *job.up, job.up_y, it.r0, it.r1, next, i0, i1);
    const bool swiglu = job.up && job.n > kLinGroup;
    run_rows(size_t(it.job), *job.w, job.y, it.r0, it.r1,
             swiglu ? weight_rows_ahead(*job.up, it.r0, it.r1) : next, i0, i1);
    if (!swiglu) return;
    // SwiGLU: the same rows of the up product, then silu(gate) · up while both are in cache
    // (an expert's ~48 rows × 96 columns: 18 KiB each).
    run_rows(size_t(it.job), *job.up, job.up_y, it.r0, it.r1, next, i0, i1);
    const int64_t out = job.w->out;
    for (int64_t i = i0; i < i1; ++i)
      silu_mul(job.y + i * out + it.r0, job.up_y + i * out + it.r0, it.r1 - it.r0);
  };
  // Each thread of a pass with a job that requests (one on the int8 GEMM, or FP8 weights on the
  // BF16 GEMM: never a decode pass, whose jobs take neither GEMM) claims its next item before it
  // runs the current one, so that the current one's GEMM can request the next one's weight rows
  // while it computes (other passes keep the plain claim: a held item can only lengthen the
  // pass's tail).
  bool requests = std::find(xq_gemm.begin(), xq_gemm.end(), uint8_t(1)) != xq_gemm.end();
  for (size_t j = 0; j < jobs.size() && !panel_of.empty(); ++j)
    requests = requests || (panel_of[j] >= 0 && (jobs[j].w->dtype == DType::kF8E4M3 ||
                                                 jobs[j].w->dtype == DType::kF8E4M3R16));
  if (!requests) {
    pool.parallel_for(int64_t(items.size()),
                      [&](int64_t c, int) { run_item(items[size_t(c)], WeightAhead{}); });
  } else {
    std::atomic<int64_t> claimed{0};
    const int64_t count = int64_t(items.size());
    pool.parallel_for(threads, [&](int64_t, int) {
      for (int64_t c = claimed.fetch_add(1, std::memory_order_relaxed); c < count;) {
        const int64_t d = claimed.fetch_add(1, std::memory_order_relaxed);
        WeightAhead next;
        if (d < count) {
          const Item& it = items[size_t(d)];
          const LinearJob& job = jobs[size_t(it.job)];
          next = weight_rows_ahead(it.up ? *job.up : *job.w, it.r0, it.r1);
        }
        run_item(items[size_t(c)], next);
        c = d;
      }
    });
  }
  for (const LinearJob& job : jobs)
    if (job.up && job.n > 0 && job.n <= kLinGroup) silu_mul(job.y, job.up_y, job.n * job.w->out);
}

}  // namespace
}  // namespace mla::cpu
