// linear.cpu.avx512vbmi: linear.cpu.avx512 with the FP8 GEMV (n = 1) decoding E4M3 by byte-table
// lookups (AVX-512 VBMI: Zen 4 / 5, Ice Lake and later) instead of through FP16. The decoded
// values, the products and their order are those of linear.cpu.avx512, so every output is the
// same bit for bit; only fewer instructions feed the FMAs.
// On one Zen 5 core the FP16 route decoded ~25 GB/s of L3-resident FP8 weights, below the DRAM
// read rate of two cores (docs/BENCHMARKS.md "Weight products").
#include "core/dtype.h"
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

namespace mla::cpu {

// Bytes 3 and 2 of the FP32 bits of value · 2^-8 for each E4M3 magnitude code c = 0 .. 127, from
// core/dtype's fp8_e4m3_to_f32 (bytes 1 and 0 are zero: the value has at most 4 significant bits;
// subnormal codes come out normalised, so no multiply is needed after the lookup). 0x7F (NaN)
// gives the quiet NaN 0x7FC00000: the products carry it to the output.
namespace {
Fp8Fp32Bytes fp8_fp32_bytes() {
  Fp8Fp32Bytes t;
  for (int c = 0; c < 0x80; ++c) {
    const uint32_t bits = f32_bits(fp8_e4m3_to_f32(uint8_t(c)) * 0x1p-8f);
    t.top[c] = uint8_t(bits >> 24);
    t.next[c] = uint8_t(bits >> 16);
  }
  return t;
}
}  // namespace

// Built at start-up by baseline code (above the target pragma: it runs on every CPU).
const Fp8Fp32Bytes kFp8Fp32Bytes = fp8_fp32_bytes();

}  // namespace mla::cpu

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_avx512_vbmi_traits.h"

namespace mla::cpu {

void linear_avx512_vbmi(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinAvx512Vbmi>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
