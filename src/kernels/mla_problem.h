// Seeded MLA inputs for the ops harness, the benchmarks (`mla bench`, bench/) and the tests: a
// paged latent cache in any storage format, with a permuted block table, poison (NaN bytes) in
// every unused slot and garbage in every unused table entry.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/rng.h"
#include "kernels/mla_params.h"

namespace mla {

struct PagedCache {
  int page_size = 64, num_blocks = 0, max_blocks = 0, latent_dim = 512, rope_dim = 64;
  DType dtype = DType::kBF16;  // kBF16, kF32, or a quantised latent (kF8E4M3, kI8, kE2M1)
  float global_scale = 1.0f;   // nvfp4
  int64_t row_bytes = 0;
  std::vector<uint8_t> data;         // [num_blocks, page_size, row_bytes]
  std::vector<int32_t> block_table;  // [b, max_blocks]
  std::vector<int32_t> seqlens;      // [b]
};

// Rows of used slots are N(0, sd²) values [latent | rope], stored in dtype (rounded or
// quantised); `extra_blocks` unused pages are added.
PagedCache make_paged_cache(Rng& rng, DType dtype, const std::vector<int32_t>& seqlens,
                            int page_size, int latent_dim, int rope_dim, double sd,
                            float global_scale = kNvfp4DefaultGlobalScale, int extra_blocks = 3);

// The contract view of c (every sequence of it; one-sequence ops read the first).
PagedLatentCache cache_view(const PagedCache& c);

// Points p's cache fields at c: b, d_qk, d_v, page size, blocks, block table, seqlens, format.
void set_decode_cache(const PagedCache& c, MlaDecodeParams& p);

// Sequence lengths: all s_kv, or (varlen) spread over [s_kv/2, 3·s_kv/2] with one zero-length
// sequence when b > 2.
std::vector<int32_t> make_seqlens(Rng& rng, int b, int s_kv, bool varlen);

}  // namespace mla
