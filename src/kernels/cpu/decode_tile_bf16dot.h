// Tile policy of the BF16-dot absorbed decode (vdpbf16ps, AVX512_BF16). The score product, the
// larger of the two (d_qk = 576 channels against d_v = 512), runs as pairwise BF16 dot products
// with FP32 accumulation. vdpbf16ps multiplies adjacent pairs along the reduction axis; the
// channels of a cache row are adjacent, so with rows (heads × queries) as the vector lanes each
// 32-bit word of a cache row (a channel pair) is broadcast straight from the paged cache:
//   qT: [d_qk2][ld] u32    BF16 query channel pairs, transposed once per work item
//                          (d_qk2 = d_qk / 2, ld = R padded to 16)
//   kr: [kTile][kr_stride] the tile's V widened to FP32 (d_v columns)
//   ST: [kTile][ld]        scores, then probabilities (owned by the driver)
// P·V stays in FP32 (FMA): rounding the probabilities to BF16 as well would cost ~2^-9 relative
// per probability, which fails FlashMLA's per-element output rule on short contexts, while a
// hi/lo BF16 split of P would cost as many instructions as FP32 FMA. Rounding the query costs
// ~1e-3 relative on the scores (docs/kernels/mla_decode.md), so this variant takes only a BF16
// query (supports() refuses F32) and a BF16 cache with even d_qk.
#pragma once

#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {
namespace {

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// ST[j0 + kk][v0 + 16k ...] = Σ_c2 dot2(qT[c2][v0 + 16k ...], key_kk[c2]) for NK keys × NV
// vectors of rows; keys are BF16 cache rows read as 32-bit channel pairs.
template <int NV, int NK>
inline void score_block_rows_bf16(const uint32_t* qT, int ld, int d_qk2, const uint8_t* const* keys,
                                  float* ST) {
  __m512 acc[NK][NV];
  for (auto& a : acc)
    for (auto& x : a) x = _mm512_setzero_ps();
  for (int c2 = 0; c2 < d_qk2; ++c2) {
    __m512bh q[NV];
    for (int k = 0; k < NV; ++k)
      q[k] = (__m512bh)_mm512_loadu_si512(qT + int64_t(c2) * ld + 16 * k);
    for (int kk = 0; kk < NK; ++kk) {
      const __m512bh b = (__m512bh)_mm512_set1_epi32(int(load_u32(keys[kk] + 4 * c2)));
      for (int k = 0; k < NV; ++k) acc[kk][k] = _mm512_dpbf16_ps(acc[kk][k], q[k], b);
    }
  }
  for (int kk = 0; kk < NK; ++kk)
    for (int k = 0; k < NV; ++k) _mm512_storeu_ps(ST + int64_t(kk) * ld + 16 * k, acc[kk][k]);
}

struct DecodeTileBf16Dot {
  static constexpr int W = 16;
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
    const uint8_t* q =
        static_cast<const uint8_t*>(p.q) + (int64_t(b) * p.s_q * p.h_q + r0) * d_qk * 2;
    std::fill(qT.data(), qT.data() + size_t(d_qk2) * ld, 0u);
    for (int i = 0; i < R; ++i)
      for (int c2 = 0; c2 < d_qk2; ++c2)
        qT[int64_t(c2) * ld + i] = load_u32(q + (int64_t(i) * d_qk + 2 * c2) * 2);
  }

  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    for (int j = 0; j < kTile; ++j) {
      rows[j] = j < n ? cache_row(p, b, t0 + j, 2 * int64_t(d_qk)) : zero_row.data();
      if (j < n) load_f32(DType::kBF16, rows[j], d_v, kr.data() + int64_t(j) * kr_stride);
    }
  }

  // Fewer row vectors take more keys per block: vdpbf16ps needs ~10 independent accumulators.
  void scores(float* ST) {
    for (int v = 0; v < ld;) {
      const int nv = std::min(4, (ld - v) / W);
      switch (nv) {
        case 4:
          score_keys<4, 4>(v, ST);
          break;
        case 3:
          score_keys<3, 4>(v, ST);
          break;
        case 2:
          score_keys<2, 4>(v, ST);
          break;
        default:
          score_keys<1, 8>(v, ST);
          break;
      }
      v += nv * W;
    }
  }

  template <int NV, int NK>
  void score_keys(int v, float* ST) {
    static_assert(kTile % NK == 0, "key blocks tile the tile");
    for (int j0 = 0; j0 < kTile; j0 += NK)
      score_block_rows_bf16<NV, NK>(qT.data() + v, ld, d_qk2, rows + j0, ST + int64_t(j0) * ld + v);
  }

  void pv(const float* PT, int R, int n, const float* corr, RowBlockState st) {
    pv_tile<VecAvx512>(PT, R, n, kr.data(), kr_stride, dv_pad, corr, st, /*p_row=*/1, /*p_key=*/ld);
  }
};

}  // namespace
}  // namespace mla::cpu
