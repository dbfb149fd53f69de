// Reading and writing the tensors of `mla attention` (the mla_decode contract as a safetensors
// file): shape and dtype checks that name the file, tensor and field, and copies into aligned
// buffers (safetensors data need not be aligned).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/mla_params.h"
#include "mla/status.h"

namespace mla::cli {

// Inputs of one mla_decode call, owned.
struct DecodeInputs {
  MlaDecodeParams params;  // pointers into the buffers below; out/lse unset
  AlignedBuffer<uint8_t> q, kv_cache;
  AlignedBuffer<int32_t> block_table, cache_seqlens;
};

// Tensors q [b, s_q, h_q, d_qk], kv_cache [num_blocks, page_size, d_qk] (BF16 or F32),
// block_table I32 [b, max_blocks], cache_seqlens I32 [b]; metadata softmax_scale (default
// d_qk^-0.5), causal ("true"/"false"/"1"/"0", default false), d_v (default 512, FlashMLA's),
// kv_dtype ("bf16" default; "fp8_e4m3", "int8", "nvfp4": kv_cache is then U8
// [num_blocks, page_size, record bytes] in the layout of core/kv_format.h) and kv_global_scale
// (nvfp4; default kNvfp4DefaultGlobalScale).
Result<DecodeInputs> read_decode_inputs(const std::string& path);

// Writes out F32 [b, s_q, h_q, d_v], lse F32 [b, h_q, s_q] and, when p.abs_out is set, abs_out;
// metadata: the variant and its intermediates (registry.h).
Status write_decode_outputs(const std::string& path, const MlaDecodeParams& p,
                            const std::string& variant, const std::string& intermediates);

}  // namespace mla::cli
