#include "sparse24/reference.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/seed.h"
#include "sparse24/compressed.h"
#include "sparse24/mask.h"

namespace sparse24 {
namespace {

using testing::random_floats;
using testing::rng;

// The reference multiply equals the dense product of the decompressed weights within fp32 rounding.
TEST(Reference, MatchesDenseProductOfDecompressed) {
  SPARSE24_SEED_TRACE();
  auto g = rng(20);
  for (int64_t m : {1, 3, 5, 64})
    for (int64_t k : {1, 3, 4, 5, 63, 65})
      for (int64_t n : {1, 7, 33})
        for (Epilogue ep : {Epilogue::kNone, Epilogue::kRelu, Epilogue::kGelu}) {
          SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + " " +
                       epilogue_name(ep));
          std::vector<float> w = random_floats(g, static_cast<size_t>(m * k));
          const Compressed c = compress(Tensor::from_float(w, {m, k}), true);
          const std::vector<float> wd = decompress(c).to_float();
          const int64_t ldx = n + 3, ldy = n + 5;  // strided
          const std::vector<float> x = random_floats(g, static_cast<size_t>(k * ldx));
          const std::vector<float> bias = random_floats(g, static_cast<size_t>(m));
          std::vector<float> ys(static_cast<size_t>(m * ldy), -7.f), yd(ys);
          spmm_reference(c, x.data(), n, ldx, ys.data(), ldy, bias.data(), ep);
          gemm_reference(wd.data(), m, k, x.data(), n, ldx, yd.data(), ldy, bias.data(), ep);
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t j = 0; j < n; ++j)
              ASSERT_NEAR(ys[r * ldy + j], yd[r * ldy + j], 1e-5f * (1 + std::sqrt(static_cast<float>(k))));
            for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(ys[r * ldy + j], -7.f) << "wrote past n";
          }
        }
}

TEST(Reference, Epilogues) {
  EXPECT_EQ(apply_epilogue(-2.f, Epilogue::kRelu), 0.f);
  EXPECT_EQ(apply_epilogue(3.f, Epilogue::kRelu), 3.f);
  EXPECT_NEAR(apply_epilogue(1.f, Epilogue::kGelu), 0.8413447f, 1e-6);
  EXPECT_NEAR(apply_epilogue(-1.f, Epilogue::kGelu), -0.1586553f, 1e-6);
}

// A hand-computed case: the metadata selects which activation rows each kept value multiplies.
TEST(Reference, SelectsActivationsByMetadata) {
  const Compressed c = compress(Tensor::from_float({0, 2, 0, 3}, {1, 4}));
  const std::vector<float> x = {10, 20, 30, 40};  // K=4, N=1
  float y = 0;
  spmm_reference(c, x.data(), 1, 1, &y, 1);
  EXPECT_EQ(y, 2 * 20 + 3 * 40);
}

}  // namespace
}  // namespace sparse24
