// GGUF files (llama.cpp's model format; docs/GGUF.md): a validated, read-only memory-mapped
// reader, split sets (`NAME-00001-of-0000N.gguf`), and a streaming writer.
// Layout: magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata count, the metadata
// key/values, the tensor infos (name, n_dims, ne[n_dims] innermost first, u32 ggml type, u64
// offset), padding to general.alignment (default 32), then the data section. Little-endian only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/safetensors.h"  // TensorInfo
#include "mla/status.h"

namespace mla {

// GGUF metadata value types (the file's u32 codes).
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One metadata value. Scalars: `type` and one of i (every integer type and bool, value-preserving;
// a u64 above INT64_MAX is refused at open), f (f32, f64), s. Arrays: type kArray, elem_type, and
// the elements in `ints`, `floats` or `strings` by elem_type (arrays of arrays are refused).
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType elem_type = GgufType::kU8;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  bool is_array() const { return type == GgufType::kArray; }

  static GgufValue of_int(GgufType t, int64_t v) {  // t: an integer type or kBool
    GgufValue x;
    x.type = t;
    x.i = v;
    return x;
  }
  static GgufValue of_float(GgufType t, double v) {  // t: kF32 or kF64
    GgufValue x;
    x.type = t;
    x.f = v;
    return x;
  }
  static GgufValue of_string(std::string v) {
    GgufValue x;
    x.type = GgufType::kString;
    x.s = std::move(v);
    return x;
  }
  static GgufValue of_ints(GgufType elem, std::vector<int64_t> v) {
    GgufValue x;
    x.type = GgufType::kArray;
    x.elem_type = elem;
    x.ints = std::move(v);
    return x;
  }
  static GgufValue of_floats(GgufType elem, std::vector<double> v) {
    GgufValue x;
    x.type = GgufType::kArray;
    x.elem_type = elem;
    x.floats = std::move(v);
    return x;
  }
  static GgufValue of_strings(std::vector<std::string> v) {
    GgufValue x;
    x.type = GgufType::kArray;
    x.elem_type = GgufType::kString;
    x.strings = std::move(v);
    return x;
  }
};

// Limits checked before any allocation proportional to a count in the file.
inline constexpr uint64_t kGgufMaxStringBytes = uint64_t{1} << 24;  // one key or string value
inline constexpr uint64_t kGgufMaxArrayElems = uint64_t{1} << 26;   // > any vocabulary's merges
inline constexpr int kGgufMaxDims = 4;

// The ggml type code of a dtype mla reads from GGUF (F32 0, F16 1, Q4_0 2, Q8_0 8, Q2_K 10,
// Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, I8 24, I16 25, I32 26, I64 27, F64 28, BF16 30), and back.
// ggml_type_to_dtype: nullopt for a code mla does not read (then open() says unimplemented,
// naming the tensor and the type code / name).
std::optional<DType> ggml_type_to_dtype(uint32_t code);
uint32_t dtype_to_ggml_type(DType t);  // t must be one of the above
// ggml's name of a type code ("Q4_K", "IQ2_XXS", ...; "type 77" for unknown codes).
std::string ggml_type_name(uint32_t code);

// An open, fully validated GGUF file. open() checks the whole header: the magic and version,
// every string's and array's length against the bytes left, keys non-empty, UTF-8 and unique,
// bools 0 or 1, tensor names unique, non-empty and UTF-8, 1 <= n_dims <= 4, every ne >= 0 with a
// product that does not overflow, ne[0] a multiple of the type's block, each tensor's offset
// aligned and its bytes inside the data section, tensors not overlapping (gaps are allowed: they
// are the alignment padding). String values are kept as the file's bytes, not checked for UTF-8
// (some converters store raw byte tokens); a consumer that needs text checks it. Later reads
// through TensorInfo::data cannot fault unless the file is truncated while mapped.
class GgufFile {
 public:
  // Errors as SafetensorsFile::open: not_found, io_error, data_loss naming the path, the tensor or
  // key and the field; unimplemented for a tensor type mla does not read.
  static Result<GgufFile> open(const std::string& path);

  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  // TensorInfo as for safetensors: `shape` in row-major (PyTorch) order, i.e. ne reversed, so a
  // GGUF matrix with ne = [in, out] has shape [out, in]; dtype from ggml_type_to_dtype;
  // byte_size = numel / block elems * block bytes; byte_offset from the data section's start.
  // In file order. `data` is aligned to general.alignment within the file, so only the mapping's
  // page alignment adds to it.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;  // O(log n)
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* meta(std::string_view key) const;  // nullptr when absent
  uint64_t file_size() const { return file_size_; }
  uint64_t data_offset() const { return data_offset_; }
  uint32_t alignment() const { return alignment_; }
  Status populate() const;  // as SafetensorsFile::populate

 private:
  GgufFile() = default;
  void unmap();

  std::string path_;
  void* map_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::vector<TensorInfo> tensors_;
  std::vector<uint32_t> by_name_;
  std::map<std::string, GgufValue, std::less<>> metadata_;
};

// A model stored as one GGUF file or as a split set. open(path) takes any file of the set: a
// name matching `PREFIX-NNNNN-of-MMMMM.gguf` opens all MMMMM files (each must exist and carry
// split.no = its index - 1 and split.count = MMMMM when it has those keys); metadata comes from
// the first file. Tensor names must be unique across the set. Errors name the file.
class GgufSet {
 public:
  static Result<GgufSet> open(const std::string& path);
  const std::vector<GgufFile>& files() const { return files_; }
  const GgufFile& first() const { return files_.front(); }
  const TensorInfo* find(std::string_view name) const;
  // Every tensor of every file, by name.
  const std::map<std::string, const TensorInfo*, std::less<>>& tensors() const { return tensors_; }
  uint64_t bytes_mapped() const;
  Status populate() const;

 private:
  std::vector<GgufFile> files_;
  std::map<std::string, const TensorInfo*, std::less<>> tensors_;
};

// Streams a GGUF v3 file: the header (metadata and every tensor's info) is written by begin(),
// then each tensor's bytes by write_tensor() in the declared order, then finish() pads, flushes
// and renames `<path>.tmp.*` over `path` (readers see the old file or the complete new one). A
// writer destroyed before finish() removes its temporary file. Memory: the header only.
class GgufWriter {
 public:
  struct Tensor {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;  // row-major, as TensorInfo::shape
  };
  // invalid_argument: a duplicate, empty or non-UTF-8 name or key, a rank outside [1, 4], a shape
  // whose innermost dim is not a whole number of blocks, a dtype GGUF cannot store, a metadata
  // value outside its type's range, an alignment that is not a power of two;
  // io_error naming the path. The writer adds general.alignment (u32) when alignment != 32; a
  // general.alignment in `metadata` must equal `alignment`. Metadata is written in key order.
  static Result<std::unique_ptr<GgufWriter>> begin(
      const std::string& path, const std::map<std::string, GgufValue, std::less<>>& metadata,
      const std::vector<Tensor>& tensors, uint32_t alignment = 32);
  // bytes.size() must equal the tensor's byte size; tensors in order. After an io_error every
  // later call returns it.
  Status write_tensor(std::string_view name, std::span<const uint8_t> bytes);
  // The same tensor in consecutive parts, so that a writer holds one part in memory (`mla
  // quantize` writes a merged expert tensor expert by expert); the tensor is complete when its
  // byte size has been given, and only then may the next one start.
  Status write_tensor_part(std::string_view name, std::span<const uint8_t> bytes);
  // invalid_argument when a declared tensor was not written.
  Status finish();
  ~GgufWriter();

 private:
  GgufWriter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla
