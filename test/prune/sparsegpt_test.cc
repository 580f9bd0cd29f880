// SparseGPT: the Hessian against a naive X^T X, the blocked pruner against a straightforward dense-math
// reference (Gauss-Jordan inverse, textbook Cholesky of H^-1, one column at a time with immediate updates),
// the reconstruction error against magnitude and Wanda, dead inputs, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "common/seed.h"
#include "sparse24/error.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"

namespace sparse24 {
namespace {

using testing::random_floats;
using testing::rng;

// Correlated calibration inputs like a layer's activations: a few latent factors plus noise,
// X = Z A + 0.2 N (Z [tokens, 16]), then columns scaled by 10^[-1, 1].
std::vector<float> calibration(std::mt19937_64& g, int64_t tokens, int64_t cols) {
  constexpr int64_t kFactors = 16;
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> z(static_cast<size_t>(tokens * kFactors)), a(static_cast<size_t>(kFactors * cols)),
      scale(cols);
  for (auto& v : z) v = normal(g);
  for (auto& v : a) v = normal(g);
  std::uniform_real_distribution<float> e(-1.f, 1.f);
  for (auto& s : scale) s = std::pow(10.f, e(g));
  std::vector<float> x(static_cast<size_t>(tokens * cols));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      float v = 0.2f * normal(g);
      for (int64_t k = 0; k < kFactors; ++k) v += z[t * kFactors + k] * a[k * cols + c];
      x[t * cols + c] = v * scale[c];
    }
  return x;
}

// ||W X^T - W' X^T||_F in double.
double reconstruction_error(const std::vector<float>& w, const std::vector<float>& w2,
                            const std::vector<float>& x, int64_t rows, int64_t cols, int64_t tokens) {
  double err = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < tokens; ++t) {
      double d = 0;
      for (int64_t c = 0; c < cols; ++c) d += (double(w[r * cols + c]) - w2[r * cols + c]) * x[t * cols + c];
      err += d * d;
    }
  return std::sqrt(err);
}

// The reference: the same algorithm in its plainest form.
Mask reference_sparsegpt(std::vector<double>& w, int64_t rows, int64_t n, std::vector<double> h,
                         double damping) {
  auto H = [&](int64_t i, int64_t j) -> double& { return h[i * n + j]; };
  double mean = 0;
  std::vector<bool> dead(n);
  for (int64_t j = 0; j < n; ++j) {
    if (H(j, j) == 0) H(j, j) = 1, dead[j] = true;
    mean += H(j, j) / n;
  }
  for (int64_t j = 0; j < n; ++j) H(j, j) += damping * mean;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      if (dead[j]) w[r * n + j] = 0;
  // Gauss-Jordan inverse with partial pivoting.
  std::vector<double> a = h, inv(n * n, 0);
  for (int64_t i = 0; i < n; ++i) inv[i * n + i] = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
    for (int64_t k = 0; k < n; ++k)
      std::swap(a[c * n + k], a[p * n + k]), std::swap(inv[c * n + k], inv[p * n + k]);
    const double d = a[c * n + c];
    for (int64_t k = 0; k < n; ++k) a[c * n + k] /= d, inv[c * n + k] /= d;
    for (int64_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r * n + c];
      for (int64_t k = 0; k < n; ++k) a[r * n + k] -= f * a[c * n + k], inv[r * n + k] -= f * inv[c * n + k];
    }
  }
  // Upper Cholesky factor: U^T U = inv.
  std::vector<double> u(n * n, 0);
  for (int64_t i = 0; i < n; ++i) {
    double s = inv[i * n + i];
    for (int64_t k = 0; k < i; ++k) s -= u[k * n + i] * u[k * n + i];
    u[i * n + i] = std::sqrt(s);
    for (int64_t j = i + 1; j < n; ++j) {
      double t = inv[i * n + j];
      for (int64_t k = 0; k < i; ++k) t -= u[k * n + i] * u[k * n + j];
      u[i * n + j] = t / u[i * n + i];
    }
  }
  Mask mask(rows * n, 1);
  for (int64_t r = 0; r < rows; ++r) {
    double* row = w.data() + r * n;
    for (int64_t i = 0; i < n; ++i) {
      if (i % 4 == 0) {
        const int64_t len = std::min<int64_t>(4, n - i);
        for (int64_t drop = 0; drop < len - 2; ++drop) {  // prune the smallest score, ties: the higher index
          int64_t worst = -1;
          double ws = 0;
          for (int64_t k = i; k < i + len; ++k) {
            if (!mask[r * n + k]) continue;
            const double s = row[k] * row[k] / (u[k * n + k] * u[k * n + k]);
            if (worst < 0 || s <= ws) worst = k, ws = s;
          }
          mask[r * n + worst] = 0;
        }
      }
      const double q = mask[r * n + i] ? row[i] : 0;
      const double e = (row[i] - q) / u[i * n + i];
      for (int64_t j = i + 1; j < n; ++j) row[j] -= e * u[i * n + j];
      row[i] = q;
    }
  }
  return mask;
}

// Exactly: each element of a 256-token block of one add() is a float sum of fused multiply-adds in token
// order, added to the double sum; every ISA's kernel must give these bits (ctest runs this again with
// SPARSE24_ISA=avx2).
TEST(SparseGpt, HessianMatchesNaiveProductBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = rng(901);
  const int64_t cols = 37;  // not a multiple of the 16-column panels
  Hessian h(cols);
  std::vector<double> sum(cols * cols, 0.0);
  int64_t n = 0;
  for (int64_t tokens : {300, 45, 1}) {  // batches across the 256-token accumulation blocks
    const std::vector<float> x = random_floats(g, tokens * cols, -2.f, 2.f);
    h.add(x.data(), tokens);
    for (int64_t t0 = 0; t0 < tokens; t0 += 256)
      for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = i; j < cols; ++j) {
          float acc = 0;
          for (int64_t t = t0; t < std::min<int64_t>(tokens, t0 + 256); ++t)
            acc = std::fma(x[t * cols + i], x[t * cols + j], acc);
          sum[i * cols + j] += acc;
        }
    n += tokens;
  }
  ASSERT_EQ(h.samples(), n);
  const std::vector<double> m = h.matrix();
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double want = sum[std::min(i, j) * cols + std::max(i, j)] * (2.0 / static_cast<double>(n));
      ASSERT_EQ(m[i * cols + j], want) << i << " " << j;
    }
}

TEST(SparseGpt, MatchesTheReferenceForEveryBlockSize) {
  SPARSE24_SEED_TRACE();
  auto g = rng(902);
  // 42 columns: a partial last group and partial blocks; 100: the lazy update's 32-column chunks and a
  // tail; 70 rows: two whole batches of 32 rows and a partial one.
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 42}, {70, 100}}) {
    const int64_t tokens = 200;
    const std::vector<float> x = calibration(g, tokens, cols);
    const std::vector<float> w0 = random_floats(g, rows * cols);
    Hessian h(cols);
    h.add(x.data(), tokens);
    std::vector<double> ref(w0.begin(), w0.end());
    const Mask ref_mask = reference_sparsegpt(ref, rows, cols, h.matrix(), 0.01);
    for (int block : {4, 8, 20, 128}) {
      std::vector<float> w = w0;
      SparseGptOptions o;
      o.block_size = block;
      const Mask mask = sparsegpt_prune(w.data(), rows, cols, h, o);
      EXPECT_EQ(mask, ref_mask) << "[" << rows << ", " << cols << "] block " << block;
      double max_w = 0;
      for (double v : ref) max_w = std::max(max_w, std::fabs(v));
      for (int64_t i = 0; i < rows * cols; ++i)
        ASSERT_NEAR(w[i], ref[i], 1e-5 * max_w)
            << "[" << rows << ", " << cols << "] block " << block << " at " << i;
    }
  }
}

TEST(SparseGpt, ReconstructsBetterThanMagnitudeAndWanda) {
  SPARSE24_SEED_TRACE();
  auto g = rng(903);
  const int64_t rows = 64, cols = 128, tokens = 512;
  const std::vector<float> x = calibration(g, tokens, cols);
  const std::vector<float> w = random_floats(g, rows * cols);
  Hessian h(cols);
  h.add(x.data(), tokens / 2);
  h.add(x.data() + tokens / 2 * cols, tokens / 2);

  std::vector<float> w_gpt = w;
  const Mask m_gpt = sparsegpt_prune(w_gpt.data(), rows, cols, h);
  const PatternCheck check = check_pattern(w_gpt.data(), rows, cols);
  EXPECT_TRUE(check.valid);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g0 = 0; g0 < cols; g0 += 4) {
      int kept = 0;
      for (int l = 0; l < 4; ++l) {
        kept += m_gpt[r * cols + g0 + l];
        if (!m_gpt[r * cols + g0 + l]) {
          EXPECT_EQ(w_gpt[r * cols + g0 + l], 0.f);
        }
      }
      EXPECT_EQ(kept, 2);
    }

  std::vector<float> w_mag = w, w_wanda = w;
  apply_mask(w_mag.data(), magnitude_mask(w.data(), rows, cols));
  apply_mask(w_wanda.data(), wanda_mask(w.data(), rows, cols, column_norms(x.data(), tokens, cols)));
  const double e_gpt = reconstruction_error(w, w_gpt, x, rows, cols, tokens);
  const double e_mag = reconstruction_error(w, w_mag, x, rows, cols, tokens);
  const double e_wanda = reconstruction_error(w, w_wanda, x, rows, cols, tokens);
  std::printf("reconstruction error: sparsegpt %.4g, wanda %.4g, magnitude %.4g\n", e_gpt, e_wanda, e_mag);
  RecordProperty("error_sparsegpt", std::to_string(e_gpt));
  RecordProperty("error_wanda", std::to_string(e_wanda));
  RecordProperty("error_magnitude", std::to_string(e_mag));
  EXPECT_LT(e_wanda, e_mag);
  EXPECT_LT(e_gpt, 0.8 * e_wanda) << "sparsegpt " << e_gpt << " wanda " << e_wanda << " magnitude " << e_mag;
}

TEST(SparseGpt, DeadInputsArePrunedAndDoNotBreakTheInverse) {
  SPARSE24_SEED_TRACE();
  auto g = rng(904);
  const int64_t rows = 6, cols = 16, tokens = 64;
  std::vector<float> x = random_floats(g, tokens * cols);
  for (int64_t t = 0; t < tokens; ++t) x[t * cols + 5] = 0, x[t * cols + 9] = 0;
  Hessian h(cols);
  h.add(x.data(), tokens);
  std::vector<float> w = random_floats(g, rows * cols, 0.5f, 1.f);
  const Mask m = sparsegpt_prune(w.data(), rows, cols, h);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(m[r * cols + 5], 0);
    EXPECT_EQ(m[r * cols + 9], 0);
    EXPECT_EQ(w[r * cols + 5], 0.f);
  }
  EXPECT_TRUE(check_pattern(w.data(), rows, cols).valid);
}

TEST(SparseGpt, BadInputThrows) {
  SPARSE24_SEED_TRACE();
  auto g = rng(905);
  const int64_t rows = 4, cols = 8, tokens = 32;
  std::vector<float> x = random_floats(g, tokens * cols);
  for (int64_t t = 0; t < tokens; ++t) x[t * cols + 3] = x[t * cols + 6];  // two identical inputs: singular
  Hessian h(cols);
  EXPECT_THROW(h.matrix(), Error);  // no samples
  std::vector<float> w = random_floats(g, rows * cols);
  EXPECT_THROW(sparsegpt_prune(w.data(), rows, cols, h), Error);
  h.add(x.data(), tokens);
  SparseGptOptions o;
  o.dampening = 0;
  try {
    sparsegpt_prune(w.data(), rows, cols, h, o);
    ADD_FAILURE() << "singular H accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not positive definite"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(sparsegpt_prune(w.data(), rows, cols, h));  // 1% dampening makes it definite
  o.dampening = 0.01;
  o.block_size = 6;
  EXPECT_THROW(sparsegpt_prune(w.data(), rows, cols, h, o), Error);
  o.dampening = -1;
  o.block_size = 128;
  EXPECT_THROW(sparsegpt_prune(w.data(), rows, cols, h, o), Error);
  EXPECT_THROW(sparsegpt_prune(w.data(), rows, cols - 4, h), Error);  // wrong size
  w[2] = std::nanf("");
  EXPECT_THROW(sparsegpt_prune(w.data(), rows, cols, h), Error);
  x[5] = std::nanf("");
  EXPECT_THROW(h.add(x.data(), tokens), Error);
  EXPECT_THROW(Hessian(0), Error);
}

}  // namespace
}  // namespace sparse24
