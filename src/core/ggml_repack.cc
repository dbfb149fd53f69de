#include "core/ggml_repack.h"

#include <cstring>
#include <vector>

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

void repack_q4_k_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  using B = ggml::Q4_K;
  const int64_t sbs = in / 256, row_bytes = sbs * 144;
  for (int64_t g = 0; g < out / kR16Rows; ++g) {
    const uint8_t* rows = src + g * kR16Rows * row_bytes;
    uint8_t* group = dst + g * kR16Rows * row_bytes;
    for (int64_t sb = 0; sb < sbs; ++sb) {
      uint8_t* unit = group + sb * kQ4KR16UnitBytes;
      for (int r = 0; r < kR16Rows; ++r) {
        const uint8_t* blk = rows + r * row_bytes + sb * 144;
        std::memcpy(unit + 2 * r, blk + B::kD, 2);
        std::memcpy(unit + 32 + 2 * r, blk + B::kDmin, 2);
        for (int k = 0; k < 3; ++k)
          std::memcpy(unit + 64 + 64 * k + 4 * r, blk + B::kScales + 4 * k, 4);
        for (int v = 0; v < 32; ++v)
          std::memcpy(unit + 256 + 64 * v + 4 * r, blk + B::kQs + 4 * v, 4);
      }
    }
  }
}

void gather_q4_k_r16_row(const uint8_t* data, int64_t in, int64_t row, uint8_t* dst) {
  using B = ggml::Q4_K;
  const int64_t sbs = in / 256, r = row % kR16Rows;
  const uint8_t* group = data + row / kR16Rows * kR16Rows * sbs * 144;
  for (int64_t sb = 0; sb < sbs; ++sb) {
    const uint8_t* unit = group + sb * kQ4KR16UnitBytes;
    uint8_t* blk = dst + sb * 144;
    std::memcpy(blk + B::kD, unit + 2 * r, 2);
    std::memcpy(blk + B::kDmin, unit + 32 + 2 * r, 2);
    for (int k = 0; k < 3; ++k)
      std::memcpy(blk + B::kScales + 4 * k, unit + 64 + 64 * k + 4 * r, 4);
    for (int v = 0; v < 32; ++v) std::memcpy(blk + B::kQs + 4 * v, unit + 256 + 64 * v + 4 * r, 4);
  }
}

bool repack_fits(DType t, DType to, int64_t out, int64_t in) {
  return (t == DType::kQ8_0 && to == DType::kQ8_0R16 && q8_0_r16_fits(out, in)) ||
         (t == DType::kQ4_K && to == DType::kQ4_KR16 && q4_k_r16_fits(out, in));
}

void repack_rows(DType t, DType to, const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  (void)t;
  if (to == DType::kQ8_0R16) return repack_q8_0_r16(src, out, in, dst);
  repack_q4_k_r16(src, out, in, dst);
}

Status dequantize_weight_row(DType t, const uint8_t* data, int64_t in, int64_t row, float* out) {
  if (t == DType::kQ4_KR16) {
    std::vector<uint8_t> blocks(size_t(in / 256 * 144));
    gather_q4_k_r16_row(data, in, row, blocks.data());
    return dequantize_row(DType::kQ4_K, blocks.data(), in, out);
  }
  if (!dtype_is_row_interleaved(t))
    return dequantize_row(t, data + row * dtype_bytes(t, in), in, out);
  dequantize_q8_0_r16_row(data, in, row, out);
  return Status();
}

}  // namespace mla
