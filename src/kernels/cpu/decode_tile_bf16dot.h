// Tile policy of the BF16-dot absorbed decode (vdpbf16ps, AVX512_BF16). The score product, the
// larger of the two (d_qk = 576 channels against d_v = 512), runs as pairwise BF16 dot products
// with FP32 accumulation. vdpbf16ps multiplies adjacent pairs along the reduction axis; the
// channels of a cache row are adjacent, so with rows (heads × queries) as the vector lanes each
// 32-bit word of a cache row (a channel pair) is broadcast straight from the paged cache:
//   qT: [d_qk2][ld] u32    BF16 query channel pairs, transposed once per work item
//                          (d_qk2 = d_qk / 2, ld = R padded to 16)
//   kr: [kTile][kr_stride] the tile's V widened to FP32 (d_v columns)
//   ST: [kTile][ld]        scores, then probabilities (owned by the driver)
// P·V stays in FP32 (FMA): rounding the probabilities to BF16 as well would cost up to 2^-8
// relative per probability, which fails FlashMLA's per-element output rule on short contexts, while
// a hi/lo BF16 split of P would cost as many instructions as FP32 FMA. Rounding the query costs
// ~1e-3 relative on the scores (docs/kernels/mla_decode.md), so this variant takes only a BF16
// query (supports() refuses F32) and a BF16 cache with even d_qk.
#pragma once

#include "kernels/cpu/decode_bf16_common.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {
namespace {

struct DecodeTileBf16Dot {
  static constexpr int W = 16;
  static constexpr int kRowBlock = kDecodeRowBlock;
  AlignedBuffer<uint32_t> qT;
  AlignedBuffer<uint8_t> zero_row;  // stands in for keys past the tile's n
  AlignedBuffer<float> kr;
  const uint8_t* rows[kTile] = {};
  int d_qk = 0, d_qk2 = 0, d_v = 0, dv_pad = 0, kr_stride = 0, ld = 0;

  int d_v_pad() const { return dv_pad; }
  static int rows_pad(int R) { return round_up(R, W); }

  void begin(const MlaDecodeParams& p) {
    d_qk = p.d_qk;
    d_qk2 = d_qk / 2;
    d_v = p.d_v;
    dv_pad = round_up(d_v, 4 * W);
    const int stride = round_up(std::max(d_v, dv_pad), W);
    if (stride != kr_stride) kr = AlignedBuffer<float>();  // padding columns must start zeroed
    kr_stride = stride;
    ensure_scratch(qT, size_t(d_qk2) * rows_pad(kDecodeRowBlock));
    ensure_scratch(zero_row, size_t(d_qk) * 2);
    ensure_scratch(kr, size_t(kTile) * kr_stride);
  }

  void prepare_q(const MlaDecodeParams& p, int b, int r0, int R) {
    ld = rows_pad(R);
    transpose_q_pairs(p, b, r0, R, ld, qT.data());
  }

  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    for (int j = 0; j < kTile; ++j) {
      rows[j] = j < n ? cache_row(p, b, t0 + j, 2 * int64_t(d_qk)) : zero_row.data();
      if (j < n) load_f32(DType::kBF16, rows[j], d_v, kr.data() + int64_t(j) * kr_stride);
    }
  }

  void scores(float* ST) { score_tile_bf16(qT.data(), ld, 0, d_qk2, rows, {}, ST); }

  void pv(const float* PT, int R, int n, const float* corr, RowBlockState st) {
    pv_tile<VecAvx512>(PT, R, n, kr.data(), kr_stride, dv_pad, corr, st, /*p_row=*/1, /*p_key=*/ld);
  }
};

}  // namespace
}  // namespace mla::cpu
