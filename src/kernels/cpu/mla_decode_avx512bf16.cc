// mla_decode.cpu.avx512bf16.bf16: the absorbed decode, BF16 dot products (vdpbf16ps), FP32
// accumulation.
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")

#include "kernels/cpu/decode_tile_bf16dot.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_decode_avx512bf16(const MlaDecodeParams& p, ThreadPool& pool) {
  run_mla_decode<VecAvx512, DecodeTileBf16Dot>(p, pool);
}

}  // namespace mla::cpu

#pragma GCC pop_options
