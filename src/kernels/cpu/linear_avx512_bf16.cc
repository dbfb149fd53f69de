// linear.cpu.avx512bf16: linear.cpu.avx512vbmi (the same FP32 products, bit for bit, for
// LinearPath kAuto / kDot and for every product below lin_gemm_min_rows rows but those of the
// R16 layouts below on path kBf16Gemm: linear_r16_dot.h), plus the BF16
// GEMM of linear_gemm_bf16.h for paths kBf16 / kBf16Gemm (prefill chunks, expert batches; GGUF
// block formats on the int8 GEMM of linear_gemm_int8.h), and BF16 / block-FP8 weights repacked at
// load as kBF16R16 / kF8E4M3R16 (read by that GEMM without transposing, and by the FP32 products of
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

#include "kernels/cpu/linear_avx512_bf16_traits.h"

namespace mla::cpu {

void linear_avx512_bf16(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinAvx512Bf16>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
