// mla_decode.cpu.avx2.bf16: the absorbed decode, FP32 intermediates, AVX2 + FMA (8 lanes).
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/cpu/decode_tile_f32.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx2.h"

namespace mla::cpu {

void mla_decode_avx2(const MlaDecodeParams& p, ThreadPool& pool) {
  run_mla_decode<VecAvx2, DecodeTileF32<VecAvx2>>(p, pool);
}

}  // namespace mla::cpu

#pragma GCC pop_options
