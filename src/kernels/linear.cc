// validate() of a weight and the backend dispatch of linear() (kernels/linear.h).
#include "kernels/linear.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/ggml_repack.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/ref/linear_ref.h"

namespace mla {

Status validate(const LinearWeight& w) {
  if (w.dtype != DType::kBF16 && w.dtype != DType::kF16 && w.dtype != DType::kF32 &&
      !linear_block_scaled(w.dtype) && !dtype_is_ggml_block(w.dtype) &&
      !dtype_is_row_interleaved(w.dtype))
    return invalid_argument("linear weight: dtype " + std::string(dtype_name(w.dtype)) +
                            " is not one of BF16, F16, F32, F8_E4M3, I8, a GGUF block format or "
                            "Q8_0_R16");
  if (dtype_is_ggml_block(w.dtype) && w.in % dtype_block(w.dtype).elems != 0)
    return invalid_argument("linear weight: " + std::string(dtype_name(w.dtype)) + " rows of " +
                            std::to_string(w.in) + " values are not whole blocks of " +
                            std::to_string(dtype_block(w.dtype).elems));
  if (w.dtype == DType::kQ8_0R16 && !q8_0_r16_fits(w.out, w.in))
    return invalid_argument("linear weight: Q8_0_R16 shape [" + std::to_string(w.out) + ", " +
                            std::to_string(w.in) + "] needs out a multiple of 16 and in of 64");
  if (w.out < 1 || w.in < 1)
    return invalid_argument("linear weight: shape [" + std::to_string(w.out) + ", " +
                            std::to_string(w.in) + "] must have out >= 1 and in >= 1");
  // Byte offsets (out · in · 4 at most) must fit in int64_t.
  if (w.out > std::numeric_limits<int64_t>::max() / 4 / w.in)
    return invalid_argument("linear weight: shape [" + std::to_string(w.out) + ", " +
                            std::to_string(w.in) + "] is too large");
  if (!w.data) return invalid_argument("linear weight: data is null");
  if (linear_block_scaled(w.dtype)) {
    if (!w.scale_inv)
      return invalid_argument("linear weight: " + std::string(dtype_name(w.dtype)) +
                              " without weight_scale_inv");
    if (w.block_rows < 1 || w.block_cols < 1)
      return invalid_argument("linear weight: block size [" + std::to_string(w.block_rows) + ", " +
                              std::to_string(w.block_cols) + "] must be >= 1");
  }
  return Status();
}

namespace {
cpu::LinearPath path_of(DType math) {
  return math == DType::kBF16 ? cpu::LinearPath::kBf16 : cpu::LinearPath::kAuto;
}
}  // namespace

DType linear_preferred_dtype(DType t, int64_t out, int64_t in, std::string_view backend) {
  if (backend != "cpu" || t != DType::kQ8_0 || !q8_0_r16_fits(out, in)) return t;
  for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants())
    if (v.supported()) return v.repacks_q8_0 ? DType::kQ8_0R16 : t;
  return t;
}

Status linear(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
              std::string_view backend, DType math) {
  MLA_RETURN_IF_ERROR(validate(w));
  if (backend != "cpu" && backend != "ref")
    return invalid_argument("linear: unknown backend '" + std::string(backend) +
                            "' (expected cpu or ref)");
  if (n < 0) return invalid_argument("linear: n = " + std::to_string(n) + " < 0");
  if (n == 0) return Status();
  if (!x || !y) return invalid_argument("linear: x or y is null with n = " + std::to_string(n));
  if (backend == "ref") {
    std::vector<double> acc(size_t(n * w.out));
    ref::linear(w, n, x, acc.data());
    for (size_t i = 0; i < acc.size(); ++i) y[i] = float(acc[i]);
    return Status();
  }
  for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants())
    if (v.supported()) {
      v.run(w, n, x, y, pool, path_of(math));
      break;
    }
  return Status();
}

Status linear_many(std::span<const LinearJob> jobs, ThreadPool& pool, std::string_view backend,
                   DType math) {
  if (backend != "cpu" && backend != "ref")
    return invalid_argument("linear_many: unknown backend '" + std::string(backend) +
                            "' (expected cpu or ref)");
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    const std::string at = "linear_many job " + std::to_string(j);
    if (!job.w) return invalid_argument(at + ": no weight");
    MLA_RETURN_IF_ERROR(validate(*job.w));
    if (job.n < 0) return invalid_argument(at + ": n = " + std::to_string(job.n) + " < 0");
    if (job.n > 0 && (!job.x || !job.y))
      return invalid_argument(at + ": x or y is null with n = " + std::to_string(job.n));
  }
  if (backend == "ref") {
    for (const LinearJob& job : jobs)
      MLA_RETURN_IF_ERROR(linear(*job.w, job.n, job.x, job.y, pool, backend));
    return Status();
  }
  for (const cpu::LinearCpuVariant& v : cpu::linear_cpu_variants())
    if (v.supported()) {
      v.run_many(jobs, pool, path_of(math));
      break;
    }
  return Status();
}

}  // namespace mla
