// The variant tables of the MLA ops and variant selection.
#include "kernels/registry.h"

#include <fmt/format.h>

#include "core/cpu_features.h"
#include "kernels/cpu/mla_decode_cpu.h"
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
bool amx_decode(const MlaDecodeParams& p) {
  return cpu_supports(CpuIsa::kAmxBf16) && bf16pv_inputs(p);
}

void ref_decode(const MlaDecodeParams& p, ThreadPool&) {
  ref::mla_decode(p);
}
void ref_prefill(const MlaPrefillParams& p, ThreadPool&) {
  ref::mla_prefill(p);
}

template <typename V, typename P>
Result<const V*> select_from(const std::vector<V>& table, const P& p, std::string_view backend,
                             std::string_view name, const char* op) {
  std::string names;
  for (const V& v : table) {
    names += (names.empty() ? "" : ", ") + v.name;
    if (!name.empty() ? v.name == name : v.backend == backend) {
      if (v.supports(p)) return &v;
      if (!name.empty())
        return Status(
            StatusCode::kUnimplemented,
            fmt::format("{}: variant {} does not support these inputs on this CPU", op, name));
    }
  }
  if (!name.empty())
    return invalid_argument(fmt::format("{}: no variant named \"{}\" (have: {})", op, name, names));
  return invalid_argument(
      fmt::format("{}: no \"{}\" variant supports these inputs (have: {})", op, backend, names));
}

}  // namespace

const std::vector<MlaDecodeVariant>& mla_decode_variants() {
  static const std::vector<MlaDecodeVariant> table = {
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
       cpu::mla_prefill_avx512},
      {"mla_prefill.cpu.avx2.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kAvx2>,
       cpu::mla_prefill_avx2},
      {"mla_prefill.cpu.scalar.bf16", "cpu", Intermediates::kFp32, on_isa<CpuIsa::kScalar>,
       cpu::mla_prefill_scalar},
      {"mla_prefill.ref.fp64.any", "ref", Intermediates::kFp64, any_params, ref_prefill},
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

Status run_variant(const MlaDecodeVariant& v, const MlaDecodeParams& p, ThreadPool& pool) {
  MLA_RETURN_IF_ERROR(validate(p));
  if (!v.supports(p)) return unimplemented(v.name + " does not support these inputs on this CPU");
  v.run(p, pool);
  return {};
}
Status run_variant(const MlaPrefillVariant& v, const MlaPrefillParams& p, ThreadPool& pool) {
  MLA_RETURN_IF_ERROR(validate(p));
  if (!v.supports(p)) return unimplemented(v.name + " does not support these inputs on this CPU");
  v.run(p, pool);
  return {};
}

}  // namespace mla
