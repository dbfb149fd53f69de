// mla_prefill.cpu.avx512.bf16: the decompressed prefill attention tiles in FP32, AVX-512F (16
// lanes); with attention_dtype I8 on an AVX512_VNNI CPU, the int8 tiles of
// mla_prefill_avx512vnni.cc; with BF16 (or I8 where those do not run) on an AVX512_BF16 CPU, the
// BF16 tiles of mla_prefill_avx512bf16.cc (an even d_n + d_r: channel pairs).
#include "core/cpu_features.h"
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

#include "kernels/cpu/mla_prefill_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_prefill_avx512(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear) {
  if (p.attention_dtype == DType::kI8 && mla_prefill_int8_tiles_fit(p) &&
      __builtin_cpu_supports("avx512vnni"))
    return mla_prefill_avx512vnni(p, pool, linear);
  if (p.attention_dtype != DType::kF32 && (p.d_n + p.d_r) % 2 == 0 &&
      cpu_supports(CpuIsa::kAvx512Bf16))
    return mla_prefill_avx512bf16(p, pool, linear);
  run_mla_prefill<VecAvx512>(p, pool, linear);
}

}  // namespace mla::cpu

#pragma GCC pop_options
