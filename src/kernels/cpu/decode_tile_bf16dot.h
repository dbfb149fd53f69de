// Tile policy of the BF16-dot absorbed decode (vdpbf16ps, AVX512_BF16). The score product, the
// larger of the two (d_qk = 576 channels against d_v = 512), runs as pairwise BF16 dot products
// with FP32 accumulation; vdpbf16ps multiplies adjacent pairs along the reduction axis, and the
// channels of a cache row are adjacent, so a key tile needs only a transpose of 32-bit words:
//   q:  [R][d_qk2] u32     BF16 query rows as channel pairs (d_qk2 = ceil(d_qk / 2))
//   kp: [d_qk2][kTile] u32 channel pair c2 of key j = the 32-bit word at row_j + 2·c2
//   kr: [kTile][kr_stride] the tile widened to FP32; its first d_v columns are V
// P·V stays in FP32 (FMA): rounding the probabilities to BF16 as well would cost ~2^-9 relative
// per probability, which fails FlashMLA's per-element output rule on short contexts, while a
// hi/lo BF16 split of P would cost as many instructions as FP32 FMA. Rounding the query costs
// ~1e-3 relative on the scores (docs/kernels/mla_decode.md), so this variant takes only a BF16
// query (supports() refuses F32) and a BF16 cache: whoever rounds the query owns that cost.
#pragma once

#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {
namespace {

struct DecodeTileBf16Dot {
  static constexpr int W = 16;
  AlignedBuffer<uint32_t> q, kp;
  AlignedBuffer<float> kr;
  int d_qk = 0, d_qk2 = 0, d_v = 0, dv_pad = 0, kr_stride = 0;

  int d_v_pad() const { return dv_pad; }

  void begin(const MlaDecodeParams& p) {
    d_qk = p.d_qk;
    d_qk2 = (d_qk + 1) / 2;
    d_v = p.d_v;
    dv_pad = round_up(d_v, 4 * W);
    ensure_scratch(q, size_t(kDecodeRowBlock) * d_qk2);
    ensure_scratch(kp, size_t(d_qk2) * kTile);
    const int stride = round_up(std::max(d_v, dv_pad), W);
    if (stride != kr_stride) kr = AlignedBuffer<float>();  // padding columns must start zeroed
    kr_stride = stride;
    ensure_scratch(kr, size_t(kTile) * kr_stride);
  }

  static uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

  void prepare_q(const MlaDecodeParams& p, int b, int r0, int R) {
    const int64_t base = (int64_t(b) * p.s_q * p.h_q + r0) * d_qk;
    for (int i = 0; i < R; ++i) {
      uint16_t row[2];
      for (int c2 = 0; c2 < d_qk2; ++c2) {
        for (int k = 0; k < 2; ++k) {
          const int c = 2 * c2 + k;
          const int64_t at = base + int64_t(i) * d_qk + c;
          row[k] = c >= d_qk ? 0 : static_cast<const uint16_t*>(p.q)[at];
        }
        q[int64_t(i) * d_qk2 + c2] = pack(row[0], row[1]);
      }
    }
  }

  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    for (int j = 0; j < kTile; ++j) {
      const uint16_t* row =
          j < n ? reinterpret_cast<const uint16_t*>(cache_row(p, b, t0 + j, 2 * int64_t(d_qk)))
                : nullptr;
      for (int c2 = 0; c2 < d_qk2; ++c2) {
        uint32_t w = 0;
        if (row) w = pack(row[2 * c2], 2 * c2 + 1 < d_qk ? row[2 * c2 + 1] : 0);
        kp[int64_t(c2) * kTile + j] = w;
      }
    }
    for (int j = 0; j < n; ++j)
      load_f32(DType::kBF16, cache_row(p, b, t0 + j, 2 * int64_t(d_qk)), d_v,
               kr.data() + int64_t(j) * kr_stride);
  }

  void scores(int R, float* S) {
    static_assert(kTile == 4 * W, "one 4-vector block per tile");
    int i = 0;
    for (; i < R; i += 4) {
      const int rn = std::min(4, R - i);
      __m512 acc[4][4];
      for (auto& row : acc)
        for (auto& a : row) a = _mm512_setzero_ps();
      for (int c2 = 0; c2 < d_qk2; ++c2) {
        const uint32_t* k = kp.data() + int64_t(c2) * kTile;
        const __m512bh k0 = (__m512bh)_mm512_loadu_si512(k),
                       k1 = (__m512bh)_mm512_loadu_si512(k + W),
                       k2 = (__m512bh)_mm512_loadu_si512(k + 2 * W),
                       k3 = (__m512bh)_mm512_loadu_si512(k + 3 * W);
        for (int r = 0; r < rn; ++r) {
          const __m512bh a = (__m512bh)_mm512_set1_epi32(int(q[int64_t(i + r) * d_qk2 + c2]));
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, k0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, k1);
          acc[r][2] = _mm512_dpbf16_ps(acc[r][2], a, k2);
          acc[r][3] = _mm512_dpbf16_ps(acc[r][3], a, k3);
        }
      }
      for (int r = 0; r < rn; ++r)
        for (int j = 0; j < 4; ++j) _mm512_storeu_ps(S + int64_t(i + r) * kTile + j * W, acc[r][j]);
    }
  }

  void pv(const float* P, int R, int n, const float* corr, RowBlockState st) {
    pv_tile<VecAvx512>(P, R, n, kr.data(), kr_stride, dv_pad, corr, st);
  }
};

}  // namespace
}  // namespace mla::cpu
