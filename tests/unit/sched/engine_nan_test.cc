// docs/RELIABILITY.md §Checklist R20: NaN weights are valid in a checkpoint and load; a request
// whose logits turn NaN ends with an error ("numerical error"), and the requests batched with it
// are untouched. The poison is one embedding row, so only a prompt containing that token meets it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <vector>

#include "io/safetensors.h"
#include "sched/engine.h"
#include "temp_dir.h"
#include "tiny/tiny_checkpoint.h"

namespace mla::sched {
namespace {

constexpr int32_t kPoisonToken = 7;

// Overwrites embedding row `token` with NaN in the shard that holds it (BF16, F16 and F32 all
// read all-ones exponent and mantissa bits as NaN).
void poison_embedding_row(const std::string& dir, int32_t token) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    uint64_t offset = 0, row_bytes = 0;
    {
      Result<SafetensorsFile> f = SafetensorsFile::open(entry.path().string());
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      const TensorInfo* t = f->find("model.embed_tokens.weight");
      if (!t) continue;
      row_bytes = t->byte_size / uint64_t(t->shape[0]);
      offset = f->data_offset() + t->byte_offset + uint64_t(token) * row_bytes;
    }
    std::fstream io(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(offset));
    const std::vector<char> nan_bytes(row_bytes, char(0xff));
    io.write(nan_bytes.data(), std::streamsize(nan_bytes.size()));
    ASSERT_TRUE(io.good());
    return;
  }
  FAIL() << "no shard holds model.embed_tokens.weight";
}

TEST(EngineNumericalError, NanLogitsFailOnlyTheirRequest) {
  mla::test::TempDir dir("nan_model");
  TinyCheckpointOptions o;
  o.family = "v2-lite";  // BF16 weights
  o.seed = 5;
  o.layers = 2;
  ASSERT_TRUE(write_tiny_checkpoint(o, dir.path()).ok());
  poison_embedding_row(dir.path(), kPoisonToken);
  RuntimeOptions ro;
  ro.max_context = 512;
  Result<std::unique_ptr<Model>> model = Model::load(dir.path(), ro);
  ASSERT_TRUE(model.ok()) << model.status().to_string();  // NaN weights load

  ThreadPool pool(2);
  EngineOptions eo;
  eo.num_blocks = 64;
  eo.page_size = 16;
  auto engine = Engine::create(**model, eo, nullptr, &pool);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto request = [](std::vector<int32_t> prompt) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_tokens = 8;
    r.ignore_eos = true;
    return r;
  };
  auto clean = (*engine)->submit(request({3, 4, 5, 6, 8, 9}));
  auto poisoned = (*engine)->submit(request({3, 4, kPoisonToken, 6}));
  auto clean2 = (*engine)->submit(request({10, 11, 12}));
  ASSERT_TRUE(clean.ok() && poisoned.ok() && clean2.ok());
  const RequestOutput bad = (*poisoned)->collect();
  EXPECT_EQ(bad.finish, FinishReason::kError);
  EXPECT_NE(bad.error.find("numerical error"), std::string::npos) << bad.error;
  for (auto* s : {&*clean, &*clean2}) {
    const RequestOutput ok = (*s)->collect();
    EXPECT_EQ(ok.finish, FinishReason::kLength) << ok.error;
    EXPECT_EQ(ok.token_ids.size(), 8u);
  }
  // The engine goes on serving and holds no page of the failed request.
  auto after = (*engine)->submit(request({3, 4, 5}));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)->collect().finish, FinishReason::kLength);
}

}  // namespace
}  // namespace mla::sched
