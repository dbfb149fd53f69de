// Construction of seeded paged caches.
#include "mla_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mla::ops {

std::vector<int32_t> make_seqlens(Rng& rng, int b, int s_kv, bool varlen) {
  std::vector<int32_t> s(b, s_kv);
  if (!varlen) return s;
  for (auto& v : s) v = int32_t(s_kv / 2 + rng.below(uint64_t(s_kv) + 1));
  if (b > 2) s[rng.below(b)] = 0;
  return s;
}

PagedCache make_paged_cache(Rng& rng, DType dtype, const std::vector<int32_t>& seqlens,
                            int page_size, int d_qk, double sd, int extra_blocks) {
  PagedCache c;
  c.page_size = page_size;
  c.d_qk = d_qk;
  c.dtype = dtype;
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
  const int eb = dtype == DType::kF32 ? 4 : 2;
  c.data.resize(size_t(c.num_blocks) * page_size * d_qk * eb);
  // NaN everywhere first: any read of an unused slot poisons the result.
  for (size_t i = 0; i < c.data.size() / eb; ++i) {
    if (eb == 4) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(&c.data[i * 4], &nan, 4);
    } else {
      const uint16_t nan = 0x7fc0;
      std::memcpy(&c.data[i * 2], &nan, 2);
    }
  }
  std::vector<int32_t> perm(c.num_blocks);
  for (int i = 0; i < c.num_blocks; ++i) perm[i] = i;
  for (int i = c.num_blocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(uint64_t(i) + 1)]);
  const int32_t garbage[] = {-1, c.num_blocks, c.num_blocks + 1000,
                             std::numeric_limits<int32_t>::max(),
                             std::numeric_limits<int32_t>::min()};
  c.block_table.resize(size_t(b) * c.max_blocks);
  for (auto& e : c.block_table) e = garbage[rng.below(5)];
  int next = 0;
  for (int s = 0; s < b; ++s) {
    const int pages = (seqlens[s] + page_size - 1) / page_size;
    for (int pg = 0; pg < pages; ++pg) c.block_table[size_t(s) * c.max_blocks + pg] = perm[next++];
    for (int t = 0; t < seqlens[s]; ++t) {
      const int64_t slot =
          int64_t(c.block_table[size_t(s) * c.max_blocks + t / page_size]) * page_size +
          t % page_size;
      for (int ch = 0; ch < d_qk; ++ch) {
        const float v = float(rng.normal() * sd);
        if (eb == 4)
          std::memcpy(&c.data[(slot * d_qk + ch) * 4], &v, 4);
        else {
          const uint16_t h = f32_to_bf16(v);
          std::memcpy(&c.data[(slot * d_qk + ch) * 2], &h, 2);
        }
      }
    }
  }
  return c;
}

float cache_value(const PagedCache& c, int b, int t, int ch) {
  const int64_t slot =
      int64_t(c.block_table[size_t(b) * c.max_blocks + t / c.page_size]) * c.page_size +
      t % c.page_size;
  if (c.dtype == DType::kF32) {
    float v;
    std::memcpy(&v, &c.data[(slot * c.d_qk + ch) * 4], 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, &c.data[(slot * c.d_qk + ch) * 2], 2);
  return bf16_to_f32(h);
}

}  // namespace mla::ops
