// linear.cpu.avx512vbmivnni: linear.cpu.avx512vbmi with GGUF block formats on the AVX512-VNNI
// kernels (GgmlVnniHooks: the integer GEMV and, for prefill, the int8 GEMM) instead of the AVX2
// ones: Ice Lake, Tiger Lake, Rocket Lake (VBMI and VNNI, no AVX512_BF16). Every other product is
// linear.cpu.avx512vbmi's, bit for bit.
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vnni,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_avx512_vbmi_traits.h"
#include "kernels/cpu/linear_ggml_vnni_hooks.h"

namespace mla::cpu {
namespace {

struct LinAvx512VbmiVnni : LinAvx512Vbmi, GgmlVnniHooks {
  MLA_GGML_VNNI_HOOKS;
};

}  // namespace

void linear_avx512_vbmi_vnni(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinAvx512VbmiVnni>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
