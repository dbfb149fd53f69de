// Entry points of the CPU weight products (kernels/linear.h), one per ISA variant. Callers go
// through the registry (kernels/registry.h), which lists them best first with their ISA checks,
// and validate the parameters first (validate()).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/linear.h"

namespace mla::cpu {

using LinearPath = mla::LinearPath;  // kernels/linear.h

// Every job of p (validated, y not overlapping) in one parallel_for: y [n, out] fp32 = x [n, in]
// fp32 · W_realᵀ, FP32 accumulation (BF16 products on path kBf16 where the variant has them).
// The run() of the registry's linear.cpu.<isa> entries (kernels/registry.cc).
void linear_scalar(const LinearParams& p, ThreadPool& pool);
void linear_avx2(const LinearParams& p, ThreadPool& pool);
void linear_avx512(const LinearParams& p, ThreadPool& pool);
void linear_avx512_vbmi(const LinearParams& p, ThreadPool& pool);
void linear_avx512_vnni(const LinearParams& p, ThreadPool& pool);
void linear_avx512_vbmi_vnni(const LinearParams& p, ThreadPool& pool);
void linear_avx512_bf16(const LinearParams& p, ThreadPool& pool);
void linear_amx(const LinearParams& p, ThreadPool& pool);

// Bytes 3 and 2 of the FP32 bits of value · 2^-8 for each E4M3 magnitude code (the byte tables of
// linear.cpu.avx512vbmi and avx512bf16), built at start-up in linear_avx512_vbmi.cc.
struct Fp8Fp32Bytes {
  alignas(64) uint8_t top[128] = {}, next[128] = {};
};
extern const Fp8Fp32Bytes kFp8Fp32Bytes;

}  // namespace mla::cpu
