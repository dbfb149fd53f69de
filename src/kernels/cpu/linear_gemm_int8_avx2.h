// The int8 GEMM of Q8_0 and Q4_0 weights for CPUs without AVX512-VNNI (the BF16 paths from
// lin_gemm_min_rows rows of x: prefill chunks, an expert's tokens): y [n, out] = x [n, in] · Wᵀ
// with x quantised per 32 values exactly as the GEMV of linear_ggml_avx2.h does (the same x rows,
// shared with it), so a block's product is
//   a · dx · Σ c · q_x      (a: the weight block's f16 scale, c its signed codes, |c| ≤ 128)
// with the integer sum exact: vpmaddubsw multiplies |c| (unsigned) by q_x carrying c's sign
// (pairs of at most 2 · 128 · 127 = 32,512: no int16 saturation), vpmaddwd by ones sums the pairs
// into int32 lanes, and a block's lane (at most 32 · 128 · 127 < 2^24) converts to FP32 exactly.
//
// Why: the GEMV holds 1-4 rows of x against one W row and ends every row with a horizontal sum
// (~0.55 of the FMA units' rate at 512 rows on Zen 3); integer pairs issue at ~1.3x the FMA rate
// there, so the register tile below is bound by the integer work, not by the FP32 epilogue.
//
// Layout: a chunk of W rows is decoded once into groups of 8 rows (the int32 lanes of a ymm); per
// group and block of 32 values: a [8] (FP32, exact from f16), then 8 vectors of quads (vector q:
// codes 4q .. 4q + 3 of each of the 8 rows, one int32 lane a row). Rows past the chunk read zero
// codes and scales. The chunk's groups (in/32 · 36 bytes a row, ≤ kA2ChunkBytes) stay in L2
// while every register tile of x passes over them; a tile's C rows of x codes stay in L1.
// Register tile: one group × C ≤ kA2Tile rows of x, per row of x an int32 accumulator (the block)
// and an FP32 one (the output), 8 outputs a vector: no horizontal sums.
// Rounding: per block fl(fl(Σ · a) · dx + f): two roundings, one term a block added to the output:
// the bound of the VNNI x32 GEMM (tests: i8_gemm32_bound). Include after linear_ggml_avx2.h under
// the ISA's `#pragma GCC target` (avx2, fma, f16c or above); internal linkage.
#pragma once

#include "kernels/cpu/linear_ggml_avx2.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/transpose8_avx2.h"

namespace mla::cpu {
namespace {

constexpr int kA2Rows = 8;                      // W rows per group: the int32 lanes of a ymm
constexpr int kA2Tile = 4;                      // rows of x per register tile
constexpr int64_t kA2BlockBytes = 32 + 8 * 32;  // a group's block: a [8], 8 vectors of quads
constexpr int64_t kA2ChunkBytes = 256 << 10;    // the chunk's groups: half of a Zen 3 L2
constexpr int64_t kA2MaxChunkRows = 128;

inline bool ggml_gemm_a2_takes(const LinearWeight& w) {
  return w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0;
}

// W rows per chunk: whole groups, about 4 chunks per thread, the groups within kA2ChunkBytes;
// panel_row_bytes: one weight row's share of its group's panel.
inline int64_t ggml_gemm_a2_chunk_rows(int64_t out, int64_t panel_row_bytes, int threads) {
  const int64_t g = kA2Rows;
  const int64_t by_threads = ((out + 4 * threads - 1) / (4 * threads) + g - 1) / g * g;
  const int64_t by_cache = std::max<int64_t>(g, kA2ChunkBytes / panel_row_bytes / g * g);
  return std::max<int64_t>(g, std::min({by_threads, by_cache, kA2MaxChunkRows}));
}

inline int64_t ggml_gemm_a2_row_bytes(const LinearWeight& w) {
  return w.in / 32 * kA2BlockBytes / kA2Rows;
}

// Rows [o0, o0 + rows) of a Q8_0 / Q4_0 weight into `panel` (ceil(rows / 8) groups of in/32
// blocks, 32-byte aligned).
template <DType D>
void ggml_a2_pack_rows(const LinearWeight& w, int64_t o0, int64_t rows, uint8_t* panel) {
  constexpr int kBytes = D == DType::kQ8_0 ? 34 : 18;
  const int64_t blocks = w.in / 32, row_bytes = blocks * kBytes;
  for (int64_t g0 = 0; g0 < rows; g0 += kA2Rows) {
    const int64_t live = std::min<int64_t>(kA2Rows, rows - g0);
    uint8_t* group = panel + g0 / kA2Rows * blocks * kA2BlockBytes;
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* out = group + b * kA2BlockBytes;
      float* a = reinterpret_cast<float*>(out);
      __m256 v[kA2Rows];
      for (int64_t r = 0; r < kA2Rows; ++r) {
        if (r >= live) {
          a[r] = 0.0f;
          v[r] = _mm256_setzero_ps();
          continue;
        }
        const uint8_t* blk = w.data + (o0 + g0 + r) * row_bytes + b * kBytes;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        a[r] = _cvtsh_ss(h);
        v[r] = _mm256_castsi256_ps(ggml_avx2_codes<D>(blk));  // 8 quads of the row
      }
      transpose8x8_ps(v, reinterpret_cast<float*>(out + 32), kA2Rows);
    }
  }
}

// One row of x as ggml_avx2_quantize_x_row lays it out: codes q [in], dx per 32 values.
struct A2XRow {
  const int8_t* q;
  const float* dx;
};

// The chunk loop of the int8 GEMMs (this file's and linear_gemm_int8_avx2_k.h's): the chunk's
// `rows` weight rows packed once (pack(panel), groups gstride bytes apart), then per register tile
// of up to kA2Tile rows of x (make_x(i): row i) every group: tile(C, group, xs, y, lanes) with C an
// std::integral_constant; y: the chunk's first output of row 0 of x, ldy apart.
template <class XRow, class MakeX, class Pack, class Tile>
void ggml_a2_chunk_loop(int64_t n, int64_t rows, int64_t gstride, float* y, int64_t ldy,
                        MakeX make_x, Pack pack, Tile tile) {
  static thread_local AlignedBuffer<uint8_t> scratch;
  const int64_t groups = (rows + kA2Rows - 1) / kA2Rows;
  uint8_t* panel = ensure_scratch(scratch, size_t(groups * gstride));
  pack(panel);
  for (int64_t i0 = 0; i0 < n; i0 += kA2Tile) {
    const int64_t nx = std::min<int64_t>(kA2Tile, n - i0);
    XRow xs[kA2Tile];
    for (int64_t i = 0; i < nx; ++i) xs[i] = make_x(i0 + i);
    for (int64_t g = 0; g < groups; ++g) {
      float* yg = y + i0 * ldy + g * kA2Rows;
      const int lanes = int(std::min<int64_t>(kA2Rows, rows - g * kA2Rows));
      [&]<int... I>(std::integer_sequence<int, I...>) {
        ((nx == I + 1
              ? tile(std::integral_constant<int, I + 1>{}, panel + g * gstride, xs, yg, lanes)
              : void()),
         ...);
      }
      (std::make_integer_sequence<int, kA2Tile>{});
    }
  }
}

// y[c · ldy + l] = f[c] lane l, for l < lanes (a group's live rows).
template <int C>
inline void ggml_a2_store(const __m256 (&f)[C], float* y, int64_t ldy, int lanes) {
  if (lanes == kA2Rows) {
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + c * ldy, f[c]);
  } else {
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int c = 0; c < C; ++c) _mm256_maskstore_ps(y + c * ldy, mask, f[c]);
  }
}

// y[c · ldy + l] for l < lanes (the group's live rows) and the C rows of x in xs against one
// group of `blocks` blocks.
template <int C>
inline void ggml_a2_tile(const uint8_t* group, int64_t blocks, const A2XRow* xs, float* y,
                         int64_t ldy, int lanes) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f[C];
  for (int c = 0; c < C; ++c) f[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = group + b * kA2BlockBytes;
    __m256i acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q) {
      const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 32 + 32 * q));
      const __m256i mag = _mm256_sign_epi8(wv, wv);
      for (int c = 0; c < C; ++c) {
        int32_t quad;
        std::memcpy(&quad, xs[c].q + 32 * b + 4 * q, 4);
        const __m256i xsign = _mm256_sign_epi8(_mm256_set1_epi32(quad), wv);
        acc[c] =
            _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(mag, xsign), ones));
        // Keeps the chain in its register: GCC 12 otherwise reassociates the block's 32 integer
        // adds into a tree and parks the terms on the stack.
        __asm__("" : "+x"(acc[c]));
      }
    }
    const __m256 a = _mm256_load_ps(reinterpret_cast<const float*>(blk));
    for (int c = 0; c < C; ++c)
      f[c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[c]), a),
                             _mm256_set1_ps(xs[c].dx[b]), f[c]);
  }
  ggml_a2_store<C>(f, y, ldy, lanes);
}

// Rows [r0, r1) of w against all n rows of x quantised by ggml_avx2_quantize_x_row
// (ggml_avx2_x_row_bytes(in) bytes apart at xq); y: row 0 of x's outputs, w.out apart.
template <DType D>
void ggml_gemm_a2_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                              int64_t r0, int64_t r1) {
  const int64_t blocks = w.in / 32, stride = ggml_avx2_x_row_bytes(w.in);
  const int64_t codes = (w.in + 31) / 32 * 32;
  ggml_a2_chunk_loop<A2XRow>(
      n, r1 - r0, blocks * kA2BlockBytes, y + r0, w.out,
      [&](int64_t i) {
        const uint8_t* row = xq + i * stride;
        return A2XRow{reinterpret_cast<const int8_t*>(row),
                      reinterpret_cast<const float*>(row + codes)};
      },
      [&](uint8_t* panel) { ggml_a2_pack_rows<D>(w, r0, r1 - r0, panel); },
      [&](auto C, const uint8_t* group, const A2XRow* xs, float* yg, int lanes) {
        ggml_a2_tile<decltype(C)::value>(group, blocks, xs, yg, w.out, lanes);
      });
}

inline void ggml_gemm_a2_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                               int64_t r0, int64_t r1) {
  if (w.dtype == DType::kQ4_0) return ggml_gemm_a2_chunk_typed<DType::kQ4_0>(w, n, xq, y, r0, r1);
  ggml_gemm_a2_chunk_typed<DType::kQ8_0>(w, n, xq, y, r0, r1);
}

}  // namespace
}  // namespace mla::cpu
