// The weights re-laid at load (model/model_repack.cc, RuntimeOptions::repack_weights) own
// everything the kernels read: once the loader has made them, the checkpoint's copy is never read
// again; and a load they would not fit in memory keeps the file's layouts. Left as views of the
// mapped file, block-FP8 scale grids were evicted from the page cache under memory pressure and
// faulted back, readahead and all, at every decode step of a model near the size of RAM
// (docs/BENCHMARKS.md "Repacked weights in anonymous memory").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "exact_runtime.h"
#include "io/safetensors.h"
#include "kernels/linear.h"
#include "model/generator.h"
#include "model/model_runtime.h"
#include "temp_dir.h"
#include "tiny/tiny_checkpoint.h"

namespace mla {
namespace {

RuntimeOptions exact() {
  return test::exact_runtime();
}

// Prompt logits of 19 tokens, then those of 3 decode steps (greedy: the sampler refuses a step
// whose logits are all NaN).
Result<std::vector<float>> logits(Model& m, ThreadPool& pool) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back(int32_t((i * 29 + 5) % 250));
  GenerateOptions go;
  go.max_new_tokens = 3;
  go.ignore_eos = true;
  go.keep_decode_logits = go.keep_prompt_activations = true;
  MLA_ASSIGN_OR_RETURN(auto g, generate(m, prompt, go, pool));
  std::vector<float> all = g.prompt_logits;
  all.insert(all.end(), g.decode_logits.begin(), g.decode_logits.end());
  return all;
}

// The block scales of every FP8 weight the loader re-lays (linear_preferred_dtype, the loader's
// rule: the tiny models' kv_a_proj of 56 rows is not whole groups of 16 and stays as it is)
// overwritten with NaN in the checkpoint's files, in place (a MAP_PRIVATE mapping sees the file's
// pages as they are now wherever it has not written): a re-laid weight that still read its scales
// from the file would turn its outputs into NaN. Returns how many were written.
int poison_scales(const std::string& dir) {
  std::vector<std::string> shards;
  std::map<std::string, std::vector<int64_t>> shape;  // of every tensor, whichever shard holds it
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    shards.push_back(e.path().string());
    auto f = SafetensorsFile::open(shards.back());
    EXPECT_TRUE(f.ok()) << f.status().message();
    if (!f.ok()) return 0;
    for (const TensorInfo& t : f->tensors()) shape[t.name] = t.shape;
  }
  int poisoned = 0;
  for (const std::string& path : shards) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (file offset, bytes)
    {
      auto f = SafetensorsFile::open(path);
      if (!f.ok()) return poisoned;
      for (const TensorInfo& t : f->tensors()) {
        if (!t.name.ends_with("weight_scale_inv")) continue;
        const auto v = shape.find(t.name.substr(0, t.name.size() - 10));  // "X.weight"
        if (v == shape.end() || v->second.size() != 2) {
          ADD_FAILURE() << "no 2-D weight for " << t.name;
          continue;
        }
        const uint8_t byte = 0;
        const LinearWeight w{DType::kF8E4M3, &byte, v->second[0], v->second[1], &byte, 128, 128};
        if (linear_preferred_dtype(w) == DType::kF8E4M3R16)
          ranges.push_back({f->data_offset() + t.byte_offset, t.byte_size});
      }
    }
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    for (const auto& [at, bytes] : ranges) {
      const std::vector<float> nan(bytes / 4, std::numeric_limits<float>::quiet_NaN());
      out.seekp(std::streamoff(at));
      out.write(reinterpret_cast<const char*>(nan.data()), std::streamsize(bytes));
      ++poisoned;
    }
    EXPECT_TRUE(out.good()) << path;
  }
  return poisoned;
}

class ModelRepack : public ::testing::TestWithParam<const char*> {
 protected:
  // The family's tiny checkpoint in dir_, its linear weights in `weights`.
  void write(TinyWeights weights, uint64_t seed) {
    TinyCheckpointOptions o;
    o.family = GetParam();
    o.seed = seed;
    o.weights = weights;
    ASSERT_TRUE(write_tiny_checkpoint(o, dir_.path()).ok());
  }
  test::TempDir dir_{"model_repack"};
  ThreadPool pool_{2};
};

TEST_P(ModelRepack, Fp8WeightsNeverReadTheFileAgain) {
  ASSERT_NO_FATAL_FAILURE(write(TinyWeights::kFP8, 7));
  auto m = Model::load(dir_.path(), exact());
  ASSERT_TRUE(m.ok()) << m.status().message();
  if ((*m)->repack_stats().weights == 0) GTEST_SKIP() << "this CPU's kernels repack no FP8 weight";
  const auto before = logits(**m, pool_);
  ASSERT_TRUE(before.ok()) << before.status().message();
  for (float v : *before) ASSERT_TRUE(std::isfinite(v));
  ASSERT_GT(poison_scales(dir_.path()), 0);
  const auto after = logits(**m, pool_);
  ASSERT_TRUE(after.ok()) << after.status().message();
  ASSERT_EQ(after->size(), before->size());
  for (size_t i = 0; i < before->size(); ++i) ASSERT_EQ((*after)[i], (*before)[i]) << "logit " << i;
  // The poison is real: a model loaded now reads NaN scales (every logit NaN: the sampler stops).
  auto poisoned = Model::load(dir_.path(), exact());
  ASSERT_TRUE(poisoned.ok()) << poisoned.status().message();
  const auto fresh = logits(**poisoned, pool_);
  EXPECT_FALSE(fresh.ok() &&
               std::all_of(fresh->begin(), fresh->end(), [](float v) { return std::isfinite(v); }));
}

// With less memory available than the re-laid weights need (a meminfo saying 1 MiB), the load
// keeps the file's layouts instead of being killed for memory half way: the same logits as
// --repack off, bit for bit, and the skip reported.
TEST_P(ModelRepack, SkippedWhenMemoryIsShort) {
  ASSERT_NO_FATAL_FAILURE(write(TinyWeights::kBF16, 11));
  auto roomy = Model::load(dir_.path(), exact());  // this machine's meminfo
  ASSERT_TRUE(roomy.ok()) << roomy.status().message();
  EXPECT_FALSE((*roomy)->repack_stats().skipped_for_memory);
  if ((*roomy)->repack_stats().weights == 0)
    GTEST_SKIP() << "this CPU's kernels repack no BF16 weight";
  const std::string meminfo = dir_.path() + "/meminfo";
  {
    std::ofstream f(meminfo);
    f << "MemTotal:       2048 kB\nMemFree:        1024 kB\nMemAvailable:   1024 kB\n";
  }
  RuntimeOptions short_ro = exact();
  short_ro.meminfo_path = meminfo;
  RuntimeOptions off = exact();
  off.repack_weights = false;
  auto a = Model::load(dir_.path(), short_ro);
  auto b = Model::load(dir_.path(), off);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->repack_stats().skipped_for_memory);
  EXPECT_EQ((*a)->repack_stats().weights, 0);
  const auto got = logits(**a, pool_), want = logits(**b, pool_);
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) ASSERT_EQ((*got)[i], (*want)[i]) << "logit " << i;
}

INSTANTIATE_TEST_SUITE_P(Families, ModelRepack, ::testing::Values("v2-lite", "v3"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace mla
