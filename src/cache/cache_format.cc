// Bytes per token of the dense KV baselines.
#include "cache/cache_format.h"

#include "core/check.h"

namespace mla {

int64_t dense_kv_bytes_per_token(int n_kv_heads, int head_dim) {
  MLA_CHECK(n_kv_heads > 0 && head_dim > 0, "bad dense KV dims heads={} head_dim={}", n_kv_heads,
            head_dim);
  // 4 · heads · head_dim < 2^64 for any two ints, but not < 2^63: check.
  int64_t bytes = 0;
  MLA_CHECK(!__builtin_mul_overflow(int64_t{4} * n_kv_heads, int64_t{head_dim}, &bytes),
            "dense KV bytes overflow: heads={} head_dim={}", n_kv_heads, head_dim);
  return bytes;  // K and V, 2 bytes (BF16) each
}

}  // namespace mla
