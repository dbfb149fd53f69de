// Flags shared by the commands that run a model (generate, serve, bench offline).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "mla/status.h"
#include "model/model_runtime.h"

namespace mla::cli {

// --attention-dtype bf16|f32|int8: the absorbed query's dtype at the decode kernel
// (kernels/mla_attention.h) and the decompressed prefill's tiles. bf16 runs the BF16-dot / AMX
// kernels, FlashMLA's numerics; f32 the FP32 kernels, exact to FP32 activations; int8 runs the
// prefill tiles on int8 dot products (AVX512_VNNI), and the absorbed decode too over an int8 KV
// cache or, from 64 heads, a bf16 one (else it decodes as bf16). Unset: bf16, with int8 where the
// weight products run on int8
// (--weight-dtype q8_0, GGUF block formats: RuntimeOptions::prefill_attention_dtype).
// Without `int8` (the crossover sweeps, whose tuning file keeps f32 and bf16): bf16|f32.
inline void add_attention_dtype_flag(CLI::App* cmd, std::string* value, bool int8 = true) {
  if (!int8) {
    cmd->add_option("--attention-dtype", *value,
                    "Absorbed query at the attention kernel: bf16 (default: BF16 / AMX kernels, "
                    "probabilities in BF16 too) or f32 (FP32 kernels)")
        ->check(CLI::IsMember({"f32", "bf16"}));
    return;
  }
  cmd->add_option("--attention-dtype", *value,
                  "Attention kernels: bf16 (default: BF16 / AMX kernels, probabilities in BF16 "
                  "too), f32 (FP32 kernels) or int8 (the decompressed prefill on int8 dot "
                  "products, and the decode too over --kv-dtype int8 or from 64 heads, else as "
                  "bf16; the default under --weight-dtype q8_0)")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}));
}
// --kv-dtype bf16|fp8_e4m3|int8|nvfp4: the KV cache's records (core/kv_format.h).
inline void add_kv_dtype_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--kv-dtype", *value, "KV cache records: bf16, fp8_e4m3, int8, nvfp4");
}
// --prefill-path auto|absorbed|decompressed: every prefill chunk on one path (checking, and
// measuring either), or by the threshold and the chunk's cached context (auto).
inline void add_prefill_path_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--prefill-path", *value,
                  "Path of every prefill chunk: auto (default: by --prefill-threshold and the "
                  "chunk's cached context), absorbed or decompressed (checking either path)")
      ->check(CLI::IsMember({"auto", "absorbed", "decompressed"}));
}
// The absorbed query's dtype of an --attention-dtype value (int8 and unset: BF16).
inline DType absorbed_q_dtype_of(const std::string& value) {
  return value == "f32" ? DType::kF32 : DType::kBF16;
}
// The decompressed prefill's dtype an --attention-dtype value asks for; unset: the default.
inline std::optional<DType> prefill_attention_dtype_of(const std::string& value) {
  if (value.empty()) return std::nullopt;
  return value == "int8" ? DType::kI8 : absorbed_q_dtype_of(value);
}
// The flag spelling of an attention dtype: "f32", "bf16" or "int8".
inline const char* dtype_flag_name(DType t) {
  return t == DType::kI8 ? "int8" : t == DType::kBF16 ? "bf16" : "f32";
}
// The DType of an f32|bf16 flag value (--attention-dtype, --matmul-dtype).
inline DType f32_or_bf16(const std::string& value) {
  return value == "bf16" ? DType::kBF16 : DType::kF32;
}

// --matmul-dtype f32|bf16: the weight products' math (RuntimeOptions::matmul_dtype).
inline void add_matmul_dtype_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--matmul-dtype", *value,
                  "Weight products of prefill chunks and expert batches (> 16 rows): bf16 "
                  "(default: BF16 dot products where the CPU has AVX512_BF16, x rounded to BF16, "
                  "FP32 accumulation) or f32 (FP32 products, independent of batching)")
      ->check(CLI::IsMember({"f32", "bf16"}));
}

// --lm-head-dtype bf16|fp8|int8: lm_head stored at load in another dtype (RuntimeOptions::
// lm_head_dtype); unset keeps the checkpoint's.
inline void add_lm_head_dtype_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--lm-head-dtype", *value,
                  "Store lm_head as bf16, fp8 or int8 (fp8 / int8: one scale per 128x128 block, "
                  "made at load) for faster decode; default: the checkpoint's dtype")
      ->check(CLI::IsMember({"bf16", "fp8", "int8"}));
}
inline std::optional<DType> lm_head_dtype_of(const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (value == "int8") return DType::kI8;
  return value == "fp8" ? DType::kF8E4M3 : DType::kBF16;
}
// --weight-dtype q8_0: the weight products requantised at load (RuntimeOptions::weight_dtype);
// unset keeps the checkpoint's.
inline void add_weight_dtype_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option(
         "--weight-dtype", *value,
         "Store the weight products' weights as q8_0 (int8, one scale per 32 values, made "
         "at load from BF16 / FP8 weights: prefill runs on int8 dot products, twice the "
         "BF16 dot product's rate; lm_head too unless --lm-head-dtype is given); default: the "
         "checkpoint's dtypes")
      ->check(CLI::IsMember({"q8_0"}));
}
inline std::optional<DType> weight_dtype_of(const std::string& value) {
  if (value.empty()) return std::nullopt;
  return DType::kQ8_0;
}
// What the loaded model's products hold, for --json's weight_dtype: "q8_0" when the load
// requantised them, else "checkpoint" (also when --weight-dtype was asked for and a load short of
// memory kept the checkpoint's dtypes).
inline std::string weight_dtype_held(const Model& m) {
  return m.repack_stats().requantized > 0 ? "q8_0" : "checkpoint";
}
// --repack on|off: weights re-laid at load for the CPU kernels (RuntimeOptions::repack_weights).
inline void add_repack_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--repack", *value,
                  "Re-lay weights at load into the layouts the CPU kernels run faster, values "
                  "unchanged (Q8_0 and Q4_K as 16-row interleaved blocks on AVX512-VNNI; BF16 and "
                  "block-FP8 as 16-row interleaved pairs on AVX512_BF16): on (default) or off")
      ->check(CLI::IsMember({"on", "off"}));
}

// --moe-split experts|width: how a model split over ranks divides its routed experts
// (RuntimeOptions::moe_split).
inline void add_moe_split_flag(CLI::App* cmd, std::string* value) {
  cmd->add_option("--moe-split", *value,
                  "Across ranks (mpirun): experts (default: whole experts per rank) or width "
                  "(a slice of every expert per rank, even at batch 1)")
      ->check(CLI::IsMember({"experts", "width"}));
}

// How a model runs, as the commands' flags spell it: the one place the CLI turns flags into
// RuntimeOptions (runtime_options below), for generate, serve, bench offline, bench model and
// probe --compare. Defaults are RuntimeOptions' own.
struct RuntimeFlags {
  std::string backend = "cpu";
  std::string kv_dtype = "bf16";
  std::string attention_dtype;  // empty: the default (prefill_attention_dtype_of)
  std::string matmul_dtype = "bf16";
  std::string lm_head_dtype;  // empty: the checkpoint's
  std::string weight_dtype;   // empty: the checkpoint's
  std::string repack = "on";
  std::string moe_split = "experts";
  int prefill_threshold = -1;         // -1: mla tune's measurement, else the default
  std::string prefill_path = "auto";  // auto | absorbed | decompressed
  int64_t max_context = 0;            // 0: the config's (each command names its own flag)
};

// --kv-dtype, --attention-dtype, --matmul-dtype, --lm-head-dtype, --weight-dtype, --repack,
// --backend, --prefill-threshold and --prefill-path.
void add_runtime_flags(CLI::App* cmd, RuntimeFlags* f);

// invalid_argument naming the value for an unknown --kv-dtype. Started by mpirun as one of
// several ranks, the options carry the world communicator (the model loads this rank's slice).
Result<RuntimeOptions> runtime_options(const RuntimeFlags& f);

// Across ranks (mpirun -np N; docs/ARCHITECTURE.md §Ranks) rank 0 runs the command and the
// others only its forward passes: whether this process is one of those followers.
bool is_follower();
// A follower's part of generate, serve or bench model once its slice is loaded: it runs the
// leader's forward passes until the leader's model is gone. Returns the exit code.
int follow_leader(Model& model, int threads);
// A failure of one rank before the model is loaded while the others may already wait inside its
// load (the leader's port, its key file): across ranks every rank is ended with the message
// (Communicator::abort), alone it is printed and 1 returned.
int fail_before_load(const Status& s);
// For the commands that run a model on one rank only: an error naming the command when started
// as one of several ranks.
Status require_one_rank(std::string_view command);

// The flag's spelling of a stored weight dtype, for --json: "bf16", "fp8", "int8", "f16", "f32",
// "q8_0".
inline std::string weight_dtype_flag_name(DType t) {
  switch (t) {
    case DType::kF8E4M3:
      return "fp8";
    case DType::kI8:
      return "int8";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
    case DType::kQ8_0:
      return "q8_0";
    default:
      return "bf16";
  }
}

}  // namespace mla::cli
