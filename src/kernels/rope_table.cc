// make_rope_table, validate(RopeParams) and the checked entry to the FP32 rotation (through the
// registry).
#include "kernels/rope_table.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "kernels/ref/mla_ref.h"
#include "kernels/registry.h"

namespace mla {

Result<RopeTable> make_rope_table(const RopeConfig& cfg, int64_t max_positions) {
  if (cfg.dim <= 0 || cfg.dim % 2 != 0)
    return invalid_argument(fmt::format("rope: dim {} must be positive and even", cfg.dim));
  if (max_positions < 1 || max_positions > (int64_t(1) << 26))
    return invalid_argument(fmt::format("rope: max_positions {} outside [1, 2^26]", max_positions));
  const int half = cfg.dim / 2;
  RopeTable t;
  t.cfg = cfg;
  t.max_positions = max_positions;
  MLA_ASSIGN_OR_RETURN(t.cos,
                       AlignedBuffer<float>::allocate(size_t(max_positions) * half, "rope cos"));
  MLA_ASSIGN_OR_RETURN(t.sin,
                       AlignedBuffer<float>::allocate(size_t(max_positions) * half, "rope sin"));
  const std::vector<double> inv_freq = ref::rope_inv_freq(cfg);
  const double factor = ref::rope_attention_factor(cfg);
  for (int64_t p = 0; p < max_positions; ++p)
    for (int i = 0; i < half; ++i) {
      const double angle = double(p) * inv_freq[i];  // FP64: the angle reaches 1e5 radians
      t.cos[size_t(p) * half + i] = float(std::cos(angle) * factor);
      t.sin[size_t(p) * half + i] = float(std::sin(angle) * factor);
    }
  return t;
}

Status validate(const RopeParams& p) {
  if (!p.table) return invalid_argument("rope: no table");
  const RopeTable& table = *p.table;
  if (p.n_tokens < 0 || p.n_heads < 0 || p.offset < 0 || p.offset + table.cfg.dim > p.row_stride)
    return invalid_argument(
        fmt::format("rope: bad shape (tokens {}, heads {}, row_stride {}, offset {}, dim {})",
                    p.n_tokens, p.n_heads, p.row_stride, p.offset, table.cfg.dim));
  for (int t = 0; t < p.n_tokens; ++t)
    if (p.positions[t] < 0 || p.positions[t] >= table.max_positions)
      return invalid_argument(fmt::format("rope: position {} of token {} outside the table [0, {})",
                                          p.positions[t], t, table.max_positions));
  return {};
}

Status rope_apply_f32(const RopeTable& table, const int64_t* positions, int n_tokens, int n_heads,
                      int64_t row_stride, int64_t offset, float* x) {
  const RopeParams p{&table, positions, n_tokens, n_heads, row_stride, offset, x};
  MLA_RETURN_IF_ERROR(validate(p));
  MLA_ASSIGN_OR_RETURN(const RopeVariant* v, select_variant(p, "cpu"));
  // The rotation is serial (a few hundred bytes per head and token, inside a layer that is already
  // split over the threads elsewhere): it is handed a pool without workers, so using the RoPE op
  // never starts the process-wide pool.
  static ThreadPool serial(1);
  v->run(p, serial);
  return {};
}

}  // namespace mla
