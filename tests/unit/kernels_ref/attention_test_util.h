// Test helpers for the reference attention ops: a paged latent cache built from logical rows
// (permuted block table, optional NaN / garbage poison in everything that must not be read) and
// thin runners around ref::mla_decode / ref::mla_prefill. Test-only code.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/mla_params.h"
#include "kernels/ref/mla_ref.h"

namespace mla::ref::test_util {

// FP32 unit roundoff (RNE store: |float(x) - x| <= u32 |x|) and FP64 unit roundoff.
inline constexpr double kU32 = 0x1.0p-24;
inline constexpr double kU64 = 0x1.0p-53;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInfF = std::numeric_limits<float>::infinity();
// Written into scores before a run: columns at or past s_kv must still hold it afterwards.
inline constexpr float kScoreSentinel = 12345.0f;

// Values drawn N(0, sd^2) and rounded to BF16, so an F32 and a BF16 array can hold them alike.
inline std::vector<float> random_bf16_values(Rng& rng, size_t n, double sd = 1.0) {
  std::vector<float> v(n);
  for (float& x : v) x = round_to_bf16(float(sd * rng.normal()));
  return v;
}

// One paged cache for b sequences. rows[b] holds sequence b's logical rows [s_kv_b, d_row].
struct PagedKv {
  int page_size = 0, num_blocks = 0, max_blocks = 0, d_row = 0;
  std::vector<float> f32;        // [num_blocks, page_size, d_row]
  std::vector<uint16_t> bf16;    // the same values as BF16
  std::vector<int32_t> table;    // [b, max_blocks]
  std::vector<int32_t> seqlens;  // [b]

  const void* data(DType t) const {
    return t == DType::kBF16 ? static_cast<const void*>(bf16.data())
                             : static_cast<const void*>(f32.data());
  }
  const int32_t* table_row(int b) const { return table.data() + int64_t(b) * max_blocks; }
  // The sequences from `first` on, stored as t.
  PagedLatentCache view(DType t, int first = 0) const {
    return {.dtype = t,
            .rows = data(t),
            .page_size = page_size,
            .num_blocks = num_blocks,
            .block_table = table_row(first),
            .max_blocks_per_seq = max_blocks,
            .seq_lens = seqlens.data() + first};
  }
};

// Places the rows in randomly permuted pages, with `spare_blocks` pages nobody owns and one table
// column more than the longest sequence needs. With poison, every slot past a sequence's length
// and every spare page is NaN, and unused table entries are -1, INT32_MAX or past num_blocks;
// without, they are 0 (harmless), so the two runs must agree exactly.
inline PagedKv make_paged_kv(const std::vector<std::vector<float>>& rows, int d_row, int page_size,
                             int spare_blocks, uint64_t seed, bool poison) {
  PagedKv kv;
  kv.page_size = page_size;
  kv.d_row = d_row;
  const int b = int(rows.size());
  int needed = 0, longest = 0;
  for (const auto& r : rows) {
    const int s_kv = int(r.size()) / d_row;
    kv.seqlens.push_back(s_kv);
    const int pages = (s_kv + page_size - 1) / page_size;
    needed += pages;
    longest = std::max(longest, pages);
  }
  kv.num_blocks = needed + spare_blocks;
  kv.max_blocks = longest + 1;

  std::vector<int32_t> ids(kv.num_blocks);  // a seeded Fisher-Yates permutation of the pages
  for (int i = 0; i < kv.num_blocks; ++i) ids[i] = i;
  Rng rng(seed);
  for (int i = kv.num_blocks - 1; i > 0; --i) std::swap(ids[i], ids[rng.below(uint64_t(i) + 1)]);

  const float fill = poison ? kNaN : 0.0f;
  kv.f32.assign(size_t(kv.num_blocks) * page_size * d_row, fill);
  const int32_t garbage[3] = {-1, std::numeric_limits<int32_t>::max(), kv.num_blocks + 7};
  kv.table.assign(size_t(b) * kv.max_blocks, 0);
  int next = 0;
  for (int s = 0; s < b; ++s) {
    const int s_kv = kv.seqlens[s];
    const int pages = (s_kv + page_size - 1) / page_size;
    for (int col = 0; col < kv.max_blocks; ++col)
      kv.table[size_t(s) * kv.max_blocks + col] =
          col < pages ? ids[next + col] : (poison ? garbage[(s + col) % 3] : 0);
    for (int t = 0; t < s_kv; ++t) {
      const int64_t slot = int64_t(ids[next + t / page_size]) * page_size + t % page_size;
      std::copy_n(&rows[s][size_t(t) * d_row], d_row, &kv.f32[slot * d_row]);
    }
    next += pages;
  }
  kv.bf16.resize(kv.f32.size());
  for (size_t i = 0; i < kv.f32.size(); ++i) kv.bf16[i] = f32_to_bf16(kv.f32[i]);
  return kv;
}

struct AttnOut {
  std::vector<float> out;     // decode [b, s_q, h_q, d_v]; prefill [s_q, h_q, d_v]
  std::vector<float> lse;     // decode [b, h_q, s_q];      prefill [h_q, s_q]
  std::vector<float> scores;  // [..., s_q, h_q, stride], kScoreSentinel where never written
  int64_t stride = 0;
};

// Runs ref::mla_decode with outputs pre-filled with NaN (so unwritten elements show) and scores
// with kScoreSentinel. q [b, s_q, h_q, d_qk] must be BF16-representable when q_dtype is kBF16.
inline AttnOut run_decode(const PagedKv& kv, DType kv_dtype, int s_q, int h_q, int d_v,
                          const std::vector<float>& q, DType q_dtype, float scale, bool causal) {
  const int b = int(kv.seqlens.size());
  AttnOut r;
  r.stride = *std::max_element(kv.seqlens.begin(), kv.seqlens.end()) + 3;
  r.out.assign(size_t(b) * s_q * h_q * d_v, kNaN);
  r.lse.assign(size_t(b) * h_q * s_q, kNaN);
  r.scores.assign(size_t(b) * s_q * h_q * r.stride, kScoreSentinel);
  std::vector<uint16_t> q_bf16(q.size());
  for (size_t i = 0; i < q.size(); ++i) q_bf16[i] = f32_to_bf16(q[i]);

  MlaDecodeParams p;
  p.b = b;
  p.s_q = s_q;
  p.h_q = h_q;
  p.d_qk = kv.d_row;
  p.d_v = d_v;
  p.q_dtype = q_dtype;
  p.q = q_dtype == DType::kBF16 ? static_cast<const void*>(q_bf16.data())
                                : static_cast<const void*>(q.data());
  p.cache = kv.view(kv_dtype);
  p.softmax_scale = scale;
  p.causal = causal;
  p.out = r.out.data();
  p.lse = r.lse.data();
  p.scores = r.scores.data();
  p.scores_stride = r.stride;
  mla_decode(p);
  return r;
}

// Shapes of one decompressed problem; q [s_q, h_q, d_n + d_r], w_uk [h_q, d_n, r],
// w_uv [h_q, d_v, r].
struct PrefillDims {
  int s_q = 0, h_q = 0, d_n = 0, d_r = 0, d_v = 0, r = 0;
};

// Runs ref::mla_prefill on sequence `seq` of kv (outputs pre-filled as in run_decode).
inline AttnOut run_prefill(const PagedKv& kv, int seq, DType kv_dtype, const PrefillDims& d,
                           const std::vector<float>& q, const std::vector<float>& w_uk,
                           const std::vector<float>& w_uv, float scale, bool causal) {
  AttnOut r;
  r.stride = kv.seqlens[seq] + 3;
  r.out.assign(size_t(d.s_q) * d.h_q * d.d_v, kNaN);
  r.lse.assign(size_t(d.h_q) * d.s_q, kNaN);
  r.scores.assign(size_t(d.s_q) * d.h_q * r.stride, kScoreSentinel);
  MlaPrefillParams p;
  p.s_q = d.s_q;
  p.h_q = d.h_q;
  p.d_n = d.d_n;
  p.d_r = d.d_r;
  p.d_v = d.d_v;
  p.r = d.r;
  p.q = q.data();
  p.cache = kv.view(kv_dtype, seq);
  p.w_uk = w_uk.data();
  p.w_uv = w_uv.data();
  p.softmax_scale = scale;
  p.causal = causal;
  p.out = r.out.data();
  p.lse = r.lse.data();
  p.scores = r.scores.data();
  p.scores_stride = r.stride;
  mla_prefill(p);
  return r;
}

// Bitwise equality of two float arrays (NaN == NaN when the bits match), with the first mismatch.
inline ::testing::AssertionResult same_bits(const std::vector<float>& a,
                                            const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (f32_bits(a[i]) != f32_bits(b[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

}  // namespace mla::ref::test_util
