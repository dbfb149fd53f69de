// Internal to mla_io: validation of a whole safetensors image (length prefix, JSON header, layout
// of the data section) held in memory, and the checked size arithmetic shared with the writer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "mla/status.h"

namespace mla::io_detail {

struct ParsedSafetensors {
  uint64_t header_size = 0;         // N
  std::vector<TensorInfo> tensors;  // data == nullptr; ascending (byte_offset, byte_size, name)
  std::map<std::string, std::string> metadata;
};

// Checks every rule of docs/RELIABILITY.md §Checklist R1-R15 on the file image bytes[0, size) and
// returns the tensor table. Reads nothing outside [bytes, bytes + size) and allocates at most in
// proportion to the header actually present. `path` only labels the error messages.
Result<ParsedSafetensors> parse_safetensors(const std::string& path, const uint8_t* bytes,
                                            uint64_t size);

struct TensorSize {
  int64_t numel = 0;
  uint64_t bytes = 0;
};
// numel and numel * dtype_bits / 8 with every product checked: dims must be >= 0, the product of
// the non-zero dims must fit in int64 (so strides never overflow even for zero-size tensors) and
// numel * bits must be a whole number of bytes. The error is invalid_argument with a message
// fragment ("shape [3] of F4 holds 12 bits, not a whole number of bytes") for the caller to prefix.
Result<TensorSize> tensor_size(DType dtype, const std::vector<int64_t>& shape);

// "[4, 8]"; "[]" for rank 0.
std::string shape_string(const std::vector<int64_t>& shape);
// The element count of a shape (0 when a dim is 0), invalid_argument naming the shape for a
// negative dim or a count past 2^63 - 1. Shared by the safetensors and GGUF size rules.
Result<int64_t> shape_numel(const std::vector<int64_t>& shape);

// `s` in double quotes, with quotes, backslashes and control bytes escaped and the text cut to
// about `max_bytes`, so that a hostile name cannot break or flood a one-line error message.
// escape_non_ascii also escapes bytes >= 0x80 (for text not known to be valid UTF-8).
std::string quote_text(std::string_view s, bool escape_non_ascii = false, size_t max_bytes = 200);

}  // namespace mla::io_detail
