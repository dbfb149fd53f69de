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

// Whether W carries a block scale grid (kF8E4M3, kI8).
constexpr bool linear_block_scaled(DType t) {
  return t == DType::kF8E4M3 || t == DType::kI8;
}

// invalid_argument naming what is wrong: dtype, non-positive dims, missing data or scales,
// a block size < 1.
Status validate(const LinearWeight& w);

// y[n, out] = x[n, in] · W_realᵀ, fp32 row-major, x and y not aliased. n may be 0.
// backend "cpu": the best ISA variant of this machine, threads of `pool` over output rows.
// backend "ref": kernels/ref's plain loop (FP64 accumulation), for checking.
// math kF32: FP32 products. kBF16: a product of more than 16 rows with BF16 or FP8 weights may
// round x to BF16 (relative error 2^-8) and run on BF16 dot products where the CPU has them
// (AVX512_BF16), FP32 accumulation; decode-sized products stay FP32. Other values: kF32.
Status linear(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
              std::string_view backend = "cpu", DType math = DType::kF32);

// The dtype `backend` runs a weight of dtype t and shape [out, in] fastest in, for a loader to
// convert it to once: kQ8_0R16 (core/ggml_repack.h) for Q8_0 where the CPU variant has its
// kernels and the shape fits, else t.
DType linear_preferred_dtype(DType t, int64_t out, int64_t in, std::string_view backend = "cpu");

// One product of linear_many: y[n, out] = x[n, in] · W_realᵀ.
struct LinearJob {
  const LinearWeight* w = nullptr;
  int64_t n = 0;
  const float* x = nullptr;
  float* y = nullptr;
};

// Every job as linear() computes it (the same outputs, bit for bit), in one pass over the pool's
// threads: for many small products (the experts of an MoE layer in decode), where a pass each
// costs more in waking and waiting than the work it splits. The y of different jobs must not
// overlap.
Status linear_many(std::span<const LinearJob> jobs, ThreadPool& pool,
                   std::string_view backend = "cpu", DType math = DType::kF32);

}  // namespace mla
