// linear.cpu.avx512bf16: linear.cpu.avx512vbmi (the same FP32 products, bit for bit, for
// LinearPath kAuto / kDot and for every product of up to kLinWidenMinRows rows), plus the BF16
// GEMM of linear_gemm_bf16.h for path kBf16 (prefill chunks, expert batches; GGUF block formats
// on the int8 GEMM of linear_gemm_int8.h): AVX512_BF16 and
// VBMI, Zen 4 / 5, Cooper Lake / Sapphire Rapids and later.
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx512vnni,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_avx512_vbmi_traits.h"
#include "kernels/cpu/linear_gemm_bf16.h"
#include "kernels/cpu/linear_gemm_int8.h"
#include "kernels/cpu/linear_ggml_vnni.h"
#include "kernels/cpu/linear_ggml_vnni_k.h"

namespace mla::cpu {
namespace {

struct LinAvx512Bf16 : LinAvx512Vbmi {
  // The GEMM hooks of run_linear_many.
  static constexpr bool kBf16Gemm = true;
  static constexpr int kGemmTileRows = cpu::kGemmTileRows;
  static bool gemm_takes(const LinearWeight& w, int64_t n) { return gemm_bf16_takes(w, n); }
  static int64_t gemm_chunk_rows(const LinearWeight& w, int threads) {
    return gemm_bf16_chunk_rows(w, threads);
  }
  static int64_t gemm_panel_words(int64_t n, int64_t in) { return cpu::gemm_panel_words(n, in); }
  static void gemm_pack_x_tile(const float* x, int64_t n, int64_t in, int64_t t, uint32_t* panel) {
    cpu::gemm_pack_x_tile(x, n, in, t, panel);
  }
  template <DType D>
  static void gemm_chunk(const LinearWeight& w, int64_t n, const uint32_t* panels, float* y,
                         int64_t r0, int64_t r1) {
    gemm_bf16_chunk<LinAvx512Bf16, D>(w, n, panels, y, r0, r1);
  }
  // GGUF block formats on AVX512-VNNI (every AVX512_BF16 CPU has it; checked anyway): Q8_0 /
  // Q4_0 with x quantised per 32 values (linear_ggml_vnni.h), the K formats per 256
  // (linear_ggml_vnni_k.h). The two x layouts follow the weight's block size.
  static constexpr bool kGgmlInt = true;
  // With `gemm` (path kBf16, more than kLinWidenMinRows rows of x) the formats run on the int8
  // GEMM of linear_gemm_int8.h, x per 256 values in its own layout.
  static bool ggml_takes(DType t) { return ggml_vnni_takes(t) || ggml_k_vnni_takes(t); }
  static bool ggml_gemm_takes(const LinearWeight& w) { return ggml_gemm_i8_takes(w); }
  static int ggml_x_layout(DType t, bool gemm) { return gemm ? 2 : ggml_k_format(t) ? 1 : 0; }
  static int64_t ggml_gemm_chunk_rows(const LinearWeight& w, int threads) {
    return ggml_gemm_i8_chunk_rows(w, threads);
  }
  static int64_t ggml_x_bytes(DType t, int64_t in, bool gemm) {
    return gemm               ? ggml_i8_x_row_bytes(in)
           : ggml_k_format(t) ? ggml_k_x_row_bytes(in)
                              : ggml_x_row_bytes(in);
  }
  static void ggml_quantize_x(DType t, const float* x, int64_t in, bool gemm, uint8_t* dst) {
    if (gemm) return ggml_i8_quantize_x_row(x, in, dst);
    if (ggml_k_format(t)) return ggml_k_quantize_x_row(x, in, dst);
    ggml_quantize_x_row(x, in, dst);
  }
  static void ggml_chunk(const LinearWeight& w, int64_t n, bool gemm, const uint8_t* xq, float* y,
                         int64_t r0, int64_t r1) {
    if (gemm) return ggml_gemm_i8_chunk(w, n, xq, y, r0, r1);
    if (ggml_k_format(w.dtype)) return ggml_k_vnni_chunk(w, n, xq, y, r0, r1);
    ggml_vnni_chunk(w, n, xq, y, r0, r1);
  }
};

}  // namespace

void linear_avx512_bf16(const LinearWeight& w, int64_t n, const float* x, float* y,
                        ThreadPool& pool, LinearPath path) {
  run_linear<LinAvx512Bf16>(w, n, x, y, pool, path);
}

void linear_many_avx512_bf16(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path) {
  run_linear_many<LinAvx512Bf16>(jobs, pool, path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
