// The index side of a sharded checkpoint (see checkpoint_index.h): index.json parsing with
// duplicate keys detected, and the confinement of shard names to the model directory.
#include "model/checkpoint_index.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/json_limits.h"
#include "model/weight_layout.h"

namespace mla {

namespace fs = std::filesystem;
using Json = nlohmann::json;

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

// nlohmann keeps the last of two equal keys, so the parser callback records duplicates: a tensor
// listed twice in weight_map could name two shards.
Result<ShardMap> parse_checkpoint_index(const std::string& text, const std::string& source) {
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
  if (const std::optional<size_t> at = json_depth_exceeded(text))
    return invalid_argument(fmt::format("{}: JSON nests deeper than {} levels (at byte {})", source,
                                        kMaxJsonFileDepth, *at));
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

Result<fs::path> resolve_shard(const fs::path& dir, const std::string& name,
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

}  // namespace mla
