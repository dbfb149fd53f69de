// advise_huge_pages: transparent huge pages for a large buffer of weights, before it is written.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace mla {

// Advises the whole 2 MiB pages inside [p, p + bytes) for transparent huge pages (THP
// "madvise"; advice only: a host whose free memory is fragmented keeps 4 KiB pages). Call it
// before the buffer is first written: the pages are chosen when they fault in. Every weight
// product reads its weight through the TLB, and on 4 KiB pages a decode step of the repacked Q8_0
// model ran 8% slower (docs/BENCHMARKS.md "Q8_0 repacked at load").
inline void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (e > b) (void)madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
}

}  // namespace mla
