// A main() for the fuzz targets when libFuzzer is not linked (gcc builds): runs
// LLVMFuzzerTestOneInput once on every file named on the command line or found (non-recursively,
// in name order) in a directory named there, so a fuzz corpus and its past crashes replay as an
// ordinary test. Arguments starting with '-' (libFuzzer flags) are ignored.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  // A fresh heap copy of exactly the input's size, so ASan sees any read past its end.
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  size_t runs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("-")) continue;
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(arg, ec))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) {
        if (!run_file(f)) return 1;
        ++runs;
      }
    } else {
      if (!run_file(arg)) return 1;
      ++runs;
    }
  }
  std::printf("replay: %zu inputs ran without a failure\n", runs);
  return runs == 0 ? 1 : 0;  // an empty corpus is a broken test, not a pass
}
