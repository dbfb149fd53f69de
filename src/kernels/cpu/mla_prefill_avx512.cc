// mla_prefill.cpu.avx512.bf16: the decompressed prefill attention tiles in FP32, AVX-512F (16
// lanes).
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

#include "kernels/cpu/mla_prefill_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_prefill_avx512(const MlaPrefillParams& p, ThreadPool& pool) {
  run_mla_prefill<VecAvx512>(p, pool);
}

}  // namespace mla::cpu

#pragma GCC pop_options
