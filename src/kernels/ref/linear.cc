// Reference weight product: dequantise one weight row to FP64, dot it with every row of x in FP64.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "kernels/ref/linear_ref.h"

namespace mla::ref {
namespace {

// The code of a block-scaled element: the E4M3 value, or the int8 integer.
double block_code(DType t, uint8_t b) {
  return t == DType::kI8 ? double(int8_t(b)) : double(fp8_e4m3_to_f32(b));
}

}  // namespace

double linear_weight(const LinearWeight& w, int64_t i, int64_t j) {
  const int64_t k = i * w.in + j;  // element index in the [out, in] row-major matrix
  switch (w.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, w.data + 4 * k, 4);
      return f;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, w.data + 2 * k, 2);
      return bf16_to_f32(h);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, w.data + 2 * k, 2);
      return f16_to_f32(h);
    }
    case DType::kF8E4M3:
    case DType::kI8: {
      // Scale grid [ceil(out / block_rows), ceil(in / block_cols)]: integer division already
      // gives a ragged edge block the last scale row / column.
      const int64_t cols = (w.in + w.block_cols - 1) / w.block_cols;
      float s;
      std::memcpy(&s, w.scale_inv + 4 * ((i / w.block_rows) * cols + j / w.block_cols), 4);
      return block_code(w.dtype, w.data[k]) * double(s);
    }
    default: {  // GGUF block formats: the row's blocks decoded by the scalar reference
      std::vector<double> row(size_t(w.in));
      linear_weight_row(w, i, row.data());
      return row[size_t(j)];
    }
  }
}

void linear_weight_row(const LinearWeight& w, int64_t i, double* row) {
  const bool scaled = linear_block_scaled(w.dtype);
  if (dtype_is_ggml_block(w.dtype) || (dtype_is_row_interleaved(w.dtype) && !scaled)) {
    std::vector<float> f(size_t(w.in));
    const Status s = dequantize_weight_row(w.dtype, w.data, w.in, i, f.data());
    MLA_CHECK(s.ok(), "linear_weight_row: {}", s.message());  // validate() checked the shape
    for (int64_t j = 0; j < w.in; ++j) row[j] = f[size_t(j)];
    return;
  }
  if (!scaled) {
    for (int64_t j = 0; j < w.in; ++j) row[j] = linear_weight(w, i, j);
    return;
  }
  const int64_t cols = (w.in + w.block_cols - 1) / w.block_cols;
  const uint8_t* e = w.data + i * w.in;
  std::vector<uint8_t> gathered;  // a kF8E4M3R16 row's codes as the row was stored
  if (w.dtype == DType::kF8E4M3R16) {
    gathered.resize(size_t(w.in));
    gather_f8_r16_row(w.data, w.in, i, gathered.data());
    e = gathered.data();
  }
  for (int64_t b = 0; b < cols; ++b) {
    float s;
    std::memcpy(&s, w.scale_inv + 4 * ((i / w.block_rows) * cols + b), 4);
    const int64_t j1 = std::min(w.in, (b + 1) * w.block_cols);
    for (int64_t j = b * w.block_cols; j < j1; ++j) row[j] = block_code(w.dtype, e[j]) * double(s);
  }
}

void linear(const LinearWeight& w, int64_t n, const float* x, double* y) {
  std::vector<double> row(size_t(w.in));
  for (int64_t i = 0; i < w.out; ++i) {
    linear_weight_row(w, i, row.data());
    for (int64_t r = 0; r < n; ++r) {
      const float* xr = x + r * w.in;
      double s = 0;
      for (int64_t j = 0; j < w.in; ++j) s += double(xr[j]) * row[size_t(j)];
      y[r * w.out + i] = s;
    }
  }
}

}  // namespace mla::ref
