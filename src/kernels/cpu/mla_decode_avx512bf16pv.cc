// mla_decode.cpu.avx512bf16.bf16pv: the absorbed decode with both products as BF16 dot products
// (vdpbf16ps) and FP32 accumulation, over BF16 or quantised caches.
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")

#include "kernels/cpu/decode_tile_bf16pv.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_decode_avx512bf16pv(const MlaDecodeParams& p, ThreadPool& pool) {
  run_mla_decode<VecAvx512, DecodeTileBf16Pv>(p, pool);
}

}  // namespace mla::cpu

#pragma GCC pop_options
