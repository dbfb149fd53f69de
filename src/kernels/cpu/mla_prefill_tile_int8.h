// The int8 tiles of the decompressed prefill (AVX512-VNNI), a tile policy of mla_prefill_driver.h
// for models whose weight products already run on int8 (`--weight-dtype q8_0`, GGUF Q8_0 / Q4_K):
// both attention products on vpdpbusd (u8 × s8, four products summed into an int32 lane), twice
// the vdpbf16ps rate, so the causal attention of a long prompt costs half of the BF16 tiles'.
// The online softmax stays FP32. Layouts (a row block of ld query lanes, one head):
//   kq:    [H][kPrefillChunk][kq_stride] s8   key rows k_nope | k_pe, each part scaled by its own
//                                             amax / 127 (k_pe is not the same size as k_nope)
//   kmeta: [H][kPrefillChunk][4] f32          per key: s_nope, s_pe, 128 Σ codes_nope, 128 Σ
//   codes_pe vq:    [H][kPrefillChunk / 4][dv_pad] u32 V as token quads (v[4t..4t+3][c] codes),
//   each
//                                             channel scaled by its amax over the chunk / 127
//   vs:    [H][dv_pad] f32                    those channel scales / 255 (the probabilities' unit)
//   qT:    [d_qk / 4][ld] u32, then [2][ld] f32  query quads as u8 (code + 128: vpdpbusd's
//                                             unsigned side) and each row's two part scales
//   pq:    [kKeyStep / 4][ld] u32             probabilities as u8 quads, p · 255 rounded
// Σ (q + 128) k = Σ q k + 128 Σ k: the second term is the key's, subtracted before scaling.
// Numerics: per part, q and k carry |Δ| ≤ s (1/2 + 2^-16) with s = amax / 127 of their row's part
// (k beside the up-projection's own BF16 error), V the same with its channel's scale; integer
// sums are exact (|Σ| < 2^24 while a part has at most 512 channels: int8_prefill_tiles_fit);
// each probability p ∈ [0, 1] of a step is off by ≤ 1/510 + 2^-23 in units of that step's
// running maximum, which never exceeds the final one. tests/unit/kernels/mla_prefill_lowp_test.cc
// derives its bound from these; mla_prefill_int8_test.cc checks the tiles against the same
// quantised arithmetic in FP64. Include inside the ISA's target region (avx512vnni).
#pragma once

#include "kernels/cpu/decode_bf16_common.h"
#include "kernels/cpu/int8_quads.h"
#include "kernels/cpu/mla_prefill_driver.h"

namespace mla::cpu {
namespace {

// The int8 tiles' limits: whole quads per part, and exact int32 → FP32 sums.
inline bool int8_prefill_tiles_fit(const MlaPrefillParams& p) {
  return p.d_n % 4 == 0 && p.d_r % 4 == 0 && p.d_n <= 512 && p.d_r <= 512;
}

// ST[kk][v0 + 16k ...] (=, or += when add) sq[lane] · s_kk · (Σ_{c4 in [c4a, c4b)}
// dot4(qT[c4][lanes], key_kk[c4]) − corr_kk) for NK keys × NV vectors of query lanes: one part of
// the score. meta[kk] points at the key's 4 floats; `part` picks its scale (meta[part]) and
// correction (meta[2 + part]).
template <int NV, int NK>
inline void score_block_rows_int8(const uint32_t* qT, int ld, int c4a, int c4b,
                                  const uint8_t* const* keys, const float* const* meta, int part,
                                  const float* sq, bool add, float* ST) {
  __m512i acc[NK][NV];
  for (auto& a : acc)
    for (auto& x : a) x = _mm512_setzero_si512();
  for (int c4 = c4a; c4 < c4b; ++c4) {
    __m512i q[NV];
    for (int k = 0; k < NV; ++k) q[k] = _mm512_loadu_si512(qT + int64_t(c4) * ld + 16 * k);
    for (int kk = 0; kk < NK; ++kk) {
      const __m512i b = _mm512_set1_epi32(int(load_u32(keys[kk] + 4 * c4)));
      for (int k = 0; k < NV; ++k) acc[kk][k] = dpbusd_in_place(acc[kk][k], q[k], b);
    }
  }
  for (int kk = 0; kk < NK; ++kk) {
    const __m512 sk = _mm512_set1_ps(meta[kk][part]), corr = _mm512_set1_ps(meta[kk][2 + part]);
    for (int k = 0; k < NV; ++k) {
      float* dst = ST + int64_t(kk) * ld + 16 * k;
      const __m512 dot = _mm512_sub_ps(_mm512_cvtepi32_ps(acc[kk][k]), corr);
      const __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(sq + 16 * k), sk);
      _mm512_storeu_ps(
          dst, add ? _mm512_fmadd_ps(dot, scale, _mm512_loadu_ps(dst)) : _mm512_mul_ps(dot, scale));
    }
  }
}

// O[i][ch .. ch+64) = O·corr + vs[ch ..] · Σ_{t4 < nq} dot4(pq[t4][i], vq[t4][ch ..]) for NR rows.
template <int NR>
inline void pv_rows_int8(const uint32_t* pq, int ld, const uint32_t* vq, const float* vs,
                         int dv_pad, int nq, int i, int ch, const float* corr, RowBlockState st) {
  __m512i acc[NR][4];
  pv_quads_int8<NR>(pq, ld, vq, dv_pad, nq, i, ch, acc);
  for (int r = 0; r < NR; ++r) {
    const __m512 c = _mm512_set1_ps(corr[i + r]);
    float* o = st.o + (i + r) * st.ld_o + ch;
    for (int k = 0; k < 4; ++k)
      _mm512_storeu_ps(o + 16 * k, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][k]),
                                                   _mm512_loadu_ps(vs + ch + 16 * k),
                                                   _mm512_mul_ps(_mm512_loadu_ps(o + 16 * k), c)));
  }
}

struct PrefillTileInt8 {
  static constexpr int kKeyStep = kPrefillChunk;  // as the BF16 tiles: O rescaled once a chunk
  using QWord = uint32_t;
  struct Scratch {
    AlignedBuffer<uint32_t> pq;
  };
  const MlaPrefillParams* p = nullptr;
  int d_qk = 0, d_qk4 = 0, d_n4 = 0, dv_pad = 0, kq_stride = 0;
  int64_t kq_head = 0, vq_head = 0;
  // The calling thread's buffers, kept between calls (as the BF16 tiles' K and V).
  uint8_t *kq = nullptr, *zero_row = nullptr;
  float *kmeta = nullptr, *zero_meta = nullptr, *vs = nullptr;
  uint32_t* vq = nullptr;

  void begin(const MlaPrefillParams& params) {
    p = &params;
    d_qk = p->d_n + p->d_r;
    d_qk4 = d_qk / 4;
    d_n4 = p->d_n / 4;
    dv_pad = round_up(p->d_v, 64);
    kq_stride = round_up(d_qk, 64);
    kq_head = int64_t(kPrefillChunk) * kq_stride;
    vq_head = int64_t(kPrefillChunk / 4) * dv_pad;
    static thread_local AlignedBuffer<uint8_t> kq_buf, zero_buf;
    static thread_local AlignedBuffer<float> meta_buf, zero_meta_buf, vs_buf;
    static thread_local AlignedBuffer<uint32_t> vq_buf;
    kq = ensure_scratch(kq_buf, size_t(p->h_q * kq_head));
    kmeta = ensure_scratch(meta_buf, size_t(p->h_q) * kPrefillChunk * 4);
    vq = ensure_scratch(vq_buf, size_t(p->h_q * vq_head));
    vs = ensure_scratch(vs_buf, size_t(p->h_q) * dv_pad);
    zero_row = ensure_scratch(zero_buf, size_t(kq_stride));  // never written: stay zero
    zero_meta = ensure_scratch(zero_meta_buf, 4);
  }

  // The chunk's n_c tokens, per head: key parts quantised per token, V per channel.
  void chunk(int n_c, const float* knope, const float* kpe, const float* v, ThreadPool& pool) {
    const int H = p->h_q, d_n = p->d_n, d_r = p->d_r, d_v = p->d_v;
    const int64_t ld_k = int64_t(H) * d_n, ld_v = int64_t(H) * d_v;
    pool.parallel_for(H, [&](int64_t h, int) {
      for (int t = 0; t < n_c; ++t) {
        uint8_t* row = kq + h * kq_head + int64_t(t) * kq_stride;
        float* meta = kmeta + (h * kPrefillChunk + t) * 4;
        int32_t sum_n = 0, sum_r = 0;
        meta[0] = quantize_part_s8(knope + t * ld_k + h * d_n, d_n, 0, row, &sum_n);
        meta[1] =
            d_r > 0 ? quantize_part_s8(kpe + int64_t(t) * d_r, d_r, 0, row + d_n, &sum_r) : 0.0f;
        meta[2] = 128.0f * float(sum_n);
        meta[3] = 128.0f * float(sum_r);
      }
      const float* vh = v + h * d_v;
      uint32_t* vqh = vq + h * vq_head;
      float* vsh = vs + h * dv_pad;
      const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
      for (int c = 0; c < dv_pad; c += 16) {
        const __mmask16 m = __mmask16(d_v - c >= 16 ? 0xFFFF
                                      : d_v <= c    ? 0
                                                    : (1u << (d_v - c)) - 1);
        __m512 amax = _mm512_setzero_ps();
        for (int t = 0; t < n_c; ++t)
          amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(m, vh + t * ld_v + c)));
        const __mmask16 live = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ);
        const __m512 s = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));  // as quantize_part_s8
        const __m512 inv = _mm512_maskz_div_ps(live, _mm512_set1_ps(1.0f), s);
        _mm512_store_ps(vsh + c, _mm512_mul_ps(s, _mm512_set1_ps(1.0f / 255.0f)));
        for (int t4 = 0; t4 < (n_c + 3) / 4; ++t4) {
          __m512i x[4];
          for (int j = 0; j < 4; ++j) {
            const int t = 4 * t4 + j;
            const __m512 val =
                t < n_c ? _mm512_maskz_loadu_ps(m, vh + t * ld_v + c) : _mm512_setzero_ps();
            x[j] = _mm512_min_epi32(
                _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(val, inv)), lo), hi);
          }
          _mm512_store_si512(vqh + int64_t(t4) * dv_pad + c, quad_bytes(x[0], x[1], x[2], x[3]));
        }
      }
    });
  }

  // Words of one row block's prepared queries, ld lanes at most: the quads, then two scales a lane.
  int64_t q_words(int ld) const { return int64_t(d_qk4 + 2) * ld; }
  // qT: the block's queries of head h as u8 quads (padding lanes: code 128, scale 0).
  void prepare_q(uint32_t* qT, int h, int s0, int R, int ld) const {
    float* sq = reinterpret_cast<float*>(qT + int64_t(d_qk4) * ld);  // [2][ld]
    std::fill(qT, qT + size_t(d_qk4) * ld, 0x80808080u);
    std::fill(sq, sq + 2 * ld, 0.0f);
    uint8_t codes[1024];  // d_qk ≤ 1,024: int8_prefill_tiles_fit
    for (int i = 0; i < R; ++i) {
      const float* q = p->q + (int64_t(s0 + i) * p->h_q + h) * d_qk;
      int32_t unused = 0;
      sq[i] = quantize_part_s8(q, p->d_n, 128, codes, &unused);
      sq[ld + i] =
          p->d_r > 0 ? quantize_part_s8(q + p->d_n, p->d_r, 128, codes + p->d_n, &unused) : 0.0f;
      for (int c4 = 0; c4 < d_qk4; ++c4) qT[int64_t(c4) * ld + i] = load_u32(codes + 4 * c4);
    }
  }

  // ST [round_up(n, kTile)][ld] = scores of keys tok0 .. tok0 + n of the chunk, kTile at a time.
  void scores(Scratch&, const uint32_t* qT, int h, int tok0, int n, int ld, float* ST) const {
    const uint8_t* kh = kq + int64_t(h) * kq_head;
    const float* mh = kmeta + int64_t(h) * kPrefillChunk * 4;
    const float* sq = reinterpret_cast<const float*>(qT + int64_t(d_qk4) * ld);
    for (int j0 = 0; j0 < n; j0 += kTile) {
      const uint8_t* rows[kTile];
      const float* meta[kTile];
      for (int j = 0; j < kTile; ++j) {
        const bool live = j0 + j < n;
        rows[j] = live ? kh + int64_t(tok0 + j0 + j) * kq_stride : zero_row;
        meta[j] = live ? mh + int64_t(tok0 + j0 + j) * 4 : zero_meta;
      }
      float* out = ST + int64_t(j0) * ld;
      for_row_vectors(ld, [&]<int NV, int NK>(int v) {
        for (int k0 = 0; k0 < kTile; k0 += NK) {
          float* o = out + int64_t(k0) * ld + v;
          score_block_rows_int8<NV, NK>(qT + v, ld, 0, d_n4, rows + k0, meta + k0, 0, sq + v, false,
                                        o);
          if (d_qk4 > d_n4)
            score_block_rows_int8<NV, NK>(qT + v, ld, d_n4, d_qk4, rows + k0, meta + k0, 1,
                                          sq + ld + v, true, o);
        }
      });
    }
  }

  void pv(Scratch& sc, int h, int tok0, int n, const float* ST, int R, int ld, const float* corr,
          RowBlockState st) const {
    const int nq = (n + 3) / 4;  // ST rows past n hold probability 0
    uint32_t* pq = ensure_scratch(sc.pq, size_t(kKeyStep / 4) * ld);
    const __m512 unit = _mm512_set1_ps(255.0f);
    const __m512i lo = _mm512_setzero_si512(), hi = _mm512_set1_epi32(255);
    for (int t4 = 0; t4 < nq; ++t4)
      for (int r = 0; r < ld; r += 16) {
        __m512i x[4];
        for (int j = 0; j < 4; ++j) {
          const __m512 pr = _mm512_loadu_ps(ST + int64_t(4 * t4 + j) * ld + r);
          x[j] = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(pr, unit)), lo),
                                  hi);
        }
        _mm512_store_si512(pq + int64_t(t4) * ld + r, quad_bytes(x[0], x[1], x[2], x[3]));
      }
    const uint32_t* vqh = vq + int64_t(h) * vq_head + int64_t(tok0 / 4) * dv_pad;
    const float* vsh = vs + int64_t(h) * dv_pad;
    pv_in_row_groups(R, dv_pad, st, [&]<int NR>(int i, int ch) {
      pv_rows_int8<NR>(pq, ld, vqh, vsh, dv_pad, nq, i, ch, corr, st);
    });
  }
};

}  // namespace
}  // namespace mla::cpu
