// The variant tables of the MLA ops, the weight products and RoPE, and variant selection.
#include "kernels/registry.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "kernels/activation.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/mla_decode_cpu.h"
#include "kernels/cpu/rope.h"
#include "kernels/ref/linear_ref.h"
#include "kernels/ref/mla_ref.h"

namespace mla {

const char* intermediates_name(Intermediates c) {
  switch (c) {
    case Intermediates::kFp64:
      return "fp64";
    case Intermediates::kFp32:
      return "fp32";
    case Intermediates::kBf16:
      return "bf16";
    case Intermediates::kBf16Probs:
      return "bf16_probs";
    case Intermediates::kInt8:
      return "int8";
  }
  return "?";
}

namespace {

template <typename P>
bool any_params(const P&) {
  return true;
}
bool cpu_dtypes(const MlaDecodeParams& p) {
  return p.q_dtype == DType::kBF16 || p.q_dtype == DType::kF32;
}
bool cpu_dtypes(const MlaPrefillParams&) {
  return true;
}
template <CpuIsa isa, typename P>
bool on_isa(const P& p) {
  return cpu_supports(isa) && cpu_dtypes(p);
}
// The BF16-dot decode consumes query and cache as BF16, as FlashMLA's kernel does; an FP32
// absorbed query goes to the FP32 variants instead of being rounded silently.
bool bf16dot_decode(const MlaDecodeParams& p) {
  return cpu_supports(CpuIsa::kAvx512Bf16) && p.cache.dtype == DType::kBF16 &&
         p.q_dtype == DType::kBF16 && p.d_qk % 2 == 0;
}

// The all-BF16 decode: BF16 query (as above) over a BF16 or quantised cache whose latent and
// scale blocks split into channel pairs (even r and d_r).
bool bf16pv_inputs(const MlaDecodeParams& p) {
  const bool cache = p.cache.dtype == DType::kBF16 || p.cache.dtype == DType::kF8E4M3 ||
                     p.cache.dtype == DType::kI8 || p.cache.dtype == DType::kE2M1;
  return cache && p.q_dtype == DType::kBF16 && p.d_qk % 2 == 0 && p.d_v % 2 == 0;
}
bool bf16pv_decode(const MlaDecodeParams& p) {
  return cpu_supports(CpuIsa::kAvx512Bf16) && bf16pv_inputs(p);
}
// int8 products where asked for, over an INT8 cache, or a BF16 one with at least
// kInt8DecodeMinRows rows (heads × queries) a sequence: its keys are quantised per tile, a cost
// that only as many rows repay (`mla bench decode --s-kv 4096 --kv-dtype bf16 --q-dtype
// bf16|int8` on Zen 4: 16 and 32 heads even, 64 1.25x, 128 1.4x); whole quads per 128-channel
// block (r % 4) and q_pe in BF16 pairs (even d_r). Not on AMX: its BF16 tiles outrun vpdpbusd
// several times over, so the request is declined there (for the more exact products).
constexpr int kInt8DecodeMinRows = 64;
bool int8_decode(const MlaDecodeParams& p) {
  const bool cache = p.cache.dtype == DType::kI8 ||
                     (p.cache.dtype == DType::kBF16 && p.s_q * p.h_q >= kInt8DecodeMinRows);
  return p.int8_products && cache && !cpu_supports(CpuIsa::kAmxBf16) &&
         cpu_supports(CpuIsa::kAvx512Bf16) && __builtin_cpu_supports("avx512vnni") &&
         (p.q_dtype == DType::kBF16 || p.q_dtype == DType::kF32) && p.d_v % 4 == 0 &&
         (p.d_qk - p.d_v) % 2 == 0;
}
bool amx_decode(const MlaDecodeParams& p) {
  return cpu_supports(CpuIsa::kAmxBf16) && bf16pv_inputs(p);
}

void ref_decode(const MlaDecodeParams& p, ThreadPool&) {
  ref::mla_decode(p);
}
void ref_prefill(const MlaPrefillParams& p, ThreadPool&) {
  ref::mla_prefill(p);
}

// ---- linear: run-time ISA checks (baseline code) ----
bool has_avx512(const LinearParams&) {
  return cpu_supports(CpuIsa::kAvx512);
}
bool has_avx512_vbmi(const LinearParams&) {
  return cpu_features().avx512_vbmi;  // implies AVX-512, and MLA_ISA=avx512 or lower clears it
}
// VNNI for the GGUF integer kernels; cpu_features does not track it (MLA_ISA caps still apply
// through the base ISA).
bool has_avx512_vnni(const LinearParams& p) {
  return has_avx512(p) && __builtin_cpu_supports("avx512vnni");
}
bool has_avx512_vbmi_vnni(const LinearParams& p) {
  return has_avx512_vbmi(p) && __builtin_cpu_supports("avx512vnni");
}
// linear.cpu.avx512bf16 is built on the VBMI traits (linear_avx512_vbmi_traits.h): a CPU with
// AVX512_BF16 but no VBMI runs one of the FP32 variants.
bool has_avx512_bf16_vbmi(const LinearParams&) {
  return cpu_features().avx512_bf16 && cpu_features().avx512_vbmi;
}
// linear.cpu.amx adds the tile unit to linear.cpu.avx512bf16 (its VNNI hooks check VNNI).
bool has_amx_linear(const LinearParams& p) {
  return cpu_supports(CpuIsa::kAmxBf16) && has_avx512_bf16_vbmi(p);
}
// The AVX2 variant converts FP16 and FP8 with F16C (vcvtph2ps), which every AVX2 + FMA CPU has,
// but cpu_features does not promise it.
bool has_avx2(const LinearParams&) {
  return cpu_supports(CpuIsa::kAvx2) && __builtin_cpu_supports("f16c");
}

// Each job in FP64 (kernels/ref), rounded to FP32 once.
void ref_linear(const LinearParams& p, ThreadPool&) {
  std::vector<double> acc;
  std::vector<float> gathered;
  for (const LinearJob& job : p.jobs) {
    if (job.n == 0) continue;
    const float* x = job.x;
    if (job.x_rows) {
      const int64_t in = job.w->in;
      gathered.resize(size_t(job.n * in));
      for (int64_t i = 0; i < job.n; ++i)
        std::copy_n(job.x + job.x_rows[i] * in, in, gathered.begin() + i * in);
      x = gathered.data();
    }
    const size_t size = size_t(job.n * job.w->out);
    acc.assign(size, 0.0);
    ref::linear(*job.w, job.n, x, acc.data());
    for (size_t i = 0; i < size; ++i) job.y[i] = float(acc[i]);
    if (!job.up) continue;
    acc.assign(size, 0.0);
    ref::linear(*job.up, job.n, x, acc.data());
    for (size_t i = 0; i < size; ++i) job.up_y[i] = float(acc[i]);
    silu_mul(job.y, job.up_y, int64_t(size));
  }
}

// The linear variant the CPU prefill runs its up-projections on: the best one of this CPU.
LinearRunFn cpu_linear() {
  for (const LinearVariant& v : linear_variants())
    if (v.backend == "cpu" && v.supports(LinearParams{})) return v.run;
  return cpu::linear_scalar;  // not reached: linear.cpu.scalar supports everything
}
template <void (*F)(const MlaPrefillParams&, ThreadPool&, LinearRunFn)>
void prefill_on_cpu_linear(const MlaPrefillParams& p, ThreadPool& pool) {
  F(p, pool, cpu_linear());
}

// ---- RoPE ----
void cpu_rope(const RopeParams& p, ThreadPool&) {
  const RopeTable& t = *p.table;
  cpu::rope_rotate(t.cfg.dim, t.cfg.layout, t.cos.data(), t.sin.data(), p.positions, p.n_tokens,
                   p.n_heads, p.row_stride, p.offset, p.x);
}
void ref_rope(const RopeParams& p, ThreadPool&) {
  ref::rope_rotate(p.table->cfg, p.positions, p.n_tokens, p.n_heads, p.row_stride, p.offset, p.x);
}

// The variant names are listed only when selection fails (linear() selects on every call).
template <typename V, typename P>
Result<const V*> select_from(const std::vector<V>& table, const P& p, std::string_view backend,
                             std::string_view name, const char* op) {
  for (const V& v : table) {
    if (!name.empty() ? v.name == name : v.backend == backend) {
      if (v.supports(p)) return &v;
      if (!name.empty())
        return Status(
            StatusCode::kUnimplemented,
            fmt::format("{}: variant {} does not support these inputs on this CPU", op, name));
    }
  }
  std::string names;
  for (const V& v : table) names += (names.empty() ? "" : ", ") + v.name;
  if (!name.empty())
    return invalid_argument(fmt::format("{}: no variant named \"{}\" (have: {})", op, name, names));
  return invalid_argument(
      fmt::format("{}: no \"{}\" variant supports these inputs (have: {})", op, backend, names));
}

template <typename V, typename P>
Status run_checked(const V& v, const P& p, ThreadPool& pool) {
  MLA_RETURN_IF_ERROR(validate(p));
  if (!v.supports(p)) return unimplemented(v.name + " does not support these inputs on this CPU");
  v.run(p, pool);
  return {};
}

}  // namespace

const std::vector<MlaDecodeVariant>& mla_decode_variants() {
  static const std::vector<MlaDecodeVariant> table = {
      {"mla_decode.cpu.avx512vnni.int8", "cpu", Intermediates::kInt8, int8_decode,
       cpu::mla_decode_avx512vnni},
      {"mla_decode.cpu.amx.bf16pv", "cpu", Intermediates::kBf16Probs, amx_decode,
       cpu::mla_decode_amx},
      {"mla_decode.cpu.avx512bf16.bf16pv", "cpu", Intermediates::kBf16Probs, bf16pv_decode,
       cpu::mla_decode_avx512bf16pv},
      {"mla_decode.cpu.avx512bf16.bf16", "cpu", Intermediates::kBf16, bf16dot_decode,
       cpu::mla_decode_avx512bf16},
      {"mla_decode.cpu.avx512.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kAvx512>,
       cpu::mla_decode_avx512},
      {"mla_decode.cpu.avx2.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kAvx2>,
       cpu::mla_decode_avx2},
      {"mla_decode.cpu.scalar.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kScalar>,
       cpu::mla_decode_scalar},
      {"mla_decode.ref.fp64.any", "ref", Intermediates::kFp64, any_params, ref_decode},
  };
  return table;
}

const std::vector<MlaPrefillVariant>& mla_prefill_variants() {
  static const std::vector<MlaPrefillVariant> table = {
      {"mla_prefill.cpu.avx512.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kAvx512>,
       prefill_on_cpu_linear<cpu::mla_prefill_avx512>},
      {"mla_prefill.cpu.avx2.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kAvx2>,
       prefill_on_cpu_linear<cpu::mla_prefill_avx2>},
      {"mla_prefill.cpu.scalar.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kScalar>,
       prefill_on_cpu_linear<cpu::mla_prefill_scalar>},
      {"mla_prefill.ref.fp64.any", "ref", Intermediates::kFp64, any_params, ref_prefill},
  };
  return table;
}

const std::vector<LinearVariant>& linear_variants() {
  static const std::vector<LinearVariant> table = {
      {{"linear.cpu.amx", "cpu", Intermediates::kBf16, has_amx_linear, cpu::linear_amx},
       true,
       true},
      {{"linear.cpu.avx512bf16", "cpu", Intermediates::kBf16, has_avx512_bf16_vbmi,
        cpu::linear_avx512_bf16},
       true,
       true},
      {{"linear.cpu.avx512vbmivnni", "cpu", Intermediates::kFp32, has_avx512_vbmi_vnni,
        cpu::linear_avx512_vbmi_vnni},
       true},
      {{"linear.cpu.avx512vbmi", "cpu", Intermediates::kFp32, has_avx512_vbmi,
        cpu::linear_avx512_vbmi}},
      {{"linear.cpu.avx512vnni", "cpu", Intermediates::kFp32, has_avx512_vnni,
        cpu::linear_avx512_vnni},
       true},
      {{"linear.cpu.avx512", "cpu", Intermediates::kFp32, has_avx512, cpu::linear_avx512}},
      {{"linear.cpu.avx2", "cpu", Intermediates::kFp32, has_avx2, cpu::linear_avx2}},
      {{"linear.cpu.scalar", "cpu", Intermediates::kFp32, any_params, cpu::linear_scalar}},
      {{"linear.ref.fp64", "ref", Intermediates::kFp64, any_params, ref_linear}},
  };
  return table;
}

const std::vector<RopeVariant>& rope_variants() {
  static const std::vector<RopeVariant> table = {
      {"rope.cpu.scalar", "cpu", Intermediates::kFp32, any_params, cpu_rope},
      {"rope.ref.fp64", "ref", Intermediates::kFp64, any_params, ref_rope},
  };
  return table;
}

Result<const MlaDecodeVariant*> select_variant(const MlaDecodeParams& p, std::string_view backend,
                                               std::string_view name) {
  return select_from(mla_decode_variants(), p, backend, name, "mla_decode");
}
Result<const MlaPrefillVariant*> select_variant(const MlaPrefillParams& p, std::string_view backend,
                                                std::string_view name) {
  return select_from(mla_prefill_variants(), p, backend, name, "mla_prefill");
}
Result<const LinearVariant*> select_variant(const LinearParams& p, std::string_view backend,
                                            std::string_view name) {
  return select_from(linear_variants(), p, backend, name, "linear");
}
Result<const RopeVariant*> select_variant(const RopeParams& p, std::string_view backend,
                                          std::string_view name) {
  return select_from(rope_variants(), p, backend, name, "rope");
}

Status run_variant(const MlaDecodeVariant& v, const MlaDecodeParams& p, ThreadPool& pool) {
  return run_checked(v, p, pool);
}
Status run_variant(const MlaPrefillVariant& v, const MlaPrefillParams& p, ThreadPool& pool) {
  return run_checked(v, p, pool);
}
Status run_variant(const LinearVariant& v, const LinearParams& p, ThreadPool& pool) {
  return run_checked(v, p, pool);
}
Status run_variant(const RopeVariant& v, const RopeParams& p, ThreadPool& pool) {
  return run_checked(v, p, pool);
}

}  // namespace mla
