// Measured limits of the machine the engine runs on: FP32 FMA, BF16 and int8 dot-product and
// AMX-BF16 tile peaks and memory read bandwidth, on one thread and on all threads. Every kernel
// figure `mla bench` prints is given as a fraction of these (docs/BENCHMARKS.md §The machine lists
// what was measured on the machines used so far).
#pragma once

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"

namespace mla::bench {

struct MachineRates {
  int threads = 1;
  double fp32_fma_gflops = 0;  // vfmadd on the widest vectors the CPU has
  double bf16_dot_gflops = 0;  // vdpbf16ps; 0 when the CPU lacks AVX512_BF16
  double int8_dot_gops = 0;    // vpdpbusd, else vpmaddubsw + vpmaddwd on AVX2 (2 ops a MAC)
  double amx_bf16_gflops = 0;  // tdpbf16ps on the AMX tile unit; 0 without AMX-BF16
  double mem_bw_gbps = 0;      // streaming read of a buffer far larger than the caches
};

struct MachineReport {
  MachineRates all, single;
};

// quick: shorter probes (a few hundred ms in all), for figures printed beside other benchmarks.
MachineReport measure_machine(ThreadPool& pool, bool quick);

// mem_bw_gbps alone, for figures taken between other work (`mla bench model` probes between
// decode segments): the median of `sweeps` reads of a buffer far beyond the caches, all
// `threads` pool threads reading a slice each at once.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(size_t bytes = size_t(256) << 20);  // touched once here
  double measure_gbps(ThreadPool& pool, int threads, int sweeps) const;

 private:
  AlignedBuffer<float> buf_;
};

}  // namespace mla::bench
