// TempDir: a fresh directory under the test temp dir, removed with everything in it when the
// test ends. Shared by the tests that write files (safetensors, checkpoints, CLI inputs).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace mla::test {

class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "mla") {
    std::string tmpl = ::testing::TempDir() + std::string(prefix) + "_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }
  // Number of entries in the directory (to catch leftover temp files).
  size_t entry_count() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path_)) ++n;
    return n;
  }

 private:
  std::string path_;
};

}  // namespace mla::test
