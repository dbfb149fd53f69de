// linear.cpu.amx: linear.cpu.avx512bf16 (every FP32 product, the R16 GEMVs and the GGUF kernels
// the same, bit for bit) with the BF16 GEMM's whole 16-row blocks of x on the AMX tile unit
// (linear_gemm_amx.h over amx_tiles.h's tdpbf16ps products): Sapphire Rapids and later, where
// the tile unit multiplies BF16 at 14 times the vdpbf16ps rate (docs/BENCHMARKS.md "The machine").
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target(                                                                      \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx512vnni,avx2,fma,f16c," \
    "amx-tile,amx-bf16")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/linear_avx512_bf16_traits.h"

namespace mla::cpu {
namespace {

// The tile policy of gemm_amx_rows: the tile unit, configured per chunk and released after it
// (tile state is per thread; a released thread saves none on a context switch).
struct AmxTileUnit {
  static void begin() { amx_configure(); }
  static void end() { _tile_release(); }
  template <bool kLoad, class AOf>
  static void grid(int nk, int nj, AOf a_of, int64_t a_s, int64_t a_stride, const uint8_t* b,
                   int64_t b_j, int64_t b_s, int64_t b_stride, int steps, float* c, int64_t c_k,
                   int64_t c_stride) {
    amx_product_grid<kLoad>(nk, nj, a_of, a_s, a_stride, b, b_j, b_s, b_stride, steps, c, c_k,
                            c_stride);
  }
};

struct LinAmx : LinAvx512Bf16Base<LinAmx> {
  static constexpr bool kAmx = true;
  using AmxTiles = AmxTileUnit;
};

}  // namespace

void linear_amx(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinAmx>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
