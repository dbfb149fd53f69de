// `mla quantize`: a Hugging Face DeepSeek-family checkpoint (BF16, F16, F32 or block-FP8) written
// as a GGUF file of llama.cpp's `deepseek2` architecture with block-quantised weights, tensor by
// tensor (the source stays mapped; one tensor's output is in memory at a time). The type mixes
// and which tensors get which type are in docs/GGUF.md "mla quantize".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "mla/status.h"

namespace mla {

// The file types `mla quantize --type` accepts: q8_0, q4_0, q4_k_m, q5_k_m, q6_k, f16, bf16, f32
// (q2_k, q3_k_m when core/ggml_quant.h can write those blocks).
std::vector<std::string> gguf_file_types();

struct QuantizeOptions {
  std::string type = "q8_0";
  // Called after each tensor with (tensors done, total, bytes written so far).
  std::function<void(int64_t, int64_t, uint64_t)> progress;
};

struct QuantizeReport {
  int64_t tensors = 0;
  uint64_t file_bytes = 0;
  // How many tensors of each GGUF type were written ("Q4_K": 120, ...).
  std::vector<std::pair<std::string, int64_t>> types;
};

// model_dir → out_path (written atomically). Errors: those of load_model_weights and the
// tokenizer loader, invalid_argument for an unknown type or a model GGUF cannot describe
// (MiniCPM3's scalings, moe_layer_freq > 1), io_error naming out_path.
Result<QuantizeReport> quantize_model(const std::string& model_dir, const std::string& out_path,
                                      const QuantizeOptions& options);

// The GGUF type of one tensor under a file type (exposed for tests and docs): `gguf_name` as
// llama.cpp names it ("blk.3.ffn_down_exps.weight"), `layer` its block (-1 outside blocks),
// `layers` the model's, `in` its row length. 1-D tensors and the router stay F32.
DType gguf_tensor_type(std::string_view file_type, std::string_view gguf_name, int layer,
                       int layers, int64_t in, int rank);

}  // namespace mla
