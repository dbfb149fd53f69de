// mla_prefill.cpu.avx2.bf16: the decompressed prefill attention tiles in FP32, AVX2 + FMA (8
// lanes).
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/cpu/mla_prefill_driver.h"
#include "kernels/cpu/vec_avx2.h"

namespace mla::cpu {

void mla_prefill_avx2(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear) {
  run_mla_prefill<VecAvx2>(p, pool, linear);
}

}  // namespace mla::cpu

#pragma GCC pop_options
