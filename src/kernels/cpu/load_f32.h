// Widening of stored values to FP32 for the kernels' tile buffers: plain BF16 / F32 runs, and
// whole cache rows in any format of core/kv_format.h, dequantised here, one row at a time, into
// the tile buffer that every head then reads (no pass ever dequantises the pool). Internal
// linkage (compiled per ISA translation unit).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/kv_format.h"

namespace mla::cpu {
namespace {

// dst[0:n] = src[0:n] widened; src may be unaligned.
inline void load_f32(DType t, const void* src, int n, float* dst) {
  if (t == DType::kF32) {
    std::memcpy(dst, src, size_t(n) * 4);
  } else {
    const uint8_t* s = static_cast<const uint8_t*>(src);
    for (int i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      dst[i] = bf16_to_f32(h);
    }
  }
}

// How to read one cache row: its latent storage and, for quantised records, the byte layout.
struct CacheRowFormat {
  DType dtype = DType::kBF16;  // kBF16, kF32, kF8E4M3, kI8, kE2M1
  int r = 0, d_r = 0;
  float global_scale = 1.0f;  // nvfp4
  KvRecordLayout layout;      // quantised formats only
  int64_t row_bytes = 0;

  CacheRowFormat(DType t, int latent, int rope, float g)
      : dtype(t), r(latent), d_r(rope), global_scale(g) {
    row_bytes = kv_row_bytes(t, latent, rope);
    if (auto f = kv_cache_dtype_of(t); f && *f != KvCacheDtype::kBF16)
      layout = kv_record_layout(*f, latent, rope);
  }
};

// Code → value tables: the per-element conversion functions of core/dtype are exact but branchy;
// a table lookup is what the tile loop can afford. Built from those functions, so identical.
struct NarrowFloatTables {
  float fp8[256];
  float e2m1[16];
  NarrowFloatTables() {
    for (int i = 0; i < 256; ++i) fp8[i] = fp8_e4m3_to_f32(uint8_t(i));
    for (int i = 0; i < 16; ++i) e2m1[i] = e2m1_to_f32(uint8_t(i));
  }
};
inline const NarrowFloatTables& narrow_tables() {
  static const NarrowFloatTables t;
  return t;
}

inline float read_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// latent[0:r] and rope[0:d_r] of one row, in FP32: the FP32 products code · scale of
// core/kv_format.h, so that kernels and the reference see the same values.
inline void load_cache_row(const CacheRowFormat& f, const uint8_t* row, float* latent,
                           float* rope) {
  switch (f.dtype) {
    case DType::kF32:
    case DType::kBF16: {
      const int eb = f.dtype == DType::kF32 ? 4 : 2;
      load_f32(f.dtype, row, f.r, latent);
      load_f32(f.dtype, row + int64_t(f.r) * eb, f.d_r, rope);
      return;
    }
    case DType::kF8E4M3:
    case DType::kI8: {
      const uint8_t* codes = row + f.layout.latent_offset_bytes;
      const uint8_t* scales = row + f.layout.scale_offset_bytes;
      for (int b0 = 0; b0 < f.r; b0 += kFp8ScaleBlock) {
        const float s = read_f32(scales + 4 * (b0 / kFp8ScaleBlock));
        const int end = std::min(f.r, b0 + kFp8ScaleBlock);
        if (f.dtype == DType::kF8E4M3) {
          const float* lut = narrow_tables().fp8;
          for (int i = b0; i < end; ++i) latent[i] = lut[codes[i]] * s;
        } else
          for (int i = b0; i < end; ++i) latent[i] = float(int8_t(codes[i])) * s;
      }
      break;
    }
    case DType::kE2M1: {
      const NarrowFloatTables& lut = narrow_tables();
      const uint8_t* codes = row + f.layout.latent_offset_bytes;
      const uint8_t* scales = row + f.layout.scale_offset_bytes;
      for (int b0 = 0; b0 < f.r; b0 += kNvfp4ScaleBlock) {
        const float s = lut.fp8[scales[b0 / kNvfp4ScaleBlock]];
        const int end = std::min(f.r, b0 + kNvfp4ScaleBlock);
        for (int i = b0; i < end; ++i)
          latent[i] = (lut.e2m1[(codes[i / 2] >> (4 * (i & 1))) & 0xf] * s) * f.global_scale;
      }
      break;
    }
    default:
      break;  // validate() admits no other dtype
  }
  load_f32(DType::kBF16, row + f.layout.rope_offset_bytes, f.d_r, rope);
}

}  // namespace
}  // namespace mla::cpu
