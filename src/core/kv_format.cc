// Record sizes, offsets and the reference row codec of the latent KV cache formats.
#include "core/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"

namespace mla {
namespace {

constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
constexpr int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

}  // namespace

std::string_view kv_cache_dtype_name(KvCacheDtype dtype) {
  switch (dtype) {
    case KvCacheDtype::kBF16:
      return "bf16";
    case KvCacheDtype::kFP8E4M3:
      return "fp8_e4m3";
    case KvCacheDtype::kINT8:
      return "int8";
    case KvCacheDtype::kNVFP4:
      return "nvfp4";
    case KvCacheDtype::kF32:
      return "f32";
  }
  MLA_CHECK(false, "bad KvCacheDtype {}", static_cast<int>(dtype));
  return "";
}

Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name) {
  std::string valid;
  for (KvCacheDtype d : kAllKvCacheDtypes) {
    if (kv_cache_dtype_name(d) == name) return d;
    valid += kv_cache_dtype_name(d);
    valid += ", ";
  }
  if (name == "f32") return KvCacheDtype::kF32;
  valid += "f32";
  return invalid_argument("unknown KV cache dtype \"" + std::string(name) + "\" (expected one of " +
                          valid + ")");
}

KvRecordLayout kv_record_layout(KvCacheDtype dtype, int latent_dim, int rope_dim) {
  MLA_CHECK(latent_dim > 0 && rope_dim >= 0, "bad cache dims r={} d_r={}", latent_dim, rope_dim);
  const int64_t r = latent_dim;
  KvRecordLayout l;
  l.rope_bytes = 2 * int64_t{rope_dim};
  if (dtype == KvCacheDtype::kF32) {  // the kernels' plain F32 row: r + d_r floats
    l.latent_bytes = 4 * r;
    l.rope_bytes = 4 * int64_t{rope_dim};
    l.scale_offset_bytes = l.rope_offset_bytes = l.latent_bytes;
    l.record_bytes = l.latent_bytes + l.rope_bytes;
    return l;
  }
  if (dtype == KvCacheDtype::kBF16) {
    l.latent_bytes = 2 * r;
    l.scale_offset_bytes = l.latent_bytes;
    l.rope_offset_bytes = l.latent_bytes;
    l.record_bytes = l.latent_bytes + l.rope_bytes;
    return l;
  }
  int64_t scale_align = 1;
  switch (dtype) {
    case KvCacheDtype::kFP8E4M3:
    case KvCacheDtype::kINT8:
      l.latent_bytes = r;
      l.scale_bytes = 4 * ceil_div(r, kFp8ScaleBlock);  // fp32
      scale_align = 4;
      break;
    case KvCacheDtype::kNVFP4:
      l.latent_bytes = ceil_div(r, 2);
      l.scale_bytes = ceil_div(r, kNvfp4ScaleBlock);  // e4m3
      break;
    case KvCacheDtype::kBF16:
    case KvCacheDtype::kF32:
      break;
  }
  l.scale_offset_bytes = round_up(l.latent_bytes, scale_align);
  l.rope_offset_bytes = round_up(l.scale_offset_bytes + l.scale_bytes, 2);
  l.record_bytes = round_up(l.rope_offset_bytes + l.rope_bytes, kKvRecordAlignBytes);
  return l;
}

int64_t kv_bytes_per_token(KvCacheDtype dtype, int latent_dim, int rope_dim) {
  return kv_record_layout(dtype, latent_dim, rope_dim).record_bytes;
}

DType kv_cache_latent_dtype(KvCacheDtype dtype) {
  switch (dtype) {
    case KvCacheDtype::kBF16:
      return DType::kBF16;
    case KvCacheDtype::kFP8E4M3:
      return DType::kF8E4M3;
    case KvCacheDtype::kINT8:
      return DType::kI8;
    case KvCacheDtype::kNVFP4:
      return DType::kE2M1;
    case KvCacheDtype::kF32:
      return DType::kF32;
  }
  MLA_CHECK(false, "bad KvCacheDtype {}", static_cast<int>(dtype));
  return DType::kBF16;
}

std::optional<KvCacheDtype> kv_cache_dtype_of(DType latent_dtype) {
  for (KvCacheDtype d : kAllKvCacheDtypes)
    if (kv_cache_latent_dtype(d) == latent_dtype) return d;
  if (latent_dtype == DType::kF32) return KvCacheDtype::kF32;
  return std::nullopt;
}

int64_t kv_row_bytes(DType latent_dtype, int latent_dim, int rope_dim) {
  if (latent_dtype == DType::kF32) return 4 * (int64_t{latent_dim} + rope_dim);
  const std::optional<KvCacheDtype> f = kv_cache_dtype_of(latent_dtype);
  MLA_CHECK(f.has_value(), "no cache format stores a {} latent", dtype_name(latent_dtype));
  return kv_bytes_per_token(*f, latent_dim, rope_dim);
}

namespace {

// Largest |x| of a block, or NaN when the block holds a NaN or an infinity.
float block_amax(const float* x, int n) {
  float a = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return NAN;
    a = std::max(a, std::fabs(x[i]));
  }
  return a;
}

void put_f32(uint8_t* p, float v) {
  std::memcpy(p, &v, 4);
}
float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// The NVFP4 block scale: nearest e4m3 to `want`, moved up one code if it would clip the block.
uint8_t nvfp4_block_scale(float amax, float global_scale) {
  const float want = amax / (kE2M1Max * global_scale);
  uint8_t code = f32_to_fp8_e4m3(want);
  if (fp8_e4m3_to_f32(code) * kE2M1Max * global_scale < amax && code < 0x7e) ++code;
  return code;
}

}  // namespace

void quantize_kv_row(KvCacheDtype dtype, int latent_dim, int rope_dim, const float* row,
                     float global_scale, uint8_t* record) {
  const KvRecordLayout l = kv_record_layout(dtype, latent_dim, rope_dim);
  if (dtype == KvCacheDtype::kF32) {
    std::memcpy(record, row, size_t(l.record_bytes));
    return;
  }
  std::memset(record, 0, size_t(l.record_bytes));
  const int r = latent_dim;
  uint8_t* latent = record + l.latent_offset_bytes;
  uint8_t* scales = record + l.scale_offset_bytes;
  switch (dtype) {
    case KvCacheDtype::kBF16:
      for (int i = 0; i < r; ++i) {
        const uint16_t h = f32_to_bf16(row[i]);
        std::memcpy(latent + 2 * i, &h, 2);
      }
      break;
    case KvCacheDtype::kFP8E4M3:
    case KvCacheDtype::kINT8: {
      const bool fp8 = dtype == KvCacheDtype::kFP8E4M3;
      for (int b0 = 0, blk = 0; b0 < r; b0 += kFp8ScaleBlock, ++blk) {
        const int n = std::min(kFp8ScaleBlock, r - b0);
        const float amax = block_amax(row + b0, n);
        const float scale = amax / (fp8 ? kFp8E4M3Max : 127.0f);  // NaN for a non-finite block
        put_f32(scales + 4 * blk, scale);
        for (int i = 0; i < n; ++i) {
          const float x = scale > 0.0f ? row[b0 + i] / scale : 0.0f;  // codes 0 when NaN or 0
          latent[b0 + i] = fp8 ? f32_to_fp8_e4m3(x)
                               : uint8_t(int8_t(std::clamp(std::nearbyint(x), -127.0f, 127.0f)));
        }
      }
      break;
    }
    case KvCacheDtype::kNVFP4:
      for (int b0 = 0, blk = 0; b0 < r; b0 += kNvfp4ScaleBlock, ++blk) {
        const int n = std::min(kNvfp4ScaleBlock, r - b0);
        const float amax = block_amax(row + b0, n);
        const uint8_t s = std::isnan(amax) ? 0x7f : nvfp4_block_scale(amax, global_scale);
        scales[blk] = s;
        const float step = fp8_e4m3_to_f32(s) * global_scale;
        for (int i = 0; i < n; ++i) {
          const uint8_t code = step > 0.0f ? f32_to_e2m1(row[b0 + i] / step) : 0;
          const int at = b0 + i;  // two values per byte, the even index in the low nibble
          latent[at / 2] |= uint8_t((code & 0xf) << (4 * (at & 1)));
        }
      }
      break;
    case KvCacheDtype::kF32:
      break;  // returned above
  }
  uint8_t* rope = record + l.rope_offset_bytes;
  for (int i = 0; i < rope_dim; ++i) {
    const uint16_t h = f32_to_bf16(row[r + i]);
    std::memcpy(rope + 2 * i, &h, 2);
  }
}

void dequantize_kv_row(KvCacheDtype dtype, int latent_dim, int rope_dim, const uint8_t* record,
                       float global_scale, float* row) {
  const KvRecordLayout l = kv_record_layout(dtype, latent_dim, rope_dim);
  if (dtype == KvCacheDtype::kF32) {
    std::memcpy(row, record, size_t(l.record_bytes));
    return;
  }
  const int r = latent_dim;
  const uint8_t* latent = record + l.latent_offset_bytes;
  const uint8_t* scales = record + l.scale_offset_bytes;
  for (int i = 0; i < r; ++i) {
    switch (dtype) {
      case KvCacheDtype::kBF16: {
        uint16_t h;
        std::memcpy(&h, latent + 2 * i, 2);
        row[i] = bf16_to_f32(h);
        break;
      }
      case KvCacheDtype::kFP8E4M3:
        row[i] = fp8_e4m3_to_f32(latent[i]) * get_f32(scales + 4 * (i / kFp8ScaleBlock));
        break;
      case KvCacheDtype::kINT8:
        row[i] = float(int8_t(latent[i])) * get_f32(scales + 4 * (i / kFp8ScaleBlock));
        break;
      case KvCacheDtype::kNVFP4: {
        const float code = e2m1_to_f32(uint8_t(latent[i / 2] >> (4 * (i & 1))) & 0xf);
        row[i] = (code * fp8_e4m3_to_f32(scales[i / kNvfp4ScaleBlock])) * global_scale;
        break;
      }
      case KvCacheDtype::kF32:
        break;  // returned above
    }
  }
  const uint8_t* rope = record + l.rope_offset_bytes;
  for (int i = 0; i < rope_dim; ++i) {
    uint16_t h;
    std::memcpy(&h, rope + 2 * i, 2);
    row[r + i] = bf16_to_f32(h);
  }
}

}  // namespace mla
