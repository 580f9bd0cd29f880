// Replayable randomness for tests: every randomized test draws its seed from test_seed(), which is
// SPARSE24_TEST_SEED if set, else a fresh one; SeedTrace prints it with any failure so the run can be
// replayed with SPARSE24_TEST_SEED=<seed>.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace sparse24::testing {

inline uint64_t test_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("SPARSE24_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    return static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
  }();
  return seed;
}

// Any failing run ends by naming its seed, also for tests without SPARSE24_SEED_TRACE (an exception, say).
class SeedReport : public ::testing::Environment {
 public:
  void TearDown() override {
    if (::testing::UnitTest::GetInstance()->Failed())
      std::printf("replay with SPARSE24_TEST_SEED=%llu\n", static_cast<unsigned long long>(test_seed()));
  }
};
inline const bool kSeedReportRegistered = (::testing::AddGlobalTestEnvironment(new SeedReport), true);

// Put at the top of a randomized test: failures then say how to replay.
#define SPARSE24_SEED_TRACE() \
  SCOPED_TRACE("replay with SPARSE24_TEST_SEED=" + std::to_string(::sparse24::testing::test_seed()))

// A generator per test, derived from the run's seed and a per-test salt.
inline std::mt19937_64 rng(uint64_t salt = 0) {
  return std::mt19937_64(test_seed() ^ (salt * 0x9E3779B97F4A7C15ull));
}

inline std::vector<float> random_floats(std::mt19937_64& g, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace sparse24::testing
