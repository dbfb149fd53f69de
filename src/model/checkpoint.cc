// Checkpoint::open: shard mapping with progress and the index ↔ shard consistency checks (the
// index parsing and shard-name confinement are checkpoint_index.cc).
#include "model/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/checked_math.h"
#include "model/checkpoint_index.h"
#include "model/weight_layout.h"

namespace mla {
namespace {

namespace fs = std::filesystem;

// Progress on stderr for big checkpoints: a rewritten line on a terminal, a line per ~10% else.
class Progress {
 public:
  Progress(bool on, size_t shards, uint64_t total)
      : on_(on), tty_(::isatty(2)), shards_(shards), total_(total) {}
  void shard_done(size_t done, uint64_t bytes) {
    if (!on_) return;
    const size_t step = shards_ / 10 + 1;
    if (!tty_ && done % step != 0 && done != shards_) return;
    std::fprintf(stderr, "%smla: mapped %zu/%zu shards (%.1f of %.1f GiB)%s", tty_ ? "\r" : "",
                 done, shards_, gib(bytes), gib(total_), tty_ ? "" : "\n");
    if (tty_ && done == shards_) std::fputc('\n', stderr);
  }
  void paged_in(uint64_t bytes) {
    if (!on_) return;
    std::fprintf(stderr, "%smla: paged in %.1f of %.1f GiB%s", tty_ ? "\r" : "", gib(bytes),
                 gib(total_), tty_ ? "" : "\n");
    if (tty_ && bytes >= total_) std::fputc('\n', stderr);
  }

 private:
  static double gib(uint64_t b) { return double(b) / double(uint64_t{1} << 30); }
  bool on_, tty_;
  size_t shards_;
  uint64_t total_;
};

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir_text, const CheckpointOptions& options) {
  const fs::path dir(dir_text);
  std::error_code ec;
  const fs::path index_path = dir / kCheckpointIndexFile;
  const fs::path single_path = dir / kSingleCheckpointFile;
  const bool has_index = fs::exists(fs::symlink_status(index_path, ec));
  const bool has_single = fs::exists(fs::symlink_status(single_path, ec));
  if (has_index && has_single)
    return invalid_argument(
        fmt::format("{}: holds both {} and {}; which one is the model is "
                    "ambiguous, remove one",
                    dir_text, kSingleCheckpointFile, kCheckpointIndexFile));
  if (!has_index && !has_single)
    return not_found(
        fmt::format("{}: no {} or {}", dir_text, kSingleCheckpointFile, kCheckpointIndexFile));

  Checkpoint ck;
  ck.dir_ = dir_text;
  ck.indexed_ = has_index;
  ShardMap shard_map;
  const std::string source = (has_index ? index_path : single_path).string();
  if (has_index) {
    MLA_ASSIGN_OR_RETURN(const std::string text,
                         read_small_file(index_path, kMaxCheckpointIndexBytes));
    MLA_ASSIGN_OR_RETURN(shard_map, parse_checkpoint_index(text, source));
  } else {
    shard_map[kSingleCheckpointFile];
  }

  // Resolve every shard before opening any, so a missing one fails fast.
  std::vector<fs::path> paths;
  uint64_t total = 0;
  for (const auto& [name, tensors] : shard_map) {
    const std::string listed_for =
        tensors.empty()       ? ""
        : tensors.size() == 1 ? fmt::format(" (listed for tensor {})", quote_name(tensors[0]))
                              : fmt::format(" (listed for tensor {} and {} more)",
                                            quote_name(tensors[0]), tensors.size() - 1);
    MLA_ASSIGN_OR_RETURN(fs::path p, resolve_shard(dir, name, source, listed_for));
    const uintmax_t size = fs::file_size(p, ec);
    // Only sizes the progress display (open() re-checks each file); saturate instead of wrapping.
    if (!ec) total = checked_add<uint64_t>(total, size).value_or(UINT64_MAX);
    paths.push_back(std::move(p));
  }

  Progress progress(total >= options.progress_min_bytes, paths.size(), total);
  ck.shards_.reserve(paths.size());
  for (const fs::path& p : paths) {
    MLA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(p.string()));
    ck.bytes_mapped_ += f.file_size();
    ck.shards_.push_back(std::move(f));
    progress.shard_done(ck.shards_.size(), ck.bytes_mapped_);
  }

  // Every tensor of every shard exactly once...
  for (uint32_t s = 0; s < ck.shards_.size(); ++s) {
    for (const TensorInfo& t : ck.shards_[s].tensors()) {
      auto [it, inserted] = ck.tensors_.try_emplace(t.name, CheckpointTensor{s, &t});
      if (!inserted)
        return data_loss(fmt::format("{}: tensor {} is in two shards, {} and {}", source,
                                     quote_name(t.name), ck.shards_[it->second.shard].path(),
                                     ck.shards_[s].path()));
    }
  }
  if (!has_index) return ck;

  // ...and exactly where weight_map says, with nothing unmapped.
  size_t mapped = 0;
  uint32_t s = 0;
  for (const auto& [file, names] : shard_map) {
    for (const std::string& name : names) {
      const CheckpointTensor* t = ck.find(name);
      if (!t || t->shard != s)
        return data_loss(fmt::format("{}: weight_map[{}] = {}, but {} has no tensor {}{}", source,
                                     quote_name(name), quote_name(file), ck.shards_[s].path(),
                                     quote_name(name),
                                     t ? " (it is in " + ck.shards_[t->shard].path() + ")" : ""));
    }
    mapped += names.size();
    ++s;
  }
  if (mapped != ck.tensors_.size()) {
    s = 0;
    for (const auto& [file, names] : shard_map) {
      const std::set<std::string_view> listed(names.begin(), names.end());
      for (const TensorInfo& t : ck.shards_[s].tensors())
        if (!listed.count(t.name))
          return data_loss(fmt::format("{}: tensor {} is not in {}'s weight_map",
                                       ck.shards_[s].path(), quote_name(t.name),
                                       kCheckpointIndexFile));
      ++s;
    }
  }
  return ck;
}

Checkpoint Checkpoint::from_gguf(std::string path, std::shared_ptr<const GgufSet> set,
                                 std::deque<CheckpointTensorInfo> tensors,
                                 std::vector<AlignedBuffer<uint8_t>> owned,
                                 std::map<int64_t, SplitKvB> split_kv_b) {
  Checkpoint ck;
  ck.dir_ = std::move(path);
  ck.bytes_mapped_ = set->bytes_mapped();
  ck.gguf_ = std::move(set);
  ck.gguf_tensors_ = std::move(tensors);
  ck.owned_ = std::move(owned);
  ck.split_kv_b_ = std::move(split_kv_b);
  for (const CheckpointTensorInfo& t : ck.gguf_tensors_)
    ck.tensors_.try_emplace(t.info.name, CheckpointTensor{t.shard, &t.info});
  return ck;
}

const std::string& Checkpoint::file_of(const CheckpointTensor& t) const {
  if (gguf_) return gguf_->files()[t.shard].path();
  return shards_[t.shard].path();
}

const SplitKvB* Checkpoint::split_kv_b(int64_t layer) const {
  const auto it = split_kv_b_.find(layer);
  return it == split_kv_b_.end() ? nullptr : &it->second;
}

const CheckpointTensor* Checkpoint::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status Checkpoint::populate(const CheckpointOptions& options) const {
  if (gguf_) return gguf_->populate();
  Progress progress(bytes_mapped_ >= options.progress_min_bytes, shards_.size(), bytes_mapped_);
  uint64_t paged = 0;
  for (const SafetensorsFile& f : shards_) {
    MLA_RETURN_IF_ERROR(f.populate());
    paged += f.file_size();
    progress.paged_in(paged);
  }
  return Status();
}

}  // namespace mla
