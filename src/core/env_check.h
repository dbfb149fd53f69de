// The environment variables the engine reads, checked once at start-up (tools/mla/main.cc): the
// readers themselves (core/cpu_features, core/thread_pool) are lazy and cannot report, so a typo
// there would otherwise be silently ignored.
#pragma once

#include "mla/status.h"

namespace mla {

// invalid_argument naming the variable and its value when MLA_ISA is set to anything but
// scalar, avx2, avx512 or avx512bf16, or MLA_NUM_THREADS to anything but an integer in
// [1, 1024]. Unset variables are fine.
Status check_environment();

}  // namespace mla
