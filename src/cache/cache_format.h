// The dense MHA / GQA baselines that `mla memory` compares the latent cache formats with
// (core/kv_format.h defines those formats).
#pragma once

#include <cstdint>

#include "core/kv_format.h"

namespace mla {

// The dense baselines of docs/kernels/kv_formats.md §Memory per token: separate K and V of
// n_kv_heads heads × head_dim values, BF16: 2 · n_kv_heads · head_dim · 2 bytes. MHA has
// n_kv_heads = H (65,536 at H = 128, head_dim = 128); GQA-8 has kGqaKvHeads (4,096). The head dim
// is the model's v_head_dim, for K as well, as in that table. Requires positive arguments.
inline constexpr int kGqaKvHeads = 8;
int64_t dense_kv_bytes_per_token(int n_kv_heads, int head_dim);

}  // namespace mla
