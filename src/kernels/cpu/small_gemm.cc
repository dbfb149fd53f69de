#include "kernels/cpu/small_gemm.h"

#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"

namespace mla::cpu {
namespace {

// 8 FP32 lanes: one ymm register with AVX2 / AVX-512, two xmm registers on baseline x86-64.
typedef float Vf __attribute__((vector_size(32)));
constexpr int kLanes = 8;
constexpr int kRows = 4;  // rows of x per block: the weight is read once per block

[[gnu::always_inline]] inline Vf load(const float* p) {
  Vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store(float* p, Vf v) {
  std::memcpy(p, &v, sizeof v);
}
[[gnu::always_inline]] inline Vf splat(float a) {
  return Vf{} + a;
}

// gemm_xw for NR rows (NR ≤ kRows): accumulators [NR][2] vectors = 16 output columns per pass.
template <int NR>
[[gnu::always_inline]] inline void xw_rows(int in, int out, const float* x, int64_t ldx,
                                           const float* w, float* y, int64_t ldy) {
  if constexpr (NR == 1) {
    // One row of x (decode): w read row after row, one long stream that the hardware prefetcher
    // follows (the column strips below read 64 bytes per row, rows 2 KiB apart at r = 512, and
    // ran at ~20 GB/s); y, out floats, is accumulated in place in L1, each column in the same
    // order as below.
    std::fill_n(y, out, 0.0f);
    for (int j = 0; j < in; ++j) {
      const Vf a = splat(x[j]);
      const float* wj = w + int64_t(j) * out;
      int c = 0;
      for (; c + kLanes <= out; c += kLanes) store(y + c, load(y + c) + a * load(wj + c));
      for (; c < out; ++c) y[c] += x[j] * wj[c];
    }
    return;
  }
  int c = 0;
  for (; c + 2 * kLanes <= out; c += 2 * kLanes) {
    Vf acc[NR][2] = {};
    for (int j = 0; j < in; ++j) {
      const Vf w0 = load(w + int64_t(j) * out + c), w1 = load(w + int64_t(j) * out + c + kLanes);
      for (int r = 0; r < NR; ++r) {
        const Vf a = splat(x[r * ldx + j]);
        acc[r][0] += a * w0;
        acc[r][1] += a * w1;
      }
    }
    for (int r = 0; r < NR; ++r) {
      store(y + r * ldy + c, acc[r][0]);
      store(y + r * ldy + c + kLanes, acc[r][1]);
    }
  }
  for (; c < out; ++c)  // ragged edge (out not a multiple of 16: small test shapes)
    for (int r = 0; r < NR; ++r) {
      float s = 0.0f;
      for (int j = 0; j < in; ++j) s += x[r * ldx + j] * w[int64_t(j) * out + c];
      y[r * ldy + c] = s;
    }
}

// gemm_xwt for NR rows: 2 weight rows × NR rows of x, lanes over `in`, summed at the end.
template <int NR>
[[gnu::always_inline]] inline void xwt_rows(int in, int out, const float* x, int64_t ldx,
                                            const float* w, float* y, int64_t ldy) {
  const int in_v = in / kLanes * kLanes;
  auto finish = [&](const Vf& v, int r, int o) {
    float s = 0.0f;
    for (int l = 0; l < kLanes; ++l) s += v[l];
    for (int j = in_v; j < in; ++j) s += x[r * ldx + j] * w[int64_t(o) * in + j];
    y[r * ldy + o] = s;
  };
  int o = 0;
  for (; o + 2 <= out; o += 2) {
    const float* w0 = w + int64_t(o) * in;
    const float* w1 = w0 + in;
    Vf acc[NR][2] = {};
    const bool ahead = o + 4 <= out;
    for (int j = 0; j < in_v; j += kLanes) {
      // Two rows are two short streams: ask for the next two rows as these are read.
      if (ahead && j % 16 == 0) {
        __builtin_prefetch(w1 + in + j, 0, 1);
        __builtin_prefetch(w1 + 2 * in + j, 0, 1);
      }
      const Vf a0 = load(w0 + j), a1 = load(w1 + j);
      for (int r = 0; r < NR; ++r) {
        const Vf xv = load(x + r * ldx + j);
        acc[r][0] += xv * a0;
        acc[r][1] += xv * a1;
      }
    }
    for (int r = 0; r < NR; ++r) {
      finish(acc[r][0], r, o);
      finish(acc[r][1], r, o + 1);
    }
  }
  for (; o < out; ++o) {
    Vf acc[NR] = {};
    for (int j = 0; j < in_v; j += kLanes) {
      const Vf a = load(w + int64_t(o) * in + j);
      for (int r = 0; r < NR; ++r) acc[r] += load(x + r * ldx + j) * a;
    }
    for (int r = 0; r < NR; ++r) finish(acc[r], r, o);
  }
}

// Every row of x in blocks of kRows, the last block partial; inlined into each ISA's copy below.
template <template <int> class Rows>
[[gnu::always_inline]] inline void by_row_blocks(int n, int in, int out, const float* x,
                                                 int64_t ldx, const float* w, float* y,
                                                 int64_t ldy) {
  int i = 0;
  for (; i + kRows <= n; i += kRows)
    Rows<kRows>::run(in, out, x + i * ldx, ldx, w, y + i * ldy, ldy);
  switch (n - i) {
    case 3:
      return Rows<3>::run(in, out, x + i * ldx, ldx, w, y + i * ldy, ldy);
    case 2:
      return Rows<2>::run(in, out, x + i * ldx, ldx, w, y + i * ldy, ldy);
    case 1:
      return Rows<1>::run(in, out, x + i * ldx, ldx, w, y + i * ldy, ldy);
    default:
      return;
  }
}

template <int NR>
struct XwRows {
  [[gnu::always_inline]] static void run(int in, int out, const float* x, int64_t ldx,
                                         const float* w, float* y, int64_t ldy) {
    xw_rows<NR>(in, out, x, ldx, w, y, ldy);
  }
};
template <int NR>
struct XwtRows {
  [[gnu::always_inline]] static void run(int in, int out, const float* x, int64_t ldx,
                                         const float* w, float* y, int64_t ldy) {
    xwt_rows<NR>(in, out, x, ldx, w, y, ldy);
  }
};

// One copy per ISA, picked at the first call from cpu_features() (which honours MLA_ISA). Not
// target_clones: its ifunc resolvers run before the sanitizer runtimes start (TSan crashes).
#define MLA_SMALL_GEMM_COPY(NAME, ATTR)                                                     \
  ATTR void NAME##_xw(int n, int in, int out, const float* x, int64_t ldx, const float* w,  \
                      float* y, int64_t ldy) {                                              \
    by_row_blocks<XwRows>(n, in, out, x, ldx, w, y, ldy);                                   \
  }                                                                                         \
  ATTR void NAME##_xwt(int n, int in, int out, const float* x, int64_t ldx, const float* w, \
                       float* y, int64_t ldy) {                                             \
    by_row_blocks<XwtRows>(n, in, out, x, ldx, w, y, ldy);                                  \
  }
MLA_SMALL_GEMM_COPY(avx512, __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))))
MLA_SMALL_GEMM_COPY(avx2, __attribute__((target("avx2,fma"))))
MLA_SMALL_GEMM_COPY(baseline, )
#undef MLA_SMALL_GEMM_COPY

using GemmFn = void (*)(int, int, int, const float*, int64_t, const float*, float*, int64_t);
struct GemmCopies {
  GemmFn xw, xwt;
};

const GemmCopies& copies() {
  static const GemmCopies c = cpu_supports(CpuIsa::kAvx512) ? GemmCopies{avx512_xw, avx512_xwt}
                              : cpu_supports(CpuIsa::kAvx2) ? GemmCopies{avx2_xw, avx2_xwt}
                                                            : GemmCopies{baseline_xw, baseline_xwt};
  return c;
}

}  // namespace

void gemm_xw(int n, int in, int out, const float* x, int64_t ldx, const float* w, float* y,
             int64_t ldy) {
  copies().xw(n, in, out, x, ldx, w, y, ldy);
}

void gemm_xwt(int n, int in, int out, const float* x, int64_t ldx, const float* w, float* y,
              int64_t ldy) {
  copies().xwt(n, in, out, x, ldx, w, y, ldy);
}

}  // namespace mla::cpu
