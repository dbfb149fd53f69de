// The CPU weight-product variants, best first, with their run-time ISA checks (baseline code).
#include "kernels/cpu/linear_cpu.h"
#include "core/cpu_features.h"

namespace mla::cpu {

namespace {

bool has_avx512() {
  return cpu_supports(CpuIsa::kAvx512);
}
bool has_avx512_vbmi() {
  return cpu_features().avx512_vbmi;  // implies AVX-512, and MLA_ISA=avx512 or lower clears it
}
// VNNI for the GGUF integer kernels; cpu_features does not track it (MLA_ISA caps still apply
// through the base ISA).
bool has_avx512_vnni() {
  return has_avx512() && __builtin_cpu_supports("avx512vnni");
}
bool has_avx512_vbmi_vnni() {
  return has_avx512_vbmi() && __builtin_cpu_supports("avx512vnni");
}
bool has_avx512_bf16_vbmi() {
  return cpu_features().avx512_bf16 && cpu_features().avx512_vbmi;
}
// The AVX2 variant converts FP16 and FP8 with F16C (vcvtph2ps), which every AVX2 + FMA CPU has,
// but cpu_features does not promise it.
bool has_avx2() {
  return cpu_supports(CpuIsa::kAvx2) && __builtin_cpu_supports("f16c");
}
bool always() {
  return true;
}

constexpr LinearCpuVariant kVariants[] = {
    {"linear.cpu.avx512bf16", has_avx512_bf16_vbmi, linear_avx512_bf16, linear_many_avx512_bf16,
     true},
    {"linear.cpu.avx512vbmivnni", has_avx512_vbmi_vnni, linear_avx512_vbmi_vnni,
     linear_many_avx512_vbmi_vnni, true},
    {"linear.cpu.avx512vbmi", has_avx512_vbmi, linear_avx512_vbmi, linear_many_avx512_vbmi},
    {"linear.cpu.avx512vnni", has_avx512_vnni, linear_avx512_vnni, linear_many_avx512_vnni, true},
    {"linear.cpu.avx512", has_avx512, linear_avx512, linear_many_avx512},
    {"linear.cpu.avx2", has_avx2, linear_avx2, linear_many_avx2},
    {"linear.cpu.scalar", always, linear_scalar, linear_many_scalar},
};

}  // namespace

std::span<const LinearCpuVariant> linear_cpu_variants() {
  return kVariants;
}

}  // namespace mla::cpu
