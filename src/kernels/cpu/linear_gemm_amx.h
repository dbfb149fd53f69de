// The BF16 GEMM of linear_gemm_bf16.h on AMX tiles (linear.cpu.amx): the same operands, whole
// blocks of 16 rows of x at a time. The chunk's weight vectors (BF16_R16 in place, or a chunk
// widened / laid out by gemm_bf16_chunk) are what tdpbf16ps takes as its B operand unchanged: 16
// pairs of one vector of 16 weight rows are 16 consecutive 64-byte lines, B[pair][row][2]; x's
// panel rows of BF16 pairs are its A operand (16 rows × 32 values, row stride kp words).
//   C[x row][weight row] (16 × 16 FP32) += Σ over 16 pairs A · B,  kp / 16 steps a product
// Written over a tile policy T with
//   T::grid<kLoad>(nk, nj, a_of, a_s, a_stride, b, b_j, b_s, b_stride, steps, c, c_k, c_stride)
// as amx_product_grid (amx_tiles.h): the AMX variant passes the tile unit, the tests a plain
// loop with the same contract (tests/unit/kernels/linear_gemm_amx_test.cc), so the operand
// addressing is checked on every CPU.
// Numerics as the vdpbf16ps tiles: exact BF16 pair products summed in FP32 (the tile unit may
// round each pair's sum once before adding it: within the GEMM's bound of 2·in + 4 roundings),
// FP8 scale blocks scaled in FP32 once per block and added. Internal linkage; no ISA needed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace mla::cpu {
namespace {

// Rows of x per AMX pass: two 16-row A tiles against the chunk's vectors.
constexpr int64_t kAmxXRows = 32;
// Weight rows gemm_amx_rows holds sums for (its stack buffers' width): gemm_bf16_chunk's chunk.
constexpr int64_t kAmxMaxCols = 96;

// Whether gemm_amx_rows can run a weight of `in` values a row with scale blocks of block_cols
// (0: unscaled): whole 16-pair steps, in every scale block.
inline bool gemm_amx_fits(int64_t in, int64_t block_cols) {
  return in % 32 == 0 && (block_cols == 0 || block_cols % 32 == 0);
}

// y[(i0 + m) · ldy + o] = Σ_p x row i0 + m pair p · W row o pair p (row o: lane o % 16 of vector
// o / 16), for m < rows (≤ kAmxXRows) and o < cols ≤ 16 · vecs (vecs ≤ 6: gemm_bf16_chunk's 96
// rows; the last vector's rows past cols are padding, not stored). The panel holds whole 16-row
// blocks (rows past the last x row zero): a partial last block runs on the tiles too, so every
// row's sums are the tile unit's whatever the number of rows (a row's output does not depend on
// the rest of the batch, as on the vdpbf16ps tiles).
//   panel: x rows of kp BF16 pair words (row i at panel + i · kp); wp: vector j at wp + j · ldw
//   words (pair p at 16p); kp % 16 == 0.
//   scales (FP8, or null): [blocks][16 · vecs] per-row scales of each column block of `block`
//   pairs (block % 16 == 0); the block sums are scaled and added in FP32.
template <class T>
void gemm_amx_rows(const uint32_t* panel, int64_t kp, int64_t i0, int64_t rows, const uint32_t* wp,
                   int64_t ldw, int64_t vecs, int64_t cols, const float* scales, int64_t block,
                   float* y, int64_t ldy) {
  const int nk = int((rows + 15) / 16), nj = int(vecs);
  auto a_of = [&](int k) { return reinterpret_cast<const uint8_t*>(panel + (i0 + 16 * k) * kp); };
  const uint8_t* b = reinterpret_cast<const uint8_t*>(wp);
  const int64_t a_stride = kp * 4, b_j = ldw * 4;
  constexpr int64_t a_s = 64, b_s = 16 * 64, b_stride = 64;
  if (!scales && cols == 16 * vecs && rows % 16 == 0) {  // stored straight into y
    T::template grid<false>(nk, nj, a_of, a_s, a_stride, b, b_j, b_s, b_stride, int(kp / 16),
                            y + i0 * ldy, 16 * ldy, ldy * 4);
    return;
  }
  // FP8: per column block, the block's sums into `part`, then scaled into `sum`; unscaled with
  // padding: one block of all pairs, its sums stored from `part`.
  constexpr int64_t ld = kAmxMaxCols;
  alignas(64) float part[kAmxXRows * ld], sum[kAmxXRows * ld];
  if (!scales) block = kp;
  for (int64_t p0 = 0, blk = 0; p0 < kp; p0 += block, ++blk) {
    const int steps = int(std::min(block, kp - p0) / 16);
    auto a_blk = [&](int k) { return a_of(k) + p0 * 4; };
    T::template grid<false>(nk, nj, a_blk, a_s, a_stride, b + p0 * 64, b_j, b_s, b_stride, steps,
                            part, 16 * ld, ld * 4);
    if (!scales) break;
    const float* s = scales + blk * 16 * vecs;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t c = 0; c < cols; ++c)
        sum[m * ld + c] =
            blk == 0 ? part[m * ld + c] * s[c] : std::fma(part[m * ld + c], s[c], sum[m * ld + c]);
  }
  const float* out = scales ? sum : part;
  for (int64_t m = 0; m < rows; ++m)
    std::memcpy(y + (i0 + m) * ldy, out + m * ld, size_t(cols) * sizeof(float));
}

}  // namespace
}  // namespace mla::cpu
