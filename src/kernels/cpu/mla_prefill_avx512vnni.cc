// The decompressed prefill with int8 tiles (mla_prefill_tile_int8.h) on AVX512-VNNI: what
// mla_prefill.cpu.avx512 runs when MlaPrefillParams::attention_dtype is I8 and the CPU has
// AVX512_VNNI.
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/mla_prefill_tile_int8.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

bool mla_prefill_int8_tiles_fit(const MlaPrefillParams& p) {
  return int8_prefill_tiles_fit(p);
}

void mla_prefill_avx512vnni(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear) {
  run_mla_prefill<VecAvx512, PrefillTileInt8>(p, pool, linear);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
