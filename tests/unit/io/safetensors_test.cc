// Safetensors reader and writer: round trips, valid edge cases (rank 0, zero size, unaligned data
// section), accessors and writer errors. Rejections of bad files are in safetensors_reject_test.cc.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "safetensors_test_util.h"

namespace mla {
namespace {

using testing_io::failed_with;
using testing_io::image;
using testing_io::TempDir;
using testing_io::write_bytes;

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Elements of a tensor read through memcpy: the mapping gives no alignment guarantee.
template <typename T>
std::vector<T> read_as(const TensorInfo& t) {
  std::vector<T> v(t.byte_size / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data, t.byte_size);
  return v;
}

TEST(Safetensors, RoundTripKeepsNamesDtypesShapesBytesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::vector<float> w = {1.5f, -2.0f, 3e10f, 0.0f, -0.0f, 7.25f};
  std::vector<uint16_t> bf = {0x3f80, 0xbf80, 0x7f80, 0x0001};
  std::vector<uint8_t> fp8 = {0x00, 0x7e, 0xfe, 0x38, 0x7f};
  std::vector<uint8_t> fp4 = {0x21, 0x7f, 0xa9};  // 6 elements, two per byte
  std::vector<int64_t> ids = {-1, 0, int64_t(1) << 62};
  std::vector<uint8_t> mask = {1, 0, 1};
  std::vector<int32_t> scalar = {42};
  std::vector<TensorToWrite> tensors = {
      {"layers.0.w", DType::kF32, {2, 3}, w.data(), w.size() * 4},
      {"layers.0.bf", DType::kBF16, {4}, bf.data(), bf.size() * 2},
      {"empty", DType::kF32, {3, 0, 5}, nullptr, 0},
      {"fp8", DType::kF8E4M3, {5}, fp8.data(), fp8.size()},
      {"fp4", DType::kE2M1, {2, 3}, fp4.data(), fp4.size()},
      {"ids", DType::kI64, {3}, ids.data(), ids.size() * 8},
      {"mask", DType::kBool, {3}, mask.data(), mask.size()},
      {"scalar", DType::kI32, {}, scalar.data(), 4},
  };
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode \"quoted\""}};
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());
  EXPECT_EQ(dir.entry_count(), 1u) << "the temp file must be renamed away";

  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->header_size() % 8, 0u) << "the writer pads the header to 8 bytes";
  EXPECT_EQ(f->metadata(), meta);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(t.name, tensors[i].name) << "packed in the given order";
    EXPECT_EQ(f->names()[i], tensors[i].name);
    EXPECT_EQ(t.dtype, tensors[i].dtype);
    EXPECT_EQ(t.shape, tensors[i].shape);
    EXPECT_EQ(t.byte_offset, offset);
    EXPECT_EQ(t.byte_size, tensors[i].byte_size);
    EXPECT_EQ(uint64_t(t.data - f->tensors()[0].data), t.byte_offset);
    if (t.byte_size > 0) {
      EXPECT_EQ(std::memcmp(t.data, tensors[i].data, t.byte_size), 0);
    }
    EXPECT_EQ(f->find(t.name), &t);
    offset += t.byte_size;
  }
  EXPECT_EQ(f->data_offset() + offset, f->file_size());
  EXPECT_EQ(f->find("layers.0.w")->numel, 6);
  EXPECT_EQ(f->find("empty")->numel, 0);
  EXPECT_EQ(f->find("scalar")->numel, 1);
  EXPECT_EQ(f->find("fp4")->numel, 6);
  EXPECT_EQ(read_as<float>(*f->find("layers.0.w")), w);
  EXPECT_EQ(read_as<int64_t>(*f->find("ids")), ids);
  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_EQ(f->find("layers.0"), nullptr);
  EXPECT_EQ(f->find(""), nullptr);
}

TEST(Safetensors, WriterOmitsEmptyMetadataAndOverwritesAtomically) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  std::vector<float> one = {1.0f}, two = {2.0f, 3.0f};
  ASSERT_TRUE(write_safetensors(path, {{"x", DType::kF32, {1}, one.data(), 4}}, {}).ok());
  ASSERT_TRUE(write_safetensors(path, {{"y", DType::kF32, {2}, two.data(), 8}}, {}).ok());
  EXPECT_EQ(dir.entry_count(), 1u);
  const std::string raw = testing_io::read_bytes(path);
  EXPECT_EQ(raw.find("__metadata__"), std::string::npos);
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->tensors()[0].name, "y");
  EXPECT_EQ(read_as<float>(f->tensors()[0]), two);
  EXPECT_TRUE(f->metadata().empty());
}

TEST(Safetensors, WriterWithNoTensorsWritesAnEmptyHeader) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  ASSERT_TRUE(write_safetensors(path, {}, {}).ok());
  EXPECT_EQ(testing_io::read_bytes(path), image("{}      "));
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE(f->tensors().empty());
}

TEST(Safetensors, WriterRejectsInconsistentTensorsNamingThem) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  std::vector<uint8_t> buf(64, 0);
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_TRUE(
      failed_with(write_safetensors(path, {{"w", DType::kBF16, {4, 8}, buf.data(), 60}}, {}),
                  kInvalid, path, {"tensor \"w\"", "byte_size 60", "[4, 8]", "BF16", "64"}));
  EXPECT_TRUE(failed_with(write_safetensors(path, {{"n", DType::kF32, {2, -1}, buf.data(), 0}}, {}),
                          kInvalid, path, {"tensor \"n\"", "negative", "-1"}));
  EXPECT_TRUE(failed_with(write_safetensors(path, {{"q", DType::kE2M1, {3}, buf.data(), 1}}, {}),
                          kInvalid, path, {"tensor \"q\"", "F4", "whole number of bytes"}));
  EXPECT_TRUE(failed_with(write_safetensors(path, {{"z", DType::kF32, {2}, nullptr, 8}}, {}),
                          kInvalid, path, {"tensor \"z\"", "null"}));
  EXPECT_TRUE(failed_with(
      write_safetensors(
          path, {{"d", DType::kU8, {1}, buf.data(), 1}, {"d", DType::kU8, {1}, buf.data(), 1}}, {}),
      kInvalid, path, {"tensor \"d\"", "twice"}));
  EXPECT_TRUE(
      failed_with(write_safetensors(path, {{"__metadata__", DType::kU8, {1}, buf.data(), 1}}, {}),
                  kInvalid, path, {"__metadata__", "reserved"}));
  EXPECT_TRUE(
      failed_with(write_safetensors(path, {{"bad\xff", DType::kU8, {1}, buf.data(), 1}}, {}),
                  kInvalid, path, {"UTF-8", "bad\\xff"}));
  EXPECT_TRUE(failed_with(write_safetensors(path, {}, {{"k", "\xc0\xaf"}}), kInvalid, path,
                          {"metadata", "\"k\"", "UTF-8"}));
  EXPECT_EQ(dir.entry_count(), 0u) << "nothing is written when the tensors are invalid";
}

TEST(Safetensors, WriterReportsUnwritablePath) {
  TempDir dir;
  const std::string path = dir.file("no_such_dir/model.safetensors");
  std::vector<float> one = {1.0f};
  EXPECT_TRUE(failed_with(write_safetensors(path, {{"x", DType::kF32, {1}, one.data(), 4}}, {}),
                          StatusCode::kIoError, path, {"cannot create"}));
  EXPECT_EQ(dir.entry_count(), 0u);
}

TEST(Safetensors, EmptyHeaderIsValid) {
  TempDir dir;
  const std::string path = dir.file("e.safetensors");
  for (std::string_view header : {"{}", "{}      ", "{ }", "{\"__metadata__\":{}}"}) {
    write_bytes(path, image(header));
    Result<SafetensorsFile> f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok()) << header << ": " << f.status().to_string();
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_TRUE(f->metadata().empty());
    EXPECT_EQ(f->data_offset(), f->file_size());
  }
}

TEST(Safetensors, RankZeroAndZeroSizeTensorsAreValid) {
  TempDir dir;
  const std::string path = dir.file("z.safetensors");
  // Listed out of offset order: the reader orders by offset, zero-size tensors by name at a tie.
  const std::string header = R"({"b":{"dtype":"F32","shape":[],"data_offsets":[4,8]},)"
                             R"("z1":{"dtype":"BF16","shape":[0],"data_offsets":[4,4]},)"
                             R"("z0":{"dtype":"F4","shape":[7,0],"data_offsets":[4,4]},)"
                             R"("a":{"dtype":"I32","shape":[1,1,1],"data_offsets":[0,4]},)"
                             R"("end":{"dtype":"I8","shape":[2,0,3],"data_offsets":[8,8]}})";
  write_bytes(path, image(header, std::string("\x01\x00\x00\x00\x00\x00\xc0\x3f", 8)));
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<std::string_view> want = {"a", "z0", "z1", "b", "end"};
  EXPECT_EQ(f->names(), want);
  const TensorInfo* b = f->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->shape.empty());
  EXPECT_EQ(b->numel, 1);
  EXPECT_EQ(read_as<float>(*b), std::vector<float>{1.5f});
  EXPECT_EQ(f->find("z0")->numel, 0);
  EXPECT_EQ(f->find("z0")->byte_size, 0u);
  EXPECT_EQ(f->find("end")->shape, (std::vector<int64_t>{2, 0, 3}));
  EXPECT_EQ(read_as<int32_t>(*f->find("a")), std::vector<int32_t>{1});
}

TEST(Safetensors, UnalignedDataSectionLoadsAndReadsThroughMemcpy) {
  TempDir dir;
  const std::string path = dir.file("u.safetensors");
  const std::vector<double> d = {3.141592653589793, -1e300};
  const std::vector<float> f32 = {1.5f, -2.0f, 3e10f};
  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x7bff};
  std::string data;
  for (const auto& b : {bytes_of(d), bytes_of(f32), bytes_of(h)}) data.append(b.begin(), b.end());
  // 8 + N with N = 181: every tensor starts at an odd address.
  std::string header =
      R"({"__metadata__":{"k":"v"},"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
      R"("f":{"dtype":"F32","shape":[3],"data_offsets":[16,28]},)"
      R"("h":{"dtype":"F16","shape":[3],"data_offsets":[28,34]}})";
  if (header.size() % 2 == 0) header += ' ';
  ASSERT_NE((8 + header.size()) % 8, 0u);
  write_bytes(path, image(header, data));
  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->header_size(), header.size());
  EXPECT_EQ(file->metadata().at("k"), "v");
  const TensorInfo* td = file->find("d");
  const TensorInfo* tf = file->find("f");
  const TensorInfo* th = file->find("h");
  ASSERT_TRUE(td && tf && th);
  EXPECT_NE(reinterpret_cast<uintptr_t>(td->data) % alignof(double), 0u);
  EXPECT_EQ(read_as<double>(*td), d);
  EXPECT_EQ(read_as<float>(*tf), f32);
  EXPECT_EQ(read_as<uint16_t>(*th), h);
}

TEST(Safetensors, HeaderDetailsFollowJson) {
  TempDir dir;
  const std::string path = dir.file("j.safetensors");
  // Escapes in names, UTF-8 names, whitespace between tokens, field order free.
  const std::string header =
      "{ \"a\\u0062\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 2 ] , \"dtype\" : \"U8\" } ,"
      " \"\xce\xb1\\\"q\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}\n\t\r ";
  write_bytes(path, image(header, "xyz"));
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_NE(f->find("ab"), nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->find("ab")->data), 2), "xy");
  ASSERT_NE(f->find("\xce\xb1\"q"), nullptr);
  EXPECT_EQ(f->find("\xce\xb1\"q")->data[0], 'z');
}

TEST(Safetensors, MovesKeepTheMappingAndPointers) {
  TempDir dir;
  const std::string p1 = dir.file("1.safetensors"), p2 = dir.file("2.safetensors");
  std::vector<int32_t> a = {1, 2, 3}, b = {9};
  ASSERT_TRUE(write_safetensors(p1, {{"a", DType::kI32, {3}, a.data(), 12}}, {}).ok());
  ASSERT_TRUE(write_safetensors(p2, {{"b", DType::kI32, {1}, b.data(), 4}}, {}).ok());
  Result<SafetensorsFile> r1 = SafetensorsFile::open(p1);
  Result<SafetensorsFile> r2 = SafetensorsFile::open(p2);
  ASSERT_TRUE(r1.ok() && r2.ok());
  const uint8_t* data = r1->find("a")->data;
  SafetensorsFile f1 = std::move(*r1);
  EXPECT_EQ(f1.find("a")->data, data);
  EXPECT_EQ(f1.path(), p1);
  EXPECT_EQ(read_as<int32_t>(*f1.find("a")), a);
  SafetensorsFile f2 = std::move(*r2);
  f2 = std::move(f1);  // unmaps 2.safetensors, takes over 1.safetensors
  EXPECT_EQ(f2.find("b"), nullptr);
  EXPECT_EQ(f2.find("a")->data, data);
  EXPECT_EQ(read_as<int32_t>(*f2.find("a")), a);
}

}  // namespace
}  // namespace mla
