// The ggml type table, the GGUF size rule and the small helpers the reader, the writer and the
// fuzz target share.
#include <fmt/format.h>

#include <iterator>

#include "core/checked_math.h"
#include "io/gguf_header.h"

namespace mla::io_detail {
namespace {

// Every code llama.cpp's gguf package (0.19.0) defines, with its block: the reader names the
// type of a tensor it cannot use instead of printing a bare number.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t code) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.code == code) return &t;
  return nullptr;
}

Result<TensorSize> gguf_tensor_size(DType dtype, const std::vector<int64_t>& shape) {
  MLA_ASSIGN_OR_RETURN(const int64_t numel, shape_numel(shape));
  const DTypeBlock block = dtype_block(dtype);
  if (block.elems <= 0 || block.bytes <= 0)
    return invalid_argument(fmt::format("{} has no byte size", dtype_name(dtype)));
  const int64_t inner = shape.empty() ? 1 : shape.back();
  if (inner % block.elems != 0)
    return invalid_argument(fmt::format(
        "shape {} of {}: the innermost dim {} (ne[0]) is not a multiple of the {}-value block",
        shape_string(shape), dtype_name(dtype), inner, block.elems));
  const std::optional<uint64_t> bytes =
      checked_mul(uint64_t(numel / block.elems), uint64_t(block.bytes));
  if (!bytes)
    return invalid_argument(fmt::format("shape {} of {} needs more than 2^64-1 bytes",
                                        shape_string(shape), dtype_name(dtype)));
  return TensorSize{numel, *bytes};
}

std::string gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                "i32", "f32", "bool", "string", "array",
                                                "u64", "i64", "f64"};
  const uint32_t code = uint32_t(t);
  if (code < std::size(kNames)) return std::string(kNames[code]);
  return fmt::format("type {}", code);
}

int gguf_scalar_bytes(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool gguf_is_integer(GgufType t) {
  return gguf_scalar_bytes(t) > 0 && t != GgufType::kF32 && t != GgufType::kF64;
}

bool gguf_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return false;
    }
    if (s.size() - i <= size_t(extra)) return false;
    for (int k = 1; k <= extra; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + size_t(k)]);
      if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return false;
    }
    i += size_t(extra) + 1;
  }
  return true;
}

}  // namespace mla::io_detail
