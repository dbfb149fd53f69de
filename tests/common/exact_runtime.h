// The runtime options of the tests that compare logits exactly or against FP32-derived bounds:
// FP32 cache records, FP32 weight products (the same bits for a row alone or in a batch) and an
// FP32 absorbed query. BF16 products and attention have their own tests.
#pragma once

#include "core/dtype.h"
#include "core/kv_format.h"
#include "model/model_runtime.h"

namespace mla::test {

inline RuntimeOptions exact_runtime() {
  RuntimeOptions ro;
  ro.kv_dtype = KvCacheDtype::kF32;
  ro.matmul_dtype = DType::kF32;
  ro.attention_q_dtype = DType::kF32;
  return ro;
}

}  // namespace mla::test
