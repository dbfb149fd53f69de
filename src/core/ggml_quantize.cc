// quantize_row: argument checks, the plain float formats, the two 32-value formats Q8_0 and
// Q4_0, whose codes follow ggml's reference rounding exactly (the `gguf` package reproduces it,
// and the tests compare bytes with it), and the K formats' weights and packing. Their scale
// search is in ggml_quantize_k.cc.
#include <fmt/format.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/cpu_features.h"
#include "core/ggml_blocks.h"
#include "core/ggml_quant.h"

namespace mla {
namespace {

// Q8_0: d = amax / 127 in FP32, codes round(x · (1 / d)) half away from zero, computed with the
// unrounded FP32 d; the FP16 rounding of d comes after (so a code may be off by the f16 error,
// as in the reference). A d whose reciprocal overflows (amax below ~1e-36) stores zeros:
// the reference is undefined there, and the f16 d is 0 anyway.
// The block's d (stored at b as f16) and the 1 / d its codes are made with, from its amax; false
// when d overflows f16.
bool q8_0_scale(float amax, uint8_t* b, float* id) {
  const float d = amax / 127.0f;
  *id = d != 0 ? 1.0f / d : 0.0f;
  if (std::isinf(*id)) *id = 0;
  const uint16_t dh = ggml::float_to_half(d);
  if ((dh & 0x7fffu) == 0x7c00u) return false;
  ggml::store_u16(b + ggml::Q8_0::kD, dh);
  return true;
}

// x is finite (quantize_row checks), so the max needs no NaN rule, and the rounding is done on
// the integer part, exactly as std::round (|v| ≤ 127 + a rounding: v − trunc(v) is exact): plain
// comparisons the compiler vectorises, where fmaxf / roundf calls took three quarters of the
// time `--weight-dtype q8_0` spends requantising at load.
bool quantize_q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
  }
  float id;
  if (!q8_0_scale(amax, b, &id)) return false;
  for (int i = 0; i < 32; ++i) {
    const float v = x[i] * id;
    const int t = int(v);  // toward zero
    const float f = v - float(t);
    b[ggml::Q8_0::kQs + i] = uint8_t(int8_t(t + (f >= 0.5f) - (f <= -0.5f)));
  }
  return true;
}

// quantize_q8_0 on AVX-512, byte for byte the same (the same FP32 operations: the max, the
// division and reciprocal as scalars, the product x · id per lane, the rounding on the integer
// part): 16 lanes a step for `--weight-dtype q8_0`, which requantises every weight of a model at
// load (a 16 GB checkpoint took 30 s of scalar quantising).
__attribute__((target("avx512f,avx512bw,avx512vl"))) bool quantize_q8_0_avx512(const float* x,
                                                                               uint8_t* b) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  float id;
  if (!q8_0_scale(amax, b, &id)) return false;
  const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f);
  for (int h = 0; h < 2; ++h) {
    const __m512 v = _mm512_mul_ps(h ? x1 : x0, vid);
    const __m512i t = _mm512_cvttps_epi32(v);  // toward zero
    const __m512 f = _mm512_sub_ps(v, _mm512_cvtepi32_ps(t));
    const __mmask16 up = _mm512_cmp_ps_mask(f, half, _CMP_GE_OQ);
    const __mmask16 down =
        _mm512_cmp_ps_mask(f, _mm512_sub_ps(_mm512_setzero_ps(), half), _CMP_LE_OQ);
    __m512i q = _mm512_mask_add_epi32(t, up, t, _mm512_set1_epi32(1));
    q = _mm512_mask_sub_epi32(q, down, q, _mm512_set1_epi32(1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + ggml::Q8_0::kQs + 16 * h),
                     _mm512_cvtepi32_epi8(q));
  }
  return true;
}

// Q4_0: the value of largest magnitude (the first one on a tie) maps to code 0 (-8 · d), so
// d = max / -8 carries the sign; codes trunc(x / d + 8.5) clipped to 15 (the far end, +8 · |d|,
// is one step beyond the range). Same rounding steps as the reference, each in FP32.
bool quantize_q4_0(const float* x, uint8_t* b) {
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8.0f;
  float id = d != 0 ? 1.0f / d : 0.0f;
  if (std::isinf(id)) id = 0;
  const uint16_t dh = ggml::float_to_half(d);
  if ((dh & 0x7fffu) == 0x7c00u) return false;
  ggml::store_u16(b + ggml::Q4_0::kD, dh);
  uint8_t q[32];
  for (int i = 0; i < 32; ++i) {
    const float p = x[i] * id;
    const float v = p + 8.5f;
    const int c = int(v);  // v ≥ 0: truncation
    q[i] = uint8_t(c > 15 ? 15 : c);
  }
  for (int j = 0; j < 16; ++j) b[ggml::Q4_0::kQs + j] = uint8_t(q[j] | (q[j + 16] << 4));
  return true;
}

// ---- K formats: the search's weights, and the packing of the integers it chose ----

// The 2-bit plane of Q2_K / Q3_K: value 128 h + 32 s + l in bits 2s, 2s + 1 of byte 32 h + l;
// `offset` makes the codes unsigned.
void pack_two_bits(const int8_t* q, int offset, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      int byte = 0;
      for (int s = 0; s < 4; ++s) byte |= ((q[128 * h + 32 * s + l] + offset) & 3) << (2 * s);
      qs[32 * h + l] = uint8_t(byte);
    }
  }
}

// The 4-bit plane of Q4_K / Q5_K: value 64 c + 32 n + l in nibble n of byte 32 c + l.
void pack_nibbles(const int8_t* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = uint8_t((q[64 * c + l] & 0x0f) | ((q[64 * c + 32 + l] & 0x0f) << 4));
}

// A 1-bit plane (Q3_K hmask, Q5_K qh): value 32 t + l in bit t of byte l.
void pack_bit_plane(const int8_t* q, int offset, int bit, uint8_t* plane) {
  std::memset(plane, 0, 32);
  for (int i = 0; i < ggml::kQK; ++i)
    plane[i & 31] |= uint8_t((((q[i] + offset) >> bit) & 1) << (i >> 5));
}

void pack_k(DType t, const ggml::KQuant& k, uint8_t* dst) {
  using namespace ggml;
  switch (t) {
    case DType::kQ2_K:
      for (int j = 0; j < 16; ++j) dst[Q2_K::kScales + j] = uint8_t(k.ls[j] | (k.lm[j] << 4));
      pack_two_bits(k.q, 0, dst + Q2_K::kQs);
      store_u16(dst + Q2_K::kD, k.dh);
      store_u16(dst + Q2_K::kDmin, k.mh);
      break;
    case DType::kQ3_K:
      pack_bit_plane(k.q, 4, 2, dst + Q3_K::kHmask);  // set for codes 0..3 (q + 4 ≥ 4)
      pack_two_bits(k.q, 4, dst + Q3_K::kQs);
      pack_q3k_scales(k.ls, dst + Q3_K::kScales);
      store_u16(dst + Q3_K::kD, k.dh);
      break;
    case DType::kQ4_K:
    case DType::kQ5_K: {
      uint8_t sc[8], m[8];
      for (int j = 0; j < 8; ++j) sc[j] = uint8_t(k.ls[j]), m[j] = uint8_t(k.lm[j]);
      store_u16(dst + Q4_K::kD, k.dh);
      store_u16(dst + Q4_K::kDmin, k.mh);
      pack_scale_min_k4(sc, m, dst + Q4_K::kScales);
      if (t == DType::kQ4_K) {
        pack_nibbles(k.q, dst + Q4_K::kQs);
      } else {
        pack_bit_plane(k.q, 0, 4, dst + Q5_K::kQh);
        pack_nibbles(k.q, dst + Q5_K::kQs);
      }
      break;
    }
    default: {  // Q6_K
      uint8_t* ql = dst + Q6_K::kQl;
      uint8_t* qh = dst + Q6_K::kQh;
      std::memset(ql, 0, 128);
      std::memset(qh, 0, 64);
      for (int i = 0; i < kQK; ++i) {
        const int c = k.q[i] + 32, h = i >> 7, r = i & 127;
        ql[64 * h + (r & 63)] |= uint8_t((c & 0x0f) << (4 * (r >> 6)));
        qh[32 * h + (r & 31)] |= uint8_t((c >> 4) << (2 * (r >> 5)));
      }
      for (int j = 0; j < 16; ++j) dst[Q6_K::kScales + j] = uint8_t(int8_t(k.ls[j]));
      store_u16(dst + Q6_K::kD, k.dh);
    }
  }
}

// One K-format super-block. Weights: `importance`, or x² plus the block's mean square (see
// ggml_quantize_k.cc), scaled so that the largest is 1 (only ratios matter, and the FP32 error
// sums stay finite); a sub-block whose weights are all zero, or underflow, is weighed evenly.
bool quantize_k(DType t, const float* x, const float* importance, uint8_t* dst) {
  constexpr int n = ggml::kQK;
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  if (amax < 0x1p-32f) {
    // Every nonzero level is a multiple of an f16 scale, at least 2^-24: zeros are closer.
    std::memset(dst, 0, size_t(dtype_block(t).bytes));
    return true;
  }
  float w[n];
  if (importance) {
    std::memcpy(w, importance, sizeof w);
  } else {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    const float mean_sq = float(ss / n);
    for (int i = 0; i < n; ++i) w[i] = x[i] * x[i] + mean_sq;
  }
  float wmax = 0;
  for (int i = 0; i < n; ++i) wmax = std::fmax(wmax, w[i]);
  for (int i = 0; i < n; ++i) w[i] = wmax > 0 ? w[i] / wmax : 1.0f;
  const int sub = (t == DType::kQ4_K || t == DType::kQ5_K) ? 32 : 16;
  for (int j = 0; j < n; j += sub) {
    float sum = 0;
    for (int i = j; i < j + sub; ++i) sum += w[i];
    if (!(sum > 0))
      for (int i = j; i < j + sub; ++i) w[i] = 1;
  }
  ggml::KQuant k;
  if (!ggml::search_k_block(t, x, w, &k)) return false;
  pack_k(t, k, dst);
  return true;
}

Status check_finite(std::span<const float> v, const char* what) {
  // A value is finite unless its exponent bits are all ones: one pass with no branch (an integer
  // OR reduction, which vectorises), the index looked for only when something is wrong.
  uint32_t all_ones = 0;
  for (const float e : v) {
    uint32_t bits;
    std::memcpy(&bits, &e, 4);
    all_ones |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
  }
  if (all_ones == 0) return Status::ok_status();
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      return invalid_argument(
          fmt::format("quantize_row: {}[{}] = {} is not finite", what, i, v[i]));
  return Status::ok_status();
}

}  // namespace

bool can_quantize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

Status quantize_row(DType t, std::span<const float> x, uint8_t* dst,
                    std::span<const float> importance) {
  if (!can_quantize(t))
    return invalid_argument(fmt::format("quantize_row: cannot quantise to {}", dtype_name(t)));
  const DTypeBlock blk = dtype_block(t);
  const int64_t n = int64_t(x.size());
  if (n % blk.elems != 0)
    return invalid_argument(
        fmt::format("quantize_row: {} values are not a whole number of {} blocks of {}", n,
                    dtype_name(t), blk.elems));
  if (!importance.empty() && importance.size() != x.size())
    return invalid_argument(fmt::format("quantize_row: {} importance weights for {} values",
                                        importance.size(), x.size()));
  MLA_RETURN_IF_ERROR(check_finite(x, "x"));
  MLA_RETURN_IF_ERROR(check_finite(importance, "importance"));
  for (size_t i = 0; i < importance.size(); ++i)
    if (importance[i] < 0)
      return invalid_argument(
          fmt::format("quantize_row: importance[{}] = {} is negative", i, importance[i]));

  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, x.data(), size_t(n) * 4);
      return Status::ok_status();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = ggml::float_to_half(x[i]);
        if ((h & 0x7fffu) == 0x7c00u)
          return invalid_argument(
              fmt::format("quantize_row: x[{}] = {} is beyond the F16 range", i, x[i]));
        ggml::store_u16(dst + 2 * i, h);
      }
      return Status::ok_status();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) ggml::store_u16(dst + 2 * i, f32_to_bf16(x[i]));
      return Status::ok_status();
    default:
      break;
  }

  const int64_t nb = n / blk.elems;
  static const bool avx512 = cpu_supports(CpuIsa::kAvx512);
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x.data() + b * blk.elems;
    uint8_t* out = dst + b * blk.bytes;
    bool ok;
    if (t == DType::kQ8_0)
      ok = avx512 ? quantize_q8_0_avx512(xb, out) : quantize_q8_0(xb, out);
    else if (t == DType::kQ4_0)
      ok = quantize_q4_0(xb, out);
    else
      ok = quantize_k(t, xb, importance.empty() ? nullptr : importance.data() + b * blk.elems, out);
    if (!ok)
      return invalid_argument(
          fmt::format("quantize_row: values {}..{} are too large for {}'s FP16 scales",
                      b * blk.elems, (b + 1) * blk.elems - 1, dtype_name(t)));
  }
  return Status::ok_status();
}

}  // namespace mla
