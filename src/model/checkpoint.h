// Checkpoint: the safetensors files of a Hugging Face model directory, validated and mapped, with
// one name → (shard, tensor) index. Either `model.safetensors` or `model.safetensors.index.json`
// plus the shards it lists (docs/RELIABILITY.md §Checklist R16). Knows nothing about which tensors
// a model needs: that is ModelWeights (model_weights.h).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/aligned_buffer.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "mla/status.h"

namespace mla {

inline constexpr const char* kSingleCheckpointFile = "model.safetensors";
inline constexpr const char* kCheckpointIndexFile = "model.safetensors.index.json";
// An index.json larger than this is refused before reading (V3's, 92k tensors, is ~9 MB).
inline constexpr uint64_t kMaxCheckpointIndexBytes = uint64_t{64} << 20;

struct CheckpointTensor {
  uint32_t shard = 0;                // index into Checkpoint::shards(), or the GGUF set's files()
  const TensorInfo* info = nullptr;  // owned by that shard; data points into its mapping
};

// A tensor as from_gguf takes it: its info (under the Hugging Face name) and its file's index.
struct CheckpointTensorInfo {
  TensorInfo info;
  uint32_t shard = 0;
};

// A GGUF layer's attention up-projection as the file splits it (attn_k_b, attn_v_b): W_UK[h]ᵀ
// rows [H·r, d_n] and W_UV[h] rows [H·d_v, r], in the file's dtype. The absorbed decode path
// reads them as they are; kv_b_proj is rebuilt from them in FP32 for everything else.
struct SplitKvB {
  const TensorInfo* uk_t = nullptr;
  const TensorInfo* uv = nullptr;
};

struct CheckpointOptions {
  // Show progress on stderr while mapping when the shards total at least this many bytes
  // (UINT64_MAX: never). Mapping is lazy, so this mostly measures header validation.
  uint64_t progress_min_bytes = uint64_t{1} << 30;
  // load_model_weights: page every shard in (Checkpoint::populate) once the weights have passed
  // every check, what a run that will read every weight wants. Off, the mapping stays lazy
  // (tools that read headers only). Checkpoint::open itself never pages in.
  bool populate = false;
};

class Checkpoint {
 public:
  // Opens `dir`'s safetensors files. With an index: weight_map must be an object of tensor name →
  // plain file name (no '/', not "." or "..", so no path can leave the directory; a shard that is
  // a symlink must resolve inside the directory too), every listed shard must exist and open,
  // every tensor of a listed shard must be mapped to that shard, and every mapped tensor must be
  // in its shard. Files not listed are never opened. Having both model.safetensors and the index
  // is refused as ambiguous. Errors: not_found (no checkpoint files, a missing shard),
  // invalid_argument (a malformed index, a bad shard name), data_loss (a shard that disagrees
  // with the index or fails SafetensorsFile validation), io_error. One line naming the file, the
  // tensor and the value.
  static Result<Checkpoint> open(const std::string& dir, const CheckpointOptions& options = {});

  const std::string& dir() const { return dir_; }
  // Sorted by file name; a single model.safetensors is shard 0. Empty for a GGUF model.
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // The file a tensor lives in (a safetensors shard or a GGUF file), for messages.
  const std::string& file_of(const CheckpointTensor& t) const;
  // The GGUF files of a model opened by open_gguf_model (model/gguf_checkpoint.h), else null.
  const GgufSet* gguf() const { return gguf_.get(); }
  bool indexed() const { return indexed_; }  // opened through index.json
  // nullptr when absent. O(log n).
  const CheckpointTensor* find(std::string_view name) const;
  // Every tensor of every shard, by name.
  const std::map<std::string, CheckpointTensor, std::less<>>& tensors() const { return tensors_; }
  // Sum of the shards' file sizes: what is mapped (read-only, paged in on first touch).
  uint64_t bytes_mapped() const { return bytes_mapped_; }
  // Pages every shard in (SafetensorsFile::populate), with progress past
  // options.progress_min_bytes. io_error naming the shard the kernel cannot read.
  Status populate(const CheckpointOptions& options) const;

  // A GGUF model under Hugging Face names (built by model/gguf_checkpoint.cc): `set` owns the
  // mappings; each tensor is a renamed view into them (an expert's slice of a merged expert
  // tensor among them), or into one of `owned` (tensors rebuilt at load, such as kv_b_proj from
  // the split attn_k_b / attn_v_b). shard = the index of the GGUF file in set->files(), or of
  // the file the rebuilt tensor came from.
  static Checkpoint from_gguf(std::string path, std::shared_ptr<const GgufSet> set,
                              std::deque<CheckpointTensorInfo> tensors,
                              std::vector<AlignedBuffer<uint8_t>> owned,
                              std::map<int64_t, SplitKvB> split_kv_b = {});
  // The split attn_k_b / attn_v_b of a GGUF model's decoder layer, or null (another file, or a
  // file with attn_kv_b).
  const SplitKvB* split_kv_b(int64_t layer) const;

 private:
  std::string dir_;
  bool indexed_ = false;
  // Moving a vector keeps its buffer, and SafetensorsFile keeps its tensor table in one too, so
  // the TensorInfo pointers in tensors_ survive moves of the Checkpoint.
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, CheckpointTensor, std::less<>> tensors_;
  uint64_t bytes_mapped_ = 0;
  // GGUF only. A deque keeps its elements in place when it is moved, so tensors_'s pointers into
  // it stay valid, as they do into shards_.
  std::shared_ptr<const GgufSet> gguf_;
  std::deque<CheckpointTensorInfo> gguf_tensors_;
  std::vector<AlignedBuffer<uint8_t>> owned_;
  std::map<int64_t, SplitKvB> split_kv_b_;  // TensorInfos owned by gguf_
};

}  // namespace mla
