// validate() of a weight and of linear parameters, and linear() / linear_many(): checked, then
// run on the first variant of the backend in the registry's table (kernels/registry.h).
#include "kernels/linear.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/ggml_repack.h"
#include "kernels/registry.h"

namespace mla {

namespace {

// Whether an FP8 scale grid of [block_rows, block_cols] keeps every group of 16 rows and every
// pair of columns of kF8E4M3R16 inside one block.
bool f8_r16_blocks_fit(const LinearWeight& w) {
  return w.block_rows % 16 == 0 && w.block_cols % 2 == 0;
}

}  // namespace

Status validate(const LinearWeight& w) {
  if (w.dtype != DType::kBF16 && w.dtype != DType::kF16 && w.dtype != DType::kF32 &&
      !linear_block_scaled(w.dtype) && !dtype_is_ggml_block(w.dtype) &&
      !dtype_is_row_interleaved(w.dtype))
    return invalid_argument("linear weight: dtype " + std::string(dtype_name(w.dtype)) +
                            " is not one of BF16, F16, F32, F8_E4M3, I8, a GGUF block format, "
                            "Q8_0_R16, Q4_K_R16, BF16_R16 or F8_E4M3_R16");
  if (dtype_is_ggml_block(w.dtype) && w.in % dtype_block(w.dtype).elems != 0)
    return invalid_argument("linear weight: " + std::string(dtype_name(w.dtype)) + " rows of " +
                            std::to_string(w.in) + " values are not whole blocks of " +
                            std::to_string(dtype_block(w.dtype).elems));
  if (dtype_is_row_interleaved(w.dtype) && !repack_fits(w.dtype, w.out, w.in))
    return invalid_argument("linear weight: " + std::string(dtype_name(w.dtype)) + " shape [" +
                            std::to_string(w.out) + ", " + std::to_string(w.in) +
                            "] needs out a multiple of 16 and in of " +
                            std::to_string(r16_row_multiple(w.dtype)));
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
    if (w.dtype == DType::kF8E4M3R16 && !f8_r16_blocks_fit(w))
      return invalid_argument("linear weight: F8_E4M3_R16 block size [" +
                              std::to_string(w.block_rows) + ", " + std::to_string(w.block_cols) +
                              "] must hold whole groups of 16 rows and pairs of columns");
  }
  return Status();
}

namespace {

LinearPath path_of(DType math, int64_t batch_rows = 0) {
  if (math != DType::kBF16) return LinearPath::kAuto;
  return batch_rows > kLinearBatchInvariantRows ? LinearPath::kBf16Gemm : LinearPath::kBf16;
}

// validate(LinearParams) with errors prefixed by the entry point's name.
Status validate_jobs(std::span<const LinearJob> jobs, const char* op) {
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    // Formatted only for an error: this runs for every job of every decode pass.
    auto at = [&] { return std::string(op) + " job " + std::to_string(j); };
    if (!job.w) return invalid_argument(at() + ": no weight");
    MLA_RETURN_IF_ERROR(validate(*job.w));
    if (job.n < 0) return invalid_argument(at() + ": n = " + std::to_string(job.n) + " < 0");
    if (job.n > 0 && (!job.x || !job.y))
      return invalid_argument(at() + ": x or y is null with n = " + std::to_string(job.n));
    if (!job.up) continue;
    MLA_RETURN_IF_ERROR(validate(*job.up));
    if (!linear_pair_fits(*job.w, *job.up))
      return invalid_argument(at() + ": the up weight (" + std::string(dtype_name(job.up->dtype)) +
                              " [" + std::to_string(job.up->out) + ", " +
                              std::to_string(job.up->in) + "]) differs from the gate's (" +
                              std::string(dtype_name(job.w->dtype)) + " [" +
                              std::to_string(job.w->out) + ", " + std::to_string(job.w->in) +
                              "]) in dtype, shape or scale grid");
    if (job.n > 0 && !job.up_y)
      return invalid_argument(at() +
                              ": up_y is null with an up weight and n = " + std::to_string(job.n));
  }
  return Status();
}

Status check_backend(std::string_view backend, const char* op) {
  if (backend == "cpu" || backend == "ref") return Status();
  return invalid_argument(std::string(op) + ": unknown backend '" + std::string(backend) +
                          "' (expected cpu or ref)");
}

// The first variant of `backend` in the registry's table (validated params): every linear
// variant runs every weight dtype, so this is the best one this CPU has.
Status run_on(const LinearParams& p, std::string_view backend, ThreadPool& pool) {
  MLA_ASSIGN_OR_RETURN(const LinearVariant* v, select_variant(p, backend));
  v->run(p, pool);
  return Status();
}

}  // namespace

bool linear_pair_fits(const LinearWeight& a, const LinearWeight& b) {
  if (a.dtype != b.dtype || a.out != b.out || a.in != b.in) return false;
  return !linear_block_scaled(a.dtype) ||
         (a.block_rows == b.block_rows && a.block_cols == b.block_cols);
}

Status validate(const LinearParams& p) {
  return validate_jobs(p.jobs, "linear");
}

namespace {

DType preferred_layout(DType t, int64_t out, int64_t in, std::string_view backend) {
  const DType to = repacked_dtype(t);
  if (backend != "cpu" || !repack_fits(to, out, in)) return t;
  const Result<const LinearVariant*> v = select_variant(LinearParams{}, backend);
  if (!v.ok()) return t;
  const bool floats = to == DType::kBF16R16 || to == DType::kF8E4M3R16;
  return (floats ? (*v)->repacks_floats : (*v)->repacks_blocks) ? to : t;
}

}  // namespace

DType linear_preferred_dtype(DType t, int64_t out, int64_t in, std::string_view backend) {
  // Block-FP8 only through the overload that sees the scale grid.
  return t == DType::kF8E4M3 ? t : preferred_layout(t, out, in, backend);
}

DType linear_preferred_dtype(const LinearWeight& w, std::string_view backend) {
  if (w.dtype == DType::kF8E4M3 && !f8_r16_blocks_fit(w)) return w.dtype;
  return preferred_layout(w.dtype, w.out, w.in, backend);
}

Status linear(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
              std::string_view backend, DType math) {
  MLA_RETURN_IF_ERROR(validate(w));
  MLA_RETURN_IF_ERROR(check_backend(backend, "linear"));
  if (n < 0) return invalid_argument("linear: n = " + std::to_string(n) + " < 0");
  if (n == 0) return Status();
  if (!x || !y) return invalid_argument("linear: x or y is null with n = " + std::to_string(n));
  const LinearJob job{&w, n, x, y};
  return run_on(LinearParams{{&job, 1}, path_of(math)}, backend, pool);
}

Status linear_many(std::span<const LinearJob> jobs, ThreadPool& pool, std::string_view backend,
                   DType math, int64_t batch_rows) {
  MLA_RETURN_IF_ERROR(check_backend(backend, "linear_many"));
  MLA_RETURN_IF_ERROR(validate_jobs(jobs, "linear_many"));
  return run_on(LinearParams{jobs, path_of(math, batch_rows)}, backend, pool);
}

}  // namespace mla
