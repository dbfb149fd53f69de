// mla_decode.cpu.scalar.bf16: the absorbed decode, FP32 intermediates, portable C++ (any x86-64 or
// other CPU).
#include "kernels/cpu/isa_prelude.h"

#include "kernels/cpu/decode_tile_f32.h"
#include "kernels/cpu/mla_decode_driver.h"
#include "kernels/cpu/vec_scalar.h"

namespace mla::cpu {

void mla_decode_scalar(const MlaDecodeParams& p, ThreadPool& pool) {
  run_mla_decode<VecScalar, DecodeTileF32<VecScalar>>(p, pool);
}

}  // namespace mla::cpu
