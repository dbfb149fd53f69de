// Tile policy of the FP32-intermediate absorbed decode. Rows (heads × queries) are the vector
// lanes of the score product, so a key tile needs no transpose: each key value is broadcast
// against W rows of the transposed query at once, and the scores come out key-major.
//   qT: [d_qk][ld]             widened query, transposed once per work item (ld = R padded to W)
//   kr: [kTile][kr_stride]     widened (dequantised) cache rows; the first d_v columns are V
//   ST: [kTile][ld]            scores, then probabilities (owned by the driver)
// Include inside the ISA's target region. Internal linkage.
#pragma once

#include "kernels/cpu/mla_decode_driver.h"

namespace mla::cpu {
namespace {

template <class V>
struct DecodeTileF32 {
  static constexpr int W = V::kWidth;
  static constexpr int kRowBlock = kDecodeRowBlock;
  AlignedBuffer<float> qT, kr, qrow;  // qrow: one query row widened, [d_qk]
  int d_qk = 0, d_v = 0, dv_pad = 0, kr_stride = 0, ld = 0;

  int d_v_pad() const { return dv_pad; }
  static int rows_pad(int R) { return round_up(R, W); }

  void begin(const MlaDecodeParams& p) {
    d_qk = p.d_qk;
    d_v = p.d_v;
    dv_pad = round_up(p.d_v, 4 * W);
    const int stride = std::max(round_up(d_qk, W), dv_pad);
    if (stride != kr_stride) kr = AlignedBuffer<float>();  // padding columns must start zeroed
    kr_stride = stride;
    ensure_scratch(qT, size_t(d_qk) * rows_pad(kDecodeRowBlock));
    ensure_scratch(kr, size_t(kTile) * kr_stride);
    ensure_scratch(qrow, size_t(d_qk));
  }

  void prepare_q(const MlaDecodeParams& p, int b, int r0, int R) {
    ld = rows_pad(R);
    const int eb = p.q_dtype == DType::kF32 ? 4 : 2;
    const uint8_t* src =
        static_cast<const uint8_t*>(p.q) + (int64_t(b) * p.s_q * p.h_q + r0) * d_qk * eb;
    float* row = qrow.data();
    std::fill(qT.data(), qT.data() + size_t(d_qk) * ld, 0.0f);
    for (int i = 0; i < R; ++i) {
      load_f32(p.q_dtype, src + int64_t(i) * d_qk * eb, d_qk, row);
      for (int c = 0; c < d_qk; ++c) qT[int64_t(c) * ld + i] = row[c];
    }
  }

  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    const CacheRowFormat f(p.cache.dtype, d_v, d_qk - d_v, p.cache.global_scale);
    for (int j = 0; j < n; ++j) {
      float* dst = kr.data() + int64_t(j) * kr_stride;
      load_cache_row(f, cache_row(p, b, t0 + j, f.row_bytes), dst, dst + d_v);
    }
  }

  // ST [kTile][ld]; keys past the tile's n read stale rows, which the softmax masks. Fewer row
  // vectors take more keys per block, so that enough independent accumulators hide FMA latency.
  void scores(float* ST) {
    for (int v = 0; v < ld;) {
      const int nv = std::min(4, (ld - v) / W);
      switch (nv) {
        case 4:
          score_keys<4, W == 8 ? 2 : 4>(v, ST);
          break;
        case 3:
          score_keys<3, W == 8 ? 2 : 4>(v, ST);
          break;
        case 2:
          score_keys<2, W == 8 ? 4 : 8>(v, ST);
          break;
        default:
          score_keys<1, W == 8 ? 8 : 16>(v, ST);
          break;
      }
      v += nv * W;
    }
  }

  template <int NV, int NK>
  void score_keys(int v, float* ST) {
    static_assert(kTile % NK == 0, "key blocks tile the tile");
    for (int j0 = 0; j0 < kTile; j0 += NK) {
      const float* keys[NK];
      for (int kk = 0; kk < NK; ++kk) keys[kk] = kr.data() + int64_t(j0 + kk) * kr_stride;
      score_block_rows_f32<V, NV, NK>(qT.data() + v, ld, d_qk, keys, ST + int64_t(j0) * ld + v);
    }
  }

  void pv(const float* PT, int R, int n, const float* corr, RowBlockState st) {
    pv_tile<V>(PT, R, n, kr.data(), kr_stride, dv_pad, corr, st, /*p_row=*/1, /*p_key=*/ld);
  }
};

}  // namespace
}  // namespace mla::cpu
