// Entry points of the CPU absorbed-decode and decompressed-prefill kernels, one per ISA variant.
// Callers go through the registry (kernels/registry.h), which checks supports() and validate().
#pragma once

#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/mla_params.h"

namespace mla::cpu {

// FP32 intermediates (query, probabilities, accumulators): mla_decode.cpu.<isa>.bf16
void mla_decode_scalar(const MlaDecodeParams& p, ThreadPool& pool);
void mla_decode_avx2(const MlaDecodeParams& p, ThreadPool& pool);
void mla_decode_avx512(const MlaDecodeParams& p, ThreadPool& pool);
// BF16 dot products (vdpbf16ps): query and probabilities rounded to BF16, FP32 accumulation.
// Needs a BF16 cache.
void mla_decode_avx512bf16(const MlaDecodeParams& p, ThreadPool& pool);
// Both products as BF16 dot products: query and probabilities (times the V scale) in BF16, FP32
// accumulation, as FlashMLA. BF16, FP8, INT8 and NVFP4 caches (exact BF16 codes, FP32 scales).
void mla_decode_avx512bf16pv(const MlaDecodeParams& p, ThreadPool& pool);
// The same numerics on the AMX tile unit (tdpbf16ps for both products).
void mla_decode_amx(const MlaDecodeParams& p, ThreadPool& pool);
// int8 dot products (vpdpbusd) for the latent part of both products over an INT8 cache (or a BF16
// one quantised per tile); q_pe on vdpbf16ps. Only where MlaDecodeParams::int8_products asks.
void mla_decode_avx512vnni(const MlaDecodeParams& p, ThreadPool& pool);

// The up-projections of the cached latents to K and V are weight products: they run on `linear`,
// the run() of the linear variant the registry picked for this CPU (this library cannot call
// the registry: it sits below it).
void mla_prefill_scalar(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear);
void mla_prefill_avx2(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear);
void mla_prefill_avx512(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear);
// mla_prefill_avx512's BF16 tiles (attention_dtype BF16 on an AVX512_BF16 CPU).
void mla_prefill_avx512bf16(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear);
// mla_prefill_avx512's int8 tiles (attention_dtype I8 on an AVX512_VNNI CPU, within
// mla_prefill_int8_tiles_fit: whole 4-channel quads per key part, at most 512 channels a part).
void mla_prefill_avx512vnni(const MlaPrefillParams& p, ThreadPool& pool, LinearRunFn linear);
bool mla_prefill_int8_tiles_fit(const MlaPrefillParams& p);

}  // namespace mla::cpu
