// A plain-loop stand-in for the AMX tile unit with amx_product_grid's contract (kernels/cpu/
// amx_tiles.h): the tile policy the tests give the AMX GEMM (kernels/cpu/linear_gemm_amx.h) so its
// addressing runs on every CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace mla::test {

// amx_product_grid's contract in plain loops: per pair one FMA of each value, in pair order (the
// tile unit's rounding differs within the GEMM's bound, which the AMX machines' tests check).
struct AmxLoopTiles {
  static void begin() {}
  static void end() {}
  template <bool kLoad, class AOf>
  static void grid(int nk, int nj, AOf a_of, int64_t a_s, int64_t a_stride, const uint8_t* b,
                   int64_t b_j, int64_t b_s, int64_t b_stride, int steps, float* c, int64_t c_k,
                   int64_t c_stride) {
    auto bf = [](const uint8_t* p) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    };
    for (int k = 0; k < nk; ++k)
      for (int j = 0; j < nj; ++j)
        for (int m = 0; m < 16; ++m)
          for (int col = 0; col < 16; ++col) {
            float* out = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(c + k * c_k + j * 16) +
                                                  m * c_stride) +
                         col;
            float acc = kLoad ? *out : 0.0f;
            for (int s = 0; s < steps; ++s)
              for (int q = 0; q < 16; ++q) {
                const uint8_t* a = a_of(k) + s * a_s + m * a_stride + 4 * q;
                const uint8_t* w = b + j * b_j + s * b_s + q * b_stride + 4 * col;
                acc = std::fma(bf(a), bf(w), acc);
                acc = std::fma(bf(a + 2), bf(w + 2), acc);
              }
            *out = acc;
          }
  }
};

}  // namespace mla::test
