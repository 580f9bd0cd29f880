#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "common/seed.h"
#include "sparse24/mask.h"

namespace sparse24 {
namespace {

using testing::random_floats;
using testing::rng;

TEST(Transposable, NinetyPatterns) {
  const auto& pats = transposable_patterns_4x4();
  ASSERT_EQ(pats.size(), 90u);
  for (uint16_t p : pats) {
    std::vector<float> w(16);
    for (int i = 0; i < 16; ++i) w[i] = (p >> i & 1) ? 1.f : 0.f;
    EXPECT_TRUE(is_transposable_24(w.data(), 4, 4));
  }
}

// Independent brute force over all 12870 ways to keep 8 of 16.
double best_block_by_brute_force(const float* a) {
  double best = -1;
  for (uint32_t bits = 0; bits < (1u << 16); ++bits) {
    if (std::popcount(bits) != 8) continue;
    bool ok = true;
    for (int i = 0; i < 4; ++i)
      ok = ok && std::popcount((bits >> (4 * i)) & 0xFu) == 2 && std::popcount(bits & (0x1111u << i)) == 2;
    if (!ok) continue;
    double s = 0;
    for (int i = 0; i < 16; ++i)
      if (bits >> i & 1) s += std::fabs(a[i]);
    best = std::max(best, s);
  }
  return best;
}

TEST(Transposable, ExactIsOptimalAndGreedyIsValid) {
  SPARSE24_SEED_TRACE();
  auto g = rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> w = random_floats(g, 16);
    if (trial % 4 == 0)  // force ties
      for (auto& x : w) x = std::round(x * 2);
    const Mask exact = transposable_mask(w.data(), 4, 4, TransposableMethod::kExact);
    const Mask greedy = transposable_mask(w.data(), 4, 4, TransposableMethod::kGreedy);
    double kept_exact = 0, kept_greedy = 0;
    int n_exact = 0, n_greedy = 0;
    for (int i = 0; i < 16; ++i) {
      kept_exact += exact[i] * std::fabs(w[i]);
      kept_greedy += greedy[i] * std::fabs(w[i]);
      n_exact += exact[i];
      n_greedy += greedy[i];
    }
    EXPECT_EQ(n_exact, 8);
    EXPECT_EQ(n_greedy, 8) << "greedy must complete every block";
    EXPECT_NEAR(kept_exact, best_block_by_brute_force(w.data()), 1e-5);
    EXPECT_LE(kept_greedy, kept_exact + 1e-5);
    // 8 kept with at most 2 per row and column means exactly 2 in each.
    auto indicator = [](const Mask& m) { return std::vector<float>(m.begin(), m.end()); };
    const std::vector<float> pe = indicator(exact), pg = indicator(greedy);
    EXPECT_TRUE(is_transposable_24(pe.data(), 4, 4));
    EXPECT_TRUE(is_transposable_24(pg.data(), 4, 4));
  }
}

TEST(Transposable, WholeMatricesWithPadding) {
  SPARSE24_SEED_TRACE();
  auto g = rng(3);
  for (int64_t rows : {1, 3, 4, 5, 63, 64, 65})
    for (int64_t k : {1, 3, 4, 5, 63, 64, 65})
      for (auto method : {TransposableMethod::kGreedy, TransposableMethod::kExact}) {
        std::vector<float> w = random_floats(g, static_cast<size_t>(rows * k));
        apply_mask(w.data(), transposable_mask(w.data(), rows, k, method));
        EXPECT_TRUE(is_transposable_24(w.data(), rows, k)) << rows << "x" << k;
        // The transpose is 2:4 along its rows too.
        std::vector<float> t(w.size());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < k; ++c) t[c * rows + r] = w[r * k + c];
        EXPECT_TRUE(check_pattern(t.data(), k, rows, kPattern24).valid);
      }
}

TEST(Transposable, KeepsLessThanOneDimensional) {
  SPARSE24_SEED_TRACE();
  auto g = rng(4);
  std::vector<float> w = random_floats(g, 64 * 64);
  const double one_d = kept_magnitude(w.data(), magnitude_mask(w.data(), 64, 64, kPattern24));
  const double exact =
      kept_magnitude(w.data(), transposable_mask(w.data(), 64, 64, TransposableMethod::kExact));
  const double greedy =
      kept_magnitude(w.data(), transposable_mask(w.data(), 64, 64, TransposableMethod::kGreedy));
  EXPECT_LE(exact, one_d);
  EXPECT_LE(greedy, exact);
  EXPECT_GT(greedy, 0.5);
}

}  // namespace
}  // namespace sparse24
