// AlignedBuffer<T>: an owning, 64-byte aligned array (cache-line and zmm aligned). Not a tensor:
// it carries no shape. Large allocations go through allocate(), which reports failure as a Status.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "mla/status.h"

namespace mla {

inline constexpr size_t kBufferAlignment = 64;

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "AlignedBuffer holds plain data");

 public:
  AlignedBuffer() = default;
  // Aborts on allocation failure (a bug: scratch sizes are bounded); for sizes that come from
  // outside use allocate().
  explicit AlignedBuffer(size_t n) {
    MLA_CHECK(reset(n), "cannot allocate {} elements of {} bytes", n, sizeof(T));
  }
  static Result<AlignedBuffer> allocate(size_t n, const std::string& what) {
    AlignedBuffer b;
    // Elements and element size, not their product: the product may be what overflowed.
    if (!b.reset(n))
      return out_of_memory("cannot allocate " + std::to_string(n) + " elements of " +
                           std::to_string(sizeof(T)) + " bytes for " + what);
    return b;
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(p_); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t size_bytes() const { return n_ * sizeof(T); }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

 private:
  bool reset(size_t n) {
    std::free(p_);
    p_ = nullptr;
    n_ = 0;
    if (n == 0) return true;
    if (n > (SIZE_MAX - kBufferAlignment) / sizeof(T)) return false;
    size_t bytes = (n * sizeof(T) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    p_ = static_cast<T*>(std::aligned_alloc(kBufferAlignment, bytes));
    if (!p_) return false;
    n_ = n;
    return true;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace mla
