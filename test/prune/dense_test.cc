// SparseGPT's dense double-precision kernels (src/prune/dense.h): the packed product against a naive sum on
// every ISA the CPU runs, across tile, block and chunk edges and strided operands, bit for bit the same on
// each; the blocked factorization against the plain-loop reference across block edges, the same bits for
// every ISA and thread count; a matrix that is not positive definite names its column.
#include "prune/dense.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/seed.h"
#include "sparse24/error.h"

namespace sparse24 {
namespace {

using testing::rng;

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512})
    if (isa == Isa::kRef || isa_supported(isa)) v.push_back(isa);
  return v;
}

std::vector<double> random_doubles(std::mt19937_64& g, int64_t n) {
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = d(g);
  return v;
}

// A symmetric positive definite n x n matrix: X^T X / tokens + 0.01 I for a random X.
std::vector<double> spd(std::mt19937_64& g, int64_t n) {
  const int64_t tokens = n + 8;
  const std::vector<double> x = random_doubles(g, tokens * n);
  std::vector<double> h(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t t = 0; t < tokens; ++t) s += x[t * n + i] * x[t * n + j];
      h[i * n + j] = s / tokens + (i == j ? 0.01 : 0.0);
    }
  return h;
}

TEST(Dense, ProductMatchesNaiveSumOnEveryIsaBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = rng(1101);
  // Edges of the tiles (MR 4/6/12, NR 4/8/16), the packed blocks (96-row... kMc, kNc) and kKc's chunks.
  const int64_t sizes[][3] = {{1, 1, 1},    {5, 7, 3},      {6, 8, 128},   {12, 16, 129},  {13, 17, 257},
                              {97, 33, 40}, {200, 1600, 7}, {193, 5, 300}, {31, 1537, 130}};
  for (const auto& s : sizes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    for (bool a_transposed : {false, true})
      for (bool b_transposed : {false, true}) {
        const std::vector<double> a = random_doubles(g, m * k), b = random_doubles(g, k * n),
                                  c0 = random_doubles(g, m * (n + 3));
        const dense::View av = a_transposed ? dense::View{a.data(), 1, m} : dense::View{a.data(), k, 1};
        const dense::View bv = b_transposed ? dense::View{b.data(), 1, k} : dense::View{b.data(), n, 1};
        std::vector<double> first;
        for (Isa isa : isas()) {
          std::vector<double> c = c0;  // leading dimension n + 3: columns past n stay untouched
          dense::gemm_sub(m, n, k, av, bv, c.data(), n + 3, isa);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n + 3; ++j) {
              double want = c0[i * (n + 3) + j], scale = 1;
              if (j < n)
                for (int64_t p = 0; p < k; ++p) {
                  const double t = av.data[i * av.rs + p * av.cs] * bv.data[p * bv.rs + j * bv.cs];
                  want -= t, scale += std::fabs(t);
                }
              ASSERT_NEAR(c[i * (n + 3) + j], want, 1e-14 * scale)
                  << isa_name(isa) << " [" << m << ", " << n << ", " << k << "] " << a_transposed
                  << b_transposed << " at " << i << ", " << j;
            }
          if (first.empty()) first = c;
          ASSERT_EQ(c, first) << isa_name(isa) << " differs from the portable kernel at [" << m << ", " << n
                              << ", " << k << "]";
        }
      }
  }
}

TEST(Dense, BlockedFactorizationMatchesTheReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(1102);
  for (int64_t n : {1, 2, 5, 33, 100, 250}) {
    const std::vector<double> h = spd(g, n);
    const std::vector<double> ref = dense::upper_cholesky_of_inverse_reference(h, n);
    double max_ref = 0;
    for (double v : ref) max_ref = std::max(max_ref, std::fabs(v));
    for (int64_t block : {1, 7, 32, 64, 192}) {
      std::vector<double> first;
      for (Isa isa : isas())
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          const std::vector<double> u = dense::upper_cholesky_of_inverse(h, n, block, isa);
          omp_set_num_threads(omp_get_num_procs());
          ASSERT_EQ(u.size(), ref.size());
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
              if (j < i) {
                ASSERT_EQ(u[i * n + j], 0.0) << "below the diagonal at " << i << ", " << j;
              }
              ASSERT_NEAR(u[i * n + j], ref[i * n + j], 1e-10 * max_ref)
                  << "n " << n << " block " << block << " " << isa_name(isa) << " at " << i << ", " << j;
            }
          if (first.empty()) first = u;
          ASSERT_EQ(u, first) << "n " << n << " block " << block << ": " << isa_name(isa) << ", " << threads
                              << " threads differ";
        }
    }
    // U^T U H = I.
    const std::vector<double> u = dense::upper_cholesky_of_inverse(h, n);
    std::vector<double> inv(static_cast<size_t>(n * n), 0.0);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < n; ++k) inv[i * n + k] += u[t * n + i] * u[t * n + k];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += inv[i * n + k] * h[k * n + j];
        ASSERT_NEAR(s, i == j ? 1.0 : 0.0, 1e-8) << "n " << n << " at " << i << ", " << j;
      }
  }
}

TEST(Dense, NotPositiveDefiniteNamesTheColumn) {
  SPARSE24_SEED_TRACE();
  auto g = rng(1103);
  const int64_t n = 70;
  std::vector<double> h = spd(g, n);
  // Column 20 equal to column 50 (and row 20 to row 50): singular. The factorization runs from the last
  // column, so column 20 is where it fails.
  for (int64_t i = 0; i < n; ++i) h[i * n + 20] = h[i * n + 50];
  for (int64_t j = 0; j < n; ++j) h[20 * n + j] = h[50 * n + j];
  for (int64_t block : {8, 192}) {
    try {
      dense::upper_cholesky_of_inverse(h, n, block);
      ADD_FAILURE() << "a singular matrix was factored, block " << block;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not positive definite (at input column 20)"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(dense::upper_cholesky_of_inverse_reference(h, n), Error);
  EXPECT_THROW(dense::upper_cholesky_of_inverse(spd(g, 4), 4, 0), Error);
}

}  // namespace
}  // namespace sparse24
