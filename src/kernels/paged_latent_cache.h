// The paged latent cache as every MLA op reads it: one struct, shared by the kernel parameters
// (MlaDecodeParams, MlaPrefillParams) and the layer-level ops (MlaAttentionParams,
// MlaDecodeBatchParams), so the contract is written and validated once.
//
// Token t of sequence i lives in page block_table[i * max_blocks_per_seq + t / page_size], slot
// t % page_size; its row is [c_kv (r values) | k_pe (d_r values)] in `dtype`: plain BF16 / F32
// values, or the quantised records of core/kv_format.h (docs/ARCHITECTURE.md §KV cache). The ops
// give r and d_r; the row's bytes are kv_row_bytes(dtype, r, d_r).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mla {

struct PagedLatentCache {
  DType dtype = DType::kBF16;  // kBF16, kF32, or records: kF8E4M3, kI8, kE2M1 (nvfp4)
  float global_scale = 1.0f;   // nvfp4 only: the layer's global scale
  const void* rows = nullptr;  // [num_blocks, page_size, row bytes]
  int page_size = 64;
  int num_blocks = 0;
  // [b, max_blocks_per_seq]; entries past a sequence's pages are never read. An op over one
  // sequence (prefill) reads row 0.
  const int32_t* block_table = nullptr;
  int max_blocks_per_seq = 0;
  const int32_t* seq_lens = nullptr;  // [b] keys per sequence (s_kv), the new tokens included
};

}  // namespace mla
