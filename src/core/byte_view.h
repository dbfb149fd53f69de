// ByteView: a read-only window into a buffer that can only be made inside it. The one way from a
// file image (a mapping, a fuzz input) to the bytes of a tensor (docs/RELIABILITY.md §Checklist
// G3: a view made from (base, size, offset, length) that checks it lies inside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "core/checked_math.h"

namespace mla {

class ByteView {
 public:
  ByteView() = default;

  // The view [base + offset, base + offset + length) of the buffer [base, base + size), or
  // nullopt when it would reach outside (overflow included). A zero-length view anywhere inside
  // (offset <= size) is valid; its data() may be one past the buffer's end and must not be
  // dereferenced.
  static std::optional<ByteView> make(const uint8_t* base, uint64_t size, uint64_t offset,
                                      uint64_t length) {
    if (base == nullptr && size != 0) return std::nullopt;
    if (!range_inside(offset, length, size)) return std::nullopt;
    if (base == nullptr) return ByteView();
    return ByteView(base + offset, length);
  }

  // A sub-window of this view, checked the same way.
  std::optional<ByteView> sub(uint64_t offset, uint64_t length) const {
    return make(data_, size_, offset, length);
  }

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const uint8_t> span() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  ByteView(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace mla
