#include "model/weight_requant.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "io/mapped_file.h"
#include "model/model_impl.h"

namespace mla {
namespace {

// Row i of w as FP32, [in] (block-scaled: code · weight_scale_inv, one FP32 product).
void real_row(const LinearWeight& w, int64_t i, float* dst) {
  if (!linear_block_scaled(w.dtype)) {
    widen_elements(w.dtype, w.data, i * w.in, w.in, dst);
    return;
  }
  static const auto fp8 = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = fp8_e4m3_to_f32(uint8_t(b));
    return t;
  }();
  const int64_t cols = (w.in + w.block_cols - 1) / w.block_cols;
  const uint8_t* codes = w.data + i * w.in;
  for (int64_t c0 = 0; c0 < w.in; c0 += w.block_cols) {
    float s;
    std::memcpy(&s, w.scale_inv + 4 * ((i / w.block_rows) * cols + c0 / w.block_cols), 4);
    const int64_t c1 = std::min(w.in, c0 + w.block_cols);
    if (w.dtype == DType::kI8) {
      for (int64_t j = c0; j < c1; ++j) dst[j] = float(int8_t(codes[j])) * s;
    } else {
      for (int64_t j = c0; j < c1; ++j) dst[j] = fp8[codes[j]] * s;
    }
  }
}

// rows [r0, r1) of w as FP32, [r1 - r0, in].
void real_rows(const LinearWeight& w, int64_t r0, int64_t r1, float* dst) {
  for (int64_t i = r0; i < r1; ++i) real_row(w, i, dst + (i - r0) * w.in);
}

// w's values as stored, rounded up to 64 bytes (where repack_weight puts the scales).
size_t values_bytes(const LinearWeight& w) {
  return (size_t(dtype_bytes(w.dtype, w.in) * w.out) + 63) / 64 * 64;
}

// The pages of w's values read in one request, not a fault per readahead (a mapped file's).
Status read_in_values(const LinearWeight& w, const std::string& what) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t a = uintptr_t(w.data) / page * page;
  return io_detail::populate_mapping(
      what, reinterpret_cast<void*>(a),
      uintptr_t(w.data) + uintptr_t(w.out * dtype_bytes(w.dtype, w.in)) - a);
}

// The whole pages of w's first `bytes` bytes of values dropped from the process (advice only):
// advised cold first, so the page cache gives them up before pages still read.
void drop_values(const LinearWeight& w, int64_t bytes) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (uintptr_t(w.data) + page - 1) / page * page;
  const uintptr_t b = (uintptr_t(w.data) + uintptr_t(bytes)) / page * page;
  if (b > a) {
    (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_COLD);
    (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  }
}

}  // namespace

Result<RequantizedWeight> requantize_weight(const LinearWeight& w, DType to, ThreadPool& pool,
                                            const std::string& what) {
  MLA_RETURN_IF_ERROR(validate(w));
  if (to != DType::kBF16 && !linear_block_scaled(to))
    return invalid_argument(what + ": can be stored as bf16, fp8 or int8, not " +
                            std::string(dtype_name(to)));
  constexpr int64_t kB = kRequantBlock;
  RequantizedWeight r;
  const size_t n = size_t(w.out) * size_t(w.in);
  const int64_t block_rows = (w.out + kB - 1) / kB, block_cols = (w.in + kB - 1) / kB;
  MLA_ASSIGN_OR_RETURN(r.data,
                       AlignedBuffer<uint8_t>::allocate(n * size_t(dtype_bits(to) / 8), what));
  if (linear_block_scaled(to)) {
    MLA_ASSIGN_OR_RETURN(r.scales,
                         AlignedBuffer<float>::allocate(size_t(block_rows * block_cols), what));
  }
  // One task per 128 rows (an FP8 block row): [128, in] FP32 of scratch each.
  pool.parallel_for(block_rows, [&](int64_t b, int) {
    const int64_t r0 = b * kB, r1 = std::min(w.out, r0 + kB);
    std::vector<float> v(size_t((r1 - r0) * w.in));
    real_rows(w, r0, r1, v.data());
    if (to == DType::kBF16) {
      uint16_t* out = reinterpret_cast<uint16_t*>(r.data.data()) + r0 * w.in;
      for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
      return;
    }
    for (int64_t c = 0; c < block_cols; ++c) {
      const int64_t c0 = c * kB, c1 = std::min(w.in, c0 + kB);
      float amax = 0.0f;
      bool nan = false;
      for (int64_t i = 0; i < r1 - r0; ++i)
        for (int64_t j = c0; j < c1; ++j) {
          const float a = std::fabs(v[size_t(i * w.in + j)]);
          if (std::isfinite(a)) amax = std::max(amax, a);
          nan |= std::isnan(a);
        }
      const float code_max = to == DType::kI8 ? 127.0f : kFp8E4M3Max;
      // An all-zero block keeps scale 1 (codes 0), not 0 · anything.
      const float scale = amax > 0.0f ? amax / code_max : 1.0f;
      r.scales.data()[b * block_cols + c] =
          to == DType::kI8 && nan ? std::numeric_limits<float>::quiet_NaN() : scale;
      for (int64_t i = 0; i < r1 - r0; ++i)
        for (int64_t j = c0; j < c1; ++j) {
          const float q = v[size_t(i * w.in + j)] / scale;
          uint8_t& code = r.data.data()[(r0 + i) * w.in + j];
          if (to == DType::kF8E4M3) {
            code = f32_to_fp8_e4m3(q);
          } else {
            const float c8 = std::isnan(q) ? 0.0f : std::clamp(std::nearbyint(q), -127.0f, 127.0f);
            code = uint8_t(int8_t(c8));
          }
        }
    }
  });
  r.weight = w;
  r.weight.dtype = to;
  r.weight.data = r.data.data();
  r.weight.scale_inv = nullptr;
  if (linear_block_scaled(to)) {
    r.weight.scale_inv = reinterpret_cast<const uint8_t*>(r.scales.data());
    r.weight.block_rows = r.weight.block_cols = kRequantBlock;
  }
  return r;
}

Result<WeightArena> WeightArena::allocate(size_t bytes, ThreadPool& pool, const std::string& what) {
  constexpr size_t kHuge = size_t(2) << 20;
  WeightArena a;
  if (bytes == 0) return a;
  a.map_size_ = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;
  a.map_ = mmap(nullptr, a.map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a.map_ == MAP_FAILED) {
    a.map_ = nullptr;
    return out_of_memory("cannot map " + std::to_string(bytes) + " bytes for " + what);
  }
  a.data_ = reinterpret_cast<uint8_t*>((uintptr_t(a.map_) + kHuge - 1) / kHuge * kHuge);
  a.size_ = bytes;
  const size_t huge_bytes = (bytes + kHuge - 1) / kHuge * kHuge;
  (void)madvise(a.data_, huge_bytes, MADV_HUGEPAGE);  // advice only
  // Every page taken now, before the repack reads the file: faulted in during the repack, with
  // the file's pages filling the page cache, 2-21% of the 27-layer FP8 model's 15.7 GB fell back
  // to 4 KiB pages on a 24 GB host (docs/BENCHMARKS.md "Repacked weights in anonymous memory").
  // In slices over the pool: the kernel zeroes each page on one core, at a fraction of the
  // machine's write bandwidth.
  constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE, Linux 5.14
  constexpr size_t kSlice = size_t(64) << 20;
  std::atomic<int> err{0};
  pool.parallel_for(int64_t((huge_bytes + kSlice - 1) / kSlice), [&](int64_t i, int) {
    const size_t at = size_t(i) * kSlice;
    if (madvise(a.data_ + at, std::min(kSlice, huge_bytes - at), kMadvPopulateWrite) != 0 &&
        errno != EINVAL && errno != ENOSYS)
      err = errno;
  });
  if (err != 0)
    return out_of_memory("cannot take " + std::to_string(bytes) + " bytes of memory for " + what +
                         " (" + io_detail::errno_text(err) + ")");
  return a;
}

int64_t WeightArena::huge_page_bytes() const {
  if (!data_) return 0;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  const uintptr_t lo = uintptr_t(data_), hi = lo + size_;
  int64_t kib = 0;
  bool inside = false, seen = false;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long a, b, v;  // a mapping's header "a-b perms ...", then its "Field: v kB" lines
    if (std::sscanf(line, "%lx-%lx ", &a, &b) == 2) {  // no field name is hex digits then '-'
      inside = uintptr_t(a) < hi && uintptr_t(b) > lo;
      seen |= inside;
    } else if (inside && std::sscanf(line, "AnonHugePages: %lu kB", &v) == 1) {
      kib += int64_t(v);
    }
  }
  std::fclose(f);
  return seen ? kib * 1024 : -1;
}

WeightArena::WeightArena(WeightArena&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      size_(std::exchange(o.size_, 0)),
      data_(std::exchange(o.data_, nullptr)) {}

WeightArena& WeightArena::operator=(WeightArena&& o) noexcept {
  if (this != &o) {
    if (map_) munmap(map_, map_size_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    size_ = std::exchange(o.size_, 0);
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

WeightArena::~WeightArena() {
  if (map_) munmap(map_, map_size_);
}

size_t repacked_weight_bytes(const LinearWeight& w) {
  return (values_bytes(w) + size_t(linear_scale_grid_bytes(w)) + 63) / 64 * 64;
}

Result<LinearWeight> repack_weight(const LinearWeight& w, DType to, ThreadPool& pool, uint8_t* dst,
                                   const std::string& what, bool drop_source) {
  MLA_RETURN_IF_ERROR(validate(w));
  if (!dtype_is_row_interleaved(to) || repacked_dtype(w.dtype) != to)
    return invalid_argument(what + ": no repacked layout of " + std::string(dtype_name(w.dtype)) +
                            " as " + std::string(dtype_name(to)));
  if (!repack_fits(to, w.out, w.in))
    return invalid_argument(what + ": " + std::string(dtype_name(to)) +
                            " needs whole groups of 16 rows of " +
                            std::to_string(r16_row_multiple(to)) + " values, not [" +
                            std::to_string(w.out) + ", " + std::to_string(w.in) + "]");
  LinearWeight r = w;
  r.dtype = to;
  r.data = dst;
  if (Status s = validate(r); !s.ok()) return invalid_argument(what + ": " + s.message());
  const int64_t group_bytes = kR16Rows * dtype_bytes(w.dtype, w.in);
  if (drop_source) MLA_RETURN_IF_ERROR(read_in_values(w, what));
  // Tasks of 16 groups (256 rows): a V2-Lite expert is 88 groups.
  constexpr int64_t kGroupsPerTask = 16;
  const int64_t groups = w.out / kR16Rows;
  pool.parallel_for((groups + kGroupsPerTask - 1) / kGroupsPerTask, [&](int64_t t, int) {
    const int64_t g0 = t * kGroupsPerTask, g1 = std::min(groups, g0 + kGroupsPerTask);
    repack_rows(to, w.data + g0 * group_bytes, (g1 - g0) * kR16Rows, w.in, dst + g0 * group_bytes);
  });
  if (w.scale_inv) {
    float* scales = reinterpret_cast<float*>(dst + values_bytes(w));
    std::memcpy(scales, w.scale_inv, size_t(linear_scale_grid_bytes(w)));
    r.scale_inv = reinterpret_cast<const uint8_t*>(scales);
  }
  if (drop_source) drop_values(w, groups * group_bytes);
  return r;
}

size_t q8_0_weight_bytes(const LinearWeight& w) {
  return (size_t(dtype_bytes(DType::kQ8_0, w.in) * w.out) + 63) / 64 * 64;
}

Result<LinearWeight> requantize_q8_0(const LinearWeight& w, DType to, ThreadPool& pool,
                                     uint8_t* dst, const std::string& what, bool drop_source) {
  MLA_RETURN_IF_ERROR(validate(w));
  if (dtype_is_ggml_block(w.dtype) || dtype_is_row_interleaved(w.dtype))
    return invalid_argument(what + ": " + std::string(dtype_name(w.dtype)) +
                            " is not requantised as Q8_0 (only BF16, F16, F32 and block-scaled "
                            "FP8 / INT8 weights are)");
  if (w.in % 32 != 0)
    return invalid_argument(what + ": Q8_0 needs rows of whole blocks of 32 values, not " +
                            std::to_string(w.in));
  if (to != DType::kQ8_0 && !(to == DType::kQ8_0R16 && repack_fits(to, w.out, w.in)))
    return invalid_argument(what + ": cannot be requantised as " + std::string(dtype_name(to)) +
                            " with shape [" + std::to_string(w.out) + ", " + std::to_string(w.in) +
                            "]");
  if (drop_source) MLA_RETURN_IF_ERROR(read_in_values(w, what));
  // Tasks of 16 rows (one kQ8_0R16 group): [16, in] FP32 and [16, in / 32 · 34] of scratch.
  const int64_t row_bytes = dtype_bytes(DType::kQ8_0, w.in);
  int64_t bad_row = -1;  // the first row quantize_row refused, and why
  std::string bad;
  std::mutex bad_mu;
  pool.parallel_for((w.out + kR16Rows - 1) / kR16Rows, [&](int64_t g, int) {
    const int64_t r0 = g * kR16Rows, r1 = std::min(w.out, r0 + kR16Rows);
    std::vector<float> v(size_t(w.in));
    std::vector<uint8_t> rows(to == DType::kQ8_0R16 ? size_t(kR16Rows * row_bytes) : 0);
    uint8_t* q = to == DType::kQ8_0R16 ? rows.data() : dst + r0 * row_bytes;
    for (int64_t i = r0; i < r1; ++i) {
      real_row(w, i, v.data());
      if (Status s = quantize_row(DType::kQ8_0, v, q + (i - r0) * row_bytes); !s.ok()) {
        std::lock_guard lock(bad_mu);
        if (bad_row < 0 || i < bad_row) {
          bad_row = i;
          bad = s.message();
        }
        return;
      }
    }
    if (to == DType::kQ8_0R16) repack_q8_0_r16(q, r1 - r0, w.in, dst + r0 * row_bytes);
  });
  if (bad_row >= 0) return invalid_argument(what + ": row " + std::to_string(bad_row) + ": " + bad);
  if (drop_source) drop_values(w, w.out * dtype_bytes(w.dtype, w.in));
  LinearWeight r;
  r.dtype = to;
  r.data = dst;
  r.out = w.out;
  r.in = w.in;
  return r;
}

}  // namespace mla
