// validate() of the MLA op parameters, absorbed-weight preparation and path choice.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "kernels/mla_attention.h"
#include "kernels/mla_params.h"
#include "kernels/registry.h"

namespace mla {
namespace {

struct DecodeFixture {
  std::vector<uint16_t> q = std::vector<uint16_t>(2 * 3 * 576),
                        cache = std::vector<uint16_t>(4 * 16 * 576);
  std::vector<int32_t> table = {0, 1, 2, 3};  // [b = 2, max_blocks = 2]
  std::vector<int32_t> seqlens = {20, 17};
  std::vector<float> out = std::vector<float>(2 * 3 * 512), lse = std::vector<float>(2 * 3);
  MlaDecodeParams p;
  DecodeFixture() {
    p.b = 2;
    p.s_q = 1;
    p.h_q = 3;
    p.page_size = 16;
    p.num_blocks = 4;
    p.max_blocks_per_seq = 2;
    p.q = q.data();
    p.kv_cache = cache.data();
    p.block_table = table.data();
    p.cache_seqlens = seqlens.data();
    p.out = out.data();
    p.lse = lse.data();
  }
};

TEST(ValidateDecode, AcceptsAWellFormedCall) {
  EXPECT_TRUE(validate(DecodeFixture().p).ok());
}

TEST(ValidateDecode, RejectsWhatKernelsWouldTrust) {
  auto expect_error = [](auto mutate, const char* needle) {
    DecodeFixture f;
    mutate(f);
    const Status s = validate(f.p);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_error([](DecodeFixture& f) { f.p.h_q = 0; }, "h_q");
  expect_error([](DecodeFixture& f) { f.p.d_v = 600; }, "d_v");
  expect_error([](DecodeFixture& f) { f.p.page_size = 0; }, "page_size");
  expect_error([](DecodeFixture& f) { f.p.kv_dtype = DType::kI32; }, "kv_cache dtype");
  expect_error(
      [](DecodeFixture& f) {
        f.p.kv_dtype = DType::kE2M1;
        f.p.kv_global_scale = 0.0f;
      },
      "kv_global_scale");
  expect_error([](DecodeFixture& f) { f.p.q_dtype = DType::kI32; }, "q dtype");
  expect_error([](DecodeFixture& f) { f.seqlens[1] = -1; }, "cache_seqlens");
  expect_error([](DecodeFixture& f) { f.seqlens[0] = 33; }, "block table has 2 columns");
  expect_error([](DecodeFixture& f) { f.table[3] = 4; }, "block_table[1] = 4");
  expect_error([](DecodeFixture& f) { f.table[2] = -1; }, "block_table[0] = -1");
  expect_error([](DecodeFixture& f) { f.p.lse = nullptr; }, "required");
  expect_error(
      [](DecodeFixture& f) {
        f.p.scores = f.out.data();
        f.p.scores_stride = 10;
      },
      "scores_stride");
}

TEST(ValidateDecode, UnusedTableEntriesAreNotChecked) {
  DecodeFixture f;
  f.seqlens = {16, 0};  // sequence 0 uses one page, sequence 1 none
  f.table[1] = std::numeric_limits<int32_t>::min();
  f.table[2] = -7;
  f.table[3] = 1 << 30;
  EXPECT_TRUE(validate(f.p).ok());
}

TEST(Registry, EveryVariantIsNamedOpBackendIsaDtype) {
  for (const auto& v : mla_decode_variants()) {
    EXPECT_EQ(v.name.rfind("mla_decode." + v.backend + ".", 0), 0u) << v.name;
    EXPECT_EQ(std::count(v.name.begin(), v.name.end(), '.'), 3) << v.name;
  }
  for (const auto& v : mla_prefill_variants())
    EXPECT_EQ(v.name.rfind("mla_prefill." + v.backend + ".", 0), 0u);
}

TEST(Registry, SelectionErrorsNameTheRequest) {
  DecodeFixture f;
  auto bad = select_variant(f.p, "cpu", "mla_decode.cpu.nonexistent.bf16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nonexistent"), std::string::npos);
  auto none = select_variant(f.p, "gpu");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("gpu"), std::string::npos);
  auto ref = select_variant(f.p, "ref");
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ((*ref)->backend, "ref");
}

TEST(PrepareAbsorbedWeights, SplitsKvBProjPerHeadExactly) {
  const int h = 3, d_n = 2, d_v = 3, r = 4;
  std::vector<float> kv_b(size_t(h) * (d_n + d_v) * r);
  for (size_t i = 0; i < kv_b.size(); ++i) kv_b[i] = float(i);  // integers: exact in BF16 and F32
  std::vector<uint16_t> kv_b16(kv_b.size());
  for (size_t i = 0; i < kv_b.size(); ++i) kv_b16[i] = f32_to_bf16(kv_b[i]);
  for (bool bf16 : {false, true}) {
    auto w = bf16 ? prepare_absorbed_weights(DType::kBF16, kv_b16.data(), h, d_n, d_v, r)
                  : prepare_absorbed_weights(DType::kF32, kv_b.data(), h, d_n, d_v, r);
    ASSERT_TRUE(w.ok());
    for (int hh = 0; hh < h; ++hh)
      for (int c = 0; c < r; ++c) {
        for (int n = 0; n < d_n; ++n)
          EXPECT_EQ(w->w_uk[(hh * d_n + n) * r + c], kv_b[(hh * (d_n + d_v) + n) * r + c]);
        for (int n = 0; n < d_v; ++n)
          EXPECT_EQ(w->w_uv[(hh * d_v + n) * r + c], kv_b[(hh * (d_n + d_v) + d_n + n) * r + c]);
      }
  }
  auto bad = prepare_absorbed_weights(DType::kF8E4M3, kv_b.data(), h, d_n, d_v, r);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("F8_E4M3"), std::string::npos);
}

TEST(MlaPath, ThresholdIsInclusive) {
  EXPECT_EQ(choose_mla_path(1, kDefaultPrefillAbsorptionThreshold), MlaPath::kAbsorbed);
  EXPECT_EQ(choose_mla_path(256, 256), MlaPath::kAbsorbed);
  EXPECT_EQ(choose_mla_path(257, 256), MlaPath::kDecompressed);
  EXPECT_EQ(choose_mla_path(1, 0), MlaPath::kDecompressed);
}

}  // namespace
}  // namespace mla
