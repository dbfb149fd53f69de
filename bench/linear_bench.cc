// Google Benchmark suite of the CPU weight products (kernels/linear.h) on the best ISA variant of
// this machine: GB/s of weight bytes (data + FP8 scales) for the decode GEMV (memory-bound: compare
// with the machine's read bandwidth) and GFLOP/s (2·n·out·in) for prefill-sized n: `/dot` the FP32
// products (register-blocked dot products; the OpenBLAS comparison of docs/BENCHMARKS.md was
// measured with a BLAS path since removed), `/bf16` the BF16 GEMM where the CPU has it.
// Weights rotate over copies totalling ≥ 256 MiB so each call reads them from DRAM, not the L3;
// the `/l3` GEMV rows reuse one copy (a few MiB: L3-resident), which separates the decoding
// rate of a dtype from the DRAM rate.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "core/huge_pages.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/registry.h"

namespace {

using mla::DType;
using mla::LinearPath;

struct WeightSet {
  // `copies` identical [out, in] matrices back to back, 64-byte aligned as the loader's buffers
  // (a mapped GGUF file's tensors are 32-byte aligned).
  mla::AlignedBuffer<uint8_t> data;
  std::vector<uint8_t> scales;
  int64_t bytes = 0, scale_bytes = 0;
  int copies = 1;
  mla::LinearWeight w;  // copy 0; copy c is at data + c · bytes
  mla::LinearWeight at(int c) const {
    mla::LinearWeight r = w;
    r.data = data.data() + c * bytes;
    return r;
  }
};

const WeightSet& weights(DType dt, int64_t out, int64_t in) {
  static std::map<std::tuple<DType, int64_t, int64_t>, std::unique_ptr<WeightSet>> cache;
  auto& slot = cache[{dt, out, in}];
  if (slot) return *slot;
  slot = std::make_unique<WeightSet>();
  WeightSet& s = *slot;
  mla::Rng rng(5);
  // Q8_0_R16 / Q4_K_R16 / BF16_R16 / F8_E4M3_R16: the stored rows repacked as the loader does
  // (core/ggml_repack.h).
  const bool r16 = mla::dtype_is_row_interleaved(dt);
  const bool block = mla::dtype_is_ggml_block(dt) || mla::dtype_is_ggml_repack(dt);
  const DType file = mla::r16_file_dtype(dt);
  s.bytes = out * mla::dtype_bytes(dt, in);
  s.copies = int(std::max<int64_t>(1, (int64_t(256) << 20) / s.bytes));
  s.data = mla::AlignedBuffer<uint8_t>(size_t(s.bytes) * s.copies);
  // On 2 MiB pages, as the loader's repacked weights (WeightArena) and a mapped file's large
  // folios are: on 4 KiB pages the rows read from DRAM also paid page walks the engine does not.
  mla::advise_huge_pages(s.data.data(), size_t(s.bytes) * s.copies);
  std::vector<float> row(size_t(block ? in : 0));
  for (int64_t o = 0; block && o < out; ++o) {  // GGUF blocks: quantised N(0, 1) rows
    for (float& v : row) v = float(rng.normal());
    (void)mla::quantize_row(r16 ? file : dt, row, s.data.data() + o * mla::dtype_bytes(dt, in));
  }
  for (int64_t k = 0; !block && k < out * in; ++k) {
    if (dt == DType::kF8E4M3 || dt == DType::kF8E4M3R16) {
      s.data[k] = uint8_t(rng.below(0x7F));  // finite codes
    } else {
      const uint16_t h = mla::f32_to_bf16(float(rng.normal()));
      std::memcpy(&s.data[2 * k], &h, 2);
    }
  }
  if (r16) {
    const std::vector<uint8_t> rows(s.data.begin(), s.data.begin() + s.bytes);  // one copy
    mla::repack_rows(dt, rows.data(), out, in, s.data.data());
  }
  for (int c = 1; c < s.copies; ++c)
    std::memcpy(&s.data[c * s.bytes], s.data.data(), size_t(s.bytes));
  s.w.dtype = dt;
  s.w.data = s.data.data();
  s.w.out = out;
  s.w.in = in;
  if (mla::linear_block_scaled(dt)) {
    s.scale_bytes = ((out + 127) / 128) * ((in + 127) / 128) * 4;
    s.scales.resize(size_t(s.scale_bytes));
    for (int64_t c = 0; c < s.scale_bytes / 4; ++c) {
      const float v = float(1e-3 * (1 + rng.uniform()));
      std::memcpy(&s.scales[4 * c], &v, 4);
    }
    s.w.scale_inv = s.scales.data();
  }
  return s;
}

void BM_Linear(benchmark::State& state, DType dt, int64_t out, int64_t in, int64_t n,
               LinearPath path, bool l3_resident) {
  const WeightSet& ws = weights(dt, out, in);
  const mla::LinearVariant* v = mla::select_variant(mla::LinearParams{}, "cpu").value();
  mla::Rng rng(1);
  std::vector<float> x(size_t(n * in)), y(size_t(n * out));
  for (auto& e : x) e = float(rng.normal());
  mla::ThreadPool& pool = mla::default_thread_pool();
  int c = 0;
  for (auto _ : state) {
    const mla::LinearWeight w = ws.at(c);
    const mla::LinearJob job{&w, n, x.data(), y.data()};
    v->run(mla::LinearParams{{&job, 1}, path}, pool);
    if (!l3_resident) c = (c + 1) % ws.copies;
  }
  benchmark::DoNotOptimize(y.data());
  state.SetLabel(v->name);
  state.counters["GB/s"] = benchmark::Counter(double(ws.bytes + ws.scale_bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n) * out * in * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// One MoE layer's decode step as the model runs it (model_ffn.cc): gate and up of 8 experts
// (V2-Lite: 6 routed + 2 shared of the same width) as SwiGLU jobs in one linear_many pass on one
// row of x, then
// their down products in a second; the experts drawn at random each step from 20 whose weights lie
// apart in memory, as the routed experts of a checkpoint do. GB/s of weight bytes: compare with
// the read probe and with the single products' rows above.
void BM_MoeDecode(benchmark::State& state, DType dt) {
  constexpr int64_t kD = 2048, kWidth = 1408, kExperts = 20, kActive = 8;
  const WeightSet& gu = weights(dt, kWidth, kD);
  const WeightSet& dn = weights(dt, kD, kWidth);
  if (gu.copies < 2 * kExperts || dn.copies < kExperts) {
    state.SkipWithError("fewer copies than experts");
    return;
  }
  mla::Rng rng(3);
  std::vector<float> x(kD), h(size_t(2 * kActive * kWidth)), y(size_t(kActive * kD));
  for (auto& e : x) e = float(rng.normal());
  std::vector<mla::LinearWeight> ws(3 * kActive);
  std::vector<mla::LinearJob> first(kActive), second(kActive);
  std::vector<int64_t> pick(kExperts);
  mla::ThreadPool& pool = mla::default_thread_pool();
  for (auto _ : state) {
    for (int64_t e = 0; e < kExperts; ++e) pick[size_t(e)] = e;
    for (int64_t k = 0; k < kActive; ++k)
      std::swap(pick[size_t(k)], pick[size_t(k + int64_t(rng.below(uint32_t(kExperts - k))))]);
    for (int64_t k = 0; k < kActive; ++k) {
      const int64_t e = pick[size_t(k)];
      ws[size_t(3 * k)] = gu.at(int(e));
      ws[size_t(3 * k + 1)] = gu.at(int(kExperts + e));
      ws[size_t(3 * k + 2)] = dn.at(int(e));
      first[size_t(k)] = {&ws[size_t(3 * k)],
                          1,
                          x.data(),
                          &h[size_t(2 * k * kWidth)],
                          &ws[size_t(3 * k + 1)],
                          &h[size_t((2 * k + 1) * kWidth)]};
      second[size_t(k)] = {&ws[size_t(3 * k + 2)], 1, &h[size_t(2 * k * kWidth)],
                           &y[size_t(k * kD)]};
    }
    (void)mla::linear_many(first, pool);
    (void)mla::linear_many(second, pool);
  }
  benchmark::DoNotOptimize(y.data());
  const double bytes =
      double(kActive) * (2 * (gu.bytes + gu.scale_bytes) + dn.bytes + dn.scale_bytes);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

const bool registered = [] {
  for (DType dt : {DType::kF8E4M3, DType::kF8E4M3R16, DType::kBF16R16, DType::kQ8_0R16})
    benchmark::RegisterBenchmark(
        (std::string("moe_decode/") + std::string(mla::dtype_name(dt))).c_str(), BM_MoeDecode, dt)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  // Square and tall shapes, the V2-Lite expert shapes (gate / up 1408 × 2048, down 2048 × 1408)
  // and its dense first layer's (gate / up 10944 × 2048, down 2048 × 10944), and DeepSeek-V3's
  // expert shapes (gate / up 2048 × 7168, down 7168 × 2048).
  const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {4096, 2048},  {1408, 2048},
                                                {2048, 1408}, {10944, 2048}, {2048, 10944},
                                                {2048, 7168}, {7168, 2048}};
  for (DType dt : {DType::kBF16, DType::kBF16R16, DType::kF8E4M3, DType::kF8E4M3R16, DType::kQ8_0,
                   DType::kQ8_0R16, DType::kQ4_K, DType::kQ4_KR16, DType::kQ6_K})
    for (auto [out, in] : shapes) {
      if (mla::dtype_is_ggml_block(dt) && in % mla::dtype_block(dt).elems != 0) continue;
      if (mla::dtype_is_row_interleaved(dt) && !mla::repack_fits(dt, out, in)) continue;
      // 40: an expert's tokens in a 512-token prefill chunk of V2-Lite (DeepSeek-V3's: ~16);
      // 2,048: a whole default chunk; 5 and 6: where the FP32 products pass over W twice (4 + 1,
      // 4 + 2 rows).
      for (int64_t n : {1, 2, 4, 5, 6, 8, 16, 40, 64, 512, 2048}) {
        const std::string name = std::string("linear/") + std::string(mla::dtype_name(dt)) + "/" +
                                 std::to_string(out) + "x" + std::to_string(in) + "/n" +
                                 std::to_string(n) + "/dot";
        benchmark::RegisterBenchmark(name.c_str(), BM_Linear, dt, out, in, n, LinearPath::kDot,
                                     false)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        if (n <= 4)
          benchmark::RegisterBenchmark((name + "/l3").c_str(), BM_Linear, dt, out, in, n,
                                       LinearPath::kDot, true)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        // The BF16 GEMM beside the FP32 products of the same shape (path kBf16Gemm, as a
        // prefill chunk's experts run: from the format's lin_gemm_min_rows, below it the FP32
        // products again; the same as kBf16 above kLinearBatchInvariantRows); at an expert's
        // token counts also on one L3-resident copy (what the weight's DRAM reads cost).
        for (bool l3 : {false, true})
          if (!l3 || n <= 64)
            benchmark::RegisterBenchmark(
                (name.substr(0, name.size() - 4) + (l3 ? "/bf16/l3" : "/bf16")).c_str(), BM_Linear,
                dt, out, in, n, LinearPath::kBf16Gemm, l3)
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
      }
    }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
