// Wanda: column norms against a plain double loop, masks against brute-force scoring of the 6 choices per
// group, and bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "common/seed.h"
#include "sparse24/error.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"

namespace sparse24 {
namespace {

using testing::random_floats;
using testing::rng;

TEST(Wanda, ColumnNormsMatchADoubleLoop) {
  SPARSE24_SEED_TRACE();
  auto g = rng(801);
  const int64_t tokens = 37, cols = 13;
  const std::vector<float> x = random_floats(g, tokens * cols, -3.f, 3.f);
  const std::vector<float> n = column_norms(x.data(), tokens, cols);
  ASSERT_EQ(n.size(), static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0;
    for (int64_t t = 0; t < tokens; ++t) s += double(x[t * cols + c]) * x[t * cols + c];
    EXPECT_NEAR(n[c], std::sqrt(s), 1e-6 * std::sqrt(s));
  }
}

TEST(Wanda, MaskIsTheBestPairOfEachGroupByScore) {
  SPARSE24_SEED_TRACE();
  auto g = rng(802);
  const int64_t rows = 9, cols = 24;
  const std::vector<float> w = random_floats(g, rows * cols);
  const std::vector<float> norms = random_floats(g, cols, 0.01f, 10.f);
  const Mask m = wanda_mask(w.data(), rows, cols, norms);
  ASSERT_EQ(m.size(), static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g0 = 0; g0 < cols; g0 += 4) {
      double best = -1;
      int best_a = -1, best_b = -1;
      for (int a = 0; a < 4; ++a)
        for (int b = a + 1; b < 4; ++b) {
          const double s = std::fabs(w[r * cols + g0 + a]) * norms[g0 + a] +
                           std::fabs(w[r * cols + g0 + b]) * norms[g0 + b];
          if (s > best) best = s, best_a = a, best_b = b;
        }
      for (int l = 0; l < 4; ++l)
        EXPECT_EQ(m[r * cols + g0 + l], (l == best_a || l == best_b) ? 1 : 0)
            << "row " << r << " group " << g0 / 4;
    }
  // Large input norms can overrule magnitude: the mask is not simply magnitude's.
  EXPECT_NE(m, magnitude_mask(w.data(), rows, cols));
  // With equal norms it is.
  EXPECT_EQ(wanda_mask(w.data(), rows, cols, std::vector<float>(cols, 2.5f)),
            magnitude_mask(w.data(), rows, cols));
}

TEST(Wanda, BadInputThrows) {
  std::vector<float> w(2 * 8, 1.f);
  EXPECT_THROW(wanda_mask(w.data(), 2, 8, std::vector<float>(7, 1.f)), Error);
  std::vector<float> n(8, 1.f);
  n[3] = -1;
  EXPECT_THROW(wanda_mask(w.data(), 2, 8, n), Error);
  n[3] = std::nanf("");
  EXPECT_THROW(wanda_mask(w.data(), 2, 8, n), Error);
  w[5] = std::nanf("");
  EXPECT_THROW(wanda_mask(w.data(), 2, 8, std::vector<float>(8, 1.f)), Error);
  std::vector<float> x(3 * 4, 0.f);
  x[6] = INFINITY;
  EXPECT_THROW(column_norms(x.data(), 3, 4), Error);
  EXPECT_THROW(column_norms(x.data(), 3, 0), Error);
}

}  // namespace
}  // namespace sparse24
