// The runtime flags of the model-running commands, and the RuntimeOptions they make.
#include "runtime_flags.h"

#include <fmt/format.h>

#include "core/kv_format.h"
#include "dist/communicator.h"
#include "io/tune_file.h"

namespace mla::cli {

void add_runtime_flags(CLI::App* cmd, RuntimeFlags* f) {
  add_kv_dtype_flag(cmd, &f->kv_dtype);
  add_attention_dtype_flag(cmd, &f->attention_dtype);
  add_matmul_dtype_flag(cmd, &f->matmul_dtype);
  add_lm_head_dtype_flag(cmd, &f->lm_head_dtype);
  add_weight_dtype_flag(cmd, &f->weight_dtype);
  add_repack_flag(cmd, &f->repack);
  add_moe_split_flag(cmd, &f->moe_split);
  cmd->add_option("--backend", f->backend, "cpu (default) or ref (the reference kernels)")
      ->check(CLI::IsMember({"cpu", "ref"}));
  cmd->add_option("--prefill-threshold", f->prefill_threshold,
                  "The absorbed path's threshold T (default: mla tune's measurement, else 256): a "
                  "prefill chunk of s_q tokens after p cached ones takes it iff s_q (p + s_q / 2) "
                  "<= T p, so never for a fresh prompt; 0: every chunk decompressed")
      ->check(CLI::Range(0, 1 << 30));
  add_prefill_path_flag(cmd, &f->prefill_path);
}

Result<RuntimeOptions> runtime_options(const RuntimeFlags& f) {
  MLA_ASSIGN_OR_RETURN(KvCacheDtype kv, parse_kv_cache_dtype(f.kv_dtype));
  RuntimeOptions ro;
  ro.backend = f.backend;
  ro.kv_dtype = kv;
  ro.attention_q_dtype = absorbed_q_dtype_of(f.attention_dtype);
  ro.prefill_attention_dtype = prefill_attention_dtype_of(f.attention_dtype);
  ro.matmul_dtype = f32_or_bf16(f.matmul_dtype);
  ro.lm_head_dtype = lm_head_dtype_of(f.lm_head_dtype);
  ro.weight_dtype = weight_dtype_of(f.weight_dtype);
  ro.repack_weights = f.repack != "off";
  ro.max_context = f.max_context;
  ro.prefill_absorption_threshold = f.prefill_threshold >= 0
                                        ? f.prefill_threshold
                                        : tuned_prefill_absorption_threshold(ro.attention_q_dtype)
                                              .value_or(kDefaultPrefillAbsorptionThreshold);
  if (f.prefill_path != "auto") {  // the length rule at a threshold no chunk passes, or 0
    ro.prefill_path_rule = PrefillPathRule::kLength;
    ro.prefill_absorption_threshold = f.prefill_path == "absorbed" ? 1 << 30 : 0;
  }
  ro.comm = dist::world();
  ro.moe_split = f.moe_split == "width" ? MoeSplit::kWidth : MoeSplit::kExperts;
  return ro;
}

bool is_follower() {
  return dist::world() && !dist::world()->leader();
}

int follow_leader(Model& model, int threads) {
  ThreadPool pool(threads > 0 ? threads : default_thread_pool().num_threads());
  fmt::print(stderr, "split: {}\n", model.split_summary());
  const Status s = model.follow(pool);
  if (s.ok()) return 0;
  fmt::print(stderr, "error: rank {}: {}\n", model.rank(), s.message());
  return 1;
}

int fail_before_load(const Status& s) {
  if (dist::world()) dist::world()->abort(s.message());
  fmt::print(stderr, "error: {}\n", s.message());
  return 1;
}

Status require_one_rank(std::string_view command) {
  if (!dist::world()) return Status();
  return unimplemented(fmt::format(
      "mla {} runs on one rank; across ranks (mpirun -np {}) use generate, serve or bench model",
      command, dist::world()->size()));
}

}  // namespace mla::cli
