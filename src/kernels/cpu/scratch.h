// Per-thread scratch buffers for the CPU kernels: grown on demand, reused across calls, so the
// hot loops never allocate. Most sizes are bounded by tile and row-block sizes; the decompressed
// prefill's queries and running output grow with the largest chunk of queries seen (a prefill
// chunk: 2,048 tokens by default).
#pragma once

#include <algorithm>

#include "core/aligned_buffer.h"

namespace mla::cpu {

// Makes b hold at least n elements; new memory is zero-filled (padding lanes read as 0).
template <typename T>
T* ensure_scratch(AlignedBuffer<T>& b, size_t n) {
  if (b.size() < n) {
    b = AlignedBuffer<T>(n);
    std::fill(b.begin(), b.end(), T{});
  }
  return b.data();
}

}  // namespace mla::cpu
