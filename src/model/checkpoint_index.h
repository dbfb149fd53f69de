// The index side of a sharded checkpoint, apart from the mapping (checkpoint.h) so that it can be
// tested and fuzzed on its own (fuzz/fuzz_st_index.cc): model.safetensors.index.json text →
// shard file → tensor names, and each shard name → a path that cannot leave the model directory
// (docs/RELIABILITY.md §Checklist R16).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "mla/status.h"

namespace mla {

// Shard file name → the tensor names weight_map assigns to it (names in file order).
using ShardMap = std::map<std::string, std::vector<std::string>>;

// The whole file as text; invalid_argument when it is larger than `limit` (checked before any
// read), io_error when it cannot be read.
Result<std::string> read_small_file(const std::filesystem::path& file, uint64_t limit);

// index.json text → shard map. weight_map must be a non-empty object of tensor name → plain file
// name (no '/', NUL, "." or "..", at most 255 bytes); a key repeated at the top level or in
// weight_map is an error. invalid_argument naming `source`, the key and the value.
Result<ShardMap> parse_checkpoint_index(const std::string& text, const std::string& source);

// dir/name, which must exist and, after resolving symlinks, lie inside dir: not_found (missing,
// dangling), invalid_argument (a symlink leaving dir), io_error (dir cannot be resolved).
// `listed_for` (" (listed for tensor ...)" or "") is appended to the shard in messages.
Result<std::filesystem::path> resolve_shard(const std::filesystem::path& dir,
                                            const std::string& name, const std::string& source,
                                            const std::string& listed_for);

}  // namespace mla
