// Safetensors files: a validated, read-only memory-mapped reader and an atomic writer. The format
// (docs/MODELS.md §Safetensors and FP8): u64 little-endian header length N, N bytes of UTF-8 JSON
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {str: str}}, then the data
// section. Not here: multi-file index.json handling, dtype conversion, config parsing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "mla/status.h"

namespace mla {

// Headers longer than this are rejected before any parsing (the limit of the reference reader).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // rank 0 (a scalar) and zero-size dims are valid
  int64_t numel = 0;           // product of shape (1 for rank 0)
  uint64_t byte_offset = 0;    // from the start of the data section (the header's data_offsets[0])
  uint64_t byte_size = 0;      // numel * dtype_bits / 8, checked against the header at open
  // Into the read-only mapping, valid while the SafetensorsFile lives (moves keep it valid).
  // NOT aligned for the element type: the data section starts at 8 + N for any N, so readers
  // must memcpy or use unaligned loads. When byte_size is 0 it must not be dereferenced.
  const uint8_t* data = nullptr;
};

// An open, fully validated safetensors file. open() checks the whole header and the layout of
// the data section (every tensor's bytes inside the file, tensors tiling the data section with
// no overlap, hole or trailing byte), so later reads through TensorInfo::data cannot fault unless
// another process truncates the file while it is mapped (a SIGBUS no reader can prevent).
class SafetensorsFile {
 public:
  // Errors: not_found (no such file), io_error (open/stat/mmap refused, not a regular file),
  // data_loss (anything wrong with the contents), unimplemented (a dtype in the safetensors spec
  // that mla does not support). Messages name the path, the tensor and the field.
  static Result<SafetensorsFile> open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // In data-section order (ascending byte_offset; ties broken by name).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The same order as tensors().
  std::vector<std::string_view> names() const;
  // nullptr when absent. O(log n).
  const TensorInfo* find(std::string_view name) const;
  // The "__metadata__" object; empty when the header has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  uint64_t file_size() const { return file_size_; }
  uint64_t header_size() const { return header_size_; }  // N, the JSON length
  uint64_t data_offset() const { return 8 + header_size_; }

  // Reads the whole file into the page cache and maps it now (MADV_POPULATE_READ), so that the
  // first pass over the weights does not stop on a page fault every few pages. A kernel without
  // it (before Linux 5.14) leaves the mapping lazy: not an error. io_error naming the file when
  // the kernel cannot read a page (an I/O error, or the file shrank after it was opened).
  Status populate() const;

 private:
  SafetensorsFile() = default;
  void unmap();

  std::string path_;
  void* map_ = nullptr;  // PROT_READ, MAP_PRIVATE over the whole file
  uint64_t file_size_ = 0;
  uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<uint32_t> by_name_;  // indices into tensors_, sorted by name, for find()
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // byte_size bytes, little-endian C order; may be null if size 0
  size_t byte_size = 0;        // must equal numel * dtype_bits / 8
};

// Writes a safetensors file: tensors packed in the given order, the header padded with spaces to
// a multiple of 8 bytes so that the data section is 8-byte aligned, "__metadata__" only when
// metadata is non-empty. Writes `<path>.tmp.*` and renames it over `path`, so readers see either
// the old file or the complete new one. Errors: invalid_argument (a tensor whose byte_size does
// not match its shape and dtype, a duplicate or reserved name, strings that are not UTF-8),
// io_error (the OS refused to create, write or rename; names the path).
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata);

}  // namespace mla
