// Run-time CPU feature detection for kernel dispatch. MLA_ISA=scalar|avx2|avx512|avx512bf16|amx
// caps what is reported (to test the lower variants on a bigger CPU); MLA_ISA=avx512 also hides
// AVX512_VBMI.
#pragma once

namespace mla {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kAmxBf16 = 4 };

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 + FMA3
  bool avx512 = false;       // AVX-512 F, BW, VL, DQ
  bool avx512_vbmi = false;  // and AVX512_VBMI (vpermb, vpermt2b)
  bool avx512_bf16 = false;  // AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  bool amx_bf16 = false;     // AMX-TILE + AMX-BF16 (+ VBMI) and the kernel's grant of tile data
};

// Detected once; honours the MLA_ISA cap.
const CpuFeatures& cpu_features();
bool cpu_supports(CpuIsa isa);
const char* cpu_isa_name(CpuIsa isa);

}  // namespace mla
