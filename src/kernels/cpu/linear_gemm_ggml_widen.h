// The BF16 GEMM's panels of GGUF block-format weights (linear_gemm_bf16.h): the chunk's rows
// decoded in registers to their exact FP32 values (bit-exact with core/ggml_quant.h's decoders)
// and rounded once to BF16 (RNE), 32 values per store. The scalar decoders cost ~15% of a Q8_0
// prefill; this costs ~4 vector operations per 16 values.
// Include after linear_ggml_vnni_k.h (ggml_k_decode) under the ISA's `#pragma GCC target` with
// avx512bf16; internal linkage.
#pragma once

#include "kernels/cpu/linear_ggml_vnni_k.h"

namespace mla::cpu {
namespace {

inline void ggml_store_bf16(uint16_t* d, __m512 lo, __m512 hi) {
  _mm512_storeu_si512(d, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
}

// Q8_0 (d · q) and Q4_0 (d · (q − 8)): 32 values per block, products exact in FP32.
template <DType D>
void ggml_widen_row_32(const uint8_t* src, int64_t in, uint16_t* dst) {
  constexpr int kBytes = D == DType::kQ8_0 ? 34 : 18;
  for (int64_t b = 0; b < in / 32; ++b) {
    const uint8_t* blk = src + b * kBytes;
    const __m512 d = _mm512_set1_ps(ggml_k_half(blk));
    __m512i lo, hi;
    if constexpr (D == DType::kQ8_0) {
      lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
      hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18)));
    } else {
      // Byte j: value j in the low nibble, value j + 16 in the high one.
      const __m512i v =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
      const __m512i m4 = _mm512_set1_epi32(0x0f), eight = _mm512_set1_epi32(8);
      lo = _mm512_sub_epi32(_mm512_and_si512(v, m4), eight);
      hi = _mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight);
    }
    ggml_store_bf16(dst + 32 * b, _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)),
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)));
  }
}

// The K formats from ggml_k_decode's registers: value 64c + 16g + j is
// fl(d·s) · q − fl(dm·m), s the scale of its 4-value lane, m the min of its 16-value run; d·s and
// the product are exact, so the one rounding is the subtraction's, as in the scalar decoders.
template <DType D>
void ggml_widen_row_k(const uint8_t* src, int64_t in, uint16_t* dst) {
  const __m512i quarter =
      _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2);
  for (int64_t sb = 0; sb < in / 256; ++sb) {
    GgmlKBlock k;
    ggml_k_decode<D>(src + sb * kGgmlKBytes<D>, k);
    __m512 ks[4], km;
    ggml_k_float_scales(k, ks, km);
    alignas(64) float ml[16];
    _mm512_store_ps(ml, km);
    for (int c = 0; c < 4; ++c) {
      alignas(64) uint8_t q8[64];
      _mm512_store_si512(q8, k.q[c]);
      __m512 v[4];
      for (int g = 0; g < 4; ++g) {
        const __m512 q = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q8 + 16 * g))));
        const __m512 dl =
            _mm512_permutexvar_ps(_mm512_add_epi32(quarter, _mm512_set1_epi32(4 * g)), ks[c]);
        v[g] = _mm512_fmsub_ps(dl, q, _mm512_set1_ps(ml[4 * c + g]));
      }
      uint16_t* out = dst + 256 * sb + 64 * c;
      ggml_store_bf16(out, v[0], v[1]);
      ggml_store_bf16(out + 32, v[2], v[3]);
    }
  }
}

// dst [rows, ldw] BF16 of the block-format rows [o0, o0 + rows) of w (`in` whole blocks).
inline void ggml_widen_rows_bf16(const LinearWeight& w, int64_t o0, int64_t rows, int64_t ldw,
                                 uint16_t* dst) {
  const int64_t row_bytes = dtype_bytes(w.dtype, w.in);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = w.data + (o0 + r) * row_bytes;
    uint16_t* d = dst + r * ldw;
    switch (w.dtype) {
      case DType::kQ8_0:
        ggml_widen_row_32<DType::kQ8_0>(src, w.in, d);
        break;
      case DType::kQ4_0:
        ggml_widen_row_32<DType::kQ4_0>(src, w.in, d);
        break;
      case DType::kQ2_K:
        ggml_widen_row_k<DType::kQ2_K>(src, w.in, d);
        break;
      case DType::kQ3_K:
        ggml_widen_row_k<DType::kQ3_K>(src, w.in, d);
        break;
      case DType::kQ4_K:
        ggml_widen_row_k<DType::kQ4_K>(src, w.in, d);
        break;
      case DType::kQ5_K:
        ggml_widen_row_k<DType::kQ5_K>(src, w.in, d);
        break;
      default:
        ggml_widen_row_k<DType::kQ6_K>(src, w.in, d);
    }
  }
}

}  // namespace
}  // namespace mla::cpu
