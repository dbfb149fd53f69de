// The weight bytes a GEMM chunk's thread reads next (the rows of its next item in
// linear_many's pass), requested into L2 a few lines at a time while the current chunk computes on
// weights already in cache: by the int8 GEMM, and by the BF16 GEMM where it widens FP8. An
// expert's chunk of a prefill pass is read from DRAM once and then reused by every register tile
// of x: without the request the first tiles (or the widening) wait on DRAM (docs/BENCHMARKS.md
// "The int8 GEMM at its format's limit, and the next chunk's weights requested").
#pragma once

#include <xmmintrin.h>

#include <cstdint>

namespace mla::cpu {

struct WeightAhead {
  const char* p = nullptr;  // next line to request
  const char* end = nullptr;

  int64_t lines() const { return p < end ? (end - p + 63) / 64 : 0; }

  // Requests up to `k` more lines.
  void request(int64_t k) {
    for (; k > 0 && p < end; --k, p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }

  // Lines per step for `steps` steps to request every line.
  int64_t per_step(int64_t steps) const { return steps > 0 ? (lines() + steps - 1) / steps : 0; }
};

}  // namespace mla::cpu
