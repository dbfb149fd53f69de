// mla_decode.cpu.avx512.bf16: the absorbed decode, FP32 intermediates, AVX-512F (16 lanes).
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

#include "kernels/cpu/decode_tile_f32.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_decode_avx512(const MlaDecodeParams& p, ThreadPool& pool) {
  run_mla_decode<VecAvx512, DecodeTileF32<VecAvx512>>(p, pool);
}

}  // namespace mla::cpu

#pragma GCC pop_options
