// Shared by the fuzz targets: a reader that splits a fuzz input into typed fields (always
// succeeds; past the end it yields zeros), and the fixed tiny tokenizers the targets encode with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return uint16_t(u8() | (uint16_t(u8()) << 8)); }
  uint32_t u32() { return uint32_t(u16()) | (uint32_t(u16()) << 16); }
  // A value in [lo, hi] (hi >= lo).
  int64_t range(int64_t lo, int64_t hi) {
    const uint64_t span = uint64_t(hi - lo) + 1;
    return lo + int64_t((span > 0xFFFF ? u32() : u16()) % span);
  }
  // Up to max_len bytes: a length byte, then that many (or what is left).
  std::string str(size_t max_len) {
    size_t n = u8();
    if (n > max_len) n = max_len;
    if (n > remaining()) n = remaining();
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string_view rest() {
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), remaining());
    pos_ = size_;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The tokenizer files `mla make-tiny` writes for `family` ("v3", "kimi-k2", ...), loaded once
// per process with BOS/EOS set as load_tokenizer_dir does. A failure aborts: it is a bug.
const tok::LoadedTokenizer& tiny_tokenizer(std::string_view family);

// Strict UTF-8 validity (tok::utf8_valid_prefix covers the whole string).
bool valid_utf8(std::string_view s);

}  // namespace mla::fuzz
