#include "sparse24/mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/seed.h"
#include "sparse24/error.h"

namespace sparse24 {
namespace {

using testing::random_floats;
using testing::rng;

const int64_t kSizes[] = {1, 3, 4, 5, 63, 64, 65};

// Checks the magnitude mask's promises for every group of one matrix.
void check_magnitude_mask(const std::vector<float>& w, int64_t rows, int64_t k, Pattern p, const Mask& mask) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g0 = 0; g0 < k; g0 += p.m) {
      const int64_t len = std::min<int64_t>(p.m, k - g0);
      int kept = 0;
      for (int64_t i = 0; i < len; ++i) kept += mask[r * k + g0 + i];
      ASSERT_EQ(kept, std::min<int64_t>(p.n, len)) << "row " << r << " group at " << g0;
      // Every kept element is at least as large as every dropped one, and a dropped equal one lies later.
      for (int64_t i = 0; i < len; ++i)
        for (int64_t j = 0; j < len; ++j) {
          if (!mask[r * k + g0 + i] || mask[r * k + g0 + j]) continue;
          const float a = std::fabs(w[r * k + g0 + i]), b = std::fabs(w[r * k + g0 + j]);
          ASSERT_GE(a, b);
          if (a == b) {
            ASSERT_LT(i, j) << "ties must go to the lower index";
          }
        }
    }
}

TEST(MagnitudeMask, KeepsLargestAcrossShapesAndPatterns) {
  SPARSE24_SEED_TRACE();
  auto g = rng(1);
  for (Pattern p : {Pattern{2, 4}, Pattern{1, 2}, Pattern{4, 8}})
    for (int64_t rows : kSizes)
      for (int64_t k : kSizes) {
        SCOPED_TRACE(pattern_string(p) + " " + std::to_string(rows) + "x" + std::to_string(k));
        std::vector<float> w = random_floats(g, static_cast<size_t>(rows * k));
        const Mask mask = magnitude_mask(w.data(), rows, k, p);
        check_magnitude_mask(w, rows, k, p, mask);
        // Idempotent: the pruned matrix is valid and pruning it again changes nothing.
        apply_mask(w.data(), mask);
        EXPECT_TRUE(check_pattern(w.data(), rows, k, p).valid);
        std::vector<float> again = w;
        apply_mask(again.data(), magnitude_mask(again.data(), rows, k, p));
        EXPECT_EQ(again, w);
      }
}

// Weights drawn from {-2, ..., 2}: most groups hold ties, which must go to the lower index in every pattern
// (2:4 has its own rank-counting path; the others sort).
TEST(MagnitudeMask, ManyTiesAcrossPatterns) {
  SPARSE24_SEED_TRACE();
  auto g = rng(3);
  for (Pattern p : {Pattern{2, 4}, Pattern{1, 2}, Pattern{4, 8}})
    for (int64_t k : kSizes) {
      SCOPED_TRACE(pattern_string(p) + " 7x" + std::to_string(k));
      std::vector<float> w(static_cast<size_t>(7 * k));
      for (float& x : w) x = static_cast<float>(static_cast<int>(g() % 5) - 2);
      check_magnitude_mask(w, 7, k, p, magnitude_mask(w.data(), 7, k, p));
    }
}

TEST(MagnitudeMask, TiesGoToLowerIndexAndSignDoesNotMatter) {
  const std::vector<float> w = {1, -1, 1, -1, /**/ 0, 0, 0, 0, /**/ -3, 2, 2, 1};
  const Mask mask = magnitude_mask(w.data(), 1, 12, kPattern24);
  EXPECT_EQ(mask, (Mask{1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0}));
}

// K not a multiple of M: the tail group is padded with zeros, so its real elements are kept first.
TEST(MagnitudeMask, TailGroupPaddedWithZeros) {
  const std::vector<float> w = {5, 1, 2, 3, /**/ 0, 7};
  EXPECT_EQ(magnitude_mask(w.data(), 1, 6, kPattern24), (Mask{1, 0, 0, 1, 1, 1}));
  const std::vector<float> w7 = {1, 2, 3, 4, 9, 8, 7};
  EXPECT_EQ(magnitude_mask(w7.data(), 1, 7, kPattern24), (Mask{0, 0, 1, 1, 1, 1, 0}));
}

TEST(MagnitudeMask, RejectsNaNAndEmptyK) {
  std::vector<float> w = {1, 2, 3, 4, 5, std::numeric_limits<float>::quiet_NaN(), 7, 8};
  try {
    magnitude_mask(w.data(), 2, 4, kPattern24);
    FAIL() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "NaN at row 1, column 1");
  }
  EXPECT_THROW(magnitude_mask(w.data(), 1, 0, kPattern24), Error);
}

TEST(CheckPattern, CountsAndLocatesViolations) {
  const std::vector<float> w = {1, 0, 0, 1, /**/ 1, 1, 1, 0, /**/ -0.f, 0, 2, 2,
                                1, 1, 1, 1, /**/ 0, 0, 0, 0, /**/ 1,    1, 1, 0};
  const PatternCheck c = check_pattern(w.data(), 2, 12, kPattern24);
  EXPECT_FALSE(c.valid);
  EXPECT_EQ(c.groups, 6);
  EXPECT_EQ(c.bad_groups, 3);
  EXPECT_EQ(c.first_bad_row, 0);
  EXPECT_EQ(c.first_bad_group, 1);
  EXPECT_TRUE(check_pattern(w.data(), 1, 4, kPattern24).valid);
  // 4:8 sees the first row as two groups of 8 and 4: 5 nonzeros in the first.
  EXPECT_EQ(check_pattern(w.data(), 1, 12, Pattern{4, 8}).bad_groups, 1);
}

TEST(KeptMagnitude, Fractions) {
  const std::vector<float> w = {3, -1, 0, 0};
  EXPECT_DOUBLE_EQ(kept_magnitude(w.data(), Mask{1, 0, 0, 0}), 0.75);
  EXPECT_DOUBLE_EQ(kept_magnitude(w.data(), Mask{1, 1, 0, 0}), 1.0);
  const std::vector<float> z(4, 0.f);
  EXPECT_DOUBLE_EQ(kept_magnitude(z.data(), Mask{0, 0, 0, 0}), 1.0);
}

}  // namespace
}  // namespace sparse24
