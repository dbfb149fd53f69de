// CPU feature detection through the compiler's cpuid support (which also checks OS state saving).
#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mla {
namespace {

// Linux hands out AMX tile state only to processes that ask for it (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without the grant a tile instruction faults.
bool request_amx_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// CPUID leaf 7 (sub-leaf 0) ECX and EDX, read directly: not every compiler's
// __builtin_cpu_supports knows AMX or VBMI. Zero where the leaf is absent.
struct Leaf7 {
  unsigned ecx = 0, edx = 0;
};
Leaf7 cpuid_leaf7() {
  Leaf7 r;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &r.ecx, &r.edx)) return {};
#endif
  return r;
}
bool has_bit(unsigned reg, int bit) {
  return reg >> bit & 1;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures r;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    r.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    r.avx512 = r.avx2_fma && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
    // AVX512_VBMI (ECX 1), which the AMX and linear VBMI kernels use; AMX-BF16 (EDX 22);
    // AMX-TILE (EDX 24).
    const Leaf7 leaf7 = cpuid_leaf7();
    const bool vbmi = has_bit(leaf7.ecx, 1);
    r.avx512_vbmi = r.avx512 && vbmi;
    r.avx512_bf16 = r.avx512 && __builtin_cpu_supports("avx512bf16");
    r.amx_bf16 = r.avx512_bf16 && vbmi && has_bit(leaf7.edx, 22) && has_bit(leaf7.edx, 24);
#endif
    if (const char* cap = std::getenv("MLA_ISA")) {
      if (!std::strcmp(cap, "scalar"))
        r = CpuFeatures{};
      else if (!std::strcmp(cap, "avx2"))
        r.avx512 = r.avx512_vbmi = r.avx512_bf16 = r.amx_bf16 = false;
      else if (!std::strcmp(cap, "avx512"))
        r.avx512_vbmi = r.avx512_bf16 = r.amx_bf16 = false;
      else if (!std::strcmp(cap, "avx512bf16"))
        r.amx_bf16 = false;
    }
    if (r.amx_bf16) r.amx_bf16 = request_amx_permission();
    return r;
  }();
  return f;
}

bool cpu_supports(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return f.avx2_fma;
    case CpuIsa::kAvx512:
      return f.avx512;
    case CpuIsa::kAvx512Bf16:
      return f.avx512_bf16;
    case CpuIsa::kAmxBf16:
      return f.amx_bf16;
  }
  return false;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512bf16";
    case CpuIsa::kAmxBf16:
      return "amx";
  }
  return "?";
}

}  // namespace mla
