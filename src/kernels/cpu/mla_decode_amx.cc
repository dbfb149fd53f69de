// mla_decode.cpu.amx.bf16pv: the absorbed decode on the AMX tile unit (tdpbf16ps) for both
// products, FP32 accumulation, over BF16 or quantised caches.
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,amx-tile,amx-bf16")

#include "kernels/cpu/decode_tile_amx.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_decode_amx(const MlaDecodeParams& p, ThreadPool& pool) {
  run_mla_decode<VecAvx512, DecodeTileAmx>(p, pool);
}

}  // namespace mla::cpu

#pragma GCC pop_options
