// Tests of the KV cache record formats and the memory estimate: the golden numbers of
// docs/kernels/kv_formats.md §Memory per token (sizes per token-layer and the V2 example), layouts,
// and overflow handling.
#include "cache/cache_format.h"

#include <gtest/gtest.h>

#include "cache/memory_estimate.h"

namespace mla {
namespace {

TEST(CacheFormat, GoldenBytesPerTokenAtDeepSeekDims) {
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kBF16, 512, 64), 1152);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kFP8E4M3, 512, 64), 656);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kINT8, 512, 64), 656);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kNVFP4, 512, 64), 416);
  EXPECT_EQ(dense_kv_bytes_per_token(128, 128), 65536);
  EXPECT_EQ(dense_kv_bytes_per_token(kGqaKvHeads, 128), 4096);
}

TEST(CacheFormat, Fp8LayoutIsFlashMlas) {
  // 512 e4m3 | 4 fp32 scales | 64 BF16 rope, no padding needed.
  const KvRecordLayout l = kv_record_layout(KvCacheDtype::kFP8E4M3, 512, 64);
  EXPECT_EQ(l.latent_offset_bytes, 0);
  EXPECT_EQ(l.latent_bytes, 512);
  EXPECT_EQ(l.scale_offset_bytes, 512);
  EXPECT_EQ(l.scale_bytes, 16);
  EXPECT_EQ(l.rope_offset_bytes, 528);
  EXPECT_EQ(l.rope_bytes, 128);
  EXPECT_EQ(l.record_bytes, 656);
}

TEST(CacheFormat, Nvfp4Layout) {
  // 256 bytes e2m1 | 32 e4m3 block scales | 64 BF16 rope.
  const KvRecordLayout l = kv_record_layout(KvCacheDtype::kNVFP4, 512, 64);
  EXPECT_EQ(l.latent_bytes, 256);
  EXPECT_EQ(l.scale_offset_bytes, 256);
  EXPECT_EQ(l.scale_bytes, 32);
  EXPECT_EQ(l.rope_offset_bytes, 288);
  EXPECT_EQ(l.rope_bytes, 128);
  EXPECT_EQ(l.record_bytes, 416);
}

TEST(CacheFormat, Bf16IsTheUnpaddedRow) {
  const KvRecordLayout l = kv_record_layout(KvCacheDtype::kBF16, 256, 32);  // MiniCPM3 dims
  EXPECT_EQ(l.latent_bytes, 512);
  EXPECT_EQ(l.scale_bytes, 0);
  EXPECT_EQ(l.rope_offset_bytes, 512);
  EXPECT_EQ(l.record_bytes, (256 + 32) * 2);
  // A row that is not a multiple of 16 bytes stays unpadded: the kernels index r + d_r values.
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kBF16, 3, 1), 8);
}

TEST(CacheFormat, QuantisedRecordsArePaddedTo16AndSectionsAligned) {
  for (KvCacheDtype d : {KvCacheDtype::kFP8E4M3, KvCacheDtype::kINT8, KvCacheDtype::kNVFP4}) {
    for (int r : {1, 15, 16, 100, 130, 256, 511, 512, 1000}) {
      for (int d_r : {0, 1, 32, 64}) {
        const KvRecordLayout l = kv_record_layout(d, r, d_r);
        SCOPED_TRACE(testing::Message() << kv_cache_dtype_name(d) << " r=" << r << " d_r=" << d_r);
        EXPECT_EQ(l.record_bytes % kKvRecordAlignBytes, 0);
        EXPECT_GE(l.scale_offset_bytes, l.latent_offset_bytes + l.latent_bytes);
        EXPECT_GE(l.rope_offset_bytes, l.scale_offset_bytes + l.scale_bytes);
        EXPECT_GE(l.record_bytes, l.rope_offset_bytes + l.rope_bytes);
        EXPECT_LT(l.record_bytes - (l.rope_offset_bytes + l.rope_bytes), kKvRecordAlignBytes);
        EXPECT_EQ(l.rope_offset_bytes % 2, 0);
        if (d != KvCacheDtype::kNVFP4) {
          EXPECT_EQ(l.scale_offset_bytes % 4, 0);
        }
      }
    }
  }
  // One scale per started block: 130 values need 2 fp32 scales (FP8) and 9 e4m3 scales (NVFP4).
  EXPECT_EQ(kv_record_layout(KvCacheDtype::kINT8, 130, 0).scale_bytes, 8);
  EXPECT_EQ(kv_record_layout(KvCacheDtype::kNVFP4, 130, 0).scale_bytes, 9);
}

TEST(CacheFormat, NamesRoundTrip) {
  for (KvCacheDtype d : kAllKvCacheDtypes) {
    Result<KvCacheDtype> back = parse_kv_cache_dtype(kv_cache_dtype_name(d));
    ASSERT_TRUE(back.ok()) << kv_cache_dtype_name(d);
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(kv_cache_dtype_name(KvCacheDtype::kFP8E4M3), "fp8_e4m3");
  Result<KvCacheDtype> bad = parse_kv_cache_dtype("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"fp8\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("fp8_e4m3"), std::string::npos);
}

// docs/kernels/kv_formats.md §Memory per token: DeepSeek-V2, 60 layers, context 65,536, batch 16.
KvMemoryQuery v2_example() {
  KvMemoryQuery q;
  q.dims = {.num_layers = 60,
            .num_heads = 128,
            .head_dim = 128,
            .kv_lora_rank = 512,
            .qk_rope_head_dim = 64};
  q.context = 65536;
  q.batch = 16;
  q.page_size = 64;
  return q;
}

TEST(MemoryEstimate, V2ExampleExact) {
  Result<KvMemoryEstimate> est = estimate_kv_memory(v2_example());
  ASSERT_TRUE(est.ok()) << est.status().to_string();
  EXPECT_EQ(est->token_slots, 1048576);
  ASSERT_EQ(est->layouts.size(), 6u);
  const auto& mha = est->layouts[0];
  const auto& gqa = est->layouts[1];
  const auto& bf16 = est->layouts[2];
  EXPECT_EQ(mha.name, "mha");
  EXPECT_EQ(gqa.name, "gqa8");
  EXPECT_EQ(bf16.name, "mla_bf16");
  EXPECT_EQ(est->layouts[3].name, "mla_fp8_e4m3");
  EXPECT_EQ(est->layouts[4].name, "mla_int8");
  EXPECT_EQ(est->layouts[5].name, "mla_nvfp4");

  EXPECT_EQ(mha.total_bytes, 4'123'168'604'160);  // 3.75 TiB
  EXPECT_EQ(mha.total_bytes, int64_t{15} << 38);
  EXPECT_EQ(gqa.total_bytes, 257'698'037'760);  // 240 GiB
  EXPECT_EQ(gqa.total_bytes, int64_t{240} << 30);
  EXPECT_EQ(bf16.total_bytes, 72'477'573'120);  // 67.5 GiB
  EXPECT_EQ(bytes_to_gib(bf16.total_bytes), 67.5);
  EXPECT_EQ(bytes_to_gib(mha.total_bytes) / 1024, 3.75);
  EXPECT_EQ(bf16.bytes_per_sequence * 16, bf16.total_bytes);
  EXPECT_EQ(bf16.bytes_per_sequence, int64_t{1152} * 60 * 65536);
  EXPECT_EQ(est->layouts[3].total_bytes, int64_t{656} * 60 * 1048576);
  EXPECT_EQ(est->layouts[5].total_bytes, int64_t{416} * 60 * 1048576);

  EXPECT_EQ(bf16.pages_per_sequence, 1024);
  EXPECT_EQ(bf16.page_bytes, 73728);  // 72 KiB
  EXPECT_EQ(bf16.paged_bytes_per_sequence, bf16.bytes_per_sequence);
  // 1 − 1152/65536 and 1 − 4096/65536 are exact in binary.
  EXPECT_EQ(mha.saved_vs_mha_percent, 0.0);
  EXPECT_EQ(gqa.saved_vs_mha_percent, 93.75);
  EXPECT_EQ(bf16.saved_vs_mha_percent, 98.2421875);
}

TEST(MemoryEstimate, PartialLastPage) {
  KvMemoryQuery q = v2_example();
  q.context = 65537;
  q.batch = 1;
  Result<KvMemoryEstimate> est = estimate_kv_memory(q);
  ASSERT_TRUE(est.ok());
  const auto& bf16 = est->layouts[2];
  EXPECT_EQ(bf16.pages_per_sequence, 1025);
  EXPECT_EQ(bf16.bytes_per_sequence, int64_t{1152} * 60 * 65537);
  EXPECT_EQ(bf16.paged_bytes_per_sequence, int64_t{73728} * 60 * 1025);
}

TEST(MemoryEstimate, GqaNeverHasMoreHeadsThanMha) {
  KvMemoryQuery q = v2_example();
  q.dims.num_heads = 4;
  Result<KvMemoryEstimate> est = estimate_kv_memory(q);
  ASSERT_TRUE(est.ok());
  EXPECT_EQ(est->layouts[1].bytes_per_token_layer, est->layouts[0].bytes_per_token_layer);
}

TEST(MemoryEstimate, OverflowIsAnErrorNotAWrap) {
  KvMemoryQuery q = v2_example();
  q.context = int64_t{1} << 50;  // × 65,536 bytes × 60 layers leaves int64
  Result<KvMemoryEstimate> est = estimate_kv_memory(q);
  ASSERT_FALSE(est.ok());
  EXPECT_EQ(est.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(est.status().message().find("overflow"), std::string::npos);
  EXPECT_NE(est.status().message().find("1125899906842624"), std::string::npos);

  q = v2_example();
  q.context = INT64_MAX;
  q.batch = 2;  // context × batch itself overflows
  EXPECT_FALSE(estimate_kv_memory(q).ok());

  q = v2_example();
  q.batch = int64_t{1} << 40;  // the per-sequence size fits, the total does not
  est = estimate_kv_memory(q);
  ASSERT_FALSE(est.ok());
  EXPECT_NE(est.status().message().find("MHA"), std::string::npos);
}

TEST(MemoryEstimate, BadInputsAreErrors) {
  auto expect_error = [](KvMemoryQuery q, const char* what) {
    Result<KvMemoryEstimate> est = estimate_kv_memory(q);
    ASSERT_FALSE(est.ok()) << what;
    EXPECT_NE(est.status().message().find(what), std::string::npos) << est.status().message();
  };
  KvMemoryQuery q = v2_example();
  q.context = 0;
  expect_error(q, "context");
  q = v2_example();
  q.batch = -1;
  expect_error(q, "batch");
  q = v2_example();
  q.page_size = 0;
  expect_error(q, "page size");
  q = v2_example();
  q.dims.num_layers = 0;
  expect_error(q, "layers");
  q = v2_example();
  q.dims.kv_lora_rank = kMaxKvMemoryDim + 1;
  expect_error(q, "kv_lora_rank");
  q = v2_example();
  q.dims.num_heads = -5;
  expect_error(q, "num_attention_heads");
}

}  // namespace
}  // namespace mla
