// `mla attention`: runs mla_decode on tensors from a safetensors file and writes out and lse, so
// that anyone can compare our kernels with their own reference (FlashMLA's included).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "attention_io.h"
#include "commands.h"
#include "core/thread_pool.h"
#include "kernels/registry.h"

namespace mla::cli {
namespace {

struct AttentionOptions {
  std::string in, out, backend = "cpu", variant;
};

int run_attention(const AttentionOptions& o) {
  auto in = read_decode_inputs(o.in);
  if (!in.ok()) {
    fmt::print(stderr, "mla attention: {}\n", in.status().message());
    return 1;
  }
  MlaDecodeParams p = in->params;
  auto v = select_variant(p, o.backend, o.variant);
  if (!v.ok()) {
    fmt::print(stderr, "mla attention: {}\n", v.status().message());
    return 1;
  }
  const int64_t n_out = int64_t(p.b) * p.s_q * p.h_q * p.d_v, n_lse = int64_t(p.b) * p.h_q * p.s_q;
  auto out = AlignedBuffer<float>::allocate(size_t(n_out) + 1, "out");
  auto lse = AlignedBuffer<float>::allocate(size_t(n_lse) + 1, "lse");
  if (!out.ok() || !lse.ok()) {
    fmt::print(stderr, "mla attention: {}\n", (out.ok() ? lse.status() : out.status()).message());
    return 1;
  }
  p.out = out->data();
  p.lse = lse->data();
  // The reference also writes Σ p|v| (abs_out), which bounds what rounding the probabilities to
  // BF16 may cost a variant (kernels/compare.h).
  std::vector<float> abs_out((*v)->backend == "ref" ? size_t(n_out) : 0);
  if (!abs_out.empty()) p.abs_out = abs_out.data();
  if (Status s = run_variant(**v, p, default_thread_pool()); !s.ok()) {
    fmt::print(stderr, "mla attention: {}\n", s.message());
    return 1;
  }
  if (Status s = write_decode_outputs(o.out, p, (*v)->name, intermediates_name((*v)->compute));
      !s.ok()) {
    fmt::print(stderr, "mla attention: {}\n", s.message());
    return 1;
  }
  fmt::print("{}: b {} s_q {} h_q {} d_qk {} d_v {} causal {} -> {}\n", (*v)->name, p.b, p.s_q,
             p.h_q, p.d_qk, p.d_v, p.causal, o.out);
  return 0;
}

}  // namespace

void register_attention(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<AttentionOptions>();
  CLI::App* cmd = app.add_subcommand("attention",
                                     "Run mla_decode on q, kv_cache, block_table, cache_seqlens "
                                     "from a safetensors file; write out and lse");
  cmd->add_option(
         "--in", o->in,
         "Input safetensors (metadata: softmax_scale, causal, d_v, kv_dtype, kv_global_scale)")
      ->required();
  cmd->add_option("--out", o->out,
                  "Output safetensors: out F32 [b, s_q, h_q, d_v], lse F32 [b, h_q, s_q] (the ref "
                  "backend adds abs_out, Σ p|v| [b, s_q, h_q, d_v]); metadata variant, "
                  "intermediates")
      ->required();
  cmd->add_option("--backend", o->backend, "ref (FP64 reference) or cpu")
      ->capture_default_str()
      ->check(CLI::IsMember({"ref", "cpu"}));
  cmd->add_option("--variant", o->variant,
                  "A registered variant name, e.g. mla_decode.cpu.avx512.bf16");
  cmd->callback([o, exit_code] { *exit_code = run_attention(*o); });
}

MLA_REGISTER_COMMAND("attention", register_attention);

}  // namespace mla::cli
