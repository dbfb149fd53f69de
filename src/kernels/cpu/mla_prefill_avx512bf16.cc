// The decompressed prefill with BF16 tiles (mla_prefill_tile_bf16.h) on AVX512_BF16: what
// mla_prefill.cpu.avx512 runs when MlaPrefillParams::attention_dtype is BF16 and the CPU has
// AVX512_BF16.
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/mla_prefill_tile_bf16.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_prefill_avx512bf16(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear) {
  run_mla_prefill<VecAvx512, PrefillTileBf16>(p, pool, linear);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
