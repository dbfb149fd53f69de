// Construction of seeded paged caches.
#include "kernels/mla_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mla {

std::vector<int32_t> make_seqlens(Rng& rng, int b, int s_kv, bool varlen) {
  std::vector<int32_t> s(b, s_kv);
  if (!varlen) return s;
  for (auto& v : s) v = int32_t(s_kv / 2 + rng.below(uint64_t(s_kv) + 1));
  if (b > 2) s[rng.below(b)] = 0;
  return s;
}

namespace {

// Writes one row of values in the cache's storage.
void store_row(const PagedCache& c, const float* row, uint8_t* dst) {
  const int n = c.latent_dim + c.rope_dim;
  if (c.dtype == DType::kF32) {
    std::memcpy(dst, row, size_t(n) * 4);
  } else if (c.dtype == DType::kBF16) {
    for (int i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(row[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  } else {
    quantize_kv_row(*kv_cache_dtype_of(c.dtype), c.latent_dim, c.rope_dim, row, c.global_scale,
                    dst);
  }
}

}  // namespace

PagedCache make_paged_cache(Rng& rng, DType dtype, const std::vector<int32_t>& seqlens,
                            int page_size, int latent_dim, int rope_dim, double sd,
                            float global_scale, int extra_blocks) {
  PagedCache c;
  c.page_size = page_size;
  c.latent_dim = latent_dim;
  c.rope_dim = rope_dim;
  c.dtype = dtype;
  c.global_scale = global_scale;
  c.row_bytes = kv_row_bytes(dtype, latent_dim, rope_dim);
  c.seqlens = seqlens;
  const int b = int(seqlens.size());
  int used = 0;
  for (int32_t s : seqlens) {
    const int pages = (s + page_size - 1) / page_size;
    used += pages;
    c.max_blocks = std::max(c.max_blocks, pages);
  }
  c.max_blocks += 1;  // at least one unused column per row
  c.num_blocks = used + extra_blocks;
  // 0xFF everywhere first: a NaN in BF16, F32, FP8 and FP32 scales, so any read of an unused
  // slot poisons the result.
  c.data.assign(size_t(c.num_blocks) * page_size * c.row_bytes, 0xff);
  std::vector<int32_t> perm(c.num_blocks);
  for (int i = 0; i < c.num_blocks; ++i) perm[i] = i;
  for (int i = c.num_blocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(uint64_t(i) + 1)]);
  const int32_t garbage[] = {-1, c.num_blocks, c.num_blocks + 1000,
                             std::numeric_limits<int32_t>::max(),
                             std::numeric_limits<int32_t>::min()};
  c.block_table.resize(size_t(b) * c.max_blocks);
  for (auto& e : c.block_table) e = garbage[rng.below(5)];
  std::vector<float> row(latent_dim + rope_dim);
  int next = 0;
  for (int s = 0; s < b; ++s) {
    const int pages = (seqlens[s] + page_size - 1) / page_size;
    for (int pg = 0; pg < pages; ++pg) c.block_table[size_t(s) * c.max_blocks + pg] = perm[next++];
    for (int t = 0; t < seqlens[s]; ++t) {
      const int64_t slot =
          int64_t(c.block_table[size_t(s) * c.max_blocks + t / page_size]) * page_size +
          t % page_size;
      for (auto& v : row) v = float(rng.normal() * sd);
      store_row(c, row.data(), &c.data[size_t(slot * c.row_bytes)]);
    }
  }
  return c;
}

PagedLatentCache cache_view(const PagedCache& c) {
  return {.dtype = c.dtype,
          .global_scale = c.global_scale,
          .rows = c.data.data(),
          .page_size = c.page_size,
          .num_blocks = c.num_blocks,
          .block_table = c.block_table.data(),
          .max_blocks_per_seq = c.max_blocks,
          .seq_lens = c.seqlens.data()};
}

void set_decode_cache(const PagedCache& c, MlaDecodeParams& p) {
  p.b = int(c.seqlens.size());
  p.d_qk = c.latent_dim + c.rope_dim;
  p.d_v = c.latent_dim;
  p.cache = cache_view(c);
}

}  // namespace mla
