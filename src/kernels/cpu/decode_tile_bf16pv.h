// Tile policy of the all-BF16 absorbed decode (vdpbf16ps for both products, FP32 accumulation):
// what FlashMLA computes on Hopper. Rows (heads × queries) are the lanes of the score product as
// in decode_tile_bf16dot.h; P·V runs with channels as the lanes, which needs token pairs:
//   qT: [d_qk2][ld] u32          BF16 query channel pairs (d_qk2 = d_qk / 2, ld = R padded to 16)
//   kb: [kTile][kb_stride] u16   decoded key rows of a quantised cache (exact BF16 codes)
//   ks: [kTile][nblk] f32        their latent block scales (FP8, INT8)
//   vp: [kTile/2][dv_pad] u32    V as token pairs: (v[2t][c], v[2t+1][c]) per channel c
//   pp: [nblk][kTile/2][ld] u32  probabilities as token pairs, times the V block scale
//   ST: [kTile][ld] f32          scores, then probabilities (owned by the driver)
// Numerics: the probability p (FP32, in [0, 1]) times its key's V scale s is rounded to BF16
// once, so each term of O carries a relative error ≤ 2^-8 and |ΔO_c| ≤ 2^-8 · Σ_t p_t |v_tc|
// (the running sum l stays FP32); the per-element bound of the harness and `mla verify` adds
// exactly this to FlashMLA's rule. Everything else is as in the BF16-dot variant: cache codes are
// exact in BF16, scales are applied in FP32. docs/kernels/mla_decode.md has the derivation.
#pragma once

#include "kernels/cpu/cache_row_bf16.h"
#include "kernels/cpu/decode_bf16_common.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {
namespace {

// O[i][ch .. ch+64) = O·corr + Σ_{t2 < np} dot2(pp[t2][i], vp[t2][ch ..]) for NR rows from i.
template <int NR>
inline void pv_rows_bf16(const uint32_t* pp, int ld, const uint32_t* vp, int dv_pad, int np, int i,
                         int ch, const float* corr, RowBlockState st) {
  __m512 acc[NR][4];
  for (int r = 0; r < NR; ++r) {
    const __m512 c = _mm512_set1_ps(corr[i + r]);
    for (int k = 0; k < 4; ++k)
      acc[r][k] = _mm512_mul_ps(_mm512_loadu_ps(st.o + (i + r) * st.ld_o + ch + 16 * k), c);
  }
  for (int t2 = 0; t2 < np; ++t2) {
    const uint32_t* v = vp + int64_t(t2) * dv_pad + ch;
    __m512bh vv[4];
    for (int k = 0; k < 4; ++k) vv[k] = (__m512bh)_mm512_load_si512(v + 16 * k);
    const uint32_t* pr = pp + int64_t(t2) * ld + i;
    for (int r = 0; r < NR; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(int(pr[r]));
      for (int k = 0; k < 4; ++k) acc[r][k] = _mm512_dpbf16_ps(acc[r][k], a, vv[k]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int k = 0; k < 4; ++k) _mm512_storeu_ps(st.o + (i + r) * st.ld_o + ch + 16 * k, acc[r][k]);
}

struct DecodeTileBf16Pv {
  static constexpr int W = 16;
  static constexpr int kRowBlock = 128;  // one block for all 128 heads: a tile decoded once
  AlignedBuffer<uint32_t> qT, vp, pp;
  AlignedBuffer<uint16_t> kb, zero_row;
  AlignedBuffer<float> ks;
  const uint8_t* rows[kTile] = {};
  DType kv = DType::kBF16;
  int d_qk = 0, d_qk2 = 0, d_v = 0, dv_pad = 0, kb_stride = 0, ld = 0;
  int nblk = 1;               // scale blocks of V (FP8 / INT8: ceil(r / 128)), else 1
  float global_scale = 1.0f;  // NVFP4: the layer's g, applied to latent scores and to P
  int64_t row_bytes = 0;

  int d_v_pad() const { return dv_pad; }
  static int rows_pad(int R) { return round_up(R, W); }
  bool block_scaled() const { return kv == DType::kF8E4M3 || kv == DType::kI8; }

  void begin(const MlaDecodeParams& p) {
    kv = p.cache.dtype;
    d_qk = p.d_qk;
    d_qk2 = d_qk / 2;
    d_v = p.d_v;
    dv_pad = round_up(d_v, 4 * W);
    kb_stride = round_up(d_qk, 32);
    nblk = block_scaled() ? (d_v + kFp8ScaleBlock - 1) / kFp8ScaleBlock : 1;
    global_scale = kv == DType::kE2M1 ? p.cache.global_scale : 1.0f;
    row_bytes = CacheRowFormat(kv, d_v, d_qk - d_v, p.cache.global_scale).row_bytes;
    const int ldm = rows_pad(kRowBlock);
    ensure_scratch(qT, size_t(d_qk2) * ldm);
    ensure_scratch(vp, size_t(kTile / 2) * dv_pad);
    ensure_scratch(pp, size_t(nblk) * (kTile / 2) * ldm);
    ensure_scratch(zero_row, size_t(kb_stride) + 64);
    if (kv != DType::kBF16) {
      ensure_scratch(kb, size_t(kTile) * kb_stride);
      ensure_scratch(ks, size_t(kTile) * nblk);
    }
  }

  void prepare_q(const MlaDecodeParams& p, int b, int r0, int R) {
    ld = rows_pad(R);
    transpose_q_pairs(p, b, r0, R, ld, qT.data());
  }

  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    const CacheRowFormat f(kv, d_v, d_qk - d_v, p.cache.global_scale);
    const uint8_t* zero = reinterpret_cast<const uint8_t*>(zero_row.data());
    for (int j = 0; j < kTile; ++j) {
      if (j >= n) {
        rows[j] = zero;
        continue;
      }
      const uint8_t* src = cache_row(p, b, t0 + j, row_bytes);
      if (kv == DType::kBF16) {
        rows[j] = src;
      } else {
        uint16_t* dst = kb.data() + int64_t(j) * kb_stride;
        decode_row_bf16(f, src, dst, dst + d_v, ks.data() + int64_t(j) * nblk);
        rows[j] = reinterpret_cast<const uint8_t*>(dst);
      }
    }
    build_v_pairs(rows, (n + 1) / 2, d_v, dv_pad, vp.data(), dv_pad);  // channels d_v .. dv_pad: 0
  }

  void scores(float* ST) {
    const int r2 = d_v / 2;
    if (kv == DType::kBF16) {
      score_tile_bf16(qT.data(), ld, 0, d_qk2, rows, {}, ST);
      return;
    }
    if (block_scaled()) {
      for (int j = 0; j < nblk; ++j) {
        ScoreRangeOp op;
        op.add = j > 0;
        op.key_scale = ks.data() + j;
        op.key_scale_stride = nblk;
        score_tile_bf16(qT.data(), ld, j * (kFp8ScaleBlock / 2),
                        std::min(r2, (j + 1) * (kFp8ScaleBlock / 2)), rows, op, ST);
      }
    } else {
      ScoreRangeOp op;
      op.scale = global_scale;
      score_tile_bf16(qT.data(), ld, 0, r2, rows, op, ST);
    }
    ScoreRangeOp rope;
    rope.add = true;
    score_tile_bf16(qT.data(), ld, r2, d_qk2, rows, rope, ST);
  }

  // Probabilities into BF16 token pairs (per V scale block), then O += P·V block by block.
  void pv(const float* PT, int R, int n, const float* corr, RowBlockState st) {
    const int np = (n + 1) / 2;  // row 2·np − 1 < kTile of PT: probability 0 past n
    for (int j = 0; j < nblk; ++j)
      probability_pairs(PT, ld, np, n, block_scaled() ? ks.data() + j : nullptr, nblk, global_scale,
                        pp.data() + int64_t(j) * (kTile / 2) * ld);
    for (int ch = 0; ch < dv_pad; ch += 4 * W) {
      const int j = block_scaled() ? ch / kFp8ScaleBlock : 0;
      const uint32_t* ppj = pp.data() + int64_t(j) * (kTile / 2) * ld;
      int i = 0;
      for (; i + 4 <= R; i += 4) pv_rows_bf16<4>(ppj, ld, vp.data(), dv_pad, np, i, ch, corr, st);
      for (; i < R; ++i) pv_rows_bf16<1>(ppj, ld, vp.data(), dv_pad, np, i, ch, corr, st);
    }
  }
};

}  // namespace
}  // namespace mla::cpu
