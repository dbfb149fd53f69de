// Seeded MLA inputs for the harness, the benchmarks and the CLI tests: a paged latent cache with
// a permuted block table, NaN in every unused slot and garbage in every unused table entry.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"

namespace mla::ops {

struct PagedCache {
  int page_size = 64, num_blocks = 0, max_blocks = 0, d_qk = 576;
  DType dtype = DType::kBF16;
  std::vector<uint8_t> data;         // [num_blocks, page_size, d_qk] of dtype
  std::vector<int32_t> block_table;  // [b, max_blocks]
  std::vector<int32_t> seqlens;      // [b]
};

// Rows of used slots are N(0, sd²) (rounded to dtype); `extra_blocks` unused pages are added.
PagedCache make_paged_cache(Rng& rng, DType dtype, const std::vector<int32_t>& seqlens,
                            int page_size, int d_qk, double sd, int extra_blocks = 3);

// Sequence lengths: all s_kv, or (varlen) spread over [s_kv/2, 3·s_kv/2] with one zero-length
// sequence when b > 2.
std::vector<int32_t> make_seqlens(Rng& rng, int b, int s_kv, bool varlen);

// The cache row of token t of sequence b, widened to FP32 (for references built in tests).
float cache_value(const PagedCache& c, int b, int t, int ch);

}  // namespace mla::ops
