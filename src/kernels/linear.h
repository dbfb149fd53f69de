// Weight products of the model runtime: y = x · Wᵀ with W in its checkpoint dtype (BF16, F16, F32,
// or block-FP8 E4M3 with F32 weight_scale_inv), accumulated in FP32. FP8 and BF16 weights are
// widened in registers (or in a per-thread panel that is reused across many rows of x), never as a
// widened copy of the whole matrix. The same call serves decode (n = a few rows: a GEMV that
// streams W once for all rows) and prefill / expert batches (n large: a GEMM).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "mla/status.h"

namespace mla {

struct LinearWeight {
  DType dtype = DType::kBF16;     // kBF16, kF16, kF32, kF8E4M3 or kI8
  const uint8_t* data = nullptr;  // [out, in] row-major; NOT necessarily aligned (mmap'd file)
  int64_t out = 0, in = 0;
  // Block-scaled dtypes (kF8E4M3, kI8) only: F32 [ceil(out / block_rows), ceil(in / block_cols)],
  // not necessarily aligned. W_real[i][j] = code(W[i][j]) · scale_inv[i / block_rows][j /
  // block_cols] (a multiplication; blocks at a ragged edge use the last scale row / column);
  // code is the E4M3 value or the int8 integer.
  const uint8_t* scale_inv = nullptr;
  int block_rows = 128, block_cols = 128;
};

// Whether W carries a block scale grid (kF8E4M3 and its repacked kF8E4M3R16, kI8).
constexpr bool linear_block_scaled(DType t) {
  return t == DType::kF8E4M3 || t == DType::kF8E4M3R16 || t == DType::kI8;
}

// Bytes of w's F32 scale grid ([ceil(out / block_rows), ceil(in / block_cols)]); 0 without one.
inline int64_t linear_scale_grid_bytes(const LinearWeight& w) {
  if (!w.scale_inv) return 0;
  return 4 * ((w.out + w.block_rows - 1) / w.block_rows) *
         ((w.in + w.block_cols - 1) / w.block_cols);
}

// invalid_argument naming what is wrong: dtype, non-positive dims, missing data or scales,
// a block size < 1.
Status validate(const LinearWeight& w);

// y[n, out] = x[n, in] · W_realᵀ, fp32 row-major, x and y not aliased. n may be 0.
// backend "cpu": the best ISA variant of this machine (the first linear.cpu variant of the
// registry it supports), threads of `pool` over output rows.
// backend "ref": kernels/ref's plain loop (FP64 accumulation; linear.ref.fp64), for checking.
// math kF32: FP32 products. kBF16: a product of more than 16 rows with BF16 or FP8 weights may
// round x to BF16 (relative error 2^-8) and run on BF16 dot products where the CPU has them
// (AVX512_BF16), FP32 accumulation; decode-sized products stay FP32. Other values: kF32.
Status linear(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
              std::string_view backend = "cpu", DType math = DType::kF32);

// The dtype `backend` runs a weight of dtype t and shape [out, in] fastest in, for a loader to
// convert it to once: kQ8_0R16 / kQ4_KR16 / kBF16R16 (core/ggml_repack.h) for Q8_0 / Q4_K / BF16
// where the CPU variant has their kernels and the shape fits, else t.
DType linear_preferred_dtype(DType t, int64_t out, int64_t in, std::string_view backend = "cpu");
// The same for a weight, whose scale grid is known: block-FP8 as kF8E4M3R16 where its scale
// blocks hold whole groups of 16 rows and whole pairs of columns.
DType linear_preferred_dtype(const LinearWeight& w, std::string_view backend = "cpu");

// One product of linear_many: y[n, out] = x[n, in] · W_realᵀ.
// With `up` (a SwiGLU's gate in w and its up product, same dtype, shape and scale grid: see
// linear_pair_fits): y = silu(x · W_realᵀ) ⊙ (x · Up_realᵀ), each chunk of rows of the two
// products made and multiplied while it is in cache, the up product kept in up_y [n, out] (the
// caller's scratch, overlapping no job's y); y is, bit for bit, silu_mul (kernels/activation.h)
// of the two products as linear() makes them.
// With `x_rows` ([n], each a valid row of x): row i of the product's x is x + x_rows[i] · in (the
// tokens routed to an expert, read where they are: the GEMMs lay them out or quantise them from
// there, the other paths take a gathered copy).
struct LinearJob {
  const LinearWeight* w = nullptr;
  int64_t n = 0;
  const float* x = nullptr;
  float* y = nullptr;
  const LinearWeight* up = nullptr;
  float* up_y = nullptr;
  const int64_t* x_rows = nullptr;
};

// Whether a and b can be one SwiGLU job (w = a, up = b): the same dtype, shape and scale grid,
// so that every CPU path lays out x once for both and cuts their rows in the same chunks.
bool linear_pair_fits(const LinearWeight& a, const LinearWeight& b);

// How a CPU variant computes a product (docs/BENCHMARKS.md "Weight products (linear)" has the
// figures):
//   kDot:  register-blocked dot products of weight rows (widened in registers) with up to 4 rows
//          of x at a time: W is streamed once for n ≤ 4 (decode); for larger n an L2-sized chunk
//          of rows is reused for every group of 4 (FP8 / F16 chunks widened once to FP32 first).
//          It beat OpenBLAS SGEMM on widened panels at every n measured (16, 64, 512), so the
//          engine uses no BLAS library (and maps no BLAS work buffer). FP32 products.
//   kAuto: kDot (linear()'s math kF32).
//   kBf16: products of more than 16 rows of x with BF16, FP8 or F32 weights (F32 rounded to
//          BF16 as well) run on BF16 dot products (x rounded to BF16 once, FP32 accumulation:
//          cpu/linear_gemm_bf16.h) in the variants that have them; linear.cpu.avx2 runs them
//          (and F16 / int8 weights) on an FP32 GEMM instead (cpu/linear_gemm_f32_avx2.h: x
//          in FP32, the FP32 bound); everything else as kDot (linear()'s math kBF16).
//   kBf16Gemm: kBf16, and products of fewer rows on the GEMMs too, down to the row count where
//          the GEMM stops being faster for the weight's format (measured per format:
//          cpu/linear_driver.h; the FP32 GEMM from 32 rows), and below it BF16_R16 / F8_E4M3_R16
//          weights on BF16 dot products as well (cpu/linear_r16_dot.h): for the jobs of a pass of
//          more than kLinearBatchInvariantRows rows (a prefill chunk's experts, ~16 tokens each in
//          DeepSeek-V3), which would otherwise run on FP32 FMAs at half the rate of the BF16 dot
//          products (linear_many's batch_rows).
enum class LinearPath { kAuto, kDot, kBf16, kBf16Gemm };

// Path kBf16 keeps FP32 products for up to this many rows of x, so that a row gets the same bits
// alone or in a batch of up to this many rows (decode batching). A pass of more rows (a prefill
// chunk) has no such property to keep: its dense products are GEMMs and each expert's product
// runs on the path its own token count picks.
constexpr int64_t kLinearBatchInvariantRows = 16;

// The parameters of a linear variant (kernels/registry.h): every job in one pass over the pool's
// threads. linear() is one job, linear_many() several; a CPU variant computes a job the same way,
// bit for bit, alone or among others (one product is a pass with one job).
struct LinearParams {
  std::span<const LinearJob> jobs;  // y of different jobs do not overlap
  LinearPath path = LinearPath::kAuto;
};

// invalid_argument naming the job: no weight, validate(*w) fails, n < 0, or x / y null with
// n > 0. No jobs, or jobs of n = 0 with null pointers, are valid (nothing to do).
Status validate(const LinearParams& p);

// A linear variant's run() (kernels/registry.h): what the prefill kernels are handed for their
// up-projections.
using LinearRunFn = void (*)(const LinearParams& p, ThreadPool& pool);

// Every job as linear() computes it (the same outputs, bit for bit), in one pass over the pool's
// threads: for many small products (the experts of an MoE layer in decode), where a pass each
// costs more in waking and waiting than the work it splits. The y of different jobs must not
// overlap.
// batch_rows: the rows of the pass the jobs come from (the forward's tokens; 0: unknown); above
// kLinearBatchInvariantRows, math kBF16 runs on path kBf16Gemm.
Status linear_many(std::span<const LinearJob> jobs, ThreadPool& pool,
                   std::string_view backend = "cpu", DType math = DType::kF32,
                   int64_t batch_rows = 0);

}  // namespace mla
