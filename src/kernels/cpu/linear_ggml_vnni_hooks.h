// The driver's integer path for GGUF blocks (linear_driver.h, traits with kGgmlInt) on
// AVX512-VNNI: the K formats with x quantised per 256 (linear_ggml_vnni_k.h), Q8_0 / Q4_0 per
// 32 on the same kernel as without VNNI (linear_ggml_avx2.h, which measured faster), and with
// `gemm` (the BF16 paths, from lin_gemm_min_rows rows of x) every format on the int8 GEMM of
// linear_gemm_int8.h, x per 32 (Q8_0, Q4_0) or per 256 (the K formats) in its own layouts. The
// traits of linear.cpu.avx512bf16 and of the VNNI variants take these hooks in place of
// GgmlAvx2Hooks (linear_ggml_avx2_hooks.h; using-declarations: both are bases). Include after the
// ISA's `#pragma GCC target` with avx512vnni; internal linkage.
#pragma once

#include "kernels/cpu/linear_gemm_int8.h"
#include "kernels/cpu/linear_gemm_int8_x32.h"
#include "kernels/cpu/linear_ggml_avx2.h"
#include "kernels/cpu/linear_ggml_r16.h"
#include "kernels/cpu/linear_ggml_r16_k.h"
#include "kernels/cpu/linear_ggml_vnni_k.h"

namespace mla::cpu {
namespace {

struct GgmlVnniHooks {
  static constexpr bool kGgmlInt = true;
  static bool ggml_takes(DType t) {
    return ggml_avx2_takes(t) || ggml_k_vnni_takes(t) || dtype_is_ggml_repack(t);
  }
  static bool ggml_gemm_takes(const LinearWeight& w, int64_t) { return ggml_gemm_i8_takes(w); }
  static int ggml_x_layout(DType t, bool gemm) {
    return gemm                   ? (ggml_gemm_i8x32(t) ? 5 : 2)
           : t == DType::kQ8_0R16 ? 3
           : t == DType::kQ4_KR16 ? 4
           : ggml_k_format(t)     ? 1
                                  : 0;
  }
  static int64_t ggml_gemm_chunk_rows(const LinearWeight& w, int threads) {
    return ggml_gemm_i8_chunk_rows(w, threads);
  }
  static int64_t ggml_x_bytes(DType t, int64_t in, bool gemm) {
    return gemm ? (ggml_gemm_i8x32(t) ? ggml_i8x32_row_bytes(in) : ggml_i8_x_row_bytes(in))
           : t == DType::kQ8_0R16 ? ggml_r16_x_row_bytes(in)
           : t == DType::kQ4_KR16 ? ggml_r16k_x_row_bytes(in)
           : ggml_k_format(t)     ? ggml_k_x_row_bytes(in)
                                  : ggml_avx2_x_row_bytes(in);
  }
  static void ggml_quantize_x(DType t, const float* x, int64_t in, bool gemm, uint8_t* dst) {
    if (gemm)
      return ggml_gemm_i8x32(t) ? ggml_i8x32_quantize_row(x, in, dst)
                                : ggml_i8_quantize_x_row(x, in, dst);
    if (t == DType::kQ8_0R16) return ggml_r16_quantize_x_row(x, in, dst);
    if (t == DType::kQ4_KR16) return ggml_r16k_quantize_x_row(x, in, dst);
    if (ggml_k_format(t)) return ggml_k_quantize_x_row(x, in, dst);
    ggml_avx2_quantize_x_row(x, in, dst);
  }
  // `next`: the weight bytes this thread reads next, requested by the int8 GEMM.
  static void ggml_chunk(const LinearWeight& w, int64_t n, bool gemm, const uint8_t* xq, float* y,
                         int64_t r0, int64_t r1, WeightAhead next) {
    if (gemm)
      return ggml_gemm_i8x32(w.dtype) ? ggml_gemm_i8x32_chunk(w, n, xq, y, r0, r1, next)
                                      : ggml_gemm_i8_chunk(w, n, xq, y, r0, r1, next);
    if (w.dtype == DType::kQ8_0R16) return ggml_r16_chunk(w, n, xq, y, r0, r1);
    if (w.dtype == DType::kQ4_KR16) return ggml_r16k_chunk(w, n, xq, y, r0, r1);
    if (ggml_k_format(w.dtype)) return ggml_k_vnni_chunk(w, n, xq, y, r0, r1);
    ggml_avx2_chunk(w, n, xq, y, r0, r1);
  }
};

// The using-declarations a traits struct deriving from another traits struct and GgmlVnniHooks
// needs (the base's GgmlAvx2Hooks would make each name ambiguous).
#define MLA_GGML_VNNI_HOOKS                                                                 \
  using GgmlVnniHooks::kGgmlInt, GgmlVnniHooks::ggml_takes, GgmlVnniHooks::ggml_gemm_takes, \
      GgmlVnniHooks::ggml_x_layout, GgmlVnniHooks::ggml_gemm_chunk_rows,                    \
      GgmlVnniHooks::ggml_x_bytes, GgmlVnniHooks::ggml_quantize_x, GgmlVnniHooks::ggml_chunk

}  // namespace
}  // namespace mla::cpu
