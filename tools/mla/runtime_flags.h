// Flags shared by the commands that run a model (generate, serve, bench offline).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/dtype.h"

namespace mla::cli {

// --attention-dtype f32|bf16: the absorbed query's dtype at the decode kernel
// (kernels/mla_attention.h). bf16 runs the BF16-dot / AMX kernels, FlashMLA's numerics.
inline void add_attention_dtype_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--attention-dtype", *value,
                  "Absorbed query at the attention kernel: f32 (default) or bf16 (BF16 / AMX "
                  "kernels, probabilities in BF16 too)")
      ->check(CLI::IsMember({"f32", "bf16"}));
}
// The DType of an f32|bf16 flag value (--attention-dtype, --matmul-dtype).
inline DType f32_or_bf16(const std::string& value) {
  return value == "bf16" ? DType::kBF16 : DType::kF32;
}

// --matmul-dtype f32|bf16: the weight products' math (RuntimeOptions::matmul_dtype).
inline void add_matmul_dtype_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--matmul-dtype", *value,
                  "Weight products of prefill chunks and expert batches (> 16 rows): f32 "
                  "(default) or bf16 (BF16 dot products where the CPU has AVX512_BF16; x rounded "
                  "to BF16, FP32 accumulation)")
      ->check(CLI::IsMember({"f32", "bf16"}));
}

}  // namespace mla::cli
