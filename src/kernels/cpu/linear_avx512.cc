// linear.cpu.avx512: weight products with AVX-512F/BW/VL (16 FP32 lanes) and F16C. BF16 is widened
// by a shift and multiplied in FP32 (vdpbf16ps would round x to BF16); FP8 E4M3 goes through FP16.
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// GCC 12 flags _mm512_reduce_add_ps's _mm256_undefined_pd() operand as uninitialized once inlined
// here (the same false positive src/kernels/CMakeLists.txt silences as -Wmaybe-uninitialized).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_avx512_traits.h"

namespace mla::cpu {

void linear_avx512(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinAvx512>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
