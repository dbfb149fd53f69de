// linear.cpu.avx512bf16: linear.cpu.avx512vbmi (the same FP32 products, bit for bit, for
// LinearPath kAuto / kDot and for every product of up to kLinWidenMinRows rows), plus the BF16
// GEMM of linear_gemm_bf16.h for path kBf16 (prefill chunks, expert batches; GGUF block formats
// on the int8 GEMM of linear_gemm_int8.h), and BF16 / block-FP8 weights repacked at load as
// kBF16R16 / kF8E4M3R16 (read by that GEMM without transposing, and by the FP32 products of
// linear_bf16_r16.h / linear_f8_r16.h): AVX512_BF16 and
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
#include "kernels/cpu/linear_bf16_r16.h"
#include "kernels/cpu/linear_f8_r16.h"
#include "kernels/cpu/linear_gemm_bf16.h"
#include "kernels/cpu/linear_ggml_vnni_hooks.h"

namespace mla::cpu {
namespace {

struct LinAvx512Bf16 : LinAvx512Vbmi, GgmlVnniHooks {
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
  // kBF16R16 and kF8E4M3R16 weights (the layouts this variant asks the loader for) on its FP32
  // paths.
  static void bf16_r16_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                             int64_t r1) {
    cpu::bf16_r16_chunk(w, n, x, y, r0, r1);
  }
  static void f8_r16_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                           int64_t r1) {
    cpu::f8_r16_chunk(w, n, x, y, r0, r1);
  }
  // GGUF block formats on AVX512-VNNI (every AVX512_BF16 CPU has it; checked anyway).
  MLA_GGML_VNNI_HOOKS;
};

}  // namespace

void linear_avx512_bf16(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinAvx512Bf16>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
