// The traits of linear.cpu.avx512bf16 (linear_avx512_bf16.cc), shared with linear.cpu.amx
// (linear_amx.cc, which runs the GEMM's whole 16-row blocks of x on AMX tiles): the VBMI traits'
// FP32 products, the BF16 GEMM hooks of linear_gemm_bf16.h, the R16 float GEMVs and the GGUF
// VNNI hooks. Include after the ISA's `#pragma GCC target` with AVX512_BF16, VBMI and VNNI (and
// isa_prelude.h, linear_cpu.h, scratch.h before it); internal linkage.
#pragma once

#include "kernels/cpu/linear_avx512_vbmi_traits.h"
#include "kernels/cpu/linear_bf16_r16.h"
#include "kernels/cpu/linear_f8_r16.h"
#include "kernels/cpu/linear_gemm_bf16.h"
#include "kernels/cpu/linear_ggml_vnni_hooks.h"
#include "kernels/cpu/linear_r16_dot.h"

namespace mla::cpu {
namespace {

// L: the most derived traits (gemm_bf16_chunk looks up the AMX hooks there).
template <class L>
struct LinAvx512Bf16Base : LinAvx512Vbmi, GgmlVnniHooks {
  // The GEMM hooks of run_linear_many.
  static constexpr bool kBf16Gemm = true;
  static constexpr int kGemmTileRows = cpu::kGemmTileRows;
  static bool gemm_takes(const LinearWeight& w) { return gemm_bf16_takes(w); }
  static int64_t gemm_chunk_rows(const LinearWeight& w, int threads) {
    return gemm_bf16_chunk_rows(w, threads);
  }
  static int64_t gemm_panel_words(int64_t n, int64_t in) { return cpu::gemm_panel_words(n, in); }
  static int64_t gemm_row_words(int64_t in) { return cpu::gemm_pairs(in); }  // one row of a panel
  static void gemm_pack_x_tile(const float* x, const int64_t* rows, int64_t n, int64_t in,
                               int64_t t, uint32_t* panel) {
    cpu::gemm_pack_x_tile(x, rows, n, in, t, panel);
  }
  template <DType D>
  static void gemm_chunk(const LinearWeight& w, int64_t n, const uint32_t* panels, float* y,
                         int64_t r0, int64_t r1, WeightAhead next) {
    gemm_bf16_chunk<L, D>(w, n, panels, y, r0, r1, next);
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
  // The same weights on BF16 dot products below the GEMM's minimum rows (path kBf16Gemm).
  static void r16_dot_chunk(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                            int64_t r1) {
    cpu::r16_dot_chunk(w, n, x, y, r0, r1);
  }
  // GGUF block formats on AVX512-VNNI (every AVX512_BF16 CPU has it; checked anyway).
  MLA_GGML_VNNI_HOOKS;
};

struct LinAvx512Bf16 : LinAvx512Bf16Base<LinAvx512Bf16> {};

}  // namespace
}  // namespace mla::cpu
