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
          for (int q = 0; q < 8; ++q) {  // codes 4q .. 4q + 3 of the row, offset by 128
            uint32_t quad;
            std::memcpy(&quad, blk + ggml::Q8_0::kQs + 4 * q, 4);
            quad ^= 0x80808080u;
            std::memcpy(quads + 64 * q + 4 * r, &quad, 4);
          }
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

namespace {

// f(offset in the unit, offset in the row's Q4_K block, bytes) for every piece of row r of a
// kQ4_KR16 unit (the layout of ggml_repack.h): the one description repacking and gathering share.
template <class F>
void q4_k_r16_pieces(int64_t r, F&& f) {
  using B = ggml::Q4_K;
  f(2 * r, B::kD, 2);
  f(32 + 2 * r, B::kDmin, 2);
  for (int k = 0; k < 3; ++k) f(64 + 64 * k + 4 * r, B::kScales + 4 * k, 4);
  for (int v = 0; v < 32; ++v) f(256 + 64 * v + 4 * r, B::kQs + 4 * v, 4);
}

void repack_q4_k_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  const int64_t sbs = in / 256, row_bytes = sbs * 144;
  for (int64_t g = 0; g < out / kR16Rows; ++g)
    for (int64_t sb = 0; sb < sbs; ++sb) {
      uint8_t* unit = dst + g * kR16Rows * row_bytes + sb * kQ4KR16UnitBytes;
      for (int64_t r = 0; r < kR16Rows; ++r) {
        const uint8_t* blk = src + (g * kR16Rows + r) * row_bytes + sb * 144;
        q4_k_r16_pieces(r,
                        [&](int64_t u, int64_t b, size_t n) { std::memcpy(unit + u, blk + b, n); });
      }
    }
}

}  // namespace

void gather_q4_k_r16_row(const uint8_t* data, int64_t in, int64_t row, uint8_t* dst) {
  const int64_t sbs = in / 256;
  const uint8_t* group = data + row / kR16Rows * kR16Rows * sbs * 144;
  for (int64_t sb = 0; sb < sbs; ++sb) {
    const uint8_t* unit = group + sb * kQ4KR16UnitBytes;
    q4_k_r16_pieces(row % kR16Rows, [&](int64_t u, int64_t b, size_t n) {
      std::memcpy(dst + sb * 144 + b, unit + u, n);
    });
  }
}

namespace {

// The pair layout of kBF16R16 / kF8E4M3R16 for values of `eb` bytes: pair p of a group's 16 rows
// at 16 · 2eb · p, row r's pair at 2eb · r. Moves rows [out, in] there.
void repack_pairs_r16(const uint8_t* src, int64_t out, int64_t in, int eb, uint8_t* dst) {
  const int64_t pair = 2 * eb, group_bytes = kR16Rows * in * eb;
  for (int64_t g = 0; g < out / kR16Rows; ++g)
    for (int64_t p = 0; p < in / 2; ++p)
      for (int r = 0; r < kR16Rows; ++r)
        std::memcpy(dst + g * group_bytes + kR16Rows * pair * p + pair * r,
                    src + g * group_bytes + r * in * eb + pair * p, size_t(pair));
}

// Row `row` of that layout back as its stored values, in order.
void gather_pairs_r16_row(const uint8_t* data, int64_t in, int eb, int64_t row, uint8_t* dst) {
  const int64_t pair = 2 * eb;
  const uint8_t* group = data + row / kR16Rows * kR16Rows * in * eb;
  for (int64_t p = 0; p < in / 2; ++p)
    std::memcpy(dst + pair * p, group + kR16Rows * pair * p + pair * (row % kR16Rows),
                size_t(pair));
}

}  // namespace

void repack_bf16_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  repack_pairs_r16(src, out, in, 2, dst);
}

void dequantize_bf16_r16_row(const uint8_t* data, int64_t in, int64_t row, float* out) {
  std::vector<uint16_t> h(static_cast<size_t>(in));
  gather_pairs_r16_row(data, in, 2, row, reinterpret_cast<uint8_t*>(h.data()));
  for (int64_t j = 0; j < in; ++j) out[j] = bf16_to_f32(h[size_t(j)]);
}

void repack_f8_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  repack_pairs_r16(src, out, in, 1, dst);
}

void gather_f8_r16_row(const uint8_t* data, int64_t in, int64_t row, uint8_t* dst) {
  gather_pairs_r16_row(data, in, 1, row, dst);
}

DType repacked_dtype(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return DType::kQ8_0R16;
    case DType::kQ4_K:
      return DType::kQ4_KR16;
    case DType::kBF16:
      return DType::kBF16R16;
    case DType::kF8E4M3:
      return DType::kF8E4M3R16;
    default:
      return t;
  }
}

DType r16_file_dtype(DType to) {
  switch (to) {
    case DType::kQ8_0R16:
      return DType::kQ8_0;
    case DType::kBF16R16:
      return DType::kBF16;
    case DType::kF8E4M3R16:
      return DType::kF8E4M3;
    default:
      return DType::kQ4_K;
  }
}

int64_t r16_row_multiple(DType to) {
  return to == DType::kQ8_0R16                              ? kR16UnitValues
         : to == DType::kBF16R16 || to == DType::kF8E4M3R16 ? 2
                                                            : 256;
}

bool repack_fits(DType to, int64_t out, int64_t in) {
  return dtype_is_row_interleaved(to) && out > 0 && in > 0 && out % kR16Rows == 0 &&
         in % r16_row_multiple(to) == 0;
}

void repack_rows(DType to, const uint8_t* src, int64_t out, int64_t in, uint8_t* dst) {
  if (to == DType::kQ8_0R16) return repack_q8_0_r16(src, out, in, dst);
  if (to == DType::kBF16R16) return repack_bf16_r16(src, out, in, dst);
  if (to == DType::kF8E4M3R16) return repack_f8_r16(src, out, in, dst);
  repack_q4_k_r16(src, out, in, dst);
}

Status dequantize_weight_row(DType t, const uint8_t* data, int64_t in, int64_t row, float* out) {
  if (t == DType::kQ4_KR16) {
    std::vector<uint8_t> blocks(size_t(in / 256 * 144));
    gather_q4_k_r16_row(data, in, row, blocks.data());
    return dequantize_row(DType::kQ4_K, blocks.data(), in, out);
  }
  if (t == DType::kBF16R16) {
    dequantize_bf16_r16_row(data, in, row, out);
    return Status();
  }
  if (t == DType::kF8E4M3R16)
    return invalid_argument("dequantize_weight_row: F8_E4M3_R16 rows need their block scales");
  if (!dtype_is_row_interleaved(t))
    return dequantize_row(t, data + row * dtype_bytes(t, in), in, out);
  dequantize_q8_0_r16_row(data, in, row, out);
  return Status();
}

}  // namespace mla
