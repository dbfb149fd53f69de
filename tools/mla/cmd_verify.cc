// `mla verify`: numerical equivalence of the absorbed and decompressed MLA paths, every registered
// variant against the FP64 reference and each other, at model shapes (kernels/mla_verify).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/cpu_features.h"
#include "core/kv_format.h"
#include "kernels/mla_verify.h"

namespace mla::cli {
namespace {

struct VerifyOptions {
  VerifyConfig cfg;
  std::string dtype = "bf16";
  std::string kv_dtype;  // empty: rows stored in --dtype
  bool json = false;
};

int run_verify(VerifyOptions& o) {
  if (o.dtype == "bf16")
    o.cfg.dtype = DType::kBF16;
  else if (o.dtype == "f32" || o.dtype == "fp32")
    o.cfg.dtype = DType::kF32;
  else {
    fmt::print(stderr, "mla verify: --dtype {}: expected bf16 or f32\n", o.dtype);
    return 2;
  }
  if (!o.kv_dtype.empty()) {
    auto k = parse_kv_cache_dtype(o.kv_dtype);
    if (!k.ok()) {
      fmt::print(stderr, "mla verify: --kv-dtype: {}\n", k.status().message());
      return 2;
    }
    o.cfg.kv_dtype = *k;
  }
  auto rep = run_mla_verify(o.cfg, default_thread_pool());
  if (!rep.ok()) {
    fmt::print(stderr, "mla verify: {}\n", rep.status().message());
    return 2;
  }
  const VerifyConfig& c = o.cfg;
  if (o.json) {
    nlohmann::json j;
    j["config"] = {{"heads", c.heads},     {"nope", c.nope},
                   {"rope", c.rope},       {"latent", c.latent},
                   {"v_dim", c.v_dim},     {"seq", c.seq},
                   {"queries", c.queries}, {"page_size", c.page_size},
                   {"dtype", o.dtype},     {"kv_dtype", o.kv_dtype.empty() ? o.dtype : o.kv_dtype},
                   {"seed", c.seed},       {"softmax_scale", rep->softmax_scale}};
    j["pairs"] = nlohmann::json::array();
    for (const auto& p : rep->pairs)
      j["pairs"].push_back({{"a", p.a},
                            {"b", p.b},
                            {"tensor", p.tensor},
                            {"compute", p.compute},
                            {"max_err", p.stats.max_err},
                            {"mean_err", p.stats.mean_err},
                            {"cos", p.stats.cos},
                            {"cos_bound", p.cos_bound},
                            {"bad_elements", p.stats.bad_elements},
                            {"gating", p.gating},
                            {"note", p.note},
                            {"pass", p.pass}});
    j["pass"] = rep->pass;
    fmt::print("{}\n", j.dump(2));
  } else {
    const auto& f = cpu_features();
    fmt::print(
        "mla verify: heads {} nope {} rope {} latent {} v_dim {} seq {} queries {} page {} dtype "
        "{} kv_dtype {} seed {}\n",
        c.heads, c.nope, c.rope, c.latent, c.v_dim, c.seq, c.queries, c.page_size, o.dtype,
        o.kv_dtype.empty() ? o.dtype : o.kv_dtype, c.seed);
    fmt::print("softmax_scale {:.9f}; cpu avx2={} avx512={} avx512_bf16={}\n", rep->softmax_scale,
               f.avx2_fma, f.avx512, f.avx512_bf16);
    fmt::print("{:<32} {:<32} {:<6} {:<4} {:>10} {:>10} {:>12} {:>11}  {}\n", "a", "b", "tensor",
               "cmp", "max_err", "mean_err", "cos", "cos_bound", "result");
    for (const auto& p : rep->pairs)
      fmt::print("{:<32} {:<32} {:<6} {:<4} {:>10.3e} {:>10.3e} {:>12.9f} {:>11.7f}  {}\n", p.a,
                 p.b, p.tensor, p.compute, p.stats.max_err, p.stats.mean_err, p.stats.cos,
                 p.cos_bound, p.gating ? (p.pass ? "PASS" : "FAIL") : "info: " + p.note);
    fmt::print("{}\n", rep->pass ? "PASS" : "FAIL");
  }
  return rep->pass ? 0 : 1;
}

}  // namespace

void register_verify(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand("verify",
                                     "Check that the absorbed and decompressed MLA paths, every "
                                     "kernel variant, match the FP64 reference");
  cmd->add_option("--heads", o->cfg.heads, "Attention heads (h_q)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--nope", o->cfg.nope, "qk_nope_head_dim (d_n)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--rope", o->cfg.rope, "qk_rope_head_dim (d_r)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--latent", o->cfg.latent, "kv_lora_rank (r)")
      ->capture_default_str()
      ->check(CLI::Range(1, 8192));
  cmd->add_option("--v-dim", o->cfg.v_dim, "v_head_dim (d_v)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", o->cfg.seq, "Cached tokens (s_kv)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--queries", o->cfg.queries, "Query tokens (s_q), causal")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--page-size", o->cfg.page_size, "Tokens per cache page")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--dtype", o->dtype, "Storage of the inputs: bf16 or f32")->capture_default_str();
  cmd->add_option("--kv-dtype", o->kv_dtype,
                  "Cache format: bf16, fp8_e4m3, int8 or nvfp4 (default: rows in --dtype)");
  cmd->add_option("--seed", o->cfg.seed, "Seed of the inputs")->capture_default_str();
  cmd->add_option("--softmax-scale", o->cfg.softmax_scale,
                  "Softmax scale (default: d_qk^-0.5 * m^2 with DeepSeek-V3's YaRN)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o, exit_code] { *exit_code = run_verify(*o); });
}

MLA_REGISTER_COMMAND("verify", register_verify);

}  // namespace mla::cli
