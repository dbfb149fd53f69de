// Shared pieces of the ops harness: guarded outputs, reporting, timing.
#include "harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace mla::ops {

namespace {
constexpr uint32_t kGuardBits = 0x7fa5a5a5u;  // a NaN payload no kernel produces
}

GuardedOutput::GuardedOutput(size_t n) : buf_(n + 2 * kGuard), n_(n) {
  for (size_t i = 0; i < buf_.size(); ++i) std::memcpy(&buf_[i], &kGuardBits, 4);
}

void GuardedOutput::poison() {
  std::fill(data(), data() + n_, std::nanf(""));
}

bool GuardedOutput::guards_intact() const {
  for (size_t i = 0; i < size_t(kGuard); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &buf_[i], 4);
    std::memcpy(&b, &buf_[kGuard + n_ + i], 4);
    if (a != kGuardBits || b != kGuardBits) return false;
  }
  return true;
}

bool matches(const Options& opt, const std::string& op, const std::string& case_name,
             const std::string& variant) {
  return opt.filter.empty() ||
         (op + "/" + case_name + "/" + variant).find(opt.filter) != std::string::npos;
}

void report(Tally& t, const std::string& op, const std::string& case_name,
            const std::string& variant, bool pass, const std::string& detail) {
  (pass ? t.pass : t.fail)++;
  if (!pass || std::getenv("MLA_OPS_VERBOSE"))
    fmt::print("{:<5} {}/{} {} {}\n", pass ? "PASS" : "FAIL", op, case_name, variant, detail);
}

void report_unsupported(Tally& t, const std::string& op, const std::string& case_name,
                        const std::string& variant) {
  t.unsupported++;
  if (std::getenv("MLA_OPS_VERBOSE")) fmt::print("UNSUPPORTED {}/{} {}\n", op, case_name, variant);
}

double median_seconds(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  fn();  // warm-up: page faults, scratch growth
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double cos_bound(Intermediates c) {
  // FP32 intermediates: the 0.999999 bar. BF16 query / probabilities: FlashMLA's 5e-6 cosine
  // difference (BF16 rounding of the absorbed query alone costs ~1e-6; docs/kernels/mla_decode.md
  // §Pass rules).
  return c >= Intermediates::kBf16 ? 1.0 - 5e-6 : 1.0 - 1e-6;
}

void fill_normal(Rng& rng, DType t, void* dst, int64_t n, double sd) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = float(rng.normal() * sd);
    if (t == DType::kF32)
      static_cast<float*>(dst)[i] = v;
    else
      static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
  }
}

bool run_linear_case(const LinearVariant& v, const LinearWeight& w, int64_t n, const float* x,
                     LinearPath path, GuardedOutput& y, Tally& tally, const std::string& op,
                     const std::string& case_name) {
  y.poison();
  const LinearJob job{&w, n, x, y.data()};
  const LinearParams p{{&job, 1}, path};
  if (!v.supports(p)) {
    report_unsupported(tally, op, case_name, v.name);
    return false;
  }
  const Status st = run_variant(v, p, default_thread_pool());
  if (!st.ok()) report(tally, op, case_name, v.name, false, st.to_string());
  return st.ok();
}

}  // namespace mla::ops
