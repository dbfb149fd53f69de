// The BF16 tiles of the decompressed prefill (AVX512_BF16), a tile policy of
// mla_prefill_driver.h: both products on vdpbf16ps with FP32 accumulation, as the all-BF16
// absorbed decode (decode_tile_bf16pv.h) whose pieces it uses; the online softmax stays FP32.
//   kb: [H][kPrefillChunk][kb_stride] u16   each head's key rows k_nope | k_pe of the chunk, BF16
//   vp: [H][kPrefillChunk / 2][dv_pad] u32  each head's V as token pairs (v[2t][c], v[2t+1][c])
//   qT: [d_qk / 2][ld] u32                  the row block's query channel pairs, rows as lanes
//   pp: [kKeyStep / 2][ld] u32              the probabilities as token pairs
// Numerics: q, k and v are rounded to BF16 (RNE, relative ≤ 2^-8 each) once per chunk or row
// block, and each probability once per tile, so a score carries ≤ 2·2^-8 · Σ_c |q_c k_c| from its
// inputs beside FP32 accumulation, and an output ≤ 2·2^-8 · Σ_t p_t |v_tc| from P and V (plus the
// up-projection's); the FP32 tiles of mla_prefill_driver.h have neither.
// tests/unit/kernels/mla_prefill_lowp_test.cc derives its bound from these. Include inside the
// ISA's target region (avx512bf16).
#pragma once

#include "kernels/cpu/decode_bf16_common.h"
#include "kernels/cpu/decode_tile_bf16pv.h"
#include "kernels/cpu/mla_prefill_driver.h"

namespace mla::cpu {
namespace {

// dst[0, len) = BF16 (RNE) of src[0, len).
inline void round_row_bf16(const float* src, int len, uint16_t* dst) {
  for (int c = 0; c < len; c += 16) {
    const __mmask16 m = __mmask16(len - c >= 16 ? 0xFFFF : (1u << (len - c)) - 1);
    const __m256i b = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + c));
    _mm256_mask_storeu_epi16(dst + c, m, b);
  }
}

struct PrefillTileBf16 {
  // A whole chunk per online-softmax step: a row block's O (128 rows x 128 channels, 64 KiB)
  // is read, rescaled and written once per chunk instead of once per 64-key tile.
  static constexpr int kKeyStep = kPrefillChunk;
  using QWord = uint32_t;
  struct Scratch {
    AlignedBuffer<uint32_t> pp;
  };
  const MlaPrefillParams* p = nullptr;
  int d_qk = 0, d_qk2 = 0, dv_pad = 0, kb_stride = 0;
  int64_t kb_head = 0, vp_head = 0;
  // The chunk's K and V, the calling thread's buffers kept between calls (V3: 21 MB a layer,
  // which a fresh zero-filled allocation per call would fault in again).
  uint16_t *kb = nullptr, *zero_row = nullptr;
  uint32_t* vp = nullptr;

  void begin(const MlaPrefillParams& params) {
    p = &params;
    d_qk = p->d_n + p->d_r;
    d_qk2 = d_qk / 2;  // even: the variant's supports() checks
    dv_pad = round_up(p->d_v, 64);
    kb_stride = round_up(d_qk, 32);
    kb_head = int64_t(kPrefillChunk) * kb_stride;
    vp_head = int64_t(kPrefillChunk / 2) * dv_pad;
    static thread_local AlignedBuffer<uint16_t> kb_buf, zero_buf;
    static thread_local AlignedBuffer<uint32_t> vp_buf;
    kb = ensure_scratch(kb_buf, size_t(p->h_q * kb_head));
    vp = ensure_scratch(vp_buf, size_t(p->h_q * vp_head));
    zero_row = ensure_scratch(zero_buf, size_t(kb_stride));  // never written: stays zero
  }

  // The chunk's n_c tokens: per head, key rows k_nope | k_pe in BF16 and V as BF16 token pairs
  // (a last odd token pairs with zeros).
  void chunk(int n_c, const float* knope, const float* kpe, const float* v, ThreadPool& pool) {
    const int H = p->h_q, d_n = p->d_n, d_r = p->d_r, d_v = p->d_v;
    const int64_t ld_k = int64_t(H) * d_n, ld_v = int64_t(H) * d_v;
    const __m512i halves = _mm512_load_si512(kPairHalves);
    pool.parallel_for(H, [&](int64_t h, int) {
      uint16_t* kh = kb + h * kb_head;
      for (int t = 0; t < n_c; ++t) {
        round_row_bf16(knope + t * ld_k + h * d_n, d_n, kh + int64_t(t) * kb_stride);
        round_row_bf16(kpe + int64_t(t) * d_r, d_r, kh + int64_t(t) * kb_stride + d_n);
      }
      uint32_t* vh = vp + h * vp_head;
      for (int t2 = 0; t2 < (n_c + 1) / 2; ++t2) {
        const float* a = v + int64_t(2 * t2) * ld_v + h * d_v;
        const bool pair = 2 * t2 + 1 < n_c;
        for (int c = 0; c < dv_pad; c += 16) {
          const __mmask16 m = __mmask16(d_v - c >= 16 ? 0xFFFF
                                        : d_v <= c    ? 0
                                                      : (1u << (d_v - c)) - 1);
          const __m512 x = _mm512_maskz_loadu_ps(m, a + c);
          const __m512 y = pair ? _mm512_maskz_loadu_ps(m, a + ld_v + c) : _mm512_setzero_ps();
          const __m512i xy = (__m512i)_mm512_cvtne2ps_pbh(y, x);  // x in words 0-15
          _mm512_store_si512(vh + int64_t(t2) * dv_pad + c, _mm512_permutexvar_epi16(halves, xy));
        }
      }
    });
  }

  // Words of one row block's prepared queries, ld lanes at most.
  int64_t q_words(int ld) const { return int64_t(d_qk2) * ld; }
  // qT [d_qk2][ld]: BF16 channel pairs of the block's queries of head h (padding lanes zero).
  void prepare_q(uint32_t* qT, int h, int s0, int R, int ld) const {
    std::fill(qT, qT + size_t(d_qk2) * ld, 0u);
    for (int i = 0; i < R; ++i) {
      const float* q = p->q + (int64_t(s0 + i) * p->h_q + h) * d_qk;
      for (int c2 = 0; c2 < d_qk2; ++c2)
        qT[int64_t(c2) * ld + i] =
            uint32_t(f32_to_bf16(q[2 * c2])) | uint32_t(f32_to_bf16(q[2 * c2 + 1])) << 16;
    }
  }

  // ST [round_up(n, kTile)][ld] = scores of keys tok0 .. tok0 + n of the chunk, kTile at a time.
  void scores(Scratch&, const uint32_t* qT, int h, int tok0, int n, int ld, float* ST) const {
    const uint16_t* kh = kb + int64_t(h) * kb_head;
    for (int j0 = 0; j0 < n; j0 += kTile) {
      const uint8_t* rows[kTile];
      for (int j = 0; j < kTile; ++j)
        rows[j] = reinterpret_cast<const uint8_t*>(
            j0 + j < n ? kh + int64_t(tok0 + j0 + j) * kb_stride : zero_row);
      score_tile_bf16(qT, ld, 0, d_qk2, rows, {}, ST + int64_t(j0) * ld);
    }
  }

  void pv(Scratch& sc, int h, int tok0, int n, const float* ST, int R, int ld, const float* corr,
          RowBlockState st) const {
    const int np = (n + 1) / 2;  // ST rows past n hold probability 0
    uint32_t* pp = ensure_scratch(sc.pp, size_t(kKeyStep / 2) * ld);
    probability_pairs(ST, ld, np, n, nullptr, 0, 1.0f, pp);
    const uint32_t* vh = vp + int64_t(h) * vp_head + int64_t(tok0 / 2) * dv_pad;
    pv_in_row_groups(R, dv_pad, st, [&]<int NR>(int i, int ch) {
      pv_rows_bf16<NR>(pp, ld, vh, dv_pad, np, i, ch, corr, st);
    });
  }
};

}  // namespace
}  // namespace mla::cpu
