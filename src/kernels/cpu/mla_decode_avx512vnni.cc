// mla_decode.cpu.avx512vnni.int8: the absorbed decode over an INT8 cache on int8 dot products
// (vpdpbusd) for the latent part of both products, q_pe · k_pe on vdpbf16ps (k_pe is BF16 in the
// cache); asked for by MlaDecodeParams::int8_products.
#include "kernels/cpu/isa_prelude.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,avx2,fma")

#include "kernels/cpu/decode_tile_int8.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {

void mla_decode_avx512vnni(const MlaDecodeParams& p, ThreadPool& pool) {
  run_mla_decode<VecAvx512, DecodeTileInt8>(p, pool);
}

}  // namespace mla::cpu

#pragma GCC pop_options
