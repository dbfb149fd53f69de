// Tile policy of the FP32-intermediate absorbed decode: the query and each key tile are widened
// to FP32 once per work item / tile and shared by every row (head × query) of the block.
//   q:  [R][d_qk]              widened query rows
//   kr: [kTile][kr_stride]     widened (dequantised) cache rows; the first d_v columns are V
//   kt: [d_qk][kTile]          the same tile transposed, for the score product
// Include inside the ISA's target region. Internal linkage.
#pragma once

#include "kernels/cpu/mla_decode_driver.h"

namespace mla::cpu {
namespace {

template <class V>
struct DecodeTileF32 {
  AlignedBuffer<float> q, kr, kt;
  int d_qk = 0, d_v = 0, dv_pad = 0, kr_stride = 0;

  int d_v_pad() const { return dv_pad; }

  void begin(const MlaDecodeParams& p) {
    d_qk = p.d_qk;
    d_v = p.d_v;
    dv_pad = round_up(p.d_v, 4 * V::kWidth);
    const int stride = std::max(round_up(d_qk, V::kWidth), dv_pad);
    if (stride != kr_stride) kr = AlignedBuffer<float>();  // padding columns must start zeroed
    kr_stride = stride;
    ensure_scratch(q, size_t(kDecodeRowBlock) * d_qk);
    ensure_scratch(kr, size_t(kTile) * kr_stride);
    ensure_scratch(kt, size_t(d_qk) * kTile);
  }

  void prepare_q(const MlaDecodeParams& p, int b, int r0, int R) {
    const int eb = p.q_dtype == DType::kF32 ? 4 : 2;
    const uint8_t* src =
        static_cast<const uint8_t*>(p.q) + (int64_t(b) * p.s_q * p.h_q + r0) * d_qk * eb;
    for (int i = 0; i < R; ++i)
      load_f32(p.q_dtype, src + int64_t(i) * d_qk * eb, d_qk, q.data() + int64_t(i) * d_qk);
  }

  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    const CacheRowFormat f(p.kv_dtype, d_v, d_qk - d_v, p.kv_global_scale);
    for (int j = 0; j < n; ++j) {
      float* dst = kr.data() + int64_t(j) * kr_stride;
      load_cache_row(f, cache_row(p, b, t0 + j, f.row_bytes), dst, dst + d_v);
    }
    for (int c = 0; c < d_qk; ++c) {
      float* dst = kt.data() + int64_t(c) * kTile;
      for (int j = 0; j < n; ++j) dst[j] = kr[int64_t(j) * kr_stride + c];
      std::fill(dst + n, dst + kTile, 0.0f);
    }
  }

  void scores(int R, float* S) { score_tile<V>(q.data(), d_qk, R, d_qk, kt.data(), S); }

  void pv(const float* P, int R, int n, const float* corr, RowBlockState st) {
    pv_tile<V>(P, R, n, kr.data(), kr_stride, dv_pad, corr, st);
  }
};

}  // namespace
}  // namespace mla::cpu
