// Helpers for the GGUF tests: a byte-level image builder (every field under the test's control,
// so that each validation rule can be broken alone) and a writer shortcut.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf.h"
#include "safetensors_test_util.h"

namespace mla::testing_io {

using GgufMeta = std::map<std::string, GgufValue, std::less<>>;

// Appends little-endian fields; the GGUF structures are spelled out by the helpers below.
class GgufImage {
 public:
  std::string bytes;

  GgufImage& raw(std::string_view s) {
    bytes.append(s);
    return *this;
  }
  template <typename T>
  GgufImage& le(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) bytes.push_back(char(uint8_t(uint64_t(v) >> (8 * i))));
    return *this;
  }
  GgufImage& u8(uint8_t v) { return le(v); }
  GgufImage& u32(uint32_t v) { return le(v); }
  GgufImage& u64(uint64_t v) { return le(v); }
  GgufImage& str(std::string_view s) { return u64(s.size()).raw(s); }

  // magic, version, tensor count, metadata count.
  GgufImage& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufImage& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufImage& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  // ne innermost first, as in the file.
  GgufImage& tensor(std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type,
                    uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  GgufImage& pad(size_t align = 32) {
    bytes.append((align - bytes.size() % align) % align, '\0');
    return *this;
  }
  GgufImage& zeros(size_t n) {
    bytes.append(n, '\0');
    return *this;
  }
};

// Writes `tensors` with bytes from `data` (one entry per tensor; an empty entry: a pattern of the
// right size) and returns the finish() status.
inline Status write_gguf(const std::string& path, const GgufMeta& meta,
                         const std::vector<GgufWriter::Tensor>& tensors,
                         const std::vector<std::vector<uint8_t>>& data = {},
                         uint32_t alignment = 32) {
  Result<std::unique_ptr<GgufWriter>> w = GgufWriter::begin(path, meta, tensors, alignment);
  if (!w.ok()) return w.status();
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<uint8_t> bytes;
    if (i < data.size() && !data[i].empty()) {
      bytes = data[i];
    } else {
      // The size the writer expects, from the same rule the reader applies.
      const DTypeBlock b = dtype_block(tensors[i].dtype);
      int64_t numel = 1;
      for (int64_t d : tensors[i].shape) numel *= d;
      bytes.resize(size_t(numel / b.elems * b.bytes));
      for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = uint8_t(k * 7 + i);
    }
    Status s = (*w)->write_tensor(tensors[i].name, bytes);
    if (!s.ok()) return s;
  }
  return (*w)->finish();
}

}  // namespace mla::testing_io
