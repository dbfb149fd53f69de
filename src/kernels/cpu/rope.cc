// FP32 rotation of RoPE pairs: y_a = x_a·c − x_b·s, y_b = x_a·s + x_b·c, pairs (2i, 2i+1) in the
// interleaved (DeepSeek checkpoint) layout and (i, i + dim/2) in the NeoX layout.
#include "kernels/cpu/rope.h"

namespace mla::cpu {

void rope_rotate(int dim, RopeLayout layout, const float* cos, const float* sin,
                 const int64_t* positions, int n_tokens, int n_heads, int64_t row_stride,
                 int64_t offset, float* x) {
  const int half = dim / 2;
  const bool interleaved = layout == RopeLayout::kInterleaved;
  for (int t = 0; t < n_tokens; ++t) {
    const float* c = cos + positions[t] * half;  // [half]
    const float* s = sin + positions[t] * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (int64_t(t) * n_heads + h) * row_stride + offset;  // [dim]
      for (int i = 0; i < half; ++i) {
        const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        const float xa = v[a], xb = v[b];
        v[a] = xa * c[i] - xb * s[i];
        v[b] = xa * s[i] + xb * c[i];
      }
    }
  }
}

}  // namespace mla::cpu
