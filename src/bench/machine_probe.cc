// Probe loops: independent FMA / vdpbf16ps / vpdpbusd (AVX2: vpmaddubsw + vpmaddwd) chains (enough
// to cover latency × ports) and a vector read sweep; each run on one thread and on every pool
// thread at once, median of repeats.
#include "bench/machine_probe.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"

namespace mla::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChains = 12;  // 4-cycle latency × 2 FMA ports needs ≥ 8 in flight

// GCC 12's _mm512_reduce_add_ps reads a lane it calls uninitialized (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

// FLOPs done by `iters` iterations of each probe.
__attribute__((target("avx512f"))) float fma_probe_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(float(k));
  const __m512 m = _mm512_set1_ps(0.9999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, a);
  __m512 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_probe_avx2(int64_t iters) {
  __m256 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(float(k));
  const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, a);
  float out[8];
  __m256 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, acc[k]);
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_probe(int64_t iters) {
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(float(k));
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // pairs of 1.0
  const __m512bh y = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // pairs of ~1e-7
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], x, y);
  __m512 s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
  return _mm512_reduce_add_ps(s);
}

// vpdpbusd: 64 u8 × s8 multiply-adds per instruction (the int8 GEMM of block-quantised weights,
// kernels/cpu/linear_gemm_int8.h), int32 accumulators that wrap harmlessly.
__attribute__((target("avx512f,avx512vnni"))) float int8_probe(int64_t iters) {
  __m512i acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_epi32(k);
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], x, y);
  __m512i s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_epi32(s, acc[k]);
  // Lane 0 only: the accumulators wrap, and a scalar sum of the lanes would overflow int.
  return float(_mm_cvtsi128_si32(_mm512_castsi512_si128(s)));
}

// vpmaddubsw + vpmaddwd + vpaddd on AVX2 without VNNI: 32 u8 × s8 multiply-adds per pair of
// multiplies into int32, the integer work of linear_gemm_int8_avx2.h less its vpsignb (with it a
// Zen 3 core ran ~0.77 of this rate: the sign is a fourth operation, not free). The asm makes each
// chain's x a value of its own, so that the compiler cannot share one product among the chains.
__attribute__((target("avx2"))) float int8_probe_avx2(int64_t iters) {
  __m256i acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_epi32(k);
  const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k) {
      __m256i xk = x;
      __asm__ volatile("" : "+x"(xk));
      acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(xk, y), ones));
    }
  __m256i s = acc[0];
  for (int k = 1; k < kChains; ++k) s = _mm256_add_epi32(s, acc[k]);
  return float(_mm_cvtsi128_si32(_mm256_castsi256_si128(s)));
}

// Four independent accumulator tiles (tdpbf16ps: 16 × 16 × 32 multiply-adds, ~16 cycles each,
// a longer latency): C_k += A · B with fixed operands.
__attribute__((target("amx-tile,amx-bf16"))) float amx_probe(int64_t iters) {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } cfg;
  for (int i = 0; i < 6; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  alignas(64) static uint16_t ab[16 * 32];
  alignas(64) static float c[16 * 16];
  std::fill(std::begin(ab), std::end(ab), uint16_t(0x3380));  // ~6e-8: sums stay finite
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}
constexpr double kAmxFlopsPerIter = 4.0 * 16 * 16 * 32 * 2;
#pragma GCC diagnostic pop

__attribute__((target("avx2"))) float read_probe(const float* p, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  return out[0];
}

std::atomic<float> g_sink{0};  // keeps the probes' results alive

// Runs work(thread) on `threads` threads that start together; returns the slowest thread's
// seconds. With threads == pool size each pool thread takes exactly one item: the spin barrier
// holds every item until all have started.
double run_on_threads(ThreadPool& pool, int threads, const std::function<void(int)>& work) {
  std::atomic<int> arrived{0};
  std::vector<double> secs(threads, 0.0);
  auto body = [&](int64_t item, int) {
    arrived.fetch_add(1);
    while (arrived.load() < threads) {
    }
    const auto t0 = Clock::now();
    work(int(item));
    secs[item] = std::chrono::duration<double>(Clock::now() - t0).count();
  };
  if (threads == 1)
    body(0, 0);
  else
    pool.parallel_for(threads, body);
  return *std::max_element(secs.begin(), secs.end());
}

// One read of buf, a slice per thread, all threads at once.
double read_sweep_gbps(ThreadPool& pool, int threads, const AlignedBuffer<float>& buf) {
  const int64_t per = int64_t(buf.size()) / threads / 32 * 32;
  const double s = run_on_threads(
      pool, threads, [&](int t) { g_sink = g_sink + read_probe(buf.data() + per * t, per); });
  return double(per) * threads * 4 / s * 1e-9;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

MachineRates measure(ThreadPool& pool, int threads, bool quick, const AlignedBuffer<float>& buf) {
  MachineRates r;
  r.threads = threads;
  const int reps = quick ? 3 : 5;
  const int64_t iters = quick ? 2'000'000 : 10'000'000;
  const bool avx512 = cpu_supports(CpuIsa::kAvx512), avx2 = cpu_supports(CpuIsa::kAvx2);
  static const bool vnni = __builtin_cpu_supports("avx512vnni") && avx512;
  std::vector<double> fma, bf16, int8, amx, bw;
  for (int rep = 0; rep < reps; ++rep) {
    if (avx512 || avx2) {
      const double s = run_on_threads(pool, threads, [&](int) {
        g_sink = g_sink + (avx512 ? fma_probe_avx512(iters) : fma_probe_avx2(iters));
      });
      fma.push_back(double(iters) * kChains * (avx512 ? 16 : 8) * 2 * threads / s * 1e-9);
    }
    if (cpu_supports(CpuIsa::kAvx512Bf16)) {
      const double s =
          run_on_threads(pool, threads, [&](int) { g_sink = g_sink + bf16_probe(iters); });
      bf16.push_back(double(iters) * kChains * 32 * 2 * threads / s * 1e-9);
    }
    if (vnni) {
      const double s =
          run_on_threads(pool, threads, [&](int) { g_sink = g_sink + int8_probe(iters); });
      int8.push_back(double(iters) * kChains * 64 * 2 * threads / s * 1e-9);
    } else if (avx2) {
      const double s =
          run_on_threads(pool, threads, [&](int) { g_sink = g_sink + int8_probe_avx2(iters); });
      int8.push_back(double(iters) * kChains * 32 * 2 * threads / s * 1e-9);
    }
    if (cpu_supports(CpuIsa::kAmxBf16)) {
      const int64_t amx_iters = iters / 16;  // ~64 cycles per iteration
      const double s =
          run_on_threads(pool, threads, [&](int) { g_sink = g_sink + amx_probe(amx_iters); });
      amx.push_back(double(amx_iters) * kAmxFlopsPerIter * threads / s * 1e-9);
    }
    if (avx2) bw.push_back(read_sweep_gbps(pool, threads, buf));
  }
  if (!fma.empty()) r.fp32_fma_gflops = median_of(fma);
  if (!bf16.empty()) r.bf16_dot_gflops = median_of(bf16);
  if (!int8.empty()) r.int8_dot_gops = median_of(int8);
  if (!amx.empty()) r.amx_bf16_gflops = median_of(amx);
  if (!bw.empty()) r.mem_bw_gbps = median_of(bw);
  return r;
}

}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(size_t bytes) : buf_(bytes / sizeof(float)) {
  std::fill(buf_.begin(), buf_.end(), 1.0f);
}

double ReadBandwidthProbe::measure_gbps(ThreadPool& pool, int threads, int sweeps) const {
  if (!cpu_supports(CpuIsa::kAvx2)) return 0;
  std::vector<double> bw;
  for (int i = 0; i < sweeps; ++i) bw.push_back(read_sweep_gbps(pool, threads, buf_));
  return median_of(bw);
}

MachineReport measure_machine(ThreadPool& pool, bool quick) {
  // 256 MiB (64 MiB quick): far beyond L3, touched once so pages are mapped before timing.
  AlignedBuffer<float> buf(size_t(quick ? 16 : 64) << 20);
  std::fill(buf.begin(), buf.end(), 1.0f);
  MachineReport rep;
  rep.single = measure(pool, 1, quick, buf);
  rep.all = measure(pool, pool.num_threads(), quick, buf);
  return rep;
}

}  // namespace mla::bench
