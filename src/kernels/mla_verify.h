// MLA numerical equivalence check (what `mla verify` runs): from one set of BF16 inputs at model
// shapes, every registered absorbed-decode and decompressed-prefill variant is compared, scores
// and outputs, against the FP64 reference and the two paths against each other, each pair under
// the bound that its arithmetic implies (docs/kernels/mla_decode.md, "Numerics").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/thread_pool.h"
#include "kernels/compare.h"
#include "mla/status.h"

namespace mla {

struct VerifyConfig {
  int heads = 128, nope = 128, rope = 64, latent = 512, v_dim = 128;
  int seq = 2048;   // cached tokens (s_kv)
  int queries = 1;  // s_q, causal over the last queries tokens
  int page_size = 64;
  DType dtype = DType::kBF16;  // storage of the inputs: BF16 or F32
  // Cache format (core/kv_format.h); unset: rows stored in `dtype`.
  std::optional<KvCacheDtype> kv_dtype;
  uint64_t seed = 42;
  double softmax_scale = 0.0;  // 0: d_qk^-0.5 · m² with DeepSeek-V3's YaRN (factor 40, mscale 1)
};

struct VerifyPair {
  std::string a, b;     // variant names, or "ref.absorbed.fp64"
  std::string tensor;   // "scores" or "out"
  std::string compute;  // intermediates of the weaker side: "fp32" or "bf16"
  CompareStats stats;
  double cos_bound = 0.0;
  bool pass = false;
  // false for rows that report the cost of an input format (a BF16 absorbed query) rather than a
  // kernel's error; like a quantised cache (docs/kernels/mla_decode.md §Pass rules) the kernel
  // itself is judged against the reference run on what it consumes.
  bool gating = true;
  std::string note;  // what a non-gating row measures
};

struct VerifyReport {
  VerifyConfig config;
  double softmax_scale = 0.0;
  std::vector<VerifyPair> pairs;
  bool pass = false;
};

Result<VerifyReport> run_mla_verify(const VerifyConfig& cfg, ThreadPool& pool);

}  // namespace mla
