// F2 (docs/RELIABILITY.md §Checklist): index.json bytes plus a fixed fake model directory → the
// shard resolver. The directory (made once per process under $TMPDIR) holds two shards, a
// subdirectory, and symlinks that stay inside, leave the directory, or dangle. Invariants: every
// resolved shard path, with symlinks resolved, lies inside the directory; the same input gives the
// same result and message twice (no dependence on state or iteration order).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_common.h"
#include "model/checkpoint_index.h"

namespace {

namespace fs = std::filesystem;

const fs::path& fake_model_dir() {
  static const fs::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    fs::path d =
        fs::path(tmp && *tmp ? tmp : "/tmp") / ("mla-fuzz-st-index-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d / "subdir");
    for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                          "subdir/inner.safetensors"})
      std::ofstream(d / f) << "x";
    fs::create_symlink("model-00001-of-00002.safetensors", d / "link-in.safetensors");
    fs::create_symlink("/etc/passwd", d / "link-out.safetensors");
    fs::create_symlink("../", d / "link-parent");
    fs::create_symlink("missing.safetensors", d / "dangling.safetensors");
    std::atexit([] { fs::remove_all(fake_model_dir()); });
    return d;
  }();
  return dir;
}

std::string outcome(const std::string& text) {
  using namespace mla;
  const fs::path& dir = fake_model_dir();
  Result<ShardMap> shards = parse_checkpoint_index(text, "index.json");
  if (!shards.ok()) return shards.status().to_string();
  std::string out;
  const fs::path real_dir = fs::canonical(dir);
  for (const auto& [name, tensors] : *shards) {
    MLA_CHECK(!tensors.empty(), "shard {} with no tensor", name);
    Result<fs::path> p = resolve_shard(dir, name, "index.json", "");
    if (!p.ok()) {
      out += p.status().to_string() + "\n";
      continue;
    }
    std::error_code ec;
    const fs::path real = fs::canonical(*p, ec);
    MLA_CHECK(!ec, "resolved shard {} does not resolve: {}", name, ec.message());
    const fs::path rel = real.lexically_relative(real_dir);
    MLA_CHECK(!rel.empty() && *rel.begin() != "..", "shard {} resolved to {}, outside {}", name,
              real.string(), real_dir.string());
    out += "ok " + p->string() + "\n";
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string first = outcome(text);
  const std::string second = outcome(text);
  MLA_CHECK(first == second, "nondeterministic: {} vs {}", first, second);
  return 0;
}
