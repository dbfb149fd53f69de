// Random weights for the linear() tests and the ops harness: every dtype, FP8 and int8 with a
// scale grid, at an unaligned address as inside an mmap'd file.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/linear.h"

namespace mla {

inline int elem_bytes(DType d) {
  return d == DType::kF32 ? 4 : (linear_block_scaled(d) ? 1 : 2);
}

// A weight (and FP8 scale grid) in owned storage, `offset` bytes past a malloc'd address, like a
// tensor inside an mmap'd safetensors file.
struct TestWeight {
  std::vector<uint8_t> data, scales;
  LinearWeight w;
};

inline TestWeight make_weight(Rng& rng, DType dt, int64_t out, int64_t in, int offset,
                              int block_rows = 128, int block_cols = 128) {
  TestWeight t;
  const int eb = elem_bytes(dt);
  t.data.resize(offset + size_t(out * in) * eb);
  uint8_t* p = t.data.data() + offset;
  for (int64_t k = 0; k < out * in; ++k) {
    const float f = float(rng.normal());
    if (dt == DType::kF32) {
      std::memcpy(p + 4 * k, &f, 4);
    } else if (dt == DType::kBF16 || dt == DType::kF16) {
      const uint16_t h = dt == DType::kBF16 ? f32_to_bf16(f) : f32_to_f16(f);
      std::memcpy(p + 2 * k, &h, 2);
    } else if (dt == DType::kI8) {
      p[k] = uint8_t(int8_t(int(rng.below(255)) - 127));  // every code in [-127, 127]
    } else {
      const uint8_t b = uint8_t(rng.below(254));  // every finite code, subnormals included
      p[k] = b < 0x7F ? b : uint8_t(b + 1);
    }
  }
  t.w.dtype = dt;
  t.w.data = p;
  t.w.out = out;
  t.w.in = in;
  if (linear_block_scaled(dt)) {
    t.w.block_rows = block_rows;
    t.w.block_cols = block_cols;
    const int64_t cells =
        ((out + block_rows - 1) / block_rows) * ((in + block_cols - 1) / block_cols);
    t.scales.resize(offset + size_t(cells) * 4);
    for (int64_t c = 0; c < cells; ++c) {
      // Not powers of two, so FP8 · scale rounds in FP32; magnitudes 2^-12 .. 2^-4.
      const float s = float(std::ldexp(1.0 + rng.uniform(), -12 + int(rng.below(8))));
      std::memcpy(t.scales.data() + offset + 4 * c, &s, 4);
    }
    t.w.scale_inv = t.scales.data() + offset;
  }
  return t;
}

}  // namespace mla
