// Files exchanged with llama.cpp's `gguf` Python package (pinned gguf==0.19.0): the goldens it
// wrote (tests/data/gguf, made by make_gguf_golden.py) read here, and the file that
// tests/e2e/gguf_interop.py reads with it: written here with GgufWriter when MLA_GGUF_INTEROP_OUT
// names an output path (skipped otherwise), with `<path>.json` beside it saying what it holds.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
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

nlohmann::json load_golden_json() {
  std::ifstream in(std::string(MLA_TEST_DATA_DIR) + "/gguf/golden.json");
  return nlohmann::json::parse(in);
}

std::string hex(const TensorInfo& t) {
  return hex(std::vector<uint8_t>(t.data, t.data + t.byte_size));
}

void expect_tensor_matches(const TensorInfo& t, const nlohmann::json& want) {
  SCOPED_TRACE(t.name);
  EXPECT_EQ(dtype_name(t.dtype), want["type"].get<std::string>());
  EXPECT_EQ(t.shape, want["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(t.byte_size, want["byte_size"].get<uint64_t>());
  EXPECT_EQ(hex(t), want["hex"].get<std::string>());
  const std::vector<double> values = want["values"].get<std::vector<double>>();
  if (t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kI32) {
    ASSERT_EQ(uint64_t(t.numel), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      double got;
      if (t.dtype == DType::kF32) {
        float f;
        std::memcpy(&f, t.data + 4 * i, 4);
        got = f;
      } else if (t.dtype == DType::kF16) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        got = f16_to_f32(h);
      } else {
        int32_t v;
        std::memcpy(&v, t.data + 4 * i, 4);
        got = v;
      }
      EXPECT_EQ(got, values[i]) << "element " << i;
    }
  }
}

TEST(GgufGolden, ReadsFileWrittenByGgufPy) {
  const nlohmann::json want = load_golden_json();
  const std::string path = std::string(MLA_TEST_DATA_DIR) + "/gguf/golden.gguf";
  Result<GgufFile> f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  ASSERT_EQ(f->metadata().size(), want["metadata"].size());
  for (const auto& [key, w] : want["metadata"].items()) {
    SCOPED_TRACE(key);
    const GgufValue* v = f->meta(key);
    ASSERT_NE(v, nullptr);
    const std::string type = w["type"].get<std::string>();
    const nlohmann::json& value = w["value"];
    if (type == "array") {
      ASSERT_TRUE(v->is_array());
      const std::string et = w["elem_type"].get<std::string>();
      if (et == "string") {
        EXPECT_EQ(v->elem_type, GgufType::kString);
        EXPECT_EQ(v->strings, value.get<std::vector<std::string>>());
      } else if (et == "f32" || et == "f64") {
        ASSERT_EQ(v->floats.size(), value.size());
        for (size_t i = 0; i < value.size(); ++i)
          EXPECT_EQ(v->floats[i],
                    et == "f32" ? double(value[i].get<float>()) : value[i].get<double>());
      } else {
        std::vector<int64_t> ints;
        for (const auto& x : value)
          ints.push_back(x.is_boolean() ? x.get<bool>() : x.get<int64_t>());
        EXPECT_EQ(v->ints, ints);
      }
    } else if (type == "string") {
      EXPECT_EQ(v->type, GgufType::kString);
      EXPECT_EQ(v->s, value.get<std::string>());
    } else if (type == "f32") {
      EXPECT_EQ(v->type, GgufType::kF32);
      EXPECT_EQ(v->f, double(value.get<float>()));
    } else if (type == "f64") {
      EXPECT_EQ(v->type, GgufType::kF64);
      EXPECT_EQ(v->f, value.get<double>());
    } else if (type == "bool") {
      EXPECT_EQ(v->type, GgufType::kBool);
      EXPECT_EQ(v->i, value.get<bool>() ? 1 : 0);
    } else {
      EXPECT_EQ(v->i, value.get<int64_t>());
    }
  }
  ASSERT_EQ(f->tensors().size(), want["tensors"].size());
  for (size_t i = 0; i < f->tensors().size(); ++i)
    expect_tensor_matches(f->tensors()[i], want["tensors"][i]);
}

TEST(GgufGolden, ReadsSplitSetWrittenByGgufPy) {
  const nlohmann::json want = load_golden_json()["split"];
  const std::string dir = std::string(MLA_TEST_DATA_DIR) + "/gguf/";
  Result<GgufSet> s = GgufSet::open(dir + want["files"][1].get<std::string>());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->files().size(), 2u);
  EXPECT_EQ(s->first().path(), dir + want["files"][0].get<std::string>());
  for (const nlohmann::json& t : want["tensors"]) {
    const TensorInfo* info = s->find(t["name"].get<std::string>());
    ASSERT_NE(info, nullptr);
    expect_tensor_matches(*info, t);
  }
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
