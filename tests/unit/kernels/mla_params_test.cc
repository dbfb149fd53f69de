// validate() of the MLA op parameters, absorbed-weight preparation and path choice.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/ggml_quant.h"
#include "core/rng.h"
#include "kernels/mla_absorbed_weights.h"
#include "kernels/mla_attention.h"
#include "kernels/mla_params.h"
#include "kernels/ref/linear_ref.h"
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
    p.q = q.data();
    p.cache = {.rows = cache.data(),
               .page_size = 16,
               .num_blocks = 4,
               .block_table = table.data(),
               .max_blocks_per_seq = 2,
               .seq_lens = seqlens.data()};
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
  expect_error([](DecodeFixture& f) { f.p.cache.page_size = 0; }, "page_size");
  expect_error([](DecodeFixture& f) { f.p.cache.dtype = DType::kI32; }, "kv_cache dtype");
  expect_error(
      [](DecodeFixture& f) {
        f.p.cache.dtype = DType::kE2M1;
        f.p.cache.global_scale = 0.0f;
      },
      "kv_global_scale");
  expect_error([](DecodeFixture& f) { f.p.q_dtype = DType::kI32; }, "q dtype");
  expect_error([](DecodeFixture& f) { f.seqlens[1] = -1; }, "seq_lens");
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

LinearWeight kv_b_weight(DType t, const void* data, int h, int d_n, int d_v, int r) {
  return LinearWeight{t, static_cast<const uint8_t*>(data), int64_t(h) * (d_n + d_v), r};
}

TEST(PrepareAbsorbedWeights, SplitsKvBProjPerHeadExactly) {
  const int h = 3, d_n = 2, d_v = 3, r = 4;
  std::vector<float> kv_b(size_t(h) * (d_n + d_v) * r);
  for (size_t i = 0; i < kv_b.size(); ++i) kv_b[i] = float(i);  // integers: exact in BF16 and F32
  std::vector<uint16_t> kv_b16(kv_b.size());
  for (size_t i = 0; i < kv_b.size(); ++i) kv_b16[i] = f32_to_bf16(kv_b[i]);
  for (bool bf16 : {false, true}) {
    auto w = bf16 ? prepare_absorbed_weights(
                        kv_b_weight(DType::kBF16, kv_b16.data(), h, d_n, d_v, r), h, d_n, d_v)
                  : prepare_absorbed_weights(kv_b_weight(DType::kF32, kv_b.data(), h, d_n, d_v, r),
                                             h, d_n, d_v);
    ASSERT_TRUE(w.ok());
    ASSERT_EQ(w->uk_t.size(), size_t(h));
    ASSERT_EQ(w->uv.size(), size_t(h));
    for (int hh = 0; hh < h; ++hh) {
      const LinearWeight &uk = w->uk_t[hh], &uv = w->uv[hh];
      EXPECT_EQ(uk.out, r);
      EXPECT_EQ(uk.in, d_n);
      EXPECT_EQ(uv.out, d_v);
      EXPECT_EQ(uv.in, r);
      for (int c = 0; c < r; ++c) {
        for (int n = 0; n < d_n; ++n) {
          const float want = kv_b[(hh * (d_n + d_v) + n) * r + c];
          EXPECT_EQ(w->w_uk[(hh * d_n + n) * r + c], want);
          EXPECT_EQ(ref::linear_weight(uk, c, n), want);  // transposed
        }
        for (int n = 0; n < d_v; ++n) {
          const float want = kv_b[(hh * (d_n + d_v) + d_n + n) * r + c];
          EXPECT_EQ(w->w_uv[(hh * d_v + n) * r + c], want);
          EXPECT_EQ(ref::linear_weight(uv, n, c), want);
        }
      }
    }
  }
  // Wrong row count for the dims, FP8 without scales: refused, naming kv_b_proj.
  auto rows = prepare_absorbed_weights(kv_b_weight(DType::kF32, kv_b.data(), h, d_n, d_v, r), h,
                                       d_n + 1, d_v);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("kv_b_proj: 15 rows"), std::string::npos)
      << rows.status().message();
  auto bad = prepare_absorbed_weights(kv_b_weight(DType::kF8E4M3, kv_b.data(), h, d_n, d_v, r), h,
                                      d_n, d_v);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("weight_scale_inv"), std::string::npos);
}

// Block-FP8 kv_b_proj whose heads do not start on scale-block boundaries (rows per head 5 + 7,
// blocks of 8 rows, 3 columns): every element of the per-head copies, scale included, is the
// checkpoint's W_real, and so is the FP32 split.
TEST(PrepareAbsorbedWeights, Fp8CopiesKeepEveryElementsScale) {
  const int h = 4, d_n = 4, d_v = 6, r = 7;
  const int out = h * (d_n + d_v), br = 8, bc = 3;
  const int sr = (out + br - 1) / br, sc = (r + bc - 1) / bc;
  std::vector<uint8_t> q(size_t(out) * r);
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t((i * 37 + 11) % 0x7E);  // finite codes
  std::vector<float> scale(size_t(sr) * sc);
  for (size_t i = 0; i < scale.size(); ++i)
    scale[i] = std::ldexp(1.0f + float(i) / 64, int(i % 5) - 2);
  LinearWeight kv_b{
      DType::kF8E4M3, q.data(), out, r, reinterpret_cast<const uint8_t*>(scale.data()), br, bc};
  auto w = prepare_absorbed_weights(kv_b, h, d_n, d_v);
  ASSERT_TRUE(w.ok()) << w.status().message();
  for (int hh = 0; hh < h; ++hh)
    for (int c = 0; c < r; ++c) {
      for (int n = 0; n < d_n; ++n) {
        const double want = ref::linear_weight(kv_b, hh * (d_n + d_v) + n, c);
        EXPECT_EQ(ref::linear_weight(w->uk_t[hh], c, n), want) << hh << " " << c << " " << n;
        EXPECT_EQ(w->w_uk[(hh * d_n + n) * r + c], float(want));
      }
      for (int n = 0; n < d_v; ++n) {
        const double want = ref::linear_weight(kv_b, hh * (d_n + d_v) + d_n + n, c);
        EXPECT_EQ(ref::linear_weight(w->uv[hh], n, c), want) << hh << " " << n << " " << c;
        EXPECT_EQ(w->w_uv[(hh * d_v + n) * r + c], float(want));
      }
    }
}

// A GGUF file's split pair (attn_k_b [h·r, d_n] = W_UK[h]ᵀ, attn_v_b [h·d_v, r] = W_UV[h], here
// Q8_0): uk_t / uv view the file's rows of each head, element for element the decoded values that
// kv_b_proj (rebuilt from them) holds; shapes that do not fit the dims are refused by name.
TEST(PrepareAbsorbedWeights, StoredPairIsViewedPerHead) {
  const int h = 3, d_n = 64, d_v = 32, r = 96;
  Rng rng(9);
  const auto quantized = [&](int rows, int cols, std::vector<uint8_t>& bytes) {
    const int64_t row_bytes = dtype_bytes(DType::kQ8_0, cols);
    bytes.resize(size_t(rows * row_bytes));
    std::vector<float> x(static_cast<size_t>(cols));
    for (int i = 0; i < rows; ++i) {
      for (float& v : x) v = float(rng.normal());
      EXPECT_TRUE(quantize_row(DType::kQ8_0, x, bytes.data() + i * row_bytes).ok());
    }
    return LinearWeight{DType::kQ8_0, bytes.data(), rows, cols};
  };
  std::vector<uint8_t> kb, vb;
  const StoredHeadWeights stored{quantized(h * r, d_n, kb), quantized(h * d_v, r, vb)};
  // kv_b_proj in FP32, per head its d_n W_UK rows (columns of k_b) then its d_v W_UV rows.
  std::vector<float> kv_b(size_t(h) * (d_n + d_v) * r);
  for (int hh = 0; hh < h; ++hh)
    for (int c = 0; c < r; ++c) {
      for (int n = 0; n < d_n; ++n)
        kv_b[(size_t(hh) * (d_n + d_v) + n) * r + c] =
            float(ref::linear_weight(stored.uk_t, hh * r + c, n));
      for (int n = 0; n < d_v; ++n)
        kv_b[(size_t(hh) * (d_n + d_v) + d_n + n) * r + c] =
            float(ref::linear_weight(stored.uv, hh * d_v + n, c));
    }
  const LinearWeight kv{DType::kF32, reinterpret_cast<const uint8_t*>(kv_b.data()), h * (d_n + d_v),
                        r};
  auto w = prepare_absorbed_weights(kv, h, d_n, d_v, &stored);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_TRUE(w->uk_t_bytes.empty());  // no copies
  for (int hh = 0; hh < h; ++hh) {
    EXPECT_EQ(w->uk_t[hh].dtype, DType::kQ8_0);
    for (int c = 0; c < r; ++c) {
      for (int n = 0; n < d_n; ++n) {
        const float want = kv_b[(size_t(hh) * (d_n + d_v) + n) * r + c];
        EXPECT_EQ(ref::linear_weight(w->uk_t[hh], c, n), want);
        EXPECT_EQ(w->w_uk[(size_t(hh) * d_n + n) * r + c], want);
      }
      for (int n = 0; n < d_v; ++n)
        EXPECT_EQ(ref::linear_weight(w->uv[hh], n, c),
                  kv_b[(size_t(hh) * (d_n + d_v) + d_n + n) * r + c]);
    }
  }
  StoredHeadWeights wrong = stored;
  wrong.uv.out -= 1;
  auto bad = prepare_absorbed_weights(kv, h, d_n, d_v, &wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("attn_v_b"), std::string::npos) << bad.status().message();
}

TEST(MlaPath, LengthRuleThresholdIsInclusive) {
  constexpr PrefillPathRule kLength = PrefillPathRule::kLength;
  EXPECT_EQ(choose_mla_path(1, kDefaultPrefillAbsorptionThreshold, 0, kLength), MlaPath::kAbsorbed);
  EXPECT_EQ(choose_mla_path(256, 256, 0, kLength), MlaPath::kAbsorbed);
  EXPECT_EQ(choose_mla_path(257, 256, 5000, kLength), MlaPath::kDecompressed);
  EXPECT_EQ(choose_mla_path(1, 0, 5000, kLength), MlaPath::kDecompressed);
}

// The cost rule: absorbed iff s_q (prior + s_q / 2) ≤ T prior. A fresh prompt is never absorbed;
// over a cached context the crossover approaches T as the context grows: at T 256 and 1,024
// cached tokens, 256 · 1,024 = 262,144 ≥ s_q (1,024 + s_q / 2) up to s_q 230.
TEST(MlaPath, CostRuleAbsorbsOnlyOverACachedContext) {
  constexpr PrefillPathRule kCost = PrefillPathRule::kCost;
  for (int s_q : {2, 16, 256})
    EXPECT_EQ(choose_mla_path(s_q, 256, 0, kCost), MlaPath::kDecompressed) << s_q;
  EXPECT_EQ(choose_mla_path(230, 256, 1024, kCost), MlaPath::kAbsorbed);
  EXPECT_EQ(choose_mla_path(231, 256, 1024, kCost), MlaPath::kDecompressed);
  EXPECT_EQ(choose_mla_path(16, 256, 64, kCost), MlaPath::kAbsorbed);  // 16 · 72 ≤ 256 · 64
  EXPECT_EQ(choose_mla_path(200, 256, 64, kCost), MlaPath::kDecompressed);
  EXPECT_EQ(choose_mla_path(255, 256, 1 << 24, kCost), MlaPath::kAbsorbed);  // no overflow
  EXPECT_EQ(choose_mla_path(257, 256, 1 << 24, kCost), MlaPath::kDecompressed);
  EXPECT_EQ(choose_mla_path(1, 0, 1 << 24, kCost), MlaPath::kDecompressed);
}

// A crossover measured over a context, turned into the cost rule's T, is where the rule puts the
// crossover over that context: chunks up to it absorbed, the next one not. Checked against
// choose_mla_path itself over a grid (not the formula again), with T at its smallest.
TEST(MlaPath, CostRuleThresholdPutsTheCrossoverWhereItWasMeasured) {
  constexpr PrefillPathRule kCost = PrefillPathRule::kCost;
  for (int prior : {1, 7, 64, 1024, 4096, 16384, 1 << 22})
    for (int m : {1, 2, 100, 171, 230, 256, 1000, 4096}) {
      const int t = cost_rule_threshold(m, prior);
      EXPECT_GE(t, m);
      EXPECT_EQ(choose_mla_path(m, t, prior, kCost), MlaPath::kAbsorbed) << m << " " << prior;
      EXPECT_EQ(choose_mla_path(m + 1, t, prior, kCost), MlaPath::kDecompressed)
          << m << " " << prior;
      EXPECT_EQ(choose_mla_path(m, t - 1, prior, kCost), MlaPath::kDecompressed)
          << m << " " << prior;
    }
  EXPECT_EQ(cost_rule_threshold(230, 1024), 256);  // the example above, backwards
  EXPECT_EQ(cost_rule_threshold(256, 1 << 22), 257);
  EXPECT_EQ(cost_rule_threshold(0, 1024), 0);   // every chunk decompressed
  EXPECT_EQ(cost_rule_threshold(128, 0), 128);  // nothing to fit over no context
}

}  // namespace
}  // namespace mla
