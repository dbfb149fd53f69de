// Checkpoint::open: index.json parsing (duplicate keys detected), shard-name confinement to the
// model directory, shard mapping with progress, and the index ↔ shard consistency checks.
#include "model/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/weight_layout.h"

namespace mla {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Shard file name → the tensor names weight_map assigns to it.
using ShardMap = std::map<std::string, std::vector<std::string>>;

Result<std::string> read_small_file(const fs::path& file, uint64_t limit) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(file, ec);
  if (ec) return io_error(fmt::format("{}: cannot read its size: {}", file.string(), ec.message()));
  if (size > limit)
    return invalid_argument(
        fmt::format("{}: {} bytes is larger than the limit of {}", file.string(), size, limit));
  std::ifstream in(file, std::ios::binary);
  if (!in.is_open()) return io_error(fmt::format("{}: cannot open for reading", file.string()));
  std::ostringstream text;
  if (size > 0) text << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("{}: read failed", file.string()));
  return text.str();
}

// Parses index.json into shard → tensors. nlohmann keeps the last of two equal keys, so the
// parser callback records duplicates: a tensor listed twice in weight_map could name two shards.
Result<ShardMap> parse_index(const std::string& text, const std::string& source) {
  std::string top_key, duplicate;
  std::set<std::string> seen_top, seen_tensors;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event != Json::parse_event_t::key || !duplicate.empty()) return true;
    const std::string& k = parsed.get_ref<const std::string&>();
    if (depth == 1) {
      top_key = k;
      if (!seen_top.insert(k).second) duplicate = "top-level key " + quote_name(k);
    } else if (depth == 2 && top_key == "weight_map" && !seen_tensors.insert(k).second) {
      duplicate = "weight_map key " + quote_name(k);
    }
    return true;
  };
  Json top;
  try {
    top = Json::parse(text, callback);
  } catch (const Json::exception& e) {
    return invalid_argument(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!duplicate.empty())
    return invalid_argument(fmt::format("{}: {} appears twice", source, duplicate));
  if (!top.is_object())
    return invalid_argument(fmt::format("{}: the top level must be a JSON object", source));
  const auto wm = top.find("weight_map");
  if (wm == top.end() || !wm->is_object())
    return invalid_argument(fmt::format(
        "{}: field \"weight_map\" must be an object of tensor name → file name", source));
  if (wm->empty()) return invalid_argument(fmt::format("{}: \"weight_map\" is empty", source));
  ShardMap shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      return invalid_argument(fmt::format("{}: weight_map[{}] must be a file name string, got {}",
                                          source, quote_name(it.key()), it->type_name()));
    const std::string& file = it->get_ref<const std::string&>();
    // Plain names only: anything with a separator, "." or ".." could leave the directory.
    if (file.empty() || file == "." || file == ".." || file.size() > 255 ||
        file.find('/') != std::string::npos || file.find('\0') != std::string::npos)
      return invalid_argument(
          fmt::format("{}: weight_map[{}] = {} is not a plain file name inside the model directory",
                      source, quote_name(it.key()), quote_name(file)));
    shards[file].push_back(it.key());
  }
  return shards;
}

// `dir`/`name` must exist and, after resolving symlinks, lie inside `dir`.
Result<fs::path> resolve_inside(const fs::path& dir, const std::string& name,
                                const std::string& source, const std::string& listed_for) {
  const fs::path p = dir / name;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (ec || !fs::exists(st))
    return not_found(
        fmt::format("{}: shard {}{} does not exist", source, quote_name(name), listed_for));
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec) return io_error(fmt::format("{}: cannot resolve: {}", dir.string(), ec.message()));
  const fs::path real = fs::canonical(p, ec);
  if (ec)
    return not_found(fmt::format("{}: shard {}{} cannot be resolved (a dangling symlink?): {}",
                                 source, quote_name(name), listed_for, ec.message()));
  const fs::path rel = real.lexically_relative(real_dir);
  if (rel.empty() || *rel.begin() == "..")
    return invalid_argument(
        fmt::format("{}: shard {} is a symlink to {}, outside the model directory", source,
                    quote_name(name), quote_name(real.string())));
  return p;
}

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
    MLA_ASSIGN_OR_RETURN(shard_map, parse_index(text, source));
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
    MLA_ASSIGN_OR_RETURN(fs::path p, resolve_inside(dir, name, source, listed_for));
    const uintmax_t size = fs::file_size(p, ec);
    if (!ec) total += size;  // only sizes the progress display; open() re-checks the file
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

const CheckpointTensor* Checkpoint::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace mla
