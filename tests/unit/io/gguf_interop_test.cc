// The file that tests/e2e/gguf_interop.py reads with llama.cpp's `gguf` Python package: written
// here with GgufWriter when MLA_GGUF_INTEROP_OUT names an output path (skipped otherwise), with
// `<path>.json` beside it saying what the file holds.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "io/gguf.h"
#include "io/gguf_header.h"

namespace mla {
namespace {

using testing_io::GgufMeta;

std::string hex(const std::vector<uint8_t>& b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s += kDigits[x >> 4];
    s += kDigits[x & 15];
  }
  return s;
}

nlohmann::json value_json(const GgufValue& v) {
  nlohmann::json j;
  j["type"] = io_detail::gguf_type_name(v.type);
  const GgufType t = v.is_array() ? v.elem_type : v.type;
  if (v.is_array()) j["elem_type"] = io_detail::gguf_type_name(t);
  const auto one = [&](int64_t i, double f, const std::string& s) -> nlohmann::json {
    if (t == GgufType::kString) return s;
    if (t == GgufType::kBool) return i != 0;
    if (t == GgufType::kF32 || t == GgufType::kF64) return f;
    return i;
  };
  if (!v.is_array()) {
    j["value"] = one(v.i, v.f, v.s);
  } else {
    nlohmann::json a = nlohmann::json::array();
    const size_t n = t == GgufType::kString                         ? v.strings.size()
                     : (t == GgufType::kF32 || t == GgufType::kF64) ? v.floats.size()
                                                                    : v.ints.size();
    for (size_t k = 0; k < n; ++k)
      a.push_back(one(k < v.ints.size() ? v.ints[k] : 0, k < v.floats.size() ? v.floats[k] : 0,
                      k < v.strings.size() ? v.strings[k] : std::string()));
    j["value"] = a;
  }
  return j;
}

TEST(GgufInterop, WriteForPython) {
  const char* out = ::getenv("MLA_GGUF_INTEROP_OUT");
  if (out == nullptr || *out == '\0') GTEST_SKIP() << "MLA_GGUF_INTEROP_OUT is not set";
  const std::string path = out;
  using T = GgufType;
  GgufMeta meta;
  meta["general.architecture"] = GgufValue::of_string("deepseek2");
  meta["general.name"] = GgufValue::of_string("mla interop ✓ 深");
  meta["m.u8"] = GgufValue::of_int(T::kU8, 250);
  meta["m.i8"] = GgufValue::of_int(T::kI8, -7);
  meta["m.u16"] = GgufValue::of_int(T::kU16, 65000);
  meta["m.i16"] = GgufValue::of_int(T::kI16, -32000);
  meta["m.u32"] = GgufValue::of_int(T::kU32, 4000000001);
  meta["m.i32"] = GgufValue::of_int(T::kI32, -123456789);
  meta["m.u64"] = GgufValue::of_int(T::kU64, int64_t(1) << 60);
  meta["m.i64"] = GgufValue::of_int(T::kI64, -(int64_t(1) << 61));
  meta["m.f32"] = GgufValue::of_float(T::kF32, 0.1);  // rounds to the nearest float
  meta["m.f64"] = GgufValue::of_float(T::kF64, 2.5e-300);
  meta["m.bool"] = GgufValue::of_int(T::kBool, 1);
  meta["tokenizer.ggml.tokens"] = GgufValue::of_strings({"<s>", "", "Ġworld", "深度", "\n\t"});
  meta["tokenizer.ggml.merges"] = GgufValue::of_strings({"Ġ w", "o r"});
  meta["tokenizer.ggml.token_type"] = GgufValue::of_ints(T::kI32, {3, 1, 1, 1, 6});
  meta["a.u8"] = GgufValue::of_ints(T::kU8, {1, 2, 255});
  meta["a.u64"] = GgufValue::of_ints(T::kU64, {0, int64_t(1) << 50});
  meta["a.bool"] = GgufValue::of_ints(T::kBool, {0, 1});
  meta["a.f32"] = GgufValue::of_floats(T::kF32, {1.5, -0.25});
  meta["a.f64"] = GgufValue::of_floats(T::kF64, {1e100, -3.0});
  const uint32_t alignment = 64;

  const std::vector<GgufWriter::Tensor> tensors = {
      {"token_embd.weight", DType::kF32, {3, 4}},
      {"blk.0.f16", DType::kF16, {2, 3}},
      {"blk.0.bf16", DType::kBF16, {5}},
      {"blk.0.q8_0", DType::kQ8_0, {2, 64}},
      {"blk.0.q4_k", DType::kQ4_K, {1, 256}},
      {"blk.0.q6_k", DType::kQ6_K, {2, 256}},
      {"blk.0.i32", DType::kI32, {2, 1, 3}},
      {"blk.0.f64", DType::kF64, {2}},
      {"blk.0.i8", DType::kI8, {3}},
      {"blk.0.i16", DType::kI16, {1, 1, 1, 2}},
      {"blk.0.i64", DType::kI64, {2}},
  };
  std::vector<std::vector<uint8_t>> data;
  nlohmann::json tj = nlohmann::json::array();
  for (size_t i = 0; i < tensors.size(); ++i) {
    Result<io_detail::TensorSize> size =
        io_detail::gguf_tensor_size(tensors[i].dtype, tensors[i].shape);
    ASSERT_TRUE(size.ok());
    std::vector<uint8_t> b(size->bytes);
    // Bytes that are finite values in every float type: the reader checks bytes, not meaning.
    for (size_t k = 0; k < b.size(); ++k) b[k] = uint8_t((k * 13 + i * 5) % 61);
    tj.push_back({{"name", tensors[i].name},
                  {"type", std::string(dtype_name(tensors[i].dtype))},
                  {"shape", tensors[i].shape},
                  {"hex", hex(b)}});
    data.push_back(std::move(b));
  }
  ASSERT_TRUE(testing_io::write_gguf(path, meta, tensors, data, alignment).ok());

  nlohmann::json j;
  j["alignment"] = alignment;
  j["metadata"] = nlohmann::json::object();
  for (const auto& [k, v] : meta) j["metadata"][k] = value_json(v);
  j["metadata"]["general.alignment"] = {{"type", "u32"}, {"value", alignment}};
  j["tensors"] = tj;
  std::ofstream(path + ".json") << j.dump(1) << "\n";
}

}  // namespace
}  // namespace mla
