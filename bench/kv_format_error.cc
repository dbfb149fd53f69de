// kv_format_error: the error each KV cache record format adds to the latent, on seeded synthetic
// rows (normal, Student-t(3), outlier channels), as a markdown table or JSON. Not a speed bench.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_format.h"
#include "core/rng.h"

namespace {

using namespace mla;

constexpr int kR = 512, kDr = 64;  // DeepSeek-V3: kv_lora_rank, qk_rope_head_dim
// Fixed outlier channels, one per 128-block so that every FP8/INT8 scale is set by an outlier
// (the worst case for per-128 scales; NVFP4 loses only the 4 blocks of 16 that hold one).
constexpr int kOutlierChannels[] = {37, 166, 290, 451};
constexpr float kOutlierGain = 50.0f;

enum class Kind { kNormal, kStudentT3, kOutliers };
constexpr Kind kKinds[] = {Kind::kNormal, Kind::kStudentT3, Kind::kOutliers};
const char* kind_name(Kind k) {
  return k == Kind::kNormal ? "normal" : k == Kind::kStudentT3 ? "student_t3" : "outliers_x50";
}

struct Options {
  int rows = 1024;
  uint64_t seed = 1;
  double amplitude = 1.0;  // every value is multiplied by this (probes small-magnitude layers)
  bool auto_g = false;     // NVFP4 global scale = data amax / 2688 instead of a fixed value
  float g = kNvfp4DefaultGlobalScale;
  bool json = false;
};

// rows × (r + d_r) values, the same for every format. Student-t(3) = z / sqrt(χ²₃ / 3): unit
// scale, infinite kurtosis, like the heavy tails of real activations.
std::vector<float> make_rows(Kind kind, const Options& o) {
  Rng rng(o.seed * 1000003u + uint64_t(kind));
  std::vector<float> x(size_t(o.rows) * (kR + kDr));
  for (size_t i = 0; i < x.size(); ++i) {
    double z = rng.normal();
    if (kind == Kind::kStudentT3) {
      const double a = rng.normal(), b = rng.normal(), c = rng.normal();
      z /= std::sqrt((a * a + b * b + c * c) / 3.0);
    }
    if (kind == Kind::kOutliers)
      for (int ch : kOutlierChannels)
        if (int(i % (kR + kDr)) == ch) z *= kOutlierGain;
    x[i] = float(z * o.amplitude);
  }
  return x;
}

struct Stats {
  double rel_l2 = 0;     // sqrt(Σ Δ² / Σ x²) over the latent of all rows
  double max_ratio = 0;  // worst row's max |Δ| / max |x|
  double cos_min = 1;    // worst row's cosine(x, dequantised)
  double cos_mean = 0;
};

Stats measure(KvCacheDtype d, const std::vector<float>& x, const Options& o, float g) {
  std::vector<uint8_t> rec(size_t(kv_bytes_per_token(d, kR, kDr)));
  std::vector<float> y(kR + kDr);
  Stats s;
  double sum_d2 = 0, sum_x2 = 0;
  for (int row = 0; row < o.rows; ++row) {
    const float* xr = x.data() + size_t(row) * (kR + kDr);
    quantize_kv_row(d, kR, kDr, xr, g, rec.data());
    dequantize_kv_row(d, kR, kDr, rec.data(), g, y.data());
    double dd = 0, xx = 0, yy = 0, xy = 0, max_d = 0, max_x = 0;
    for (int i = 0; i < kR; ++i) {  // latent only: the rope part is BF16 in every format
      const double a = xr[i], b = y[size_t(i)];
      dd += (a - b) * (a - b);
      xx += a * a;
      yy += b * b;
      xy += a * b;
      max_d = std::max(max_d, std::fabs(a - b));
      max_x = std::max(max_x, std::fabs(a));
    }
    sum_d2 += dd;
    sum_x2 += xx;
    if (max_x > 0) s.max_ratio = std::max(s.max_ratio, max_d / max_x);
    const double cs = xx > 0 && yy > 0 ? xy / std::sqrt(xx * yy) : 1.0;
    s.cos_min = std::min(s.cos_min, cs);
    s.cos_mean += cs / o.rows;
  }
  s.rel_l2 = sum_x2 > 0 ? std::sqrt(sum_d2 / sum_x2) : 0.0;
  return s;
}

const char* kUsage =
    "usage: kv_format_error [--rows N] [--seed S] [--amplitude A]\n"
    "                       [--nvfp4-global-scale G|auto] [--json]\n"
    "Error of the latent after quantize/dequantize for bf16, fp8_e4m3, int8 and nvfp4 records\n"
    "(r = 512, d_r = 64) on seeded normal, Student-t(3) and outlier-channel rows.\n"
    "G defaults to 1/6; auto sets it per data kind to max|x| / 2688 (the calibration rule).\n";

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    const std::string_view v = has_value ? argv[i + 1] : "";
    if (a == "--json") {
      o.json = true;
    } else if (a == "--rows" && has_value) {
      if (!parse_number(v, o.rows) || o.rows < 1) return false;
      ++i;
    } else if (a == "--seed" && has_value) {
      if (!parse_number(v, o.seed)) return false;
      ++i;
    } else if (a == "--amplitude" && has_value) {
      if (!parse_number(v, o.amplitude) || !(o.amplitude > 0) || !std::isfinite(o.amplitude))
        return false;
      ++i;
    } else if (a == "--nvfp4-global-scale" && has_value) {
      if (v == "auto")
        o.auto_g = true;
      else if (!parse_number(v, o.g) || !(o.g > 0) || !std::isfinite(o.g))
        return false;
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string json, table;
  table += fmt::format(
      "rows {} per data kind, seed {}, r {}, d_r {}, amplitude {}, nvfp4 global scale {}\n\n",
      o.rows, o.seed, kR, kDr, o.amplitude, o.auto_g ? "max|x|/2688" : fmt::format("{}", o.g));
  table +=
      "| data | format | bytes/token | rel. L2 error | max abs err / max abs x (worst row) | "
      "cosine (worst row) | cosine (mean) |\n|---|---|---:|---:|---:|---:|---:|\n";
  for (Kind kind : kKinds) {
    const std::vector<float> x = make_rows(kind, o);
    float g = o.g;
    if (o.auto_g) {
      float amax = 0;
      for (size_t i = 0; i < x.size(); ++i)
        if (int(i % (kR + kDr)) < kR) amax = std::max(amax, std::fabs(x[i]));
      g = amax > 0 ? amax / (kE2M1Max * kFp8E4M3Max) : kNvfp4DefaultGlobalScale;
    }
    for (KvCacheDtype d :
         {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3, KvCacheDtype::kINT8, KvCacheDtype::kNVFP4}) {
      const Stats s = measure(d, x, o, g);
      const int64_t bytes = kv_bytes_per_token(d, kR, kDr);
      table +=
          fmt::format("| {} | {} | {} | {:.3e} | {:.3e} | {:.7f} | {:.7f} |\n", kind_name(kind),
                      kv_cache_dtype_name(d), bytes, s.rel_l2, s.max_ratio, s.cos_min, s.cos_mean);
      json += fmt::format(
          "{}{{\"data\":\"{}\",\"format\":\"{}\",\"bytes_per_token\":{},\"rel_l2\":{:.6e},"
          "\"max_abs_err_over_max_abs\":{:.6e},\"cosine_min\":{:.9f},\"cosine_mean\":{:.9f}{}}}",
          json.empty() ? "" : ",", kind_name(kind), kv_cache_dtype_name(d), bytes, s.rel_l2,
          s.max_ratio, s.cos_min, s.cos_mean,
          d == KvCacheDtype::kNVFP4 ? fmt::format(",\"nvfp4_global_scale\":{}", g) : "");
    }
  }
  if (o.json)
    fmt::print(
        "{{\"rows\":{},\"seed\":{},\"r\":{},\"d_r\":{},\"amplitude\":{},\"results\":[{}]}}\n",
        o.rows, o.seed, kR, kDr, o.amplitude, json);
  else
    fmt::print("{}", table);
  return 0;
}
