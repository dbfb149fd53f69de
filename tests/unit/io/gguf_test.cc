// GGUF reader and writer: round trips of every metadata type and tensor dtype, writer errors,
// split sets. Rejections of bad files are in gguf_reject_test.cc; files exchanged with llama.cpp's
// `gguf` Python package in gguf_interop_test.cc.
#include "io/gguf.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gguf_test_util.h"

namespace mla {
namespace {

using testing_io::failed_with;
using testing_io::GgufMeta;
using testing_io::read_bytes;
using testing_io::TempDir;
using testing_io::write_gguf;
using Tensor = GgufWriter::Tensor;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 31 + seed);
  return v;
}

std::vector<uint8_t> tensor_bytes(const TensorInfo& t) {
  return std::vector<uint8_t>(t.data, t.data + t.byte_size);
}

// Metadata of every scalar type at its extremes, and arrays of every element type.
GgufMeta all_types_meta() {
  using T = GgufType;
  GgufMeta m;
  m["general.architecture"] = GgufValue::of_string("deepseek2");
  m["s.u8"] = GgufValue::of_int(T::kU8, 255);
  m["s.i8"] = GgufValue::of_int(T::kI8, -128);
  m["s.u16"] = GgufValue::of_int(T::kU16, 65535);
  m["s.i16"] = GgufValue::of_int(T::kI16, -32768);
  m["s.u32"] = GgufValue::of_int(T::kU32, 4294967295);
  m["s.i32"] = GgufValue::of_int(T::kI32, -2147483648LL);
  m["s.u64"] = GgufValue::of_int(T::kU64, INT64_MAX);
  m["s.i64"] = GgufValue::of_int(T::kI64, INT64_MIN);
  m["s.f32"] = GgufValue::of_float(T::kF32, -0.375);
  m["s.f64"] = GgufValue::of_float(T::kF64, 1e-300);
  m["s.bool"] = GgufValue::of_int(T::kBool, 1);
  m["s.string"] = GgufValue::of_string("ünïcode \"quoted\"");
  m["s.empty_string"] = GgufValue::of_string("");
  // Raw byte tokens are kept as bytes.
  m["a.strings"] = GgufValue::of_strings({"<s>", "", "Ġthe", std::string("\xff\x00z", 3)});
  m["a.u8"] = GgufValue::of_ints(T::kU8, {0, 255});
  m["a.i8"] = GgufValue::of_ints(T::kI8, {-128, 127});
  m["a.u16"] = GgufValue::of_ints(T::kU16, {0, 65535});
  m["a.i16"] = GgufValue::of_ints(T::kI16, {-32768, 32767});
  m["a.u32"] = GgufValue::of_ints(T::kU32, {0, 4294967295});
  m["a.i32"] = GgufValue::of_ints(T::kI32, {-2147483648LL, 2147483647});
  m["a.u64"] = GgufValue::of_ints(T::kU64, {0, INT64_MAX});
  m["a.i64"] = GgufValue::of_ints(T::kI64, {INT64_MIN, INT64_MAX});
  m["a.bool"] = GgufValue::of_ints(T::kBool, {1, 0, 1});
  m["a.f32"] = GgufValue::of_floats(T::kF32, {0.5, -2.25, 1e30});
  m["a.f64"] = GgufValue::of_floats(T::kF64, {3.141592653589793, -0.0, 1e300});
  m["a.empty"] = GgufValue::of_ints(T::kI32, {});
  return m;
}

void expect_same_value(const std::string& key, const GgufValue& want, const GgufValue& got) {
  SCOPED_TRACE(key);
  EXPECT_EQ(got.type, want.type);
  if (want.is_array()) {
    EXPECT_EQ(got.elem_type, want.elem_type);
    EXPECT_EQ(got.ints, want.ints);
    EXPECT_EQ(got.strings, want.strings);
    ASSERT_EQ(got.floats.size(), want.floats.size());
    for (size_t i = 0; i < want.floats.size(); ++i) {
      const double w =
          want.elem_type == GgufType::kF32 ? double(float(want.floats[i])) : want.floats[i];
      EXPECT_EQ(got.floats[i], w);
      EXPECT_EQ(std::signbit(got.floats[i]), std::signbit(w));
    }
  } else {
    EXPECT_EQ(got.i, want.i);
    EXPECT_EQ(got.s, want.s);
    EXPECT_EQ(got.f, want.type == GgufType::kF32 ? double(float(want.f)) : want.f);
  }
}

TEST(Gguf, RoundTripKeepsEveryMetadataType) {
  TempDir dir;
  const std::string path = dir.file("meta.gguf");
  const GgufMeta meta = all_types_meta();
  ASSERT_TRUE(write_gguf(path, meta, {}).ok());
  Result<GgufFile> f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_TRUE(f->tensors().empty());
  ASSERT_EQ(f->metadata().size(), meta.size());
  for (const auto& [k, v] : meta) {
    const GgufValue* got = f->meta(k);
    ASSERT_NE(got, nullptr) << k;
    expect_same_value(k, v, *got);
  }
  EXPECT_EQ(f->meta("absent"), nullptr);
  EXPECT_EQ(f->file_size() % 32, 0u);
  EXPECT_EQ(dir.entry_count(), 1u) << "the temp file must be renamed away";
}

struct DtypeCase {
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes;  // written out, not derived, so that the size rule itself is checked
  const char* ggml_name;
};

TEST(Gguf, RoundTripKeepsDtypesShapesBytesAndAlignment) {
  const std::vector<DtypeCase> cases = {
      {DType::kF32, {2, 3}, 24, "F32"},
      {DType::kF16, {5}, 10, "F16"},
      {DType::kBF16, {2, 1, 2}, 8, "BF16"},
      {DType::kF64, {3}, 24, "F64"},
      {DType::kI8, {7}, 7, "I8"},
      {DType::kI16, {3}, 6, "I16"},
      {DType::kI32, {1, 1, 1, 2}, 8, "I32"},
      {DType::kI64, {2}, 16, "I64"},
      {DType::kQ8_0, {3, 64}, 3 * 2 * 34, "Q8_0"},
      {DType::kQ4_0, {1, 32}, 18, "Q4_0"},
      {DType::kQ2_K, {2, 256}, 2 * 84, "Q2_K"},
      {DType::kQ3_K, {1, 512}, 2 * 110, "Q3_K"},
      {DType::kQ4_K, {3, 512}, 3 * 2 * 144, "Q4_K"},
      {DType::kQ5_K, {2, 2, 256}, 4 * 176, "Q5_K"},
      {DType::kQ6_K, {256}, 210, "Q6_K"},
      {DType::kF32, {0, 4}, 0, "F32"},
      {DType::kQ8_0, {4, 0}, 0, "Q8_0"},
  };
  for (uint32_t alignment : {32u, 64u, 1u, 4096u}) {
    SCOPED_TRACE(alignment);
    TempDir dir;
    const std::string path = dir.file("t.gguf");
    std::vector<Tensor> tensors;
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < cases.size(); ++i) {
      tensors.push_back({fmt::format("t{}", i), cases[i].dtype, cases[i].shape});
      data.push_back(pattern(cases[i].bytes, uint8_t(i)));
    }
    ASSERT_TRUE(
        write_gguf(path, {{"k", GgufValue::of_string("v")}}, tensors, data, alignment).ok());
    Result<GgufFile> f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->alignment(), alignment);
    const GgufValue* al = f->meta("general.alignment");
    if (alignment == 32) {
      EXPECT_EQ(al, nullptr);
    } else {
      ASSERT_NE(al, nullptr);
      EXPECT_EQ(al->type, GgufType::kU32);
      EXPECT_EQ(al->i, alignment);
    }
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    EXPECT_EQ(f->file_size() % alignment, 0u);
    ASSERT_EQ(f->tensors().size(), cases.size());
    const uint8_t* base = f->tensors()[0].data - f->data_offset() - f->tensors()[0].byte_offset;
    for (size_t i = 0; i < cases.size(); ++i) {
      const TensorInfo& t = f->tensors()[i];  // file order = declaration order
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, fmt::format("t{}", i));
      EXPECT_EQ(t.dtype, cases[i].dtype);
      EXPECT_EQ(dtype_name(t.dtype), cases[i].ggml_name);
      EXPECT_EQ(t.shape, cases[i].shape);
      EXPECT_EQ(t.byte_size, cases[i].bytes);
      EXPECT_EQ(t.byte_offset % alignment, 0u);
      EXPECT_EQ(uint64_t(t.data - base) % alignment, 0u);
      EXPECT_EQ(tensor_bytes(t), data[i]);
      EXPECT_EQ(f->find(t.name), &t);
    }
    EXPECT_EQ(f->find("t"), nullptr);
    EXPECT_TRUE(f->populate().ok());
  }
}

TEST(Gguf, TypeCodesAndNames) {
  for (uint32_t code = 0; code < 64; ++code) {
    const std::optional<DType> t = ggml_type_to_dtype(code);
    if (!t) continue;
    EXPECT_EQ(dtype_to_ggml_type(*t), code);
    EXPECT_EQ(ggml_type_name(code), dtype_name(*t));
  }
  EXPECT_EQ(ggml_type_to_dtype(30), DType::kBF16);
  EXPECT_EQ(ggml_type_to_dtype(12), DType::kQ4_K);
  EXPECT_EQ(ggml_type_to_dtype(16), std::nullopt);
  EXPECT_EQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_EQ(ggml_type_name(39), "MXFP4");
  EXPECT_EQ(ggml_type_name(4), "type 4");
  EXPECT_EQ(ggml_type_name(77), "type 77");
}

TEST(Gguf, FileMovesKeepTensorViews) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  ASSERT_TRUE(write_gguf(path, {}, {{"w", DType::kF32, {4}}}, {pattern(16, 1)}).ok());
  Result<GgufFile> f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  GgufFile a = std::move(*f);
  GgufFile b = std::move(a);
  ASSERT_NE(b.find("w"), nullptr);
  EXPECT_EQ(tensor_bytes(*b.find("w")), pattern(16, 1));
  Result<GgufFile> g = GgufFile::open(path);
  ASSERT_TRUE(g.ok());
  b = std::move(*g);
  EXPECT_EQ(tensor_bytes(*b.find("w")), pattern(16, 1));
}

TEST(GgufWriter, RejectsBadTensorsAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("bad.gguf");
  const auto begin = [&](const GgufMeta& m, const std::vector<Tensor>& t, uint32_t al = 32) {
    return GgufWriter::begin(path, m, t, al);
  };
  constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_TRUE(failed_with(begin({}, {{"a", DType::kF32, {1}}, {"a", DType::kF32, {1}}}), kInvalid,
                          path, {"\"a\"", "twice"}));
  EXPECT_TRUE(failed_with(begin({}, {{"", DType::kF32, {1}}}), kInvalid, path, {"non-empty"}));
  EXPECT_TRUE(failed_with(begin({}, {{"u8", DType::kU8, {1}}}), kInvalid, path, {"\"u8\"", "U8"}));
  EXPECT_TRUE(failed_with(begin({}, {{"fp8", DType::kF8E4M3, {1}}}), kInvalid, path, {"F8_E4M3"}));
  EXPECT_TRUE(failed_with(begin({}, {{"r0", DType::kF32, {}}}), kInvalid, path, {"rank 0"}));
  EXPECT_TRUE(
      failed_with(begin({}, {{"r5", DType::kF32, {1, 1, 1, 1, 1}}}), kInvalid, path, {"rank 5"}));
  EXPECT_TRUE(failed_with(begin({}, {{"q", DType::kQ4_K, {2, 128}}}), kInvalid, path,
                          {"\"q\"", "128", "256-value block"}));
  EXPECT_TRUE(failed_with(begin({}, {{"n", DType::kF32, {-1}}}), kInvalid, path, {"negative"}));
  EXPECT_TRUE(failed_with(begin({{"k", GgufValue::of_int(GgufType::kU8, 256)}}, {}), kInvalid, path,
                          {"\"k\"", "256", "u8"}));
  EXPECT_TRUE(failed_with(begin({{"k", GgufValue::of_int(GgufType::kBool, 2)}}, {}), kInvalid, path,
                          {"\"k\"", "bool"}));
  EXPECT_TRUE(failed_with(begin({{"k", GgufValue::of_ints(GgufType::kI8, {1, -129})}}, {}),
                          kInvalid, path, {"\"k\"", "-129", "element 1"}));
  EXPECT_TRUE(failed_with(begin({{"k", GgufValue::of_ints(GgufType::kArray, {})}}, {}), kInvalid,
                          path, {"\"k\"", "array element type"}));
  EXPECT_TRUE(failed_with(begin({{"k", GgufValue::of_int(GgufType(42), 0)}}, {}), kInvalid, path,
                          {"\"k\"", "type 42"}));
  EXPECT_TRUE(
      failed_with(begin({{"", GgufValue::of_int(GgufType::kU8, 0)}}, {}), kInvalid, path, {"key"}));
  EXPECT_TRUE(failed_with(begin({}, {}, 48), kInvalid, path, {"alignment 48"}));
  EXPECT_TRUE(failed_with(begin({}, {}, 0), kInvalid, path, {"alignment 0"}));
  EXPECT_TRUE(failed_with(begin({{"general.alignment", GgufValue::of_int(GgufType::kU32, 64)}}, {}),
                          kInvalid, path, {"general.alignment", "32"}));
  EXPECT_EQ(dir.entry_count(), 0u);

  Result<std::unique_ptr<GgufWriter>> w =
      begin({}, {{"a", DType::kF32, {2}}, {"b", DType::kQ8_0, {32}}});
  ASSERT_TRUE(w.ok());
  const std::vector<uint8_t> eight(8), four(4);
  EXPECT_TRUE(failed_with((*w)->write_tensor("b", eight), kInvalid, path, {"\"b\"", "\"a\""}));
  EXPECT_TRUE(failed_with((*w)->write_tensor("a", four), kInvalid, path, {"\"a\"", "4 bytes"}));
  EXPECT_TRUE((*w)->write_tensor("a", eight).ok());
  EXPECT_TRUE(failed_with((*w)->finish(), kInvalid, path, {"\"b\""}));
  EXPECT_TRUE((*w)->write_tensor("b", std::vector<uint8_t>(34)).ok());
  EXPECT_TRUE(failed_with((*w)->write_tensor("c", eight), kInvalid, path, {"\"c\""}));
  EXPECT_TRUE((*w)->finish().ok());
  EXPECT_TRUE(GgufFile::open(path).ok());
}

TEST(GgufWriter, UnfinishedWriterLeavesNothingAndOldFileStays) {
  TempDir dir;
  const std::string path = dir.file("keep.gguf");
  ASSERT_TRUE(write_gguf(path, {{"v", GgufValue::of_int(GgufType::kU32, 1)}}, {}).ok());
  const std::string before = read_bytes(path);
  {
    Result<std::unique_ptr<GgufWriter>> w = GgufWriter::begin(
        path, {{"v", GgufValue::of_int(GgufType::kU32, 2)}}, {{"w", DType::kF32, {1}}});
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(dir.entry_count(), 2u);  // the temp file beside the old one
  }
  EXPECT_EQ(dir.entry_count(), 1u);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_TRUE(failed_with(GgufWriter::begin(dir.file("no/such/dir.gguf"), {}, {}),
                          StatusCode::kIoError, dir.file("no/such/dir.gguf"), {"cannot create"}));
}

// A tensor written in parts is the tensor written whole; a part past its end, a whole write
// after a part, or the next tensor before this one is complete, is refused.
TEST(GgufWriter, TensorPartsMakeTheSameFile) {
  TempDir dir;
  std::vector<uint8_t> a(40), b(8);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i * 7 + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i + 100);
  const std::vector<GgufWriter::Tensor> decl = {{"a", DType::kF32, {2, 5}},
                                                {"b", DType::kF32, {2}}};
  auto whole = GgufWriter::begin(dir.file("whole.gguf"), {}, decl);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE((*whole)->write_tensor("a", a).ok());
  ASSERT_TRUE((*whole)->write_tensor("b", b).ok());
  ASSERT_TRUE((*whole)->finish().ok());
  auto parts = GgufWriter::begin(dir.file("parts.gguf"), {}, decl);
  ASSERT_TRUE(parts.ok());
  GgufWriter& w = **parts;
  const std::span<const uint8_t> all(a);
  ASSERT_TRUE(w.write_tensor_part("a", all.subspan(0, 12)).ok());
  EXPECT_FALSE(w.write_tensor("a", all.subspan(12)).ok());                   // whole after a part
  EXPECT_FALSE(w.write_tensor_part("b", std::span<const uint8_t>(b)).ok());  // a not done
  EXPECT_FALSE(w.write_tensor_part("a", std::span<const uint8_t>(a)).ok());  // past its end
  ASSERT_TRUE(w.write_tensor_part("a", all.subspan(12, 20)).ok());
  ASSERT_TRUE(w.write_tensor_part("a", all.subspan(32)).ok());
  ASSERT_TRUE(w.write_tensor_part("b", std::span<const uint8_t>(b)).ok());
  ASSERT_TRUE(w.finish().ok());
  EXPECT_EQ(read_bytes(dir.file("parts.gguf")), read_bytes(dir.file("whole.gguf")));
}

// ---- split sets ----

class GgufSetTest : public ::testing::Test {
 protected:
  std::string member(int no, int count = 3) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "-%05d-of-%05d.gguf", no, count);
    return dir_.file("model") + buf;
  }
  // Member `no` (1-based) of `count`, holding tensor "t<no>" and the split keys.
  void write_member(int no, int count = 3, int64_t split_no = -1, int64_t split_count = -1,
                    std::string tensor = "") {
    GgufMeta m;
    m["split.no"] = GgufValue::of_int(GgufType::kU16, split_no >= 0 ? split_no : no - 1);
    m["split.count"] = GgufValue::of_int(GgufType::kU16, split_count >= 0 ? split_count : count);
    if (no == 1) {
      m["general.architecture"] = GgufValue::of_string("deepseek2");
      m["split.tensors.count"] = GgufValue::of_int(GgufType::kI32, count);
    }
    if (tensor.empty()) tensor = fmt::format("t{}", no);
    ASSERT_TRUE(write_gguf(member(no, count), m, {{tensor, DType::kF32, {no, 2}}},
                           {pattern(size_t(8 * no), uint8_t(no))})
                    .ok());
  }
  TempDir dir_;
};

TEST_F(GgufSetTest, OpensEveryMemberFromAnyOfThem) {
  for (int no = 1; no <= 3; ++no) write_member(no);
  for (int from = 1; from <= 3; ++from) {
    Result<GgufSet> s = GgufSet::open(member(from));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_EQ(s->files().size(), 3u);
    EXPECT_EQ(s->first().path(), member(1));
    EXPECT_NE(s->first().meta("general.architecture"), nullptr);
    EXPECT_EQ(s->tensors().size(), 3u);
    uint64_t mapped = 0;
    for (int no = 1; no <= 3; ++no) {
      const TensorInfo* t = s->find(fmt::format("t{}", no));
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t, s->files()[size_t(no - 1)].find(t->name));
      EXPECT_EQ(tensor_bytes(*t), pattern(size_t(8 * no), uint8_t(no)));
      mapped += s->files()[size_t(no - 1)].file_size();
    }
    EXPECT_EQ(s->bytes_mapped(), mapped);
    EXPECT_TRUE(s->populate().ok());
    GgufSet moved = std::move(*s);  // the tensor map points into files that moves keep in place
    EXPECT_EQ(tensor_bytes(*moved.find("t3")), pattern(24, 3));
  }
}

TEST_F(GgufSetTest, SingleFileAndOneFileSet) {
  const std::string single = dir_.file("single.gguf");
  ASSERT_TRUE(write_gguf(single, {}, {{"w", DType::kF32, {1}}}).ok());
  Result<GgufSet> s = GgufSet::open(single);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->files().size(), 1u);
  EXPECT_NE(s->find("w"), nullptr);
  write_member(1, 1);
  s = GgufSet::open(member(1, 1));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->files().size(), 1u);
}

TEST_F(GgufSetTest, MissingMemberIsNotFoundNamingIt) {
  write_member(1);
  write_member(3);
  EXPECT_TRUE(failed_with(GgufSet::open(member(1)), StatusCode::kNotFound, member(2),
                          {"file 2 of the 3-file split set is missing"}));
}

TEST_F(GgufSetTest, MismatchedSplitKeysAreDataLoss) {
  write_member(1);
  write_member(2, 3, /*split_no=*/0);
  write_member(3);
  EXPECT_TRUE(failed_with(GgufSet::open(member(3)), StatusCode::kDataLoss, member(2),
                          {"split.no is 0", "file 2"}));
  write_member(2, 3, -1, /*split_count=*/4);
  EXPECT_TRUE(failed_with(GgufSet::open(member(1)), StatusCode::kDataLoss, member(2),
                          {"split.count is 4", "3 files"}));
  write_member(2, 3, -1, -1, "t1");
  EXPECT_TRUE(failed_with(GgufSet::open(member(1)), StatusCode::kDataLoss, member(2),
                          {"tensor \"t1\" is also in", member(1)}));
  write_member(2);
  ASSERT_TRUE(GgufSet::open(member(1)).ok());
  // The first file's total disagrees with what the files hold.
  GgufMeta m = {{"split.no", GgufValue::of_int(GgufType::kU16, 0)},
                {"split.count", GgufValue::of_int(GgufType::kU16, 3)},
                {"split.tensors.count", GgufValue::of_int(GgufType::kI32, 5)}};
  ASSERT_TRUE(write_gguf(member(1), m, {{"t1", DType::kF32, {1, 2}}}).ok());
  EXPECT_TRUE(failed_with(GgufSet::open(member(1)), StatusCode::kDataLoss, member(1),
                          {"split.tensors.count is 5", "hold 3"}));
  m["split.no"] = GgufValue::of_string("0");
  ASSERT_TRUE(write_gguf(member(1), m, {{"t1", DType::kF32, {1, 2}}}).ok());
  EXPECT_TRUE(failed_with(GgufSet::open(member(1)), StatusCode::kDataLoss, member(1),
                          {"split.no", "not an integer"}));
}

TEST_F(GgufSetTest, BadNamesAndUnnamedMembers) {
  EXPECT_TRUE(failed_with(GgufSet::open(member(0)), StatusCode::kInvalidArgument, member(0),
                          {"split file 0 of 3"}));
  EXPECT_TRUE(failed_with(GgufSet::open(member(4)), StatusCode::kInvalidArgument, member(4),
                          {"split file 4 of 3"}));
  const std::string renamed = dir_.file("renamed.gguf");
  ASSERT_TRUE(write_gguf(renamed,
                         {{"split.no", GgufValue::of_int(GgufType::kU16, 0)},
                          {"split.count", GgufValue::of_int(GgufType::kU16, 3)}},
                         {})
                  .ok());
  EXPECT_TRUE(failed_with(GgufSet::open(renamed), StatusCode::kDataLoss, renamed,
                          {"split.count is 3", "-NNNNN-of-00003.gguf"}));
}

}  // namespace
}  // namespace mla
