// Attention over a KV cache at one position (src/kernels/attend.h): the AVX2 paths against the plain loops
// for fp32 and IEEE half caches, across query-head counts around the groups of four, key counts around the
// two-row step and head sizes around the 8- and 16-column steps; the plain loops against double sums.
#include "kernels/attend.h"

#include <gtest/gtest.h>

#include <cmath>

#include "../common/seed.h"
#include "sparse24/dtype.h"

namespace sparse24::kernels {
namespace {

using sparse24::testing::random_floats;
using sparse24::testing::rng;

struct F32 {
  using T = float;
  static T to(float v) { return v; }
  static float from(T v) { return v; }
};
struct Half {
  using T = uint16_t;
  static T to(float v) { return float_to_half(v); }
  static float from(T v) { return half_to_float(v); }
};

template <class K>
void matches_reference(uint64_t seed) {
  auto g = rng(seed);
  for (int64_t queries : {1, 2, 3, 4, 5, 6, 9})
    for (int64_t len : {1, 2, 3, 16, 33, 130})
      for (int64_t d : {1, 7, 8, 16, 24, 64, 72, 128}) {
        const std::vector<float> q = random_floats(g, queries * d, -2, 2);
        std::vector<float> kf = random_floats(g, len * d, -2, 2), vf = random_floats(g, len * d, -2, 2);
        std::vector<typename K::T> k(kf.size()), v(vf.size());
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] = K::to(kf[i]);
          kf[i] = K::from(k[i]);
          v[i] = K::to(vf[i]);
          vf[i] = K::from(v[i]);
        }
        const int64_t ldp = len + 3;  // rows of p apart by more than len: the gap untouched
        const float scale = 0.125f;
        std::vector<float> ref(queries * ldp, -7.0f), got(ref.size(), -7.0f);
        attend_scores_reference(q.data(), queries, k.data(), len, d, scale, ref.data(), ldp);
        for (int64_t i = 0; i < queries; ++i)
          for (int64_t t = 0; t < len; ++t) {
            double s = 0, mag = 0;
            for (int64_t c = 0; c < d; ++c) {
              s += static_cast<double>(q[i * d + c]) * kf[t * d + c];
              mag += std::fabs(static_cast<double>(q[i * d + c]) * kf[t * d + c]);
            }
            ASSERT_NEAR(ref[i * ldp + t], s * scale, 1e-6 * mag * scale + 1e-30)
                << queries << " " << len << " " << d;
          }
        attend_scores(q.data(), queries, k.data(), len, d, scale, got.data(), ldp);
        for (int64_t i = 0; i < queries * ldp; ++i)
          ASSERT_NEAR(got[i], ref[i], 1e-5 + 1e-6 * std::fabs(ref[i]))
              << "scores " << queries << " queries, " << len << " keys, d " << d << " at " << i;
        // Values with the scores as weights (any numbers do; these are not normalised).
        const std::vector<float> p = random_floats(g, queries * ldp, 0, 1);
        std::vector<float> oref(queries * d, -7.0f), ogot(queries * d, -7.0f);
        attend_values_reference(p.data(), queries, ldp, v.data(), len, d, oref.data());
        for (int64_t i = 0; i < queries; ++i)
          for (int64_t c = 0; c < d; ++c) {
            double s = 0;
            for (int64_t t = 0; t < len; ++t) s += static_cast<double>(p[i * ldp + t]) * vf[t * d + c];
            ASSERT_NEAR(oref[i * d + c], s, 1e-5 * (1 + std::fabs(s)));
          }
        attend_values(p.data(), queries, ldp, v.data(), len, d, ogot.data());
        for (int64_t i = 0; i < queries * d; ++i)
          ASSERT_NEAR(ogot[i], oref[i], 1e-5 * (1 + std::fabs(oref[i])))
              << "values " << queries << " queries, " << len << " keys, d " << d << " at " << i;
        if (attend_avx2_supported() && d % 8 == 0) {  // the dispatch took the AVX2 path: call it by name too
          std::vector<float> direct(queries * ldp, -7.0f);
          attend_scores_avx2(q.data(), queries, k.data(), len, d, scale, direct.data(), ldp);
          for (int64_t i = 0; i < queries * ldp; ++i) ASSERT_EQ(direct[i], got[i]) << i;
        }
      }
}

TEST(Attend, F32CacheMatchesReference) {
  SPARSE24_SEED_TRACE();
  matches_reference<F32>(1);
}

TEST(Attend, HalfCacheMatchesReference) {
  SPARSE24_SEED_TRACE();
  matches_reference<Half>(2);
}

}  // namespace
}  // namespace sparse24::kernels
