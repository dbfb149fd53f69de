// The kernel harness: cases with seeded inputs run the reference, then every registered variant
// whose supports() holds, and report PASS / FAIL / UNSUPPORTED per (case, variant). In perf mode
// the same cases time each variant. Outputs carry guard regions that must stay untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/rng.h"
#include "kernels/compare.h"
#include "kernels/registry.h"

namespace mla::ops {

struct Options {
  std::string filter;  // substring of "op/case/variant"
  bool perf = false;
  bool quick = false;  // the sanitizer preset: smaller grid
  int perf_reps = 5;
};

struct Tally {
  int pass = 0, fail = 0, unsupported = 0;
};

struct OpCase {
  std::string op;    // "mla_decode", "linear", "rope", ...: one add_*_cases each
  std::string name;  // "b2_sq1_skv140_h16_p64_varlen_causal_bf16"
  std::function<void(const Options&, Tally&)> run;
};

void add_mla_decode_cases(std::vector<OpCase>& cases, const Options& opt);
void add_mla_prefill_cases(std::vector<OpCase>& cases, const Options& opt);
void add_mla_attention_cases(std::vector<OpCase>& cases, const Options& opt);
void add_linear_cases(std::vector<OpCase>& cases, const Options& opt);
void add_linear_ggml_cases(std::vector<OpCase>& cases, const Options& opt);
void add_rope_cases(std::vector<OpCase>& cases, const Options& opt);

// Output buffer with kGuard sentinel floats on each side.
class GuardedOutput {
 public:
  static constexpr int kGuard = 64;
  explicit GuardedOutput(size_t n);
  float* data() { return buf_.data() + kGuard; }
  const float* data() const { return buf_.data() + kGuard; }
  size_t size() const { return n_; }
  void poison();  // fills the payload with NaN so unwritten elements are caught
  bool guards_intact() const;

 private:
  AlignedBuffer<float> buf_;
  size_t n_;
};

// One product x [n, w.in] · W_realᵀ on linear variant v into y (poisoned first: [n, w.out]);
// false, with the (case, variant) reported UNSUPPORTED or FAIL, when v does not take it or fails.
bool run_linear_case(const LinearVariant& v, const LinearWeight& w, int64_t n, const float* x,
                     LinearPath path, GuardedOutput& y, Tally& tally, const std::string& op,
                     const std::string& case_name);

// Prints one result line and counts it. detail is printed after the status word.
void report(Tally& t, const std::string& op, const std::string& case_name,
            const std::string& variant, bool pass, const std::string& detail);
void report_unsupported(Tally& t, const std::string& op, const std::string& case_name,
                        const std::string& variant);
bool matches(const Options& opt, const std::string& op, const std::string& case_name,
             const std::string& variant);

// Median wall time of reps calls, in seconds.
double median_seconds(int reps, const std::function<void()>& fn);

// Cosine bound by what the variant keeps in its intermediates (docs/kernels/mla_decode.md).
double cos_bound(Intermediates c);

// Fills n elements of dtype (BF16 or F32) with N(0, sd²) values; BF16 values are rounded.
void fill_normal(Rng& rng, DType t, void* dst, int64_t n, double sd);

}  // namespace mla::ops
