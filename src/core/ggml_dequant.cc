// Scalar dequantisers of the GGUF block formats, bit-exact with the `gguf` package's numpy
// dequantisers (and ggml's own). Each value is (d · sub-block scale) · code, minus
// (dmin · sub-block min) where the format has one, in FP32 from the exactly widened f16 scales.
// Every product is exact (at most 11 + 7 + 5 significant bits, never subnormal), so the only
// rounding is the subtraction of the min: neither the order of the products nor FMA contraction
// can change a result.
#include <fmt/format.h>

#include <cstring>
#include <string>

#include "core/ggml_blocks.h"
#include "core/ggml_quant.h"

namespace mla {
namespace {

using ggml::load_half;

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_half(b + ggml::Q8_0::kD);
  const int8_t* q = reinterpret_cast<const int8_t*>(b + ggml::Q8_0::kQs);
  for (int i = 0; i < 32; ++i) y[i] = float(q[i]) * d;
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_half(b + ggml::Q4_0::kD);
  const uint8_t* q = b + ggml::Q4_0::kQs;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float((q[j] & 0x0f) - 8);
    y[j + 16] = d * float((q[j] >> 4) - 8);
  }
}

// Q2_K and Q3_K share the 2-bit plane: 64 bytes in two halves of 32; value 128 h + 32 s + l is
// bits 2s..2s+1 of byte 32 h + l. Sub-blocks are 16 consecutive values, so each run of 16 below
// has one scale.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b + ggml::Q2_K::kScales;
  const float d = load_half(b + ggml::Q2_K::kD);
  const float dmin = load_half(b + ggml::Q2_K::kDmin);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* q = b + ggml::Q2_K::kQs + 32 * h;
    for (int s = 0; s < 4; ++s) {
      for (int half = 0; half < 2; ++half) {
        const int j = 8 * h + 2 * s + half;
        const float dl = d * float(sc[j] & 0x0f);
        const float ml = dmin * float(sc[j] >> 4);
        float* out = y + 16 * j;
        const uint8_t* qq = q + 16 * half;
        for (int l = 0; l < 16; ++l) out[l] = dl * float((qq[l] >> (2 * s)) & 3) - ml;
      }
    }
  }
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const float d = load_half(b + ggml::Q3_K::kD);
  int sc[16];
  ggml::unpack_q3k_scales(b + ggml::Q3_K::kScales, sc);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* q = b + ggml::Q3_K::kQs + 32 * h;
    for (int s = 0; s < 4; ++s) {
      // Value 32 t + l (t = 4 h + s) has its third bit in bit t of hmask[l]; a clear bit means
      // "minus 4".
      const int t = 4 * h + s;
      for (int half = 0; half < 2; ++half) {
        const int j = 8 * h + 2 * s + half;
        const float dl = d * float(sc[j]);
        float* out = y + 16 * j;
        const uint8_t* qq = q + 16 * half;
        const uint8_t* hm = b + ggml::Q3_K::kHmask + 16 * half;
        for (int l = 0; l < 16; ++l) {
          const int low = (qq[l] >> (2 * s)) & 3, high = (hm[l] >> t) & 1;
          out[l] = dl * float(low - 4 + 4 * high);
        }
      }
    }
  }
}

// Q4_K / Q5_K: 4-bit plane of 128 bytes in four chunks of 32; value 64 c + 32 n + l is nibble n
// (0 low, 1 high) of byte 32 c + l, so sub-block j (32 values) is nibble j % 2 of chunk j / 2.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_half(b + ggml::Q4_K::kD);
  const float dmin = load_half(b + ggml::Q4_K::kDmin);
  const uint8_t* qs = b + ggml::Q4_K::kQs;
  uint8_t sc[8], m[8];
  ggml::unpack_scale_min_k4(b + ggml::Q4_K::kScales, sc, m);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * float(sc[j]);
    const float ml = dmin * float(m[j]);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * float((q[l] >> shift) & 0x0f) - ml;
  }
}

void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_half(b + ggml::Q5_K::kD);
  const float dmin = load_half(b + ggml::Q5_K::kDmin);
  const uint8_t* qh = b + ggml::Q5_K::kQh;
  const uint8_t* qs = b + ggml::Q5_K::kQs;
  uint8_t sc[8], m[8];
  ggml::unpack_scale_min_k4(b + ggml::Q5_K::kScales, sc, m);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * float(sc[j]);
    const float ml = dmin * float(m[j]);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    // Value 32 j + l takes its fifth bit from bit j of qh[l].
    for (int l = 0; l < 32; ++l) {
      const int code = ((q[l] >> shift) & 0x0f) | (((qh[l] >> j) & 1) << 4);
      y[32 * j + l] = dl * float(code) - ml;
    }
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + ggml::Q6_K::kScales);
  const float d = load_half(b + ggml::Q6_K::kD);
  // Halves of 128 values: value 128 h + 64 n + k (k < 64) has its low 4 bits in nibble n of
  // ql[64 h + k], and value 128 h + 32 s + l its high 2 bits in bits 2s..2s+1 of qh[32 h + l].
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      const uint8_t* ql = b + ggml::Q6_K::kQl + 64 * h + 32 * (s & 1);
      const uint8_t* qh = b + ggml::Q6_K::kQh + 32 * h;
      const int lo_shift = 4 * (s >> 1), hi_shift = 2 * s;
      for (int half = 0; half < 2; ++half) {
        const int j = 8 * h + 2 * s + half;
        const float dl = d * float(sc[j]);
        float* out = y + 16 * j;
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int code = ((ql[l] >> lo_shift) & 0x0f) | (((qh[l] >> hi_shift) & 3) << 4);
          out[l - 16 * half] = dl * float(code - 32);
        }
      }
    }
  }
}

}  // namespace

Status dequantize_row(DType t, const uint8_t* src, int64_t n, float* out) {
  const DTypeBlock blk = dtype_block(t);
  const bool plain = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
  if (!plain && !dtype_is_ggml_block(t))
    return invalid_argument(
        fmt::format("dequantize_row: {} is not a GGUF block format or float", dtype_name(t)));
  if (n < 0 || n % blk.elems != 0)
    return invalid_argument(
        fmt::format("dequantize_row: {} values are not a whole number of {} "
                    "blocks of {}",
                    n, dtype_name(t), blk.elems));
  const int64_t nb = n / blk.elems;
  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(out, src, size_t(n) * 4);
      return Status::ok_status();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = ggml::half_to_float(ggml::load_u16(src + 2 * i));
      return Status::ok_status();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(ggml::load_u16(src + 2 * i));
      return Status::ok_status();
    default:
      break;
  }
  void (*fn)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case DType::kQ8_0:
      fn = dequant_q8_0;
      break;
    case DType::kQ4_0:
      fn = dequant_q4_0;
      break;
    case DType::kQ2_K:
      fn = dequant_q2_k;
      break;
    case DType::kQ3_K:
      fn = dequant_q3_k;
      break;
    case DType::kQ4_K:
      fn = dequant_q4_k;
      break;
    case DType::kQ5_K:
      fn = dequant_q5_k;
      break;
    case DType::kQ6_K:
      fn = dequant_q6_k;
      break;
    default:
      break;
  }
  for (int64_t b = 0; b < nb; ++b) fn(src + b * blk.bytes, out + b * blk.elems);
  return Status::ok_status();
}

}  // namespace mla
