// Entry points of the CPU weight products (kernels/linear.h), one per ISA variant, and the list
// the dispatcher and the tests pick from. Callers validate the weight first (validate()).
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/linear.h"

namespace mla::cpu {

// How the product is computed (docs/BENCHMARKS.md "Weight products (linear)" has the figures):
//   kDot:  register-blocked dot products of weight rows (widened in registers) with up to 4 rows
//          of x at a time: W is streamed once for n ≤ 4 (decode); for larger n an L2-sized chunk
//          of rows is reused for every group of 4 (FP8 / F16 chunks widened once to FP32 first).
//          It beat OpenBLAS SGEMM on widened panels at every n measured (16, 64, 512), so the
//          engine uses no BLAS library (and maps no BLAS work buffer). FP32 products.
//   kAuto: kDot.
//   kBf16: products of more than kLinWidenMinRows rows of x with BF16 or FP8 weights run on BF16
//          dot products (x rounded to BF16 once, FP32 accumulation: linear_gemm_bf16.h) in the
//          variants that have them; everything else as kDot.
enum class LinearPath { kAuto, kDot, kBf16 };

using LinearCpuFn = void (*)(const LinearWeight& w, int64_t n, const float* x, float* y,
                             ThreadPool& pool, LinearPath path);

// y [n, out] fp32 = x [n, in] fp32 · W_realᵀ, FP32 accumulation; n ≥ 1, w validated.
void linear_scalar(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
                   LinearPath path);
void linear_avx2(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
                 LinearPath path);
void linear_avx512(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
                   LinearPath path);
void linear_avx512_vbmi(const LinearWeight& w, int64_t n, const float* x, float* y,
                        ThreadPool& pool, LinearPath path);
void linear_avx512_vnni(const LinearWeight& w, int64_t n, const float* x, float* y,
                        ThreadPool& pool, LinearPath path);
void linear_avx512_vbmi_vnni(const LinearWeight& w, int64_t n, const float* x, float* y,
                             ThreadPool& pool, LinearPath path);
void linear_avx512_bf16(const LinearWeight& w, int64_t n, const float* x, float* y,
                        ThreadPool& pool, LinearPath path);

// Every job of linear_many (validated, y not overlapping) in one parallel_for.
using LinearManyCpuFn = void (*)(std::span<const LinearJob> jobs, ThreadPool& pool,
                                 LinearPath path);
void linear_many_scalar(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path);
void linear_many_avx2(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path);
void linear_many_avx512(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path);
void linear_many_avx512_vbmi(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path);
void linear_many_avx512_vnni(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path);
void linear_many_avx512_vbmi_vnni(std::span<const LinearJob> jobs, ThreadPool& pool,
                                  LinearPath path);
void linear_many_avx512_bf16(std::span<const LinearJob> jobs, ThreadPool& pool, LinearPath path);

// Bytes 3 and 2 of the FP32 bits of value · 2^-8 for each E4M3 magnitude code (the byte tables of
// linear.cpu.avx512vbmi and avx512bf16), built at start-up in linear_avx512_vbmi.cc.
struct Fp8Fp32Bytes {
  alignas(64) uint8_t top[128] = {}, next[128] = {};
};
extern const Fp8Fp32Bytes kFp8Fp32Bytes;

struct LinearCpuVariant {
  const char* name;  // "linear.cpu.<isa>"
  bool (*supported)();
  LinearCpuFn run;
  LinearManyCpuFn run_many;
  // Runs Q8_0 weights faster repacked as kQ8_0R16 (core/ggml_repack.h): the VNNI variants.
  bool repacks_q8_0 = false;
};

// Every CPU variant, best first; the first supported one is what backend "cpu" runs.
std::span<const LinearCpuVariant> linear_cpu_variants();

}  // namespace mla::cpu
