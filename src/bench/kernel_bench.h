// Timings of the MLA kernels and paths for `mla bench decode | prefill | threshold` and
// `mla tune`: median of repeated calls after a warm-up, reported against the machine's measured
// peaks (bench/machine_probe.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/machine_probe.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "mla/status.h"

namespace mla::bench {

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;
  int reps = 0;
};
// Calls fn once to warm up, then `reps` times (at least until min_seconds have passed).
Timing time_calls(const std::function<void()>& fn, int reps, double min_seconds = 0.0);

struct DecodeCase {
  int b = 1, s_q = 1, h_q = 128, s_kv = 4096;
  DType kv_dtype = DType::kBF16;  // kBF16 or a quantised latent (kF8E4M3, kI8, kE2M1)
  DType q_dtype = DType::kBF16;
  bool int8_products = false;  // MlaDecodeParams::int8_products
};

struct DecodeResult {
  DecodeCase c;
  std::string variant;
  Timing t;
  double gflops = 0, gbps = 0;
  double pct_of_bf16_peak = 0;
  double pct_of_roofline = 0;  // of min(the variant's compute peak, bandwidth × intensity)
};

// Absorbed decode with DeepSeek dims (d_qk 576, d_v 512), page size 64, causal. `variant` empty:
// the best cpu variant that supports the case.
Result<DecodeResult> bench_decode(const DecodeCase& c, const MachineReport& m, ThreadPool& pool,
                                  int reps, const std::string& variant);

struct PrefillCase {
  int m = 256, l = 4096, h_q = 128;  // chunk of m new tokens over l cached ones
  DType kv_dtype = DType::kBF16;
  DType attention_q_dtype = DType::kF32;  // the absorbed path's query at the decode kernel
  // The decompressed path's tiles (MlaAttentionParams::decompressed_dtype); unset: the query's.
  std::optional<DType> decompressed_dtype;
  bool absorbed = true, decompressed = true;  // the paths timed
};

struct PrefillResult {
  PrefillCase c;
  std::string path;  // "absorbed" or "decompressed"
  Timing t;
  double flops = 0, gflops = 0, tokens_per_s = 0, pct_of_bf16_peak = 0;
  // The decompressed path on the int8 tiles: of the vpdpbusd peak (int8_dot_gops), else 0.
  double pct_of_int8_peak = 0;
};

// The paths c asks for of mla_attention on one chunk (DeepSeek dims: d_n 128, d_r 64, d_v 128,
// r 512).
Result<std::vector<PrefillResult>> bench_prefill(const PrefillCase& c, const MachineReport& m,
                                                 ThreadPool& pool, int reps);

}  // namespace mla::bench
