// Tests of Checkpoint on valid directories: the name index, bytes mapped, progress on stderr.
#include "model/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint_test_util.h"

namespace mla {
namespace {

using testing_model::make_tiny;
using testing_model::TempDir;

TEST(Checkpoint, IndexesEveryTensorOfEveryShard) {
  TempDir dir;
  make_tiny(dir.path(), "kimi-k2");
  Result<Checkpoint> ck = Checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  ASSERT_TRUE(ck->indexed());
  ASSERT_EQ(ck->shards().size(), 2u);
  uint64_t files = 0;
  size_t tensors = 0;
  for (const SafetensorsFile& s : ck->shards()) {
    files += std::filesystem::file_size(s.path());
    tensors += s.tensors().size();
  }
  EXPECT_EQ(ck->bytes_mapped(), files);
  EXPECT_EQ(ck->tensors().size(), tensors);
  const CheckpointTensor* t = ck->find("model.layers.1.mlp.experts.11.down_proj.weight_scale_inv");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->info, ck->shards()[t->shard].find(t->info->name));
  EXPECT_EQ(ck->find("model.layers.1.mlp.experts.12.down_proj.weight"), nullptr);

  // Moving the checkpoint keeps the TensorInfo pointers valid.
  Checkpoint moved = std::move(ck.value());
  EXPECT_EQ(moved.find(t->info->name)->info, t->info);
}

TEST(Checkpoint, ProgressOnStderrForBigCheckpointsOnly) {
  TempDir dir;
  make_tiny(dir.path(), "v2-lite");
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(Checkpoint::open(dir.path()).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // under the 1 GiB default
  CheckpointOptions o;
  o.progress_min_bytes = 0;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(Checkpoint::open(dir.path(), o).ok());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("mla: mapped 2/2 shards"), std::string::npos) << err;
}

}  // namespace
}  // namespace mla
