// Helpers for the checkpoint tests: a scratch directory, and a checkpoint read into memory so a
// test can corrupt one thing (a tensor, a shard, the index) and write it back.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "temp_dir.h"
#include "tiny/tiny_checkpoint.h"

namespace mla::testing_model {

// A scratch directory per test (tests/common/temp_dir.h).
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("mla_model") {}
};

struct TensorData {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Every safetensors file of a directory, by file name, plus the index (null when single-file).
struct Files {
  std::map<std::string, std::vector<TensorData>> shards;
  nlohmann::json index;

  std::vector<TensorData>& shard_of(const std::string& tensor) {
    for (auto& [file, tensors] : shards)
      for (const TensorData& t : tensors)
        if (t.name == tensor) return tensors;
    ADD_FAILURE() << "no tensor " << tensor;
    return shards.begin()->second;
  }
  TensorData& tensor(const std::string& name) {
    for (TensorData& t : shard_of(name))
      if (t.name == name) return t;
    return shard_of(name).front();
  }
  // Removes the tensor from its shard and from the index.
  void erase(const std::string& name) {
    std::vector<TensorData>& s = shard_of(name);
    std::erase_if(s, [&](const TensorData& t) { return t.name == name; });
    if (!index.is_null()) index["weight_map"].erase(name);
  }
};

inline Files read_files(const std::string& dir) {
  Files f;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == kCheckpointIndexFile) {
      std::ifstream in(e.path());
      f.index = nlohmann::json::parse(in);
      continue;
    }
    if (e.path().extension() != ".safetensors") continue;
    Result<SafetensorsFile> sf = SafetensorsFile::open(e.path().string());
    EXPECT_TRUE(sf.ok()) << sf.status().to_string();
    if (!sf.ok()) continue;
    for (const TensorInfo& t : sf->tensors())
      f.shards[name].push_back(
          {t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.byte_size)});
  }
  return f;
}

inline void write_files(const std::string& dir, const Files& f) {
  for (const auto& [file, tensors] : f.shards) {
    std::vector<TensorToWrite> w;
    for (const TensorData& t : tensors)
      w.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
    const Status s = write_safetensors(dir + "/" + file, w, {});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  if (!f.index.is_null()) {
    std::ofstream out(dir + "/" + kCheckpointIndexFile, std::ios::trunc);
    out << f.index.dump(2);
  }
}

// A fresh tiny checkpoint of `family` in `dir`.
inline void make_tiny(const std::string& dir, const std::string& family, int shards = 2,
                      TinyWeights weights = TinyWeights::kDefault) {
  TinyCheckpointOptions o;
  o.family = family;
  o.shards = shards;
  o.weights = weights;
  o.seed = 7;
  Result<TinyCheckpointInfo> r = write_tiny_checkpoint(o, dir);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace mla::testing_model
