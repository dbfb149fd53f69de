// The op registry: every kernel variant with its name (op.backend.isa.dtype), what it computes in,
// supports() and run(). Callers (the model, the CLI, the harness, benchmarks) pick variants here
// and never call a named kernel directly. Variants are listed best first.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/mla_params.h"

namespace mla {

// Precision of the intermediates a variant keeps, which decides the tolerance it is held to
// (docs/kernels/mla_decode.md): kBf16 rounds the query to BF16, kBf16Probs also the
// probabilities of P·V (ordered: a larger value is a weaker guarantee).
enum class Intermediates { kFp64, kFp32, kBf16, kBf16Probs };
const char* intermediates_name(Intermediates c);

template <typename Params>
struct OpVariant {
  std::string name;     // e.g. "mla_decode.cpu.avx512bf16.bf16"
  std::string backend;  // "ref" or "cpu"
  Intermediates compute;
  bool (*supports)(const Params&);  // ISA present and shapes/dtypes handled; params validated
  void (*run)(const Params&, ThreadPool&);
};

using MlaDecodeVariant = OpVariant<MlaDecodeParams>;
using MlaPrefillVariant = OpVariant<MlaPrefillParams>;

const std::vector<MlaDecodeVariant>& mla_decode_variants();
const std::vector<MlaPrefillVariant>& mla_prefill_variants();

// The first variant of `backend` ("ref" or "cpu") that supports p, or the one named `name` when
// name is not empty. Errors name what was asked for and what exists.
Result<const MlaDecodeVariant*> select_variant(const MlaDecodeParams& p, std::string_view backend,
                                               std::string_view name = {});
Result<const MlaPrefillVariant*> select_variant(const MlaPrefillParams& p, std::string_view backend,
                                                std::string_view name = {});

// validate(p), then v.run(p). The one way to call a kernel with parameters from outside.
Status run_variant(const MlaDecodeVariant& v, const MlaDecodeParams& p, ThreadPool& pool);
Status run_variant(const MlaPrefillVariant& v, const MlaPrefillParams& p, ThreadPool& pool);

}  // namespace mla
