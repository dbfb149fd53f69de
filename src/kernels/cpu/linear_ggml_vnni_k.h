// The GGUF K formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; docs/GGUF.md) on AVX512-VNNI integer dot
// products, with x quantised per 256-value super-block as llama.cpp's Q8_K: q_x = round(x / dx),
// dx = amax / 127 of the super-block, and the sums of the codes per 16 values.
// Every K format is, per super-block, value = d · s_j · q − dm · m_j with unsigned codes q and
// small integer scales s_j, m_j per sub-block (of 32 or 16 values):
//   Q4_K / Q5_K  q 0..15 / 0..31, s_j, m_j the 6-bit scale and min per 32, dm = dmin
//   Q6_K         q 0..63, s_j the signed 8-bit scale per 16, m_j = 32 · s_j, dm = d
//   Q3_K         q 0..7 (the stored 2 bits | the hmask bit · 4), s_j signed 6-bit per 16,
//                m_j = 4 · s_j, dm = d
//   Q2_K         q 0..3, s_j, m_j the two nibbles per 16, dm = dmin
// so a super-block's product is
//   fl(d·dx) · Σ_j s_j Σ q_w·q_x  −  Σ_t fl(dm·m_t) · fl(dx · Σ_(16-run t) q_x)
// The first sum is integer all the way: vpmaddubsw forms each pair q_w·q_x + q_w'·q_x' in int16
// (at most 2 · 63 · 128 = 16,128: no saturation) and vpdpwssd multiplies the pairs by the int16
// scale of their sub-block, adding into int32 lanes (at most 4 · 2 · 16,128 · 128 < 2^24 in
// Q6_K, the largest). Where dm = d (Q6_K, Q3_K) the mins join that integer sum instead,
// d·dx · (Σ_j s_j Σ q_w·q_x − Σ_t m_t Σ_t q_x) (one more vpdpwssd, |m_t · Σ_t q_x| ≤ 32 · 128 ·
// 16 · 127 < 2^23): a lane stays below 2^25 and its conversion to FP32 may round once. dm·m_t
// is exact (an f16 times an integer of at most 8 bits). No FP32 work happens per sub-block.
// Error against the exact product: x's rounding, at most dx/2 per value, times Σ|w| of the
// super-block, plus FP32 roundings: the lane's conversion, d·dx, dx·Σ q_x, two fused adds per
// super-block and 4 in the final 16-lane sum: at most 2 · in/256 + 11 roundings reach any term
// (the tests' bound).
// Include after the ISA's `#pragma GCC target` (avx512f/bw/vl/vnni); internal linkage.
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/linear_ggml_avx2.h"  // ggml_x_groups
#include "kernels/cpu/scratch.h"

namespace mla::cpu {
namespace {

// A quantised x row for the K formats: per super-block sb, codes[256 · sb ..] in value order,
// sums[16 · sb + s] = fl(dx · Σ of the codes s · 16 .. s · 16 + 15) (the min term's factor,
// rounded once), neg16[16 · sb + s] = −Σ of the same codes as an int16 in the low half of an
// int32 whose high half is 0 (|Σ| ≤ 16 · 127: the factor of vpdpwssd for the formats whose min
// is a multiple of the scale, Q6_K and Q3_K), and dx[sb].
struct GgmlKXRow {
  const int8_t* codes = nullptr;
  const float* sums = nullptr;
  const int32_t* neg16 = nullptr;
  const float* dx = nullptr;
};

constexpr int64_t ggml_k_x_row_bytes(int64_t in) {
  const int64_t sbs = in / 256;
  return sbs * (256 + 64 + 64) + (sbs * 4 + 63) / 64 * 64;
}

inline GgmlKXRow ggml_k_x_row(const uint8_t* base, int64_t in) {
  const int64_t sbs = in / 256;
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + sbs * 256),
          reinterpret_cast<const int32_t*>(base + sbs * 320),
          reinterpret_cast<const float*>(base + sbs * 384)};
}

// Quantises x [in] (a multiple of 256) into the layout above at `dst` (64-byte aligned).
inline void ggml_k_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  const int64_t sbs = in / 256;
  int8_t* codes = reinterpret_cast<int8_t*>(dst);
  float* sums = reinterpret_cast<float*>(dst + sbs * 256);
  int32_t* neg16 = reinterpret_cast<int32_t*>(dst + sbs * 320);
  float* dxs = reinterpret_cast<float*>(dst + sbs * 384);
  for (int64_t sb = 0; sb < sbs; ++sb) {
    const float* xs = x + 256 * sb;
    __m512 amax = _mm512_setzero_ps();
    for (int k = 0; k < 16; ++k)
      amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(xs + 16 * k)));
    const float dx = _mm512_reduce_max_ps(amax) / 127.0f;
    const __m512 inv = _mm512_set1_ps(dx > 0.0f ? 1.0f / dx : 0.0f);
    dxs[sb] = dx;
    for (int k = 0; k < 16; ++k) {
      // Round to nearest even; |x / dx| ≤ 127 up to the rounding of 1 / dx, and the saturating
      // narrowing keeps it in int8 (the sums are taken from the narrowed codes).
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 16 * k), inv));
      const __m128i q8 = _mm512_cvtsepi32_epi8(q);
      _mm_store_si128(reinterpret_cast<__m128i*>(codes + 256 * sb + 16 * k), q8);
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q8));
      sums[16 * sb + k] = dx * float(sum);
      neg16[16 * sb + k] = int32_t(uint16_t(int16_t(-sum)));
    }
  }
}

// One decoded super-block: codes q[c] for values 64c .. 64c + 63 (value order, unsigned), the
// integer sub-block scales (lane j: s_j, of 32 values if sub32, else of 16) and the integer min
// of each 16-value run (lane t: values 16t ..), with d and dm.
struct GgmlKBlock {
  __m512i q[4];
  __m512i sub, m16;
  float d, dm;
  bool sub32;
};

// Lane k of s[c] for 32-value sub-blocks (8 lanes each) and for 16-value ones (4 lanes each),
// from a vector whose lane j holds scale j.
inline __m512 ggml_k_spread(__m512 per_sub, int c, bool sub32) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i idx = sub32
                          ? _mm512_add_epi32(_mm512_srli_epi32(lane, 3), _mm512_set1_epi32(2 * c))
                          : _mm512_add_epi32(_mm512_srli_epi32(lane, 2), _mm512_set1_epi32(4 * c));
  return _mm512_permutexvar_ps(idx, per_sub);
}

inline void ggml_k_scales(GgmlKBlock& k, __m512i per_sub, bool sub32, float d, __m512i m16,
                          float dm) {
  k.sub = per_sub;
  k.sub32 = sub32;
  k.d = d;
  k.m16 = m16;
  k.dm = dm;
}

inline __m512 ggml_k_float_mins(const GgmlKBlock& k) {
  return _mm512_mul_ps(_mm512_set1_ps(k.dm), _mm512_cvtepi32_ps(k.m16));
}

// In FP32: s[c] = d · s_j of each int32 lane of vpdpbusd(q[c], ..) (lane k sums values
// 64c + 4k .. + 3), and m = dm · m_t per 16-value run (lane t). Both products are exact (an f16
// times an integer of at most 8 bits).
inline void ggml_k_float_scales(const GgmlKBlock& k, __m512 s[4], __m512& m) {
  const __m512 fs = _mm512_mul_ps(_mm512_set1_ps(k.d), _mm512_cvtepi32_ps(k.sub));
  for (int c = 0; c < 4; ++c) s[c] = ggml_k_spread(fs, c, k.sub32);
  m = ggml_k_float_mins(k);
}

// The int16 scale of each word of vpmaddubsw(q[c], ..) (word w sums values 64c + 2w, + 1): the
// low half of sub-block (64c + 2w) / 32 (or / 16)'s int32 lane.
inline __m512i ggml_k_s16(const GgmlKBlock& k, int c) {
  const __m512i word = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                        16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  // sub-block of word w: (64c + 2w) >> 5 = 2c + (w >> 4), or >> 4 = 4c + (w >> 3); its low half
  // is word 2 · sub-block of `sub`.
  const __m512i idx =
      k.sub32
          ? _mm512_slli_epi16(
                _mm512_add_epi16(_mm512_srli_epi16(word, 4), _mm512_set1_epi16(short(2 * c))), 1)
          : _mm512_slli_epi16(
                _mm512_add_epi16(_mm512_srli_epi16(word, 3), _mm512_set1_epi16(short(4 * c))), 1);
  return _mm512_permutexvar_epi16(idx, k.sub);
}

// [v | v]: 32 bytes in both halves of a zmm.
inline __m512i ggml_k_twice(const uint8_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1);
}

// Bits (b0 in the low 32 bytes, b1 in the high) of 2-bit fields: (v >> shift) & 3 per byte,
// shifting 16-bit words (the bits pulled in from the neighbour byte are masked off).
inline __m512i ggml_k_bits2(__m512i twice, int s0, int s1) {
  const __m512i cnt =
      _mm512_inserti64x4(_mm512_set1_epi16(short(s0)), _mm256_set1_epi16(short(s1)), 1);
  return _mm512_and_si512(_mm512_srlv_epi16(twice, cnt), _mm512_set1_epi8(3));
}

// Byte mask of bit b0 (low 32 bytes) / b1 (high 32 bytes) of `twice`.
inline __mmask64 ggml_k_bit(__m512i twice, int b0, int b1) {
  const __m512i sel =
      _mm512_inserti64x4(_mm512_set1_epi8(char(1 << b0)), _mm256_set1_epi8(char(1 << b1)), 1);
  return _mm512_test_epi8_mask(twice, sel);
}

inline float ggml_k_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Q3_K scales: sixteen 6-bit values stored as s + 32 in 12 bytes; the low 4 bits of scale j are
// nibble j / 8 of byte j % 8, its top 2 bits sit at bit 2 · (j / 4) of byte 8 + j % 4.
inline __m512i ggml_k_q3_scales(const uint8_t* p) {
  alignas(64) int32_t sc[16];
  for (int j = 0; j < 16; ++j)
    sc[j] =
        (((p[j % 8] >> (4 * (j / 8))) & 0x0f) | (((p[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
  return _mm512_load_si512(sc);
}

// Q4_K / Q5_K scales: 12 bytes as three words, b0 = the low 6 bits of sc0..3 (and the top 2 of
// sc4..7), b1 the same for the mins, b2 the low nibbles of sc4..7 | m4..7 << 4. Returns lanes
// 0-7 sc[0..7], lanes 8-15 m[0..7].
inline __m512i ggml_k_scale_min(const uint8_t* p) {
  uint32_t b0, b1, b2;
  std::memcpy(&b0, p, 4);
  std::memcpy(&b1, p + 4, 4);
  std::memcpy(&b2, p + 8, 4);
  const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
  const uint32_t sc03 = b0 & lo6, m03 = b1 & lo6;
  const uint32_t sc47 = (b2 & lo4) | (((b0 >> 6) & lo2) << 4);
  const uint32_t m47 = ((b2 >> 4) & lo4) | (((b1 >> 6) & lo2) << 4);
  return _mm512_cvtepu8_epi32(_mm_set_epi32(int(m47), int(m03), int(sc47), int(sc03)));
}

template <DType D>
constexpr int kGgmlKBytes = D == DType::kQ2_K   ? 84
                            : D == DType::kQ3_K ? 110
                            : D == DType::kQ4_K ? 144
                            : D == DType::kQ5_K ? 176
                                                : 210;

template <DType D>
inline void ggml_k_decode(const uint8_t* b, GgmlKBlock& k) {
  if constexpr (D == DType::kQ4_K || D == DType::kQ5_K) {
    // Q4_K 144 bytes: d, dmin, scales[12], qs[128]; Q5_K 176: the same with qh[32] before qs.
    // Chunk c = qs[32c ..]: value 64c + l its low nibble, 64c + 32 + l its high nibble, so
    // [low | high] is the 64 values in order. Q5_K: value 32j + l's fifth bit is bit j of qh[l].
    const __m512i sm = ggml_k_scale_min(b + 4);
    const uint8_t* qs = b + (D == DType::kQ4_K ? 16 : 48);
    __m512i qh;
    if constexpr (D == DType::kQ5_K) qh = ggml_k_twice(b + 16);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      const __m256i m4 = _mm256_set1_epi8(0x0f);
      const __m256i lo = _mm256_and_si256(v, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      k.q[c] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      if constexpr (D == DType::kQ5_K)
        k.q[c] = _mm512_mask_add_epi8(k.q[c], ggml_k_bit(qh, 2 * c, 2 * c + 1), k.q[c],
                                      _mm512_set1_epi8(16));
    }
    // 16-value sum t belongs to sub-block t / 2, whose min is lane 8 + t / 2.
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i m16 = _mm512_permutexvar_epi32(
        _mm512_add_epi32(_mm512_srli_epi32(lane, 1), _mm512_set1_epi32(8)), sm);
    ggml_k_scales(k, sm, true, ggml_k_half(b), m16, ggml_k_half(b + 2));
  } else if constexpr (D == DType::kQ6_K) {
    // 210 bytes: ql[128], qh[64], scales[16] (int8), d. Half h = values 128h ..: value 128h + k
    // (k < 64) is the low nibble of ql[64h + k], 128h + 64 + k the high nibble; value
    // 128h + 32s + l has its top 2 bits at bit 2s of qh[32h + l].
    // The top bits are moved to bits 4-5 of their byte by one 16-bit shift (field s sits at
    // bits 2s: left by 4 - 2s, right by 2s - 4; what the shift pulls in from the neighbour byte
    // lands outside bits 4-5) and merged as lo | (t & 0x30) by one vpternlogd (0xf8: a | b & c).
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i left = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i right = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b + 64 * h);
      const __m512i qh = ggml_k_twice(b + 128 + 32 * h);
      const __m512i lo = _mm512_and_si512(ql, m4),
                    hi = _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
      k.q[2 * h] = _mm512_ternarylogic_epi32(lo, _mm512_sllv_epi16(qh, left), m30, 0xf8);
      k.q[2 * h + 1] = _mm512_ternarylogic_epi32(hi, _mm512_srlv_epi16(qh, right), m30, 0xf8);
    }
    const __m512i sc =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    const float d = ggml_k_half(b + 208);
    ggml_k_scales(k, sc, false, d, _mm512_slli_epi32(sc, 5), d);
  } else if constexpr (D == DType::kQ3_K) {
    // 110 bytes: hmask[32], qs[64], scales[12], d. Value 128h + 32s + l: bits 2s of
    // qs[32h + l]; its third bit is bit (4h + s) of hmask[l], clear meaning "minus 4", so the
    // stored value is (two bits | bit << 2) − 4.
    const __m512i hm = ggml_k_twice(b);
    for (int c = 0; c < 4; ++c) {
      const int h = c / 2, s = 2 * (c % 2);
      k.q[c] = ggml_k_bits2(ggml_k_twice(b + 32 + 32 * h), 2 * s, 2 * s + 2);
      k.q[c] = _mm512_mask_add_epi8(k.q[c], ggml_k_bit(hm, 4 * h + s, 4 * h + s + 1), k.q[c],
                                    _mm512_set1_epi8(4));
    }
    const __m512i scv = ggml_k_q3_scales(b + 96);
    const float d = ggml_k_half(b + 108);
    ggml_k_scales(k, scv, false, d, _mm512_slli_epi32(scv, 2), d);
  } else {
    // Q2_K 84 bytes: scales[16] (low nibble scale, high nibble min), qs[64] as Q3_K's, d, dmin.
    for (int c = 0; c < 4; ++c) {
      const int h = c / 2, s = 2 * (c % 2);
      k.q[c] = ggml_k_bits2(ggml_k_twice(b + 16 + 32 * h), 2 * s, 2 * s + 2);
    }
    const __m512i sm = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    const __m512i sc = _mm512_and_si512(sm, _mm512_set1_epi32(0x0f));
    ggml_k_scales(k, sc, false, ggml_k_half(b + 80), _mm512_srli_epi32(sm, 4), ggml_k_half(b + 82));
  }
}

// Prefetch distance of the row kernel below (prefetchnta, as the FP GEMVs of linear_driver.h):
// with the hardware prefetcher alone the Q4_K_M file's decode (its lm_head is Q6_K, 43% of the
// bytes) read 0.85 of the probe when the host reads 70-80 GB/s; 8 KiB ahead 0.92, 4 KiB 0.90
// (2 threads, Zen 5; docs/BENCHMARKS.md "The Q4_K_M file at the host's upper bandwidth level").
constexpr int64_t kGgmlKAheadBytes = 8192;

// y[i · ldy + o] for rows o in [r0, r1) of w and the n ≤ 4 quantised rows xs.
template <DType D, int N>
void ggml_k_vnni_rows(const LinearWeight& w, const GgmlKXRow* xs, float* y, int64_t ldy, int64_t r0,
                      int64_t r1) {
  constexpr int kBytes = kGgmlKBytes<D>;
  const int64_t sbs = w.in / 256, row_bytes = sbs * kBytes;
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = w.data + o * row_bytes;
    __m512 acc[N];
    __m512 acc_m[N];
    for (int i = 0; i < N; ++i) acc[i] = acc_m[i] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < sbs; ++sb) {
      // The bytes kGgmlKAheadBytes past this super-block, a line per 64 bytes of it.
      for (int b = 0; b < kBytes; b += 64)
        __builtin_prefetch(row + sb * kBytes + kGgmlKAheadBytes + b, 0, 0);
      GgmlKBlock k;
      ggml_k_decode<D>(row + sb * kBytes, k);
      __m512i s16[4];
      for (int c = 0; c < 4; ++c) s16[c] = ggml_k_s16(k, c);
      // Q6_K / Q3_K: dm = d, so the min m_t · Σ_t q_x joins the integer sum (lane t gets
      // m_t · (−Σ_t q_x): |m_t| ≤ 32 · 128, |Σ_t| ≤ 16 · 127, a lane stays below 2^25 and its
      // conversion may round once); the other formats scale their mins by dmin in FP32.
      constexpr bool kIntMins = D == DType::kQ6_K || D == DType::kQ3_K;
      const __m512 m = kIntMins ? _mm512_setzero_ps() : ggml_k_float_mins(k);
      for (int i = 0; i < N; ++i) {
        const int8_t* xc = xs[i].codes + 256 * sb;
        __m512i isum = _mm512_setzero_si512();  // Σ_j s_j Σ q_w·q_x, per lane
        for (int c = 0; c < 4; ++c) {
          const __m512i pairs = _mm512_maddubs_epi16(k.q[c], _mm512_load_si512(xc + 64 * c));
          isum = _mm512_dpwssd_epi32(isum, pairs, s16[c]);
        }
        if constexpr (kIntMins)
          isum = _mm512_dpwssd_epi32(isum, k.m16, _mm512_load_si512(xs[i].neg16 + 16 * sb));
        acc[i] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(k.d * xs[i].dx[sb]), acc[i]);
        // The mins in their own accumulator: one fused add per super-block on each chain.
        if constexpr (!kIntMins)
          acc_m[i] = _mm512_fmadd_ps(m, _mm512_load_ps(xs[i].sums + 16 * sb), acc_m[i]);
      }
    }
    for (int i = 0; i < N; ++i)
      y[i * ldy + o] = _mm512_reduce_add_ps(_mm512_sub_ps(acc[i], acc_m[i]));
  }
}

inline bool ggml_k_format(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K;
}

inline bool ggml_k_vnni_takes(DType t) {
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  return vnni && ggml_k_format(t);
}

template <DType D>
void ggml_k_vnni_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                             int64_t r0, int64_t r1) {
  ggml_x_groups<GgmlKXRow>(
      n, xq, ggml_k_x_row_bytes(w.in), w.out, y,
      [&](const uint8_t* p) { return ggml_k_x_row(p, w.in); },
      [&](auto N, const GgmlKXRow* xs, float* yg) {
        ggml_k_vnni_rows<D, decltype(N)::value>(w, xs, yg, w.out, r0, r1);
      });
}

// A chunk of rows of a K-format weight against all n quantised rows of x at `xq`
// (ggml_k_x_row_bytes(in) bytes each).
inline void ggml_k_vnni_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                              int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::kQ2_K:
      return ggml_k_vnni_chunk_typed<DType::kQ2_K>(w, n, xq, y, r0, r1);
    case DType::kQ3_K:
      return ggml_k_vnni_chunk_typed<DType::kQ3_K>(w, n, xq, y, r0, r1);
    case DType::kQ4_K:
      return ggml_k_vnni_chunk_typed<DType::kQ4_K>(w, n, xq, y, r0, r1);
    case DType::kQ5_K:
      return ggml_k_vnni_chunk_typed<DType::kQ5_K>(w, n, xq, y, r0, r1);
    default:
      return ggml_k_vnni_chunk_typed<DType::kQ6_K>(w, n, xq, y, r0, r1);
  }
}

}  // namespace
}  // namespace mla::cpu
