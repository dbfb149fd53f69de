// The one set of checked size helpers (docs/RELIABILITY.md §Checklist G1): every size, count or
// offset derived from a file or a request goes through these instead of raw `*`, `+` or rounding,
// so that a hostile number gives an error instead of a wrapped, too-small allocation (the GGUF CVE
// class). Each returns std::nullopt on overflow or a bad argument; callers turn that into a Status
// that names the file and field. Header-only, constexpr, no allocation.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <utility>

// Marks a function whose unsigned arithmetic wraps on purpose (hashes, random-number mixers), for
// the fuzz build's unsigned-overflow checks (docs/RELIABILITY.md §Checklist S2); nothing elsewhere.
#if defined(__clang__)
#define MLA_WRAPS_ON_PURPOSE __attribute__((no_sanitize("unsigned-integer-overflow")))
#else
#define MLA_WRAPS_ON_PURPOSE
#endif

namespace mla {

// a · b, or nullopt when the exact product does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_mul(T a, T b) {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when the exact sum does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_add(T a, T b) {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a − b, or nullopt when the exact difference does not fit in T (for unsigned T: when b > a).
template <std::integral T>
constexpr std::optional<T> checked_sub(T a, T b) {
  T out{};
  if (__builtin_sub_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of every factor (1 for none), or nullopt as soon as a partial product overflows.
// A zero factor does not excuse an overflow among the others: a shape like [2^40, 2^40, 0] is
// rejected, so that strides computed from the non-zero dims stay representable.
template <std::integral T>
constexpr std::optional<T> checked_product(std::initializer_list<T> factors) {
  T acc = 1;
  bool zero = false;
  for (T f : factors) {
    if (f == 0) {
      zero = true;
      continue;
    }
    const std::optional<T> next = checked_mul(acc, f);
    if (!next) return std::nullopt;
    acc = *next;
  }
  return zero ? T{0} : acc;
}

// x rounded up to a multiple of `align` (align > 0; any value, not only powers of two), or
// nullopt when align <= 0, x < 0 or the rounded value does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_align_up(T x, T align) {
  if (align <= 0 || x < 0) return std::nullopt;
  const T rem = x % align;
  if (rem == 0) return x;
  return checked_add(x, T(align - rem));
}

// ceil(x / d) for x >= 0, d > 0; nullopt otherwise. Never overflows (no x + d − 1).
template <std::integral T>
constexpr std::optional<T> checked_div_ceil(T x, T d) {
  if (d <= 0 || x < 0) return std::nullopt;
  return T(x / d + (x % d != 0 ? 1 : 0));
}

// Converts between integer types, nullopt when the value does not fit (no silent truncation).
template <std::integral To, std::integral From>
constexpr std::optional<To> checked_cast(From v) {
  if (!std::in_range<To>(v)) return std::nullopt;
  return static_cast<To>(v);
}

// Whether [offset, offset + length) lies inside [0, size). Never overflows: a range that would
// wrap is outside. The test behind every view into a buffer read from a file.
constexpr bool range_inside(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// Whether `count` records of at least `min_record_bytes` each could fit in `bytes_left`: the
// check before a resize/reserve sized by a count read from a file, so that a lying count cannot
// allocate more than the input could ever describe. min_record_bytes == 0 is treated as 1.
constexpr bool count_fits(uint64_t count, uint64_t min_record_bytes, uint64_t bytes_left) {
  const uint64_t rec = min_record_bytes == 0 ? 1 : min_record_bytes;
  return count <= bytes_left / rec;
}

}  // namespace mla
