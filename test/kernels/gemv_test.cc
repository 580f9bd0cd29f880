// The dense bf16, fp32 and int8 GEMV (src/kernels/gemv.h): the AVX2 path and the threaded dispatch against
// the plain loop, across row counts around its 8 row regions and column counts around its 8-column step; the
// plain loop against double sums. The dense small-N GEMM against gemm_reference.
#include "kernels/gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "../common/seed.h"
#include "kernels/kernel_list.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"

namespace sparse24::kernels {
namespace {

using sparse24::testing::random_floats;
using sparse24::testing::rng;

bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

// The bf16 or fp32 functions of gemv.h.
struct Bf16 {
  using T = uint16_t;
  static T to(float v) { return float_to_bf16(v); }
  static float from(T v) { return bf16_to_float(v); }
  static constexpr auto reference = gemv_bf16_reference;
  static constexpr auto threaded = gemv_bf16;
  static constexpr auto avx2 = gemv_bf16_avx2;
};
struct F32 {
  using T = float;
  static T to(float v) { return v; }
  static float from(T v) { return v; }
  static constexpr auto reference = gemv_f32_reference;
  static constexpr auto threaded = gemv_f32;
  static constexpr auto avx2 = gemv_f32_avx2;
};

template <class K>
void matches_reference_across_edge_sizes(uint64_t seed) {
  auto g = rng(seed);
  for (int64_t rows : {1, 3, 7, 8, 9, 16, 17, 64, 129, 1000})
    for (int64_t cols : {1, 7, 8, 9, 31, 64, 576}) {
      const std::vector<float> x = random_floats(g, cols, -3, 3);
      std::vector<float> wf = random_floats(g, rows * cols, -2, 2);
      std::vector<typename K::T> w(wf.size());
      for (size_t i = 0; i < w.size(); ++i) {
        w[i] = K::to(wf[i]);
        wf[i] = K::from(w[i]);
      }
      std::vector<float> ref(rows), got(rows);
      std::vector<double> mag(rows, 0.0);
      K::reference(w.data(), rows, cols, x.data(), ref.data());
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) {
          s += static_cast<double>(wf[r * cols + c]) * x[c];
          mag[r] += std::fabs(static_cast<double>(wf[r * cols + c]) * x[c]);
        }
        ASSERT_NEAR(ref[r], s, 1e-6 * mag[r] + 1e-30) << rows << "x" << cols << " row " << r;
      }
      for (int threads : {1, 2}) {
        std::fill(got.begin(), got.end(), NAN);
        K::threaded(w.data(), rows, cols, x.data(), got.data(), threads);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(got[r], ref[r], 1e-6 * mag[r] + 1e-30)
              << rows << "x" << cols << " row " << r << " threads " << threads;
      }
      if (has_avx2()) {  // a row range inside the matrix: the rows outside it untouched
        std::fill(got.begin(), got.end(), -7.0f);
        const int64_t r0 = rows / 3, r1 = rows - rows / 4;
        K::avx2(w.data(), r0, r1, cols, x.data(), got.data());
        for (int64_t r = 0; r < rows; ++r) {
          if (r < r0 || r >= r1) {
            ASSERT_EQ(got[r], -7.0f) << r;
          } else {
            ASSERT_NEAR(got[r], ref[r], 1e-6 * mag[r] + 1e-30) << r;
          }
        }
      }
    }
}

TEST(Gemv, Bf16MatchesReferenceAcrossEdgeSizes) {
  SPARSE24_SEED_TRACE();
  matches_reference_across_edge_sizes<Bf16>(1);
}

TEST(Gemv, F32MatchesReferenceAcrossEdgeSizes) {
  SPARSE24_SEED_TRACE();
  matches_reference_across_edge_sizes<F32>(2);
}

// int8 weights with a scale per 64 columns: the quantizer within half a step of each weight, the plain loop
// against double sums of the dequantized weights, the AVX2 and AVX-512 rows (where the CPU has them) and the
// threaded dispatch against the plain loop, across column counts around the 8- and 16-column steps and the
// 64-column groups.
TEST(Gemv, Int8MatchesReferenceAcrossEdgeSizes) {
  SPARSE24_SEED_TRACE();
  auto g = rng(3);
  for (int64_t rows : {1, 7, 8, 9, 17, 129, 1000})
    for (int64_t cols : {1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 80, 136, 576, 896}) {
      const int64_t groups = (cols + kGemvI8Group - 1) / kGemvI8Group;
      const std::vector<float> x = random_floats(g, cols, -3, 3);
      std::vector<float> wf = random_floats(g, rows * cols, -2, 2);
      if (rows > 1) std::fill(wf.begin(), wf.begin() + cols, 0.0f);  // an all-zero row
      std::vector<int8_t> q(wf.size());
      std::vector<float> scales(static_cast<size_t>(rows * groups));
      quantize_gemv_i8(wf.data(), rows, cols, q.data(), scales.data());
      std::vector<double> deq(wf.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const double s = scales[r * groups + c / kGemvI8Group];
          deq[r * cols + c] = q[r * cols + c] * s;
          ASSERT_LE(std::fabs(deq[r * cols + c] - wf[r * cols + c]), s / 2 * (1 + 1e-4))
              << r << "," << c;  // float rounding of w / s
        }
      std::vector<float> ref(rows), got(rows);
      std::vector<double> mag(rows, 0.0);
      gemv_i8_reference(q.data(), scales.data(), rows, cols, x.data(), ref.data());
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) {
          s += deq[r * cols + c] * x[c];
          mag[r] += std::fabs(deq[r * cols + c] * x[c]);
        }
        ASSERT_NEAR(ref[r], s, 1e-6 * mag[r] + 1e-30) << rows << "x" << cols << " row " << r;
      }
      for (int threads : {1, 2}) {
        std::fill(got.begin(), got.end(), NAN);
        gemv_i8(q.data(), scales.data(), rows, cols, x.data(), got.data(), threads);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(got[r], ref[r], 1e-6 * mag[r] + 1e-30)
              << rows << "x" << cols << " row " << r << " threads " << threads;
      }
      for (auto* rows_fn : {gemv_i8_avx2, gemv_i8_avx512}) {  // a row range: the rows outside it untouched
        if (rows_fn == gemv_i8_avx2 ? !has_avx2() : !cpu_has_avx512()) continue;
        std::fill(got.begin(), got.end(), -7.0f);
        const int64_t r0 = rows / 3, r1 = rows - rows / 4;
        rows_fn(q.data(), scales.data(), r0, r1, cols, x.data(), got.data());
        for (int64_t r = 0; r < rows; ++r) {
          if (r < r0 || r >= r1) {
            ASSERT_EQ(got[r], -7.0f) << r;
          } else {
            ASSERT_NEAR(got[r], ref[r], 1e-6 * mag[r] + 1e-30)
                << r << (rows_fn == gemv_i8_avx2 ? " avx2" : " avx512");
          }
        }
      }
    }
}

// Random rows of a ggml type: finite scales and halves (fp16 scales in [-0.05, 0.05], some zero), any bits
// for the quantized values and Q6_K's int8 scales.
std::vector<uint8_t> random_ggml_rows(std::mt19937_64& g, GgmlType type, int64_t rows, int64_t cols) {
  const auto t = static_cast<uint32_t>(type);
  std::vector<uint8_t> w(static_cast<size_t>(rows * ggml_row_bytes(t, cols)));
  for (uint8_t& b : w) b = static_cast<uint8_t>(g());
  const auto put_half = [&](size_t at, float lo, float hi) {
    const uint16_t h = float_to_half(std::uniform_real_distribution<float>(lo, hi)(g));
    std::memcpy(w.data() + at, &h, 2);
  };
  const std::vector<float> f = random_floats(g, rows * cols, -2, 2);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(w.data(), f.data(), w.size());
      break;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (size_t i = 0; i < f.size(); ++i) {
        const uint16_t h = type == GgmlType::kF16 ? float_to_half(f[i]) : float_to_bf16(f[i]);
        std::memcpy(w.data() + 2 * i, &h, 2);
      }
      break;
    case GgmlType::kQ8_0:
      for (size_t at = 0; at < w.size(); at += 34) put_half(at, -0.05f, 0.05f);
      break;
    case GgmlType::kQ6_K:
      for (size_t at = 0; at < w.size(); at += 210) put_half(at + 208, -0.05f, 0.05f);
      break;
    default:
      ADD_FAILURE() << "no random rows of " << ggml_type_name(t);
  }
  if (rows > 2 && type != GgmlType::kF32)
    std::fill(w.begin() + ggml_row_bytes(t, cols), w.begin() + 2 * ggml_row_bytes(t, cols),
              0);  // an all-zero row
  return w;
}

// Rows of ggml blocks (F32, F16, BF16, Q8_0, Q6_K): the reference against double sums of the dequantized
// rows (sparse24::dequantize_row's plain loops, checked against the gguf package in gguf_test),
// ggml_rows_to_floats bit for bit equal to those rows; the AVX2 rows, the AVX-512 rows (every type) and the
// threaded dispatch against the reference across row counts around the 4 and 8 row regions and column counts
// of 1 to 11 blocks (Q6_K: 1, 2, 3, 8, 11 blocks of 256); unsupported types and shapes refused.
TEST(GemvGgml, MatchesReferenceAcrossEdgeSizes) {
  SPARSE24_SEED_TRACE();
  auto g = rng(5);
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ6_K}) {
    const auto t = static_cast<uint32_t>(type);
    ASSERT_TRUE(gemv_ggml_supported(t));
    const int64_t block = ggml_type_info(t)->block;
    for (int64_t rows : {1, 3, 4, 5, 8, 9, 17, 129, 1000})
      for (int64_t blocks : {1, 2, 3, 8, 11}) {
        const int64_t cols = block == 1 ? blocks * 7 : blocks * block;
        const std::vector<float> x = random_floats(g, cols, -3, 3);
        const std::vector<uint8_t> w = random_ggml_rows(g, type, rows, cols);
        const int64_t row_bytes = ggml_row_bytes(t, cols);
        std::vector<float> ref(rows), got(rows), deq(static_cast<size_t>(cols));
        std::vector<double> mag(rows, 0.0);
        gemv_ggml_reference(t, w.data(), rows, cols, x.data(), ref.data());
        const std::string what = ggml_type_name(t) + " " + std::to_string(rows) + "x" + std::to_string(cols);
        std::vector<float> widened(static_cast<size_t>(rows * cols));
        ggml_rows_to_floats(t, w.data(), rows, cols, widened.data());
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(t, w.data() + r * row_bytes, deq.data(), cols, /*fast=*/false);
          for (int64_t c = 0; c < cols; ++c)  // the same floats, bit for bit
            ASSERT_EQ(std::memcmp(&widened[r * cols + c], &deq[c], sizeof(float)), 0)
                << what << " at " << r << "," << c;
          double s = 0;
          for (int64_t c = 0; c < cols; ++c) {
            s += static_cast<double>(deq[c]) * x[c];
            mag[r] += std::fabs(static_cast<double>(deq[c]) * x[c]);
          }
          ASSERT_NEAR(ref[r], s, 1e-6 * mag[r] + 1e-30) << what << " row " << r;
        }
        for (int threads : {1, 2}) {
          std::fill(got.begin(), got.end(), NAN);
          gemv_ggml(t, w.data(), rows, cols, x.data(), got.data(), threads);
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_NEAR(got[r], ref[r], 1e-6 * mag[r] + 1e-30)
                << what << " row " << r << " threads " << threads;
        }
        // Each ISA's rows on a range inside the matrix: the rows outside it untouched.
        using RowsFn = void (*)(uint32_t, const uint8_t*, int64_t, int64_t, int64_t, const float*, float*);
        for (const auto& [isa, rows_fn] :
             {std::pair<std::string, RowsFn>{"avx2", gemv_ggml_avx2}, {"avx512", gemv_ggml_avx512}}) {
          if (!(isa == "avx2" ? has_avx2() : cpu_has_avx512())) continue;
          std::fill(got.begin(), got.end(), -7.0f);
          const int64_t r0 = rows / 3, r1 = rows - rows / 4;
          rows_fn(t, w.data(), r0, r1, cols, x.data(), got.data());
          for (int64_t r = 0; r < rows; ++r) {
            if (r < r0 || r >= r1) {
              ASSERT_EQ(got[r], -7.0f) << what << " row " << r << " " << isa;
            } else {
              ASSERT_NEAR(got[r], ref[r], 1e-6 * mag[r] + 1e-30) << what << " row " << r << " " << isa;
            }
          }
        }
      }
  }
  std::vector<float> y(1);
  std::vector<uint8_t> w(256);
  for (uint32_t t : {2u, 12u, 13u, 99u}) {  // Q4_0, Q4_K, Q5_K, not a type
    EXPECT_FALSE(gemv_ggml_supported(t)) << t;
    EXPECT_THROW(gemv_ggml(t, w.data(), 1, 32, y.data(), y.data(), 1), Error) << t;
  }
  EXPECT_THROW(gemv_ggml(8, w.data(), 1, 31, y.data(), y.data(), 1), Error);  // not whole Q8_0 blocks
  EXPECT_THROW(gemv_ggml_reference(14, w.data(), 1, 128, y.data(), y.data()), Error);
  EXPECT_THROW(ggml_rows_to_floats(12, w.data(), 1, 256, y.data()), Error);
}

// The dense small-N GEMM: every N = 1..16 (one and two column vectors, masked tails), row counts around its
// 8 and 6 row regions, K from 1 up, each epilogue with and without bias, one and two threads, against
// gemm_reference (within 1e-6 of the sum of |products|: summation order; GELU within 1e-6 relative); the
// AVX2 rows on a range inside the matrix leave the rows outside it untouched.
TEST(GemmSmall, MatchesReferenceAtEveryN) {
  SPARSE24_SEED_TRACE();
  auto g = rng(4);
  for (int64_t n = 1; n <= kGemmSmallMaxN; ++n)
    for (int64_t m : {1, 5, 8, 13, 49})
      for (int64_t k : {1, 3, 64, 385}) {
        const std::vector<float> w = random_floats(g, m * k, -2, 2), x = random_floats(g, k * n, -3, 3),
                                 bias = random_floats(g, m, -1, 1);
        std::vector<double> mag(static_cast<size_t>(m * n), 0.0);
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = 0; j < n; ++j)
            for (int64_t c = 0; c < k; ++c) mag[r * n + j] += std::fabs(double{w[r * k + c]} * x[c * n + j]);
        for (Epilogue ep : {Epilogue::kNone, Epilogue::kRelu, Epilogue::kGelu})
          for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
            std::vector<float> ref(static_cast<size_t>(m * n)), got(ref.size());
            gemm_reference(w.data(), m, k, x.data(), n, n, ref.data(), n, b, ep);
            const auto tol = [&](int64_t i) { return 1e-6 * (mag[i] + 1 + std::fabs(ref[i])); };
            for (int threads : {1, 2}) {
              std::fill(got.begin(), got.end(), NAN);
              gemm_small(w.data(), m, k, x.data(), n, got.data(), b, ep, threads);
              for (int64_t i = 0; i < m * n; ++i)
                ASSERT_NEAR(got[i], ref[i], tol(i))
                    << m << "x" << k << "x" << n << " " << epilogue_name(ep) << (b ? " bias" : "")
                    << " threads " << threads << " at " << i;
            }
            if (has_avx2()) {
              std::fill(got.begin(), got.end(), -7.0f);
              const int64_t r0 = m / 3, r1 = m - m / 4;
              gemm_small_avx2(w.data(), r0, r1, k, x.data(), n, got.data(), b, ep);
              for (int64_t i = 0; i < m * n; ++i) {
                if (i / n < r0 || i / n >= r1)
                  ASSERT_EQ(got[i], -7.0f) << i;
                else
                  ASSERT_NEAR(got[i], ref[i], tol(i)) << m << "x" << k << "x" << n << " at " << i;
              }
            }
          }
      }
  std::vector<float> y(4);
  EXPECT_THROW(
      gemm_small(y.data(), 1, 1, y.data(), kGemmSmallMaxN + 1, y.data(), nullptr, Epilogue::kNone, 1), Error);
}

// The row regions' staggering (kernel_list.h): never more rows per region than an even split, at most 7
// fewer; streams that would start a multiple of 4 KB apart are spread over distinct eighths of a page;
// rows of a multiple of 4 KB (which no row count can spread) keep the even split.
TEST(RowRegions, StaggeredRowsPerRegion) {
  const auto spread = [](int64_t per, int regions, int64_t row_bytes) {
    unsigned used = 0;
    for (int i = 0; i < regions; ++i) used |= 1u << ((i * per * row_bytes) % 4096 / 512);
    return __builtin_popcount(used);
  };
  for (int64_t rows : {1, 7, 8, 9, 100, 768, 3072, 49152})
    for (int regions : {1, 4, 6, 8})
      for (int64_t row_bytes : {576, 1152, 1536, 3072, 5632, 12288}) {
        const int64_t even = rows / regions, per = staggered_rows_per_region(rows, regions, row_bytes);
        ASSERT_LE(per, even) << rows << " " << regions << " " << row_bytes;
        ASSERT_GE(per, std::min<int64_t>(even, std::max<int64_t>(1, even - 7))) << rows << " " << regions;
        ASSERT_GE(spread(per, regions, row_bytes), spread(even, regions, row_bytes));
      }
  // 768 rows of 768 floats in 8 regions: 96 rows apart is 72 pages (one eighth for all 8 starts); the
  // staggered count spreads them over 4 eighths, the most that rows of 3 KB allow.
  EXPECT_EQ(spread(96, 8, 3072), 1);
  EXPECT_EQ(spread(staggered_rows_per_region(768, 8, 3072), 8, 3072), 4);
  EXPECT_EQ(staggered_rows_per_region(768, 8, 12288), 96);
}

}  // namespace
}  // namespace sparse24::kernels
