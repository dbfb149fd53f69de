// Every header the ISA-specific kernel headers use, for an ISA translation unit to include BEFORE
// its `#pragma GCC target`: code parsed after the pragma is compiled for that ISA, and a library
// inline function compiled that way could be picked by the linker for baseline callers.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/mla_decode_cpu.h"
#include "kernels/mla_params.h"
