// The GGUF K formats most files use (Q4_K, Q5_K, Q6_K; docs/GGUF.md) on AVX2 integer dot
// products, for CPUs without AVX512-VNNI, with x quantised per 256-value super-block as on VNNI
// (linear_ggml_vnni_k.h): q_x = round(x / dx), dx = amax / 127, |q_x| ≤ 127. Per super-block
//   fl(d·dx) · Σ_j s_j Σ q_w·q_x  −  Σ_j fl(dm·m_j) · fl(dx · Σ_j q_x)
// with unsigned codes q_w (Q6_K: q − 32 enters as q with m_j = 32·s_j, dm = d). The first sum
// is integer: vpmaddubsw forms pairs q_w·q_x + q_w'·q_x' in int16 (at most 2 · 63 · 127), vpmaddwd
// multiplies them by the sub-block's int16 scale into int32 lanes (exact; a Q6_K super-block's
// lane may pass 2^24, so its conversion to FP32 can round once). The mins enter in FP32, 8
// sub-blocks a vector. Q2_K and Q3_K keep the decode-to-FP32 path on these CPUs.
// Include after the ISA's `#pragma GCC target` (avx2, fma, f16c); internal linkage.
#pragma once

#include "core/dtype.h"
#include "core/ggml_blocks.h"
#include "kernels/cpu/linear_ggml_avx2.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/weight_ahead.h"

namespace mla::cpu {
namespace {

// x row layout (32-byte aligned): codes [in] int8, dx [in / 256], dx · Σ q_x per 16 values
// [in / 16] and per 32 [in / 32] (FP32, each rounded once; the GEMV's), then Σ q_x per 16 and
// per 32 as int16 (|Σ| ≤ 32 · 127; the int8 GEMM's, linear_gemm_int8_avx2_k.h).
constexpr int64_t ggml_avx2_k_x_row_bytes(int64_t in) {
  return (in + (in / 256 * 4 + 31) / 32 * 32 + in / 16 * 6 + in / 32 * 6 + 31) / 32 * 32;
}

struct GgmlAvx2KXRow {
  const int8_t* codes;
  const float* dx;
  const float* sums16;
  const float* sums32;
  const int16_t* isums16;
  const int16_t* isums32;
};

inline GgmlAvx2KXRow ggml_avx2_k_x_row(const uint8_t* base, int64_t in) {
  const uint8_t* d = base + in;
  const float* s16 = reinterpret_cast<const float*>(d + (in / 256 * 4 + 31) / 32 * 32);
  const int16_t* i16 = reinterpret_cast<const int16_t*>(s16 + in / 16 + in / 32);
  return {reinterpret_cast<const int8_t*>(base),
          reinterpret_cast<const float*>(d),
          s16,
          s16 + in / 16,
          i16,
          i16 + in / 16};
}

inline void ggml_avx2_k_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  int8_t* codes = reinterpret_cast<int8_t*>(dst);
  float* dxs = reinterpret_cast<float*>(dst + in);
  float* s16 = reinterpret_cast<float*>(dst + in + (in / 256 * 4 + 31) / 32 * 32);
  float* s32 = s16 + in / 16;
  int16_t* i16 = reinterpret_cast<int16_t*>(s32 + in / 32);
  int16_t* i32 = i16 + in / 16;
  const __m256 sign = _mm256_set1_ps(-0.0f), lim = _mm256_set1_ps(127.0f);
  for (int64_t sb = 0; sb < in / 256; ++sb) {
    const float* xs = x + 256 * sb;
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k)
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(xs + 8 * k)));
    const float dx = ggml_avx2_hmax(amax) / 127.0f;
    dxs[sb] = dx;
    const __m256 inv = _mm256_set1_ps(dx > 0.0f ? 1.0f / dx : 0.0f);
    for (int k = 0; k < 16; ++k) {  // 16 values: round to nearest even, clamped to ±127
      int32_t q[16];
      for (int h = 0; h < 2; ++h) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xs + 16 * k + 8 * h), inv);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * h),
                            _mm256_cvtps_epi32(_mm256_max_ps(
                                _mm256_min_ps(v, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim))));
      }
      int32_t sum = 0;
      for (int j = 0; j < 16; ++j) {
        codes[256 * sb + 16 * k + j] = int8_t(q[j]);
        sum += q[j];
      }
      s16[16 * sb + k] = dx * float(sum);
      i16[16 * sb + k] = int16_t(sum);
      if (k % 2 == 1) {
        const int32_t sum2 = sum + i16[16 * sb + k - 1];
        s32[8 * sb + k / 2] = dx * float(sum2);
        i32[8 * sb + k / 2] = int16_t(sum2);
      }
    }
  }
}

inline bool ggml_avx2_k_takes(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

template <DType D>
constexpr int kAvx2KBytes = D == DType::kQ4_K   ? 144
                            : D == DType::kQ5_K ? 176
                                                : 210;

// The unsigned codes of one K super-block, 32 values a vector: emit(q, at) with q holding the
// codes of values at .. at + 31 (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63: Q6_K's offset 32 is the
// caller's), `at` rising by 32 per call. Shared by the GEMV below and the int8 GEMM
// (linear_gemm_int8_avx2_k.h).
template <DType D, class Emit>
inline void ggml_avx2_k_codes(const uint8_t* b, Emit emit) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  if constexpr (D == DType::kQ4_K || D == DType::kQ5_K) {
    const uint8_t* qs = b + (D == DType::kQ4_K ? 16 : 48);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (D == DType::kQ5_K)
      qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    for (int c = 0; c < 4; ++c) {
      // qs[32c + l]: value 64c + l in the low nibble, 64c + 32 + l in the high one; Q5_K's fifth
      // bit of value 32j + l is bit j of qh[l].
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (D == DType::kQ5_K) {
        const __m256i one = _mm256_set1_epi8(1);
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
      }
      emit(lo, 64 * c);
      emit(hi, 64 * c + 32);
    }
  } else {  // Q6_K
    const __m256i m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      // Half h (values 128h ..): ql[64h + k] low nibble = value 128h + k (k < 64), high nibble =
      // 128h + 64 + k; value 128h + 32s + l has its top two bits at bit 2s of qh[32h + l].
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const auto top = [&](int s) {
        return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * s), m2), 4);
      };
      emit(_mm256_or_si256(_mm256_and_si256(ql0, m4), top(0)), 128 * h);
      emit(_mm256_or_si256(_mm256_and_si256(ql1, m4), top(1)), 128 * h + 32);
      emit(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), top(2)), 128 * h + 64);
      emit(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), top(3)), 128 * h + 96);
    }
  }
}

// Σ_j s_j Σ q_w·q_x of one super-block (int32 lanes) and its min term's weights dm·m_j (FP32,
// `mins` 8 or 16 of them), for the N rows of x.
template <DType D, int N>
inline void ggml_avx2_k_block(const uint8_t* b, const int8_t* const* xc, __m256i* isum,
                              __m256 mins[2], float& d) {
  for (int i = 0; i < N; ++i) isum[i] = _mm256_setzero_si256();
  const auto dot = [&](__m256i q, int at, __m256i scale) {
    for (int i = 0; i < N; ++i) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc[i] + at));
      isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scale));
    }
  };
  if constexpr (D == DType::kQ4_K || D == DType::kQ5_K) {
    uint8_t sc[8], m[8];
    ggml::unpack_scale_min_k4(b + 4, sc, m);
    d = ggml::load_half(b);
    const float dmin = ggml::load_half(b + 2);
    int64_t mm;
    std::memcpy(&mm, m, 8);
    mins[0] = _mm256_mul_ps(_mm256_set1_ps(dmin),
                            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mm))));
    ggml_avx2_k_codes<D>(
        b, [&](__m256i q, int at) { dot(q, at, _mm256_set1_epi16(short(sc[at / 32]))); });
  } else {  // Q6_K
    d = ggml::load_half(b + 208);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    // The offset 32 as a min: m_j = 32 · s_j with dm = d.
    const __m256 d32 = _mm256_set1_ps(32.0f * d);
    mins[0] = _mm256_mul_ps(d32, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)));
    mins[1] = _mm256_mul_ps(d32, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))));
    // The int16 scales of sub-blocks (2k, 2k + 1) in the two 128-bit lanes: dword k of the
    // widened scales broadcast, then word 0 / word 1 of it per lane.
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2,
                                          3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    ggml_avx2_k_codes<D>(b, [&](__m256i q, int at) {
      const __m256i scale =
          _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(at / 32)), pick);
      dot(q, at, scale);
    });
  }
}

// y[i · ldy + o] for rows o in [r0, r1) of w and the N ≤ 4 quantised rows xs.
template <DType D, int N>
void ggml_avx2_k_rows(const LinearWeight& w, const GgmlAvx2KXRow* xs, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
  constexpr int kBytes = kAvx2KBytes<D>;
  const int64_t sbs = w.in / 256, row_bytes = sbs * kBytes;
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = w.data + o * row_bytes;
    __m256 acc[N], acc_m[N];
    for (int i = 0; i < N; ++i) acc[i] = acc_m[i] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < sbs; ++sb) {
      const int8_t* xc[N];
      for (int i = 0; i < N; ++i) xc[i] = xs[i].codes + 256 * sb;
      __m256i isum[N];
      __m256 mins[2];
      float d;
      ggml_avx2_k_block<D, N>(row + sb * kBytes, xc, isum, mins, d);
      for (int i = 0; i < N; ++i) {
        acc[i] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_set1_ps(d * xs[i].dx[sb]), acc[i]);
        if constexpr (D == DType::kQ6_K) {
          acc_m[i] = _mm256_fmadd_ps(mins[0], _mm256_loadu_ps(xs[i].sums16 + 16 * sb), acc_m[i]);
          acc_m[i] =
              _mm256_fmadd_ps(mins[1], _mm256_loadu_ps(xs[i].sums16 + 16 * sb + 8), acc_m[i]);
        } else {
          acc_m[i] = _mm256_fmadd_ps(mins[0], _mm256_loadu_ps(xs[i].sums32 + 8 * sb), acc_m[i]);
        }
      }
    }
    for (int i = 0; i < N; ++i) y[i * ldy + o] = ggml_avx2_hsum(_mm256_sub_ps(acc[i], acc_m[i]));
  }
}

// Rows [r0, r1) of a Q4_K / Q5_K / Q6_K weight against all n quantised rows at xq.
template <DType D>
void ggml_avx2_k_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                             int64_t r0, int64_t r1) {
  ggml_x_groups<GgmlAvx2KXRow>(
      n, xq, ggml_avx2_k_x_row_bytes(w.in), w.out, y,
      [&](const uint8_t* p) { return ggml_avx2_k_x_row(p, w.in); },
      [&](auto N, const GgmlAvx2KXRow* xs, float* yg) {
        ggml_avx2_k_rows<D, decltype(N)::value>(w, xs, yg, w.out, r0, r1);
      });
}

inline void ggml_avx2_k_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                              int64_t r0, int64_t r1) {
  if (w.dtype == DType::kQ4_K) return ggml_avx2_k_chunk_typed<DType::kQ4_K>(w, n, xq, y, r0, r1);
  if (w.dtype == DType::kQ5_K) return ggml_avx2_k_chunk_typed<DType::kQ5_K>(w, n, xq, y, r0, r1);
  ggml_avx2_k_chunk_typed<DType::kQ6_K>(w, n, xq, y, r0, r1);
}

}  // namespace
}  // namespace mla::cpu
