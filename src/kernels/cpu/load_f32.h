// Widening of stored BF16 / F32 values to FP32 for the kernels' tile buffers. Internal linkage
// (compiled per ISA translation unit).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace mla::cpu {
namespace {

// dst[0:n] = src[0:n] widened; src may be unaligned.
inline void load_f32(DType t, const void* src, int n, float* dst) {
  if (t == DType::kF32) {
    std::memcpy(dst, src, size_t(n) * 4);
  } else {
    const uint8_t* s = static_cast<const uint8_t*>(src);
    for (int i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      dst[i] = bf16_to_f32(h);
    }
  }
}

}  // namespace
}  // namespace mla::cpu
