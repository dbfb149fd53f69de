// Tile policy of the AMX-BF16 absorbed decode: both products on the tile unit (tdpbf16ps), FP32
// accumulation, the same numerics as decode_tile_bf16pv.h (BF16 query, probabilities times the V
// scale rounded to BF16 once; cache codes exact in BF16, scales in FP32). Layouts, with the
// channels padded per part so that every 32-channel step lies in one scale block:
//   lat_pad = r rounded up to 32, dk_pad = lat_pad + d_r rounded up to 32
//   qT: [dk_pad/2][ld] u32       query channel pairs, rows as columns: the B operand of S^T = K·Q^T
//   kb: [kKeys][dk_pad] u16      key rows in that layout (quantised caches, odd pages / dims);
//                                a BF16 cache with aligned dims and pages is read in place (A)
//   ST: [kKeys][ld] f32          S^T, key-major as the driver's softmax wants
//   tmp: [nblk][kKeys][ld] f32   each scale block's partial S^T (quantised caches), scaled into ST
//   pt: [kKeys/2][ld] u32, pa: [nblk][ld][kKeys] u16   probabilities as pairs, then row-major (A)
//   vp: [kKeys/2][ldv] u32       V as token pairs: the B operand of O = P·V
// (ldv = dv_pad + 16: rows 2 KiB apart would share L1 sets.) O [ld][ldv] (the driver's) is rescaled
// by corr in FP32 where a row's maximum moved, then accumulated in place by the tile unit.
// docs/kernels/mla_decode.md.
#pragma once

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cache_row_bf16.h"
#include "kernels/cpu/decode_bf16_common.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {
namespace {

struct DecodeTileAmx {
  static constexpr int W = 16;
  static constexpr int kRowBlock = 128;
  // Keys per step: the softmax runs over 128 keys at once, so O is rescaled and its tiles loaded
  // and stored once per 128 keys instead of per 64 (4 tdpbf16ps per accumulator tile, not 2).
  // 128 measured fastest of 64 to 512 (docs/BENCHMARKS.md): the step's keys, scores and V
  // pairs stay in L2 beside O.
  static constexpr int kKeys = 128;
  AlignedBuffer<uint32_t> qT, vp, pt;
  AlignedBuffer<uint16_t> kb, pa, zero_row;
  AlignedBuffer<float> ks, tmp;
  const uint8_t* rows[kKeys] = {};
  const uint8_t* ablk[kKeys / 16] = {};  // A operand of each 16-key block
  int64_t a_stride = 0;
  DType kv = DType::kBF16;
  int r = 0, d_r = 0, d_v = 0, dv_pad = 0, ldv = 0, lat_pad = 0, dk_pad = 0, ld = 0, nblk = 1;
  int n_keys = 0;         // keys of the current step
  bool in_place = false;  // keys read from the paged cache directly
  float global_scale = 1.0f;
  int64_t row_bytes = 0;

  int d_v_pad() const { return ldv; }  // O's row stride
  static int rows_pad(int R) { return round_up(R, W); }
  bool block_scaled() const { return kv == DType::kF8E4M3 || kv == DType::kI8; }

  void begin(const MlaDecodeParams& p) {
    kv = p.cache.dtype;
    r = d_v = p.d_v;
    d_r = p.d_qk - p.d_v;
    dv_pad = round_up(d_v, 4 * W);
    ldv = dv_pad + W;
    lat_pad = round_up(r, 32);
    dk_pad = lat_pad + round_up(d_r, 32);
    nblk = block_scaled() ? (r + kFp8ScaleBlock - 1) / kFp8ScaleBlock : 1;
    global_scale = kv == DType::kE2M1 ? p.cache.global_scale : 1.0f;
    row_bytes = CacheRowFormat(kv, r, d_r, p.cache.global_scale).row_bytes;
    in_place = kv == DType::kBF16 && r % 32 == 0 && d_r % 32 == 0 && p.cache.page_size % 16 == 0;
    const int ldm = rows_pad(kRowBlock);
    ensure_scratch(qT, size_t(dk_pad / 2) * ldm);
    ensure_scratch(vp, size_t(kKeys / 2) * ldv);
    ensure_scratch(pt, size_t(kKeys / 2) * ldm);
    ensure_scratch(pa, size_t(nblk) * ldm * kKeys);
    ensure_scratch(zero_row, size_t(dk_pad) + 64);
    ensure_scratch(ks, size_t(kKeys) * nblk);
    if (!in_place) ensure_scratch(kb, size_t(kKeys) * dk_pad);
    if (kv != DType::kBF16) ensure_scratch(tmp, size_t(nblk) * kKeys * ldm);  // scores()
    amx_configure();
  }
  void end_item() { _tile_release(); }

  // qT in the padded channel layout; pairs past r / d_r and rows past R are zero. Blocks of
  // 16 rows × 16 channel pairs are transposed in registers.
  void prepare_q(const MlaDecodeParams& p, int b, int r0, int R) {
    ld = rows_pad(R);
    const uint8_t* q =
        static_cast<const uint8_t*>(p.q) + (int64_t(b) * p.s_q * p.h_q + r0) * p.d_qk * 2;
    // (first pair in q, pairs, first qT row) of the latent and the rope part
    const int parts[2][3] = {{0, r / 2, 0}, {r / 2, d_r / 2, lat_pad / 2}};
    std::fill(qT.data(), qT.data() + size_t(dk_pad / 2) * ld, 0u);
    for (const auto& part : parts)
      for (int c2 = 0; c2 < part[1]; c2 += 16) {
        const __mmask16 m = first_n16(part[1] - c2);
        for (int v = 0; v < ld; v += 16) {
          __m512i blk[16];
          for (int i = 0; i < 16; ++i)
            blk[i] = v + i < R ? _mm512_maskz_loadu_epi32(
                                     m, q + (int64_t(v + i) * p.d_qk + 2 * (part[0] + c2)) * 2)
                               : _mm512_setzero_si512();
          transpose16x16_epi32(blk);
          for (int i = 0; i < std::min(16, part[1] - c2); ++i)
            _mm512_storeu_si512(qT.data() + int64_t(part[2] + c2 + i) * ld + v, blk[i]);
        }
      }
  }

  void load_tile(const MlaDecodeParams& p, int b, int t0, int n) {
    const CacheRowFormat f(kv, r, d_r, p.cache.global_scale);
    const uint8_t* zero = reinterpret_cast<const uint8_t*>(zero_row.data());
    for (int j = 0; j < kKeys; ++j) {
      if (j >= n) {
        rows[j] = zero;
        if (!in_place && j < round_up(n, 16))  // the last key block's A rows
          std::fill(kb.data() + int64_t(j) * dk_pad, kb.data() + int64_t(j + 1) * dk_pad, 0);
        continue;
      }
      const uint8_t* src = cache_row(p, b, t0 + j, row_bytes);
      if (in_place) {
        rows[j] = src;
        continue;
      }
      uint16_t* dst = kb.data() + int64_t(j) * dk_pad;
      decode_row_bf16(f, src, dst, dst + lat_pad, ks.data() + int64_t(j) * nblk);
      std::fill(dst + r, dst + lat_pad, 0);
      std::fill(dst + lat_pad + d_r, dst + dk_pad, 0);
      rows[j] = reinterpret_cast<const uint8_t*>(dst);
    }
    a_stride = in_place ? row_bytes : int64_t(dk_pad) * 2;
    for (int k = 0; k < kKeys / 16; ++k) ablk[k] = rows[std::min(16 * k, std::max(n - 1, 0))];
    // Pairs past n up to the last 32-key step are zero (rows[] there is the zero row).
    build_v_pairs(rows, round_up(n, 32) / 2, d_v, dv_pad, vp.data(), ldv);
    n_keys = n;
  }

  // out [16·nk keys][ld] = Σ over channel chunks [c0, c1) of K·Q^T (kLoad: added to out).
  template <bool kLoad>
  void score_chunks(int nk, int c0, int c1, float* out) {
    const uint8_t* b = reinterpret_cast<const uint8_t*>(qT.data()) + int64_t(c0) * 16 * ld * 4;
    amx_product_grid<kLoad>(
        nk, ld / 16, [&](int k) { return ablk[k] + int64_t(c0) * 64; }, 64, a_stride, b, 64,
        int64_t(16) * ld * 4, int64_t(ld) * 4, c1 - c0, out, int64_t(16) * ld, int64_t(ld) * 4);
  }

  // ST[t][:] = Σ_j s_tj · part_j[t][:] for t < 16·nk, the nb partial products part_j
  // [kKeys][ld] at tmp + j·kKeys·ld; s_tj = ks[t·nblk + j] (block-scaled) or the global g.
  void combine_scaled(int nk, int nb, float* ST) {
    const int64_t part = int64_t(kKeys) * ld;
    for (int t = 0; t < 16 * nk; ++t) {
      const float* sc = block_scaled() ? ks.data() + int64_t(t) * nblk : &global_scale;  // [nb]
      const float* src = tmp.data() + int64_t(t) * ld;
      for (int v = 0; v < ld; v += W) {
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(src + v), _mm512_set1_ps(sc[0]));
        for (int j = 1; j < nb; ++j)
          acc = _mm512_fmadd_ps(_mm512_loadu_ps(src + j * part + v), _mm512_set1_ps(sc[j]), acc);
        _mm512_storeu_ps(ST + int64_t(t) * ld + v, acc);
      }
    }
  }

  // ST [kKeys][ld]: key blocks past the tile's keys are left as they are (the softmax masks them).
  // Quantised latents: each scale block's product into its own buffer, then one pass applies the
  // scales (per key and block, or NVFP4's g); the BF16 rope is added by the tile unit.
  void scores(float* ST) {
    const int nk = (n_keys + 15) / 16, lat_chunks = lat_pad / 32, chunks = dk_pad / 32;
    if (kv == DType::kBF16) {
      score_chunks<false>(nk, 0, chunks, ST);
      return;
    }
    const int blk_chunks = block_scaled() ? kFp8ScaleBlock / 32 : lat_chunks;
    const int nb = (lat_chunks + blk_chunks - 1) / blk_chunks;
    for (int j = 0; j < nb; ++j)
      score_chunks<false>(nk, j * blk_chunks, std::min(lat_chunks, (j + 1) * blk_chunks),
                          tmp.data() + int64_t(j) * kKeys * ld);
    combine_scaled(nk, nb, ST);
    score_chunks<true>(nk, lat_chunks, chunks, ST);  // the BF16 rope adds unscaled
  }

  // pa[j] [ld][kKeys] bf16 = P (times the V scale of block j) row-major, for keys < 32·steps.
  void probabilities_to_rows(const float* PT, int steps) {
    for (int j = 0; j < nblk; ++j) {
      probability_pairs(PT, ld, 16 * steps, n_keys, block_scaled() ? ks.data() + j : nullptr, nblk,
                        global_scale, pt.data());
      uint32_t* dst = reinterpret_cast<uint32_t*>(pa.data() + int64_t(j) * ld * kKeys);
      for (int v = 0; v < ld; v += 16)
        for (int s = 0; s < steps; ++s) {
          __m512i blk[16];
          for (int i = 0; i < 16; ++i)
            blk[i] = _mm512_load_si512(pt.data() + int64_t(16 * s + i) * ld + v);
          transpose16x16_epi32(blk);
          for (int i = 0; i < 16; ++i)
            _mm512_store_si512(dst + int64_t(v + i) * (kKeys / 2) + 16 * s, blk[i]);
        }
    }
  }

  void pv(const float* PT, int R, int n, const float* corr, RowBlockState st) {
    const int steps = (n + 31) / 32;  // 32 keys per tdpbf16ps
    for (int i = 0; i < R; ++i) {
      if (corr[i] == 1.0f) continue;
      const __m512 c = _mm512_set1_ps(corr[i]);
      float* o = st.o + int64_t(i) * st.ld_o;
      for (int ch = 0; ch < dv_pad; ch += W)
        _mm512_storeu_ps(o + ch, _mm512_mul_ps(_mm512_loadu_ps(o + ch), c));
    }
    probabilities_to_rows(PT, steps);
    const int blk_ch = block_scaled() ? kFp8ScaleBlock : dv_pad;
    for (int j = 0; j * blk_ch < dv_pad; ++j) {
      const int ch0 = j * blk_ch, nch = std::min(blk_ch, dv_pad - ch0);
      const uint8_t* a = reinterpret_cast<const uint8_t*>(pa.data() + int64_t(j) * ld * kKeys);
      amx_product_grid<true>(
          ld / 16, nch / 16, [&](int k) { return a + int64_t(k) * 16 * kKeys * 2; }, 64, kKeys * 2,
          reinterpret_cast<const uint8_t*>(vp.data() + ch0), 64, int64_t(16) * ldv * 4,
          int64_t(ldv) * 4, steps, st.o + ch0, int64_t(16) * st.ld_o, st.ld_o * 4);
    }
  }
};

}  // namespace
}  // namespace mla::cpu
