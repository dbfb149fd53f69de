// The driver's integer path for GGUF blocks (linear_driver.h, traits with kGgmlInt) on CPUs
// without AVX512-VNNI: GEMVs for decode-sized products (Q8_0 / Q4_0 with x per 32,
// linear_ggml_avx2.h; Q4_K / Q5_K / Q6_K with x per 256, linear_ggml_avx2_k.h: x layouts 0 and
// 1), and from lin_gemm_min_rows rows of x the int8 GEMMs (linear_gemm_int8_avx2.h,
// linear_gemm_int8_avx2_k.h), which read the GEMVs' x rows: one x layout a format either way. The
// traits of linear.cpu.avx2 and of the AVX-512 variants without VNNI derive from it
// (linear.cpu.avx512bf16 and the VNNI variants replace every hook: linear_ggml_vnni_hooks.h).
// Include after the ISA's `#pragma GCC target` (avx2, fma, f16c or above); internal linkage.
#pragma once

#include "kernels/cpu/linear_gemm_int8_avx2.h"
#include "kernels/cpu/linear_gemm_int8_avx2_k.h"
#include "kernels/cpu/linear_ggml_avx2.h"
#include "kernels/cpu/linear_ggml_avx2_k.h"
#include "kernels/cpu/weight_ahead.h"

namespace mla::cpu {
namespace {

struct GgmlAvx2Hooks {
  static constexpr bool kGgmlInt = true;
  static bool ggml_takes(DType t) { return ggml_avx2_takes(t) || ggml_avx2_k_takes(t); }
  // n: rows of x, from lin_gemm_min_rows. Q6_K's GEMM (2 quads per vpmaddwd) only overtook its
  // GEMV from ~64 rows (docs/BENCHMARKS.md "An int8 GEMM without VNNI").
  static bool ggml_gemm_takes(const LinearWeight& w, int64_t n) {
    if (w.dtype == DType::kQ6_K) return n >= kA2KQ6MinRows;
    return ggml_gemm_a2_takes(w) || ggml_gemm_a2k_takes(w);
  }
  static int ggml_x_layout(DType t, bool) { return ggml_avx2_k_takes(t) ? 1 : 0; }
  static int64_t ggml_gemm_chunk_rows(const LinearWeight& w, int threads) {
    return ggml_gemm_a2_chunk_rows(
        w.out, ggml_gemm_a2k_takes(w) ? ggml_gemm_a2k_row_bytes(w) : ggml_gemm_a2_row_bytes(w),
        threads);
  }
  static int64_t ggml_x_bytes(DType t, int64_t in, bool) {
    return ggml_avx2_k_takes(t) ? ggml_avx2_k_x_row_bytes(in) : ggml_avx2_x_row_bytes(in);
  }
  static void ggml_quantize_x(DType t, const float* x, int64_t in, bool, uint8_t* dst) {
    if (ggml_avx2_k_takes(t)) return ggml_avx2_k_quantize_x_row(x, in, dst);
    ggml_avx2_quantize_x_row(x, in, dst);
  }
  static void ggml_chunk(const LinearWeight& w, int64_t n, bool gemm, const uint8_t* xq, float* y,
                         int64_t r0, int64_t r1, WeightAhead) {
    const bool k = ggml_avx2_k_takes(w.dtype);
    if (gemm)
      return k ? ggml_gemm_a2k_chunk(w, n, xq, y, r0, r1) : ggml_gemm_a2_chunk(w, n, xq, y, r0, r1);
    if (k) return ggml_avx2_k_chunk(w, n, xq, y, r0, r1);
    ggml_avx2_chunk(w, n, xq, y, r0, r1);
  }
};

}  // namespace
}  // namespace mla::cpu
