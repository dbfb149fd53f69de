// mla_prefill.cpu.scalar.bf16: the decompressed prefill attention tiles in FP32, portable C++.
#include "kernels/cpu/isa_prelude.h"

#include "kernels/cpu/mla_prefill_driver.h"
#include "kernels/cpu/vec_scalar.h"

namespace mla::cpu {

void mla_prefill_scalar(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear) {
  run_mla_prefill<VecScalar>(p, pool, linear);
}

}  // namespace mla::cpu
