// Tile policy of the absorbed decode on int8 dot products (AVX512-VNNI vpdpbusd, u8 × s8 in quads
// of four products per int32 lane, twice vdpbf16ps's rate). An INT8 cache's latent is already
// int8 codes with one FP32 scale per 128 channels (core/kv_format.h): its keys need only their
// codes + 128 for vpdpbusd's unsigned side; a BF16 cache's rows are quantised per tile to the
// same blocks (registry.cc takes it only where enough rows share that work). Rows (heads ×
// queries) are the lanes of the score product, channels the lanes of P·V, as in
// decode_tile_bf16pv.h.
//   qI: [r4][ld] u32          the query's latent as s8 quads, per 128-channel block j its own
//   sq, cq: [nblk][ld] f32    scale amax_j / 127 and 128 · Σ codes (the keys' + 128, taken off)
//   qR: [d_r / 2][ld] u32     q_pe as BF16 channel pairs: k_pe is BF16 in the cache (exact)
//   ku: [kTile][r] u8         the tile's key codes + 128
//   ks: [kTile][nblk] f32     their block scales (0 past the tile's keys)
//   vq: [kTile / 4][dv_pad] u32   the same codes as token quads per channel, 64-channel chunks
//                                 in unpack order (see `unpermute_o`)
//   pq: [nblk][kTile / 4][ld] u32 probabilities times their key's block scale, as u8 per row
//   rs: [nblk][ld] f32            and that row's unit: max over the tile / 255
// Score of key t, row i: Σ_j ks[t][j] · sq[j][i] · (Σ_c ku[t][c] · qI[c][i] − cq[j][i]) + q_pe ·
// k_pe. Numerics: the query's codes carry |Δq| ≤ sq/2 per channel (q_pe: one BF16 rounding); the
// keys are the cache's own values; each scaled probability p_t·ks[t][j] is rounded to a step of
// rs[j][i] (|Δ| ≤ rs/2 + its FP32 rounding), against the running maximum of its step as in the
// BF16 variant. Integer sums are exact in FP32 (a block: 128 · 255 · 127 < 2^24; a tile's P·V:
// 64 · 255 · 127). tests/unit/kernels/mla_decode_int8_test.cc checks the kernel against the same
// quantised arithmetic in FP64, within the FP32 roundings left.
// Include inside the ISA's target region (avx512vnni, avx512bf16).
#pragma once

#include "kernels/cpu/cache_row_bf16.h"
#include "kernels/cpu/decode_bf16_common.h"
#include "kernels/cpu/int8_quads.h"
#include "kernels/cpu/mla_decode_driver.h"

namespace mla::cpu {
namespace {

// ST[kk][v ..] (=, or += when add) ks[kk][j] · sq[v ..] · (Σ_{c4 in [c4a, c4b)} dot4(ku_kk[c4],
// qI[c4][v ..]) − cq[v ..]) for NK keys × NV vectors of rows: one 128-channel block j.
template <int NV, int NK>
inline void score_block_int8(const uint32_t* qI, int ld, int c4a, int c4b, const uint8_t* const* ku,
                             const float* ks, int nblk, int j, const float* sq, const float* cq,
                             bool add, float* ST) {
  __m512i acc[NK][NV];
  for (auto& a : acc)
    for (auto& x : a) x = _mm512_setzero_si512();
  for (int c4 = c4a; c4 < c4b; ++c4) {
    __m512i q[NV];
    for (int k = 0; k < NV; ++k) q[k] = _mm512_loadu_si512(qI + int64_t(c4) * ld + 16 * k);
    for (int kk = 0; kk < NK; ++kk) {
      const __m512i b = _mm512_set1_epi32(int(load_u32(ku[kk] + 4 * c4)));
      for (int k = 0; k < NV; ++k) acc[kk][k] = dpbusd_in_place(acc[kk][k], b, q[k]);
    }
  }
  for (int kk = 0; kk < NK; ++kk) {
    const __m512 s = _mm512_set1_ps(ks[int64_t(kk) * nblk + j]);
    for (int k = 0; k < NV; ++k) {
      float* dst = ST + int64_t(kk) * ld + 16 * k;
      const __m512 dot =
          _mm512_sub_ps(_mm512_cvtepi32_ps(acc[kk][k]), _mm512_loadu_ps(cq + 16 * k));
      const __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(sq + 16 * k), s);
      _mm512_storeu_ps(
          dst, add ? _mm512_fmadd_ps(dot, scale, _mm512_loadu_ps(dst)) : _mm512_mul_ps(dot, scale));
    }
  }
}

// O[i][ch .. ch+64) = O·corr + rs[i] · Σ_{t4 < nq} dot4(pq[t4][i], vq[t4][ch ..]) for NR rows
// (O's 64 channels in vq's unpack order).
template <int NR>
inline void pv_rows_int8_rowscale(const uint32_t* pq, int ld, const uint32_t* vq, const float* rs,
                                  int dv_pad, int nq, int i, int ch, const float* corr,
                                  RowBlockState st) {
  __m512i acc[NR][4];
  pv_quads_int8<NR>(pq, ld, vq, dv_pad, nq, i, ch, acc);
  for (int r = 0; r < NR; ++r) {
    const __m512 c = _mm512_set1_ps(corr[i + r]), s = _mm512_set1_ps(rs[i + r]);
    float* o = st.o + (i + r) * st.ld_o + ch;
    for (int k = 0; k < 4; ++k)
      _mm512_storeu_ps(o + 16 * k, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][k]), s,
                                                   _mm512_mul_ps(_mm512_loadu_ps(o + 16 * k), c)));
  }
}

struct DecodeTileInt8 {
  static constexpr int W = 16;
  static constexpr int kRowBlock = 128;  // one block for all 128 heads: a tile prepared once
  AlignedBuffer<uint32_t> qI, qR, vq, pq;
  AlignedBuffer<uint8_t> ku;
  AlignedBuffer<uint16_t> zero_rope;
  AlignedBuffer<float> sq, cq, ks, rs, qrow;
  const uint8_t* rope[kTile] = {};
  const uint8_t* keys[kTile] = {};
  KvRecordLayout layout;  // INT8 records
  bool bf16 = false;      // a BF16 cache: its rows quantised per tile as the INT8 format would
  int r = 0, d_r = 0, r4 = 0, dv_pad = 0, nblk = 0, ld = 0;
  int64_t row_bytes = 0;

  int d_v_pad() const { return dv_pad; }
  static int rows_pad(int R) { return round_up(R, W); }

  void begin(const MlaDecodeParams& p) {
    r = p.d_v;
    d_r = p.d_qk - p.d_v;
    r4 = r / 4;
    dv_pad = round_up(r, 64);
    nblk = (r + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
    bf16 = p.cache.dtype == DType::kBF16;
    layout = kv_record_layout(KvCacheDtype::kINT8, r, d_r);
    row_bytes = bf16 ? int64_t(2) * (r + d_r) : layout.record_bytes;
    const int ldm = rows_pad(kRowBlock);
    ensure_scratch(qI, size_t(r4) * ldm);
    ensure_scratch(qR, size_t(std::max(1, d_r / 2)) * ldm);
    ensure_scratch(sq, size_t(nblk) * ldm);
    ensure_scratch(cq, size_t(nblk) * ldm);
    ensure_scratch(qrow, size_t(p.d_qk));
    ensure_scratch(ku, size_t(kTile) * dv_pad);
    ensure_scratch(ks, size_t(kTile) * nblk);
    ensure_scratch(vq, size_t(kTile / 4) * dv_pad);
    ensure_scratch(pq, size_t(nblk) * (kTile / 4) * ldm);
    ensure_scratch(rs, size_t(nblk) * ldm);
    ensure_scratch(zero_rope, size_t(std::max(2, d_r)) + 32);
  }

  // Rows r0 .. r0 + R of sequence b: the latent as s8 quads per 128-channel block, q_pe as BF16
  // pairs (padding lanes: code 0, scale 0).
  void prepare_q(const MlaDecodeParams& p, int b, int r0, int R) {
    ld = rows_pad(R);
    std::fill(qI.data(), qI.data() + size_t(r4) * ld, 0u);
    std::fill(qR.data(), qR.data() + size_t(std::max(1, d_r / 2)) * ld, 0u);
    std::fill(sq.data(), sq.data() + size_t(nblk) * ld, 0.0f);
    std::fill(cq.data(), cq.data() + size_t(nblk) * ld, 0.0f);
    uint8_t codes[kFp8ScaleBlock];
    for (int i = 0; i < R; ++i) {
      const int64_t row = int64_t(b) * p.s_q * p.h_q + r0 + i;
      float* q = qrow.data();
      if (p.q_dtype == DType::kBF16) {
        const uint16_t* src = static_cast<const uint16_t*>(p.q) + row * p.d_qk;
        for (int c = 0; c < p.d_qk; ++c) q[c] = bf16_to_f32(src[c]);
      } else {
        const float* src = static_cast<const float*>(p.q) + row * p.d_qk;
        std::copy(src, src + p.d_qk, q);
      }
      for (int j = 0; j < nblk; ++j) {
        const int c0 = j * kFp8ScaleBlock, n = std::min(kFp8ScaleBlock, r - c0);
        int32_t sum = 0;
        sq[int64_t(j) * ld + i] = quantize_part_s8(q + c0, n, 0, codes, &sum);
        cq[int64_t(j) * ld + i] = 128.0f * float(sum);
        for (int c4 = 0; c4 < n / 4; ++c4)
          qI[int64_t(c0 / 4 + c4) * ld + i] = load_u32(codes + 4 * c4);
      }
      for (int c2 = 0; c2 < d_r / 2; ++c2)
        qR[int64_t(c2) * ld + i] =
            uint32_t(f32_to_bf16(q[r + 2 * c2])) | uint32_t(f32_to_bf16(q[r + 2 * c2 + 1])) << 16;
    }
  }

  // A BF16 latent row as codes + 128 per 128-channel block with scale amax / 127 (the INT8
  // format's blocks; quantize_part_s8's rounding), the scales into ks_row.
  void quantize_bf16_row(const uint16_t* src, uint8_t* dst, float* ks_row) {
    float* x = qrow.data();  // the query's scratch: prepare_q is done with it
    for (int c = 0; c < r; c += 16) {
      const __mmask16 m = __mmask16(r - c >= 16 ? 0xFFFF : (1u << (r - c)) - 1);
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + c));
      _mm512_mask_storeu_ps(x + c, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    for (int jb = 0; jb < nblk; ++jb) {
      const int c0 = jb * kFp8ScaleBlock;
      int32_t unused = 0;
      ks_row[jb] =
          quantize_part_s8(x + c0, std::min(kFp8ScaleBlock, r - c0), 128, dst + c0, &unused);
    }
  }

  // Keys t0 .. t0 + n: codes + 128 and block scales, k_pe in place, the codes as token quads.
  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    const uint8_t* zero = reinterpret_cast<const uint8_t*>(zero_rope.data());
    for (int j = 0; j < kTile; ++j) {
      uint8_t* dst = ku.data() + int64_t(j) * dv_pad;
      keys[j] = dst;
      if (j >= n) {
        std::fill(dst, dst + r, uint8_t(0x80));
        std::fill(ks.data() + int64_t(j) * nblk, ks.data() + int64_t(j + 1) * nblk, 0.0f);
        rope[j] = zero;
        continue;
      }
      const uint8_t* rec = cache_row(p, b, t0 + j, row_bytes);
      if (bf16) {
        quantize_bf16_row(reinterpret_cast<const uint16_t*>(rec), dst,
                          ks.data() + int64_t(j) * nblk);
        rope[j] = rec + 2 * r;
        continue;
      }
      for (int c = 0; c < r; c += 64) {
        const __mmask64 m = r - c >= 64 ? ~__mmask64(0) : (__mmask64(1) << (r - c)) - 1;
        _mm512_mask_storeu_epi8(
            dst + c, m,
            _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, rec + layout.latent_offset_bytes + c),
                             flip));
      }
      std::memcpy(ks.data() + int64_t(j) * nblk, rec + layout.scale_offset_bytes, 4 * size_t(nblk));
      rope[j] = rec + layout.rope_offset_bytes;
    }
    // Token quads: per 64 channels of 4 keys, byte unpacks leave vector k's 128-bit lane L with
    // channels 16L + 4k .. 16L + 4k + 3 (undone on O by unpermute_o).
    for (int t4 = 0; t4 < kTile / 4; ++t4) {
      uint32_t* dst = vq.data() + int64_t(t4) * dv_pad;
      for (int c = 0; c < dv_pad; c += 64) {
        const __mmask64 m = r - c >= 64 ? ~__mmask64(0)
                            : r <= c    ? __mmask64(0)
                                        : (__mmask64(1) << (r - c)) - 1;
        __m512i x[4];
        for (int e = 0; e < 4; ++e)  // codes = (codes + 128) ^ 0x80; 0 past r and the keys
          x[e] = _mm512_maskz_mov_epi8(
              m,
              _mm512_xor_si512(
                  _mm512_maskz_loadu_epi8(m, ku.data() + int64_t(4 * t4 + e) * dv_pad + c), flip));
        const __m512i a = _mm512_unpacklo_epi8(x[0], x[1]), bb = _mm512_unpackhi_epi8(x[0], x[1]);
        const __m512i cc = _mm512_unpacklo_epi8(x[2], x[3]), d = _mm512_unpackhi_epi8(x[2], x[3]);
        _mm512_store_si512(dst + c, _mm512_unpacklo_epi16(a, cc));
        _mm512_store_si512(dst + c + 16, _mm512_unpackhi_epi16(a, cc));
        _mm512_store_si512(dst + c + 32, _mm512_unpacklo_epi16(bb, d));
        _mm512_store_si512(dst + c + 48, _mm512_unpackhi_epi16(bb, d));
      }
    }
  }

  void scores(float* ST) {
    for_row_vectors(ld, [&]<int NV, int NK>(int v) {
      for (int k0 = 0; k0 < kTile; k0 += NK)
        for (int j = 0; j < nblk; ++j) {
          const int c4a = j * kFp8ScaleBlock / 4, c4b = std::min(r4, (j + 1) * kFp8ScaleBlock / 4);
          score_block_int8<NV, NK>(qI.data() + v, ld, c4a, c4b, keys + k0, ks.data() + k0 * nblk,
                                   nblk, j, sq.data() + int64_t(j) * ld + v,
                                   cq.data() + int64_t(j) * ld + v, j > 0,
                                   ST + int64_t(k0) * ld + v);
        }
    });
    if (d_r > 0) {
      ScoreRangeOp op;
      op.add = true;
      score_tile_bf16(qR.data(), ld, 0, d_r / 2, rope, op, ST);
    }
  }

  // Per block j: p · ks[t][j] as u8 steps of its row's maximum / 255, then O += P·V per 64
  // channels of the block.
  void pv(const float* PT, int R, int n, const float* corr, RowBlockState st) {
    const int nq = (n + 3) / 4;  // rows of PT past n hold probability 0
    for (int j = 0; j < nblk; ++j) {
      uint32_t* pqj = pq.data() + int64_t(j) * (kTile / 4) * ld;
      float* rsj = rs.data() + int64_t(j) * ld;
      for (int v = 0; v < ld; v += W) {
        __m512 mx = _mm512_setzero_ps();
        for (int t = 0; t < 4 * nq; ++t)
          mx = _mm512_max_ps(mx, _mm512_mul_ps(_mm512_loadu_ps(PT + int64_t(t) * ld + v),
                                               _mm512_set1_ps(ks[int64_t(t) * nblk + j])));
        _mm512_storeu_ps(rsj + v, _mm512_mul_ps(mx, _mm512_set1_ps(1.0f / 255.0f)));
        const __mmask16 live = _mm512_cmp_ps_mask(mx, _mm512_setzero_ps(), _CMP_GT_OQ);
        const __m512 inv = _mm512_maskz_div_ps(live, _mm512_set1_ps(255.0f), mx);
        const __m512i hi = _mm512_set1_epi32(255);
        for (int t4 = 0; t4 < nq; ++t4) {
          __m512i x[4];
          for (int e = 0; e < 4; ++e) {
            const int t = 4 * t4 + e;
            const __m512 pk = _mm512_mul_ps(_mm512_loadu_ps(PT + int64_t(t) * ld + v),
                                            _mm512_set1_ps(ks[int64_t(t) * nblk + j]));
            x[e] = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(pk, inv)), hi);
          }
          _mm512_store_si512(pqj + int64_t(t4) * ld + v, quad_bytes(x[0], x[1], x[2], x[3]));
        }
      }
      const int ch_end = std::min(dv_pad, (j + 1) * kFp8ScaleBlock);
      for (int ch = j * kFp8ScaleBlock; ch < ch_end; ch += 64) {
        int i = 0;
        for (; i + 4 <= R; i += 4)
          pv_rows_int8_rowscale<4>(pqj, ld, vq.data(), rsj, dv_pad, nq, i, ch, corr, st);
        for (; i < R; ++i)
          pv_rows_int8_rowscale<1>(pqj, ld, vq.data(), rsj, dv_pad, nq, i, ch, corr, st);
      }
    }
  }

  // O's channels back in order: within each 64 channels, position 16k + 4L + e holds channel
  // 16L + 4k + e (k, L < 4), a 4 × 4 transpose of 128-bit lanes.
  void unpermute_o(int R, RowBlockState st) const {
    for (int i = 0; i < R; ++i)
      for (int c = 0; c < dv_pad; c += 64) {
        float* o = st.o + int64_t(i) * st.ld_o + c;
        const __m512 v0 = _mm512_loadu_ps(o), v1 = _mm512_loadu_ps(o + 16),
                     v2 = _mm512_loadu_ps(o + 32), v3 = _mm512_loadu_ps(o + 48);
        const __m512 t0 = _mm512_shuffle_f32x4(v0, v1, 0x44),
                     t1 = _mm512_shuffle_f32x4(v0, v1, 0xEE);
        const __m512 t2 = _mm512_shuffle_f32x4(v2, v3, 0x44),
                     t3 = _mm512_shuffle_f32x4(v2, v3, 0xEE);
        _mm512_storeu_ps(o, _mm512_shuffle_f32x4(t0, t2, 0x88));
        _mm512_storeu_ps(o + 16, _mm512_shuffle_f32x4(t0, t2, 0xDD));
        _mm512_storeu_ps(o + 32, _mm512_shuffle_f32x4(t1, t3, 0x88));
        _mm512_storeu_ps(o + 48, _mm512_shuffle_f32x4(t1, t3, 0xDD));
      }
  }
};

}  // namespace
}  // namespace mla::cpu
