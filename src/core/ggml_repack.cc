#include "core/ggml_repack.h"

#include <cstring>

#include "core/ggml_blocks.h"
#include "core/ggml_quant.h"

namespace mla {
namespace {
constexpr int kQ8Bytes = 34;  // a Q8_0 block: f16 d, 32 × int8
}  // namespace

void repack_q8_0_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  const int64_t row_bytes = in / 32 * kQ8Bytes, units = in / kR16UnitValues;
  for (int64_t g = 0; g < out / kR16Rows; ++g) {
    const uint8_t* rows = src + g * kR16Rows * row_bytes;
    uint8_t* group = dst + g * kR16Rows * row_bytes;
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* unit = group + u * kR16UnitBytes;
      for (int half = 0; half < 2; ++half) {
        uint8_t* quads = unit + 64 + 512 * half;
        for (int r = 0; r < kR16Rows; ++r) {
          const uint8_t* blk = rows + r * row_bytes + (2 * u + half) * kQ8Bytes;
          std::memcpy(unit + 32 * half + 2 * r, blk + ggml::Q8_0::kD, 2);
          for (int j = 0; j < 32; ++j)
            quads[64 * (j / 4) + 4 * r + j % 4] = uint8_t(blk[ggml::Q8_0::kQs + j] ^ 0x80);
        }
      }
    }
  }
}

void dequantize_q8_0_r16_row(const uint8_t* data, int64_t in, int64_t row, float* out) {
  const int64_t row_bytes = in / 32 * kQ8Bytes, r = row % kR16Rows;
  const uint8_t* group = data + row / kR16Rows * kR16Rows * row_bytes;
  for (int64_t u = 0; u < in / kR16UnitValues; ++u) {
    const uint8_t* unit = group + u * kR16UnitBytes;
    for (int half = 0; half < 2; ++half) {
      const float d = ggml::load_half(unit + 32 * half + 2 * r);
      const uint8_t* quads = unit + 64 + 512 * half;
      float* y = out + kR16UnitValues * u + 32 * half;
      for (int j = 0; j < 32; ++j)  // (stored − 128) is the int8 code: as dequant_q8_0
        y[j] = float(int(quads[64 * (j / 4) + 4 * r + j % 4]) - 128) * d;
    }
  }
}

Status dequantize_weight_row(DType t, const uint8_t* data, int64_t in, int64_t row, float* out) {
  if (!dtype_is_row_interleaved(t))
    return dequantize_row(t, data + row * dtype_bytes(t, in), in, out);
  dequantize_q8_0_r16_row(data, in, row, out);
  return Status();
}

}  // namespace mla
