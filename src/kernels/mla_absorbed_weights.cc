// prepare_absorbed_weights: the FP32 split of kv_b_proj and the per-head stored-dtype copies.
#include "kernels/mla_absorbed_weights.h"

#include <vector>

#include <fmt/format.h>

#include <cstring>
#include <numeric>

#include "kernels/ref/linear_ref.h"

namespace mla {
namespace {

// weight_scale_inv[bi][bj] of the checkpoint's grid (an mmap'd file: unaligned).
float scale_at(const LinearWeight& w, int64_t bi, int64_t bj) {
  const int64_t cols = (w.in + w.block_cols - 1) / w.block_cols;
  float s;
  std::memcpy(&s, w.scale_inv + 4 * (bi * cols + bj), 4);
  return s;
}

}  // namespace

Result<MlaAbsorbedWeights> prepare_absorbed_weights(const LinearWeight& kv_b, int h_q, int d_n,
                                                    int d_v, const StoredHeadWeights* given) {
  if (h_q < 1 || d_n < 1 || d_v < 1)
    return invalid_argument(fmt::format("kv_b_proj: bad dims h_q={} d_n={} d_v={}", h_q, d_n, d_v));
  if (Status s = validate(kv_b); !s.ok())
    return invalid_argument(fmt::format("kv_b_proj: {}", s.message()));
  if (kv_b.out != int64_t(h_q) * (d_n + d_v))
    return invalid_argument(fmt::format("kv_b_proj: {} rows, need h_q · (d_n + d_v) = {}", kv_b.out,
                                        int64_t(h_q) * (d_n + d_v)));
  const int r = int(kv_b.in);
  if (kv_b.in != r) return invalid_argument(fmt::format("kv_b_proj: r = {} too large", kv_b.in));
  MlaAbsorbedWeights w;
  w.h_q = h_q;
  w.d_n = d_n;
  w.d_v = d_v;
  w.r = r;
  if (given) {
    const auto check = [&](const LinearWeight& s, const char* name, int64_t out,
                           int64_t in) -> Status {
      if (Status v = validate(s); !v.ok())
        return invalid_argument(fmt::format("{}: {}", name, v.message()));
      if (s.scale_inv)  // a scale grid would need cutting per head too
        return invalid_argument(
            fmt::format("{}: {} with block scales is not supported", name, dtype_name(s.dtype)));
      if (s.out != out || s.in != in)
        return invalid_argument(
            fmt::format("{}: [{}, {}], need [{}, {}] for h_q={} d_n={} d_v={} "
                        "r={}",
                        name, s.out, s.in, out, in, h_q, d_n, d_v, r));
      return Status();
    };
    MLA_RETURN_IF_ERROR(check(given->uk_t, "attn_k_b", int64_t(h_q) * r, d_n));
    MLA_RETURN_IF_ERROR(check(given->uv, "attn_v_b", int64_t(h_q) * d_v, r));
  }
  const size_t uk_n = size_t(h_q) * d_n * r, uv_n = size_t(h_q) * d_v * r;
  // GGUF block formats (Q8_0, Q4_K, ...) cannot be transposed block-wise: their per-head copies
  // are the FP32 split itself.
  const bool block = dtype_is_ggml_block(kv_b.dtype);
  const DType stored = block ? DType::kF32 : kv_b.dtype;
  const int eb = dtype_bits(stored) / 8;
  MLA_ASSIGN_OR_RETURN(w.w_uk, AlignedBuffer<float>::allocate(uk_n, "W_UK"));
  MLA_ASSIGN_OR_RETURN(w.w_uv, AlignedBuffer<float>::allocate(uv_n, "W_UV"));
  if (!given) {
    MLA_ASSIGN_OR_RETURN(w.uk_t_bytes, AlignedBuffer<uint8_t>::allocate(uk_n * eb, "W_UK^T"));
    MLA_ASSIGN_OR_RETURN(w.uv_bytes, AlignedBuffer<uint8_t>::allocate(uv_n * eb, "W_UV"));
  }

  // The FP32 split: W_real row by row (FP8 · scale rounds once to FP32).
  std::vector<double> row(static_cast<size_t>(r));
  for (int h = 0; h < h_q; ++h) {
    const int64_t row0 = int64_t(h) * (d_n + d_v);
    for (int n = 0; n < d_n + d_v; ++n) {
      ref::linear_weight_row(kv_b, row0 + n, row.data());
      float* out =
          n < d_n ? &w.w_uk[(size_t(h) * d_n + n) * r] : &w.w_uv[(size_t(h) * d_v + n - d_n) * r];
      for (int c = 0; c < r; ++c) out[c] = float(row[size_t(c)]);
    }
  }

  w.uk_t.resize(size_t(h_q));
  w.uv.resize(size_t(h_q));
  if (given) {  // views of the file's per-head rows
    const int64_t uk_row = dtype_bytes(given->uk_t.dtype, d_n),
                  uv_row = dtype_bytes(given->uv.dtype, r);
    for (int h = 0; h < h_q; ++h) {
      LinearWeight uk = given->uk_t, uv = given->uv;
      uk.data += int64_t(h) * r * uk_row;
      uk.out = r;
      uv.data += int64_t(h) * d_v * uv_row;
      uv.out = d_v;
      w.uk_t[size_t(h)] = uk;
      w.uv[size_t(h)] = uv;
    }
    return w;
  }

  // The stored bytes, W_UK[h] transposed: uk_t[h][c][n] = kv_b[row0 + n][c].
  for (int h = 0; h < h_q && block; ++h) {
    float* uk = reinterpret_cast<float*>(w.uk_t_bytes.data()) + size_t(h) * r * d_n;
    for (int n = 0; n < d_n; ++n)
      for (int c = 0; c < r; ++c) uk[size_t(c) * d_n + n] = w.w_uk[(size_t(h) * d_n + n) * r + c];
    std::memcpy(w.uv_bytes.data() + size_t(h) * d_v * r * 4, &w.w_uv[size_t(h) * d_v * r],
                size_t(d_v) * r * 4);
  }
  for (int h = 0; h < h_q && !block; ++h) {
    const int64_t row0 = int64_t(h) * (d_n + d_v);
    uint8_t* uk = w.uk_t_bytes.data() + size_t(h) * r * d_n * eb;
    for (int n = 0; n < d_n; ++n)
      for (int c = 0; c < r; ++c)
        std::memcpy(uk + (size_t(c) * d_n + n) * eb, kv_b.data + ((row0 + n) * r + c) * eb,
                    size_t(eb));
    std::memcpy(w.uv_bytes.data() + size_t(h) * d_v * r * eb, kv_b.data + (row0 + d_n) * r * eb,
                size_t(d_v) * r * eb);
  }

  const bool fp8 = kv_b.dtype == DType::kF8E4M3;
  const int bc = kv_b.block_cols, g = std::gcd(kv_b.block_rows, std::gcd(d_n + d_v, d_n));
  const int64_t c_blocks = (r + bc - 1) / bc, n_blocks = (d_n + g - 1) / g,
                v_blocks = (d_v + g - 1) / g;
  if (fp8) {
    MLA_ASSIGN_OR_RETURN(w.uk_t_scale, AlignedBuffer<float>::allocate(
                                           size_t(h_q) * c_blocks * n_blocks, "W_UK^T scales"));
    MLA_ASSIGN_OR_RETURN(w.uv_scale, AlignedBuffer<float>::allocate(
                                         size_t(h_q) * v_blocks * c_blocks, "W_UV scales"));
    // Row row0 + k·g of kv_b starts every new block of g rows (g divides row0, d_n and
    // block_rows), so the checkpoint's scale row of that row covers the whole new block.
    for (int h = 0; h < h_q; ++h) {
      const int64_t row0 = int64_t(h) * (d_n + d_v);
      for (int64_t cb = 0; cb < c_blocks; ++cb) {
        for (int64_t nb = 0; nb < n_blocks; ++nb)
          w.uk_t_scale[(size_t(h) * c_blocks + cb) * n_blocks + nb] =
              scale_at(kv_b, (row0 + nb * g) / kv_b.block_rows, cb);
        for (int64_t vb = 0; vb < v_blocks; ++vb)
          w.uv_scale[(size_t(h) * v_blocks + vb) * c_blocks + cb] =
              scale_at(kv_b, (row0 + d_n + vb * g) / kv_b.block_rows, cb);
      }
    }
  }

  for (int h = 0; h < h_q; ++h) {
    LinearWeight& uk = w.uk_t[size_t(h)];
    uk.dtype = stored;
    uk.data = w.uk_t_bytes.data() + size_t(h) * r * d_n * eb;
    uk.out = r;
    uk.in = d_n;
    LinearWeight& uv = w.uv[size_t(h)];
    uv.dtype = stored;
    uv.data = w.uv_bytes.data() + size_t(h) * d_v * r * eb;
    uv.out = d_v;
    uv.in = r;
    if (fp8) {
      uk.scale_inv =
          reinterpret_cast<const uint8_t*>(w.uk_t_scale.data() + size_t(h) * c_blocks * n_blocks);
      uk.block_rows = bc;
      uk.block_cols = g;
      uv.scale_inv =
          reinterpret_cast<const uint8_t*>(w.uv_scale.data() + size_t(h) * v_blocks * c_blocks);
      uv.block_rows = g;
      uv.block_cols = bc;
    }
  }
  return w;
}

namespace {

// y[s, h, 0:out_h] = x[s, h, 0:in_h] · W[h]ᵀ for every head, as one linear_many (it takes dense
// x and y, so each head's rows are gathered into [h_q, rows, ·] and scattered back; at rows = 1
// that is 2.5 KB a head).  x row (s, h) at x + (s · h_q + h) · ldx, y's at y + (s · h_q + h) · ldy.
Status per_head_products(int rows, const std::vector<LinearWeight>& W, const float* x, int ldx,
                         float* y, int ldy, ThreadPool& pool) {
  const int H = int(W.size()), in = int(W[0].in), out = int(W[0].out);
  std::vector<float> xs(size_t(H) * rows * in), ys(size_t(H) * rows * out);
  std::vector<LinearJob> jobs(static_cast<size_t>(H));
  for (int h = 0; h < H; ++h) {
    for (int s = 0; s < rows; ++s)
      std::memcpy(&xs[(size_t(h) * rows + s) * in], x + (size_t(s) * H + h) * ldx,
                  sizeof(float) * in);
    jobs[size_t(h)] = {&W[size_t(h)], rows, &xs[size_t(h) * rows * in],
                       &ys[size_t(h) * rows * out]};
  }
  MLA_RETURN_IF_ERROR(linear_many(jobs, pool));
  for (int s = 0; s < rows; ++s)
    for (int h = 0; h < H; ++h)
      std::memcpy(y + (size_t(s) * H + h) * ldy, &ys[(size_t(h) * rows + s) * out],
                  sizeof(float) * out);
  return Status();
}

}  // namespace

Status absorb_query(int rows, int d_r, const float* q, const MlaAbsorbedWeights& w, float* q_abs,
                    ThreadPool& pool) {
  const int H = w.h_q, d_n = w.d_n, r = w.r, d_qk = d_n + d_r, d_abs = r + d_r;
  MLA_RETURN_IF_ERROR(per_head_products(rows, w.uk_t, q, d_qk, q_abs, d_abs, pool));
  for (int s = 0; s < rows; ++s)
    for (int h = 0; h < H; ++h)
      std::memcpy(q_abs + (size_t(s) * H + h) * d_abs + r, q + (size_t(s) * H + h) * d_qk + d_n,
                  sizeof(float) * d_r);
  return Status();
}

Status unabsorb_output(int rows, const float* o_lat, const MlaAbsorbedWeights& w, float* o,
                       ThreadPool& pool) {
  return per_head_products(rows, w.uv, o_lat, w.r, o, w.d_v, pool);
}

}  // namespace mla
