// Internal to mla_io: validation of a whole GGUF image held in memory (the header, the metadata,
// the tensor infos and the layout of the data section), and the ggml type table and size rule
// shared by the reader, the writer and the fuzz target.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/safetensors_header.h"  // TensorSize, shape_string, quote_text
#include "mla/status.h"

namespace mla::io_detail {

// "GGUF" as the file's first four bytes.
inline constexpr uint8_t kGgufMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr uint32_t kGgufDefaultAlignment = 32;

struct ParsedGguf {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t header_end = 0;   // the first byte after the last tensor info
  uint64_t data_offset = 0;  // header_end rounded up to the alignment
  // In file order; shape row-major (ne reversed); data == nullptr; byte_offset from data_offset.
  std::vector<TensorInfo> tensors;
  std::vector<uint32_t> by_name;  // indices into tensors, sorted by name
  std::map<std::string, GgufValue, std::less<>> metadata;
};

// Checks the whole image bytes[0, size) (every rule listed in docs/GGUF.md) and returns its
// contents. Reads nothing outside the image; allocates at most in proportion to the bytes
// actually present. `path` only labels the error messages.
Result<ParsedGguf> parse_gguf(const std::string& path, const uint8_t* bytes, uint64_t size);

// A ggml type code, readable by mla or not: its name and storage block (gguf_types.cc).
struct GgmlTypeInfo {
  uint32_t code = 0;
  std::string_view name;
  int block_elems = 0;
  int block_bytes = 0;
};
const GgmlTypeInfo* ggml_type_info(uint32_t code);
// The ggml code of a dtype GGUF can hold for mla; nullopt for the others (U8, Bool, FP8, E2M1).
std::optional<uint32_t> ggml_code_of(DType t);

// numel and byte size of a tensor of `dtype` with row-major `shape`: dims >= 0, the product of
// the non-zero dims fits in int64, the innermost dim a whole number of the dtype's blocks, and
// the byte size fits in uint64. The error is invalid_argument with a message fragment for the
// caller to prefix with the path and tensor.
Result<TensorSize> gguf_tensor_size(DType dtype, const std::vector<int64_t>& shape);

// "u32", "string", "array", ...; "type N" for a code outside the enum.
std::string gguf_type_name(GgufType t);
// Bytes of one scalar of type t on disk; 0 for kString, kArray and unknown codes.
int gguf_scalar_bytes(GgufType t);
bool gguf_is_integer(GgufType t);  // the eight integer types and bool

// RFC 3629 UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool gguf_valid_utf8(std::string_view s);

}  // namespace mla::io_detail
