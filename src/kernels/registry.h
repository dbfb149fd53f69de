// The op registry: every kernel variant of every op that has more than one (MLA decode, MLA
// prefill, linear, RoPE) with its name, what it computes in, supports() and run(). Callers (the
// model through linear() / rope_apply_f32(), the CLI, the harness, benchmarks) pick variants here
// and never call a named kernel directly. Variants are listed best first; each table ends with
// the reference (backend "ref", FP64), which supports everything.
// Names: op.backend.isa.dtype for the MLA ops (the dtype they are built around), op.backend.isa
// for linear and RoPE (every variant runs every weight dtype / layout).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/mla_params.h"
#include "kernels/rope_table.h"

namespace mla {

// Precision of the intermediates a variant keeps, which decides the tolerance it is held to
// (docs/kernels/mla_decode.md): kBf16 rounds the query to BF16, kBf16Probs also the
// probabilities of P·V (ordered: a larger value is a weaker guarantee). Linear: kBf16 marks the
// variant whose path kBf16 rounds x to BF16 for more than 16 rows (the BF16 GEMM); GGUF block
// formats quantise x to int8 on the VNNI / AVX2 kernels whatever this says
// (tests/common/linear_ggml_bounds.h has the bound per kernel).
// kInt8: the query and probabilities as int8 / u8 codes (the int8 decode, asked for only).
enum class Intermediates { kFp64, kFp32, kBf16, kBf16Probs, kInt8 };
const char* intermediates_name(Intermediates c);

template <typename Params>
struct OpVariant {
  std::string name;     // e.g. "mla_decode.cpu.avx512bf16.bf16", "linear.cpu.avx2"
  std::string backend;  // "ref" or "cpu"
  Intermediates compute;
  bool (*supports)(const Params&);  // ISA present and shapes/dtypes handled; params validated
  void (*run)(const Params&, ThreadPool&);
};

using MlaDecodeVariant = OpVariant<MlaDecodeParams>;
using MlaPrefillVariant = OpVariant<MlaPrefillParams>;
using RopeVariant = OpVariant<RopeParams>;
// A linear variant also says which weight layout it prefers, for the loader to convert to once
// (linear_preferred_dtype).
struct LinearVariant : OpVariant<LinearParams> {
  // Runs Q8_0 and Q4_K faster repacked as kQ8_0R16 / kQ4_KR16 (the VNNI variants).
  bool repacks_blocks = false;
  // Runs BF16 and block-FP8 faster repacked as kBF16R16 / kF8E4M3R16 (the variant with the BF16
  // GEMM: no per-chunk transposition, and GEMVs with no horizontal sums).
  bool repacks_floats = false;
};

const std::vector<MlaDecodeVariant>& mla_decode_variants();
const std::vector<MlaPrefillVariant>& mla_prefill_variants();
// linear.cpu.<isa> (supports(): the ISA only; each runs every weight dtype), then linear.ref.fp64
// (kernels/ref's FP64 loop, rounded to FP32 once).
const std::vector<LinearVariant>& linear_variants();
// rope.cpu.scalar (the FP32 rotation over the table), then rope.ref.fp64 (cos / sin and the
// rotation in FP64 from the table's config).
const std::vector<RopeVariant>& rope_variants();

// The first variant of `backend` ("ref" or "cpu") that supports p, or the one named `name` when
// name is not empty. Errors name what was asked for and what exists.
Result<const MlaDecodeVariant*> select_variant(const MlaDecodeParams& p, std::string_view backend,
                                               std::string_view name = {});
Result<const MlaPrefillVariant*> select_variant(const MlaPrefillParams& p, std::string_view backend,
                                                std::string_view name = {});
Result<const LinearVariant*> select_variant(const LinearParams& p, std::string_view backend,
                                            std::string_view name = {});
Result<const RopeVariant*> select_variant(const RopeParams& p, std::string_view backend,
                                          std::string_view name = {});

// validate(p), then v.run(p). The one way to call a kernel with parameters from outside.
Status run_variant(const MlaDecodeVariant& v, const MlaDecodeParams& p, ThreadPool& pool);
Status run_variant(const MlaPrefillVariant& v, const MlaPrefillParams& p, ThreadPool& pool);
Status run_variant(const LinearVariant& v, const LinearParams& p, ThreadPool& pool);
Status run_variant(const RopeVariant& v, const RopeParams& p, ThreadPool& pool);

}  // namespace mla
