// The kernels' fused row reader (kernels/cpu/load_f32.h) must see exactly the values the
// reference codec says a record stores (core/kv_format.h): the harness compares kernels with a
// reference reading the same records, so any drift between the two readers would go unseen.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/kv_format.h"
#include "core/rng.h"
#include "kernels/cpu/load_f32.h"

namespace mla::cpu {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(LoadCacheRow, BitIdenticalToTheReferenceCodec) {
  Rng rng(3);
  for (KvCacheDtype d : kAllKvCacheDtypes)
    for (auto [r, d_r] : {std::pair{512, 64}, std::pair{136, 64}, std::pair{33, 7}})
      for (float g : {kNvfp4DefaultGlobalScale, 0.05f})
        for (int row_i = 0; row_i < 20; ++row_i) {
          std::vector<float> x(r + d_r);
          for (auto& v : x) v = float(rng.normal() * (row_i % 5 == 0 ? 30.0 : 1.0));
          if (row_i == 7) x[3] = NAN;  // a poisoned block reads back NaN in both readers
          std::vector<uint8_t> rec(size_t(kv_bytes_per_token(d, r, d_r)));
          quantize_kv_row(d, r, d_r, x.data(), g, rec.data());
          std::vector<float> want(r + d_r), got(r + d_r);
          dequantize_kv_row(d, r, d_r, rec.data(), g, want.data());
          const CacheRowFormat f(kv_cache_latent_dtype(d), r, d_r, g);
          ASSERT_EQ(f.row_bytes, int64_t(rec.size()));
          load_cache_row(f, rec.data(), got.data(), got.data() + r);
          for (int i = 0; i < r + d_r; ++i)
            ASSERT_TRUE(bits(got[i]) == bits(want[i]) ||
                        (std::isnan(got[i]) && std::isnan(want[i])))
                << kv_cache_dtype_name(d) << " r=" << r << " i=" << i << " got " << got[i]
                << " want " << want[i];
        }
}

}  // namespace
}  // namespace mla::cpu
