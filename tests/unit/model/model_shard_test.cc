// A rank's weight slices (model/model_shard.h) against kernels/ref's FP64 reading of the whole
// matrix: every value of a slice must be the whole matrix's value at the same place, exactly
// (a slice copies codes and reuses scales; nothing is rounded), for every stored format.
#include "model/model_shard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/ggml_quant.h"
#include "kernels/ref/linear_ref.h"
#include "model/weight_requant.h"

namespace mla {
namespace {

TEST(SplitRange, CoversEverythingInOrderOnGranules) {
  for (int64_t total : {1, 7, 64, 100, 1408, 2816, 10944})
    for (int parts : {1, 2, 3, 4, 8})
      for (int64_t granule : {1, 32, 256}) {
        int64_t at = 0, smallest = total, largest = 0;
        for (int p = 0; p < parts; ++p) {
          const IndexRange r = split_range(total, parts, p, granule);
          EXPECT_EQ(r.begin, at) << total << " " << parts << " " << granule;
          EXPECT_GE(r.size(), 0);
          if (r.end != total) {
            EXPECT_EQ(r.end % granule, 0);
          }
          smallest = std::min(smallest, r.size());
          largest = std::max(largest, r.size());
          at = r.end;
        }
        EXPECT_EQ(at, total);
        EXPECT_LE(largest - smallest, granule);  // as even as whole granules allow
      }
}

// [out, in] F32 values, then stored as `dt` (FP8 through requantize_weight's 128x128 blocks, GGUF
// formats through quantize_row).
struct Stored {
  std::vector<uint8_t> bytes;
  RequantizedWeight fp8;
  LinearWeight w;
};

Stored make_weight(DType dt, int64_t out, int64_t in) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.1f);
  std::vector<float> v(size_t(out * in));
  for (float& x : v) x = g(rng);
  Stored s;
  s.w.dtype = dt == DType::kF8E4M3 ? DType::kF32 : dt;
  s.w.out = out;
  s.w.in = in;
  if (dt == DType::kF32 || dt == DType::kF8E4M3) {
    s.bytes.resize(v.size() * 4);
    std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  } else if (dt == DType::kBF16) {
    s.bytes.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(&s.bytes[2 * i], &h, 2);
    }
  } else {
    const int64_t row = dtype_bytes(dt, in);
    s.bytes.resize(size_t(row * out));
    for (int64_t i = 0; i < out; ++i)
      EXPECT_TRUE(quantize_row(dt, std::span<const float>(&v[size_t(i * in)], size_t(in)),
                               s.bytes.data() + i * row)
                      .ok());
  }
  s.w.data = s.bytes.data();
  if (dt == DType::kF8E4M3) {
    ThreadPool pool(1);
    auto r = requantize_weight(s.w, DType::kF8E4M3, pool, "test");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    s.fp8 = std::move(*r);
    s.w = s.fp8.weight;
  }
  return s;
}

void expect_slice_exact(const LinearWeight& whole, const LinearWeight& part, IndexRange rows,
                        IndexRange cols) {
  ASSERT_EQ(part.out, rows.size());
  ASSERT_EQ(part.in, cols.size());
  ASSERT_TRUE(validate(part).ok());
  std::vector<double> a(size_t(whole.in)), b(size_t(part.in));
  for (int64_t i = 0; i < part.out; ++i) {
    ref::linear_weight_row(whole, rows.begin + i, a.data());
    ref::linear_weight_row(part, i, b.data());
    for (int64_t j = 0; j < part.in; ++j)
      ASSERT_EQ(b[size_t(j)], a[size_t(cols.begin + j)]) << "row " << i << " col " << j;
  }
}

struct Case {
  DType dt;
  int64_t out, in;
  IndexRange rows, cols;
};

class SliceLinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(SliceLinearTest, EveryValueIsTheWholeMatrixValue) {
  const Case c = GetParam();
  Stored s = make_weight(c.dt, c.out, c.in);
  SliceStore store;
  auto part = slice_linear(s.w, c.rows, c.cols, store, "w");
  ASSERT_TRUE(part.ok()) << part.status().to_string();
  expect_slice_exact(s.w, *part, c.rows, c.cols);
  auto copy = copy_linear(s.w, store, "w");
  ASSERT_TRUE(copy.ok());
  expect_slice_exact(s.w, *copy, {0, c.out}, {0, c.in});
  EXPECT_GT(store.total_bytes, 0);
}

// FP8 rows starting inside a 128-row block (heads of 192 rows: q_b_proj's slice of an odd head)
// and columns inside a 128-column block (o_proj's heads of 64 values): the slice's own grid.
INSTANTIATE_TEST_SUITE_P(Formats, SliceLinearTest,
                         ::testing::Values(Case{DType::kF32, 40, 24, {8, 20}, {5, 17}},
                                           Case{DType::kBF16, 40, 24, {0, 40}, {12, 24}},
                                           Case{DType::kF8E4M3, 400, 300, {192, 384}, {64, 300}},
                                           Case{DType::kF8E4M3, 400, 300, {96, 97}, {0, 131}},
                                           Case{DType::kQ8_0, 16, 128, {3, 11}, {32, 96}},
                                           Case{DType::kQ4_K, 6, 512, {1, 5}, {256, 512}},
                                           Case{DType::kQ6_K, 6, 512, {0, 6}, {0, 256}}));

// A head's columns inside a Q4_K block: the slice is F32, each value the block's exactly.
TEST(SliceLinear, ColumnsInsideABlockComeOutAsF32) {
  Stored s = make_weight(DType::kQ4_K, 4, 512);
  SliceStore store;
  auto r = slice_linear(s.w, {1, 4}, {128, 320}, store, "layer 3 o_proj");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->dtype, DType::kF32);
  expect_slice_exact(s.w, *r, {1, 4}, {128, 320});
  // Listed for the load's warning, named; a slice on block boundaries is not.
  ASSERT_EQ(store.widened.size(), 1u);
  EXPECT_EQ(store.widened[0], "layer 3 o_proj (Q4_K columns [128, 320) of 512)");
  ASSERT_TRUE(slice_linear(s.w, {1, 4}, {256, 512}, store, "layer 4 o_proj").ok());
  EXPECT_EQ(store.widened.size(), 1u);
}

TEST(SliceLinear, RefusesBadRanges) {
  Stored s = make_weight(DType::kQ4_K, 4, 512);
  SliceStore store;
  auto r = slice_linear(s.w, {0, 5}, {0, 256}, store, "layer 3 o_proj");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer 3 o_proj"), std::string::npos);
  EXPECT_FALSE(slice_linear(s.w, {2, 2}, {0, 256}, store, "w").ok());
  EXPECT_FALSE(slice_linear(s.w, {0, 4}, {0, 513}, store, "w").ok());
}

TEST(SliceStore, ReleaseFreesOneCopy) {
  Stored s = make_weight(DType::kBF16, 8, 16);
  SliceStore store;
  auto a = copy_linear(s.w, store, "a");
  ASSERT_TRUE(a.ok());
  const int64_t held = store.total_bytes;
  store.release(a->data);
  EXPECT_EQ(store.total_bytes, held - 8 * 16 * 2);
  store.release(s.w.data);  // not a copy: nothing happens
  EXPECT_EQ(store.total_bytes, held - 8 * 16 * 2);
}

}  // namespace
}  // namespace mla
