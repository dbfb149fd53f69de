// Weight slices for ranks (model_shard.h).
#include "model/model_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "core/ggml_quant.h"
#include "core/huge_pages.h"

namespace mla {

IndexRange split_range(int64_t total, int parts, int part, int64_t granule) {
  const int64_t units = (total + granule - 1) / granule;
  const int64_t base = units / parts, extra = units % parts;
  // The last `extra` parts take one granule more: the partial last granule then lands in a part
  // with more, and no two parts differ by more than one granule.
  const int64_t first = part * base + std::max<int64_t>(0, part - (parts - extra));
  const int64_t count = base + (part >= parts - extra ? 1 : 0);
  return {std::min(total, first * granule), std::min(total, (first + count) * granule)};
}

int64_t column_granule(const LinearWeight& w) {
  return dtype_is_ggml_block(w.dtype) ? dtype_block(w.dtype).elems : 1;
}

namespace {

// A GGUF block format cut inside its blocks (a head's columns of o_proj narrower than a Q4_K
// block): the slice as F32, the format's values exactly (its dequantisation is defined in FP32).
Result<LinearWeight> widened_slice(const LinearWeight& w, IndexRange rows, IndexRange cols,
                                   SliceStore& store, const std::string& what) {
  MLA_ASSIGN_OR_RETURN(
      AlignedBuffer<uint8_t> bytes,
      AlignedBuffer<uint8_t>::allocate(size_t(4 * cols.size() * rows.size()), what));
  std::vector<float> row(size_t(w.in));
  const int64_t row_bytes = dtype_bytes(w.dtype, w.in);
  for (int64_t i = 0; i < rows.size(); ++i) {
    MLA_RETURN_IF_ERROR(
        dequantize_row(w.dtype, w.data + (rows.begin + i) * row_bytes, w.in, row.data()));
    std::memcpy(bytes.data() + 4 * i * cols.size(), row.data() + cols.begin,
                size_t(4 * cols.size()));
  }
  LinearWeight s;
  s.dtype = DType::kF32;
  s.data = bytes.data();
  s.out = rows.size();
  s.in = cols.size();
  store.total_bytes += 4 * rows.size() * cols.size();
  store.bytes.push_back(std::move(bytes));
  store.widened.push_back(fmt::format("{} ({} columns [{}, {}) of {})", what, dtype_name(w.dtype),
                                      cols.begin, cols.end, w.in));
  return s;
}

}  // namespace

Result<LinearWeight> slice_linear(const LinearWeight& w, IndexRange rows, IndexRange cols,
                                  SliceStore& store, const std::string& what) {
  MLA_RETURN_IF_ERROR(validate(w));
  if (dtype_is_row_interleaved(w.dtype))
    return invalid_argument(
        fmt::format("{}: a {} weight cannot be sliced", what, dtype_name(w.dtype)));
  if (rows.begin < 0 || rows.end > w.out || rows.size() < 1 || cols.begin < 0 || cols.end > w.in ||
      cols.size() < 1)
    return invalid_argument(fmt::format("{}: slice rows [{}, {}) cols [{}, {}) of [{}, {}]", what,
                                        rows.begin, rows.end, cols.begin, cols.end, w.out, w.in));
  const int64_t g = column_granule(w);
  if (cols.begin % g != 0 || (cols.end % g != 0 && cols.end != w.in))
    return widened_slice(w, rows, cols, store, what);
  const int64_t row_bytes = dtype_bytes(w.dtype, w.in);
  const int64_t skip = dtype_bytes(w.dtype, cols.begin), keep = dtype_bytes(w.dtype, cols.size());
  MLA_ASSIGN_OR_RETURN(AlignedBuffer<uint8_t> bytes,
                       AlignedBuffer<uint8_t>::allocate(size_t(keep * rows.size()), what));
  advise_huge_pages(bytes.data(), bytes.size());  // before the copy touches it
  for (int64_t i = 0; i < rows.size(); ++i)
    std::memcpy(bytes.data() + i * keep, w.data + (rows.begin + i) * row_bytes + skip,
                size_t(keep));
  LinearWeight s = w;
  s.data = bytes.data();
  s.out = rows.size();
  s.in = cols.size();
  store.total_bytes += keep * rows.size();
  if (linear_block_scaled(w.dtype)) {
    const int gr = int(std::gcd<int64_t>(w.block_rows, rows.begin));
    const int gc = int(std::gcd<int64_t>(w.block_cols, cols.begin));
    const int64_t old_cols = (w.in + w.block_cols - 1) / w.block_cols;
    const int64_t nr = (s.out + gr - 1) / gr, nc = (s.in + gc - 1) / gc;
    MLA_ASSIGN_OR_RETURN(AlignedBuffer<float> sc,
                         AlignedBuffer<float>::allocate(size_t(nr * nc), what + " scales"));
    for (int64_t i = 0; i < nr; ++i)
      for (int64_t j = 0; j < nc; ++j) {
        const int64_t bi = (rows.begin + i * gr) / w.block_rows;
        const int64_t bj = (cols.begin + j * gc) / w.block_cols;
        std::memcpy(&sc[size_t(i * nc + j)], w.scale_inv + 4 * (bi * old_cols + bj), 4);
      }
    s.scale_inv = reinterpret_cast<const uint8_t*>(sc.data());
    s.block_rows = gr;
    s.block_cols = gc;
    store.total_bytes += 4 * nr * nc;
    store.scales.push_back(std::move(sc));
  }
  store.bytes.push_back(std::move(bytes));
  return s;
}

void SliceStore::release(const uint8_t* data) {
  for (AlignedBuffer<uint8_t>& b : bytes)
    if (b.size() && b.data() == data) {
      total_bytes -= int64_t(b.size());
      b = AlignedBuffer<uint8_t>();
      return;
    }
}

Result<LinearWeight> copy_linear(const LinearWeight& w, SliceStore& store,
                                 const std::string& what) {
  return slice_linear(w, {0, w.out}, {0, w.in}, store, what);
}

}  // namespace mla
