// Record sizes and offsets of the latent KV cache formats (see cache_format.h).
#include "cache/cache_format.h"

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
  }
  MLA_CHECK(false, "bad KvCacheDtype {}", static_cast<int>(dtype));
  return "";
}

Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name) {
  std::string valid;
  for (KvCacheDtype d : kAllKvCacheDtypes) {
    if (kv_cache_dtype_name(d) == name) return d;
    if (!valid.empty()) valid += ", ";
    valid += kv_cache_dtype_name(d);
  }
  return invalid_argument("unknown KV cache dtype \"" + std::string(name) + "\" (expected one of " +
                          valid + ")");
}

KvRecordLayout kv_record_layout(KvCacheDtype dtype, int latent_dim, int rope_dim) {
  MLA_CHECK(latent_dim > 0 && rope_dim >= 0, "bad cache dims r={} d_r={}", latent_dim, rope_dim);
  const int64_t r = latent_dim;
  KvRecordLayout l;
  l.rope_bytes = 2 * int64_t{rope_dim};
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

int64_t dense_kv_bytes_per_token(int n_kv_heads, int head_dim) {
  MLA_CHECK(n_kv_heads > 0 && head_dim > 0, "bad dense KV dims heads={} head_dim={}", n_kv_heads,
            head_dim);
  // 4 · heads · head_dim < 2^64 for any two ints, but not < 2^63: check.
  int64_t bytes = 0;
  MLA_CHECK(!__builtin_mul_overflow(int64_t{4} * n_kv_heads, int64_t{head_dim}, &bytes),
            "dense KV bytes overflow: heads={} head_dim={}", n_kv_heads, head_dim);
  return bytes;  // K and V, 2 bytes (BF16) each
}

}  // namespace mla
