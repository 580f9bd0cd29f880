// Row conversions and the finiteness check (src/kernels/convert.h) against dtype.h's per-element values:
// every half bit pattern through the F16C path and the plain loop, rows of every length around the
// 8-element step and the 1,024-element blocks, odd source addresses, and a non-finite value at every
// place of a row. The int8 rounding and the 2:4 pruning of a row: the AVX2 paths against the plain ones.
#include "kernels/convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../common/seed.h"

namespace sparse24::kernels {
namespace {

using sparse24::testing::random_floats;
using sparse24::testing::rng;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Convert, EveryHalfWidensAsDtype) {
  std::vector<uint16_t> h(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> y(h.size());
  half_to_floats(h.data(), 65536, y.data());
  for (int i = 0; i < 65536; ++i) {
    // NaNs compare by class: F16C sets a signalling NaN's quiet bit, the scalar widening keeps the payload.
    if (std::isnan(y[i]) || std::isnan(half_to_float(h[i]))) {
      ASSERT_TRUE(std::isnan(y[i]) && std::isnan(half_to_float(h[i]))) << i;
      continue;
    }
    ASSERT_EQ(bits(y[i]), bits(half_to_float(h[i]))) << i;
  }
  if (!f16c_supported()) GTEST_SKIP() << "no F16C: the plain loop only";
  std::vector<float> f(h.size());
  half_to_floats_f16c(h.data(), 65536, f.data());
  for (int i = 0; i < 65536; ++i)
    if (!std::isnan(f[i])) {
      ASSERT_EQ(bits(f[i]), bits(half_to_float(h[i]))) << i;
    }
}

TEST(Convert, FloatsNarrowToHalfAsDtype) {
  SPARSE24_SEED_TRACE();
  auto g = rng(3);
  for (int64_t n : {1, 7, 8, 9, 100, 1025}) {
    std::vector<float> x = random_floats(g, n, -70000, 70000);  // beyond half's range too: inf
    x[0] = 1e-6f;                                               // a subnormal half
    if (n > 2) x[1] = 6.1e-5f, x[2] = -65520.f;                 // the normal edge; rounds to -inf
    std::vector<uint16_t> h(n);
    floats_to_half(x.data(), n, h.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], float_to_half(x[i])) << x[i];
  }
}

TEST(Convert, FloatsNarrowToBf16AsDtype) {
  SPARSE24_SEED_TRACE();
  auto g = rng(4);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 15, 16, 17, 33, 100, 1025}) {
    std::vector<float> x = random_floats(g, n, -4, 4);
    // Ties both ways, the largest finite values (one rounds to inf), infinities, NaNs (one whose payload
    // is all in the dropped half, one signalling), subnormals, signed zeros.
    const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0x7F7F7FFFu, 0x7F800000u, 0xFF800000u,
                                0x7FC00000u, 0x7F800001u, 0xFFA00000u, 0x00000001u, 0x80008000u, 0x80000000u};
    for (size_t i = 0; i < std::size(special) && static_cast<int64_t>(i) < n; ++i)
      std::memcpy(&x[static_cast<size_t>(n - 1) - i], &special[i], 4);
    x[0] = -inf;
    std::vector<uint16_t> y(n);
    floats_to_bf16(x.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], float_to_bf16(x[i])) << n << " " << i << " " << x[i];
  }
}

TEST(Convert, ElementsWidenAsDtypeFromAnyAddress) {
  SPARSE24_SEED_TRACE();
  auto g = rng(4);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8})
    for (int64_t n : {0, 1, 7, 8, 9, 1023, 1024, 1025, 3000})
      for (size_t offset : {0, 1, 3}) {
        std::vector<uint8_t> raw(offset + static_cast<size_t>(n) * dtype_size(t));
        for (uint8_t& b : raw) b = static_cast<uint8_t>(g());
        std::vector<float> y(static_cast<size_t>(n));
        elements_to_floats(t, raw.data() + offset, n, y.data());
        for (int64_t i = 0; i < n; ++i) {
          const float want = element_to_float(t, raw.data() + offset + i * dtype_size(t));
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(y[i])) << dtype_name(t) << " n " << n << " at " << i;
          } else {
            ASSERT_EQ(bits(y[i]), bits(want)) << dtype_name(t) << " n " << n << " at " << i;
          }
        }
      }
}

TEST(Convert, AllFiniteFindsEveryNonFiniteValue) {
  SPARSE24_SEED_TRACE();
  auto g = rng(5);
  const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  for (int64_t n : {1, 15, 16, 17, 1023, 1024, 1025, 2100}) {
    std::vector<float> x = random_floats(g, n, -1, 1);
    x[0] = std::numeric_limits<float>::max();
    x[n - 1] = -std::numeric_limits<float>::max();
    ASSERT_TRUE(all_finite(x.data(), n)) << n;
    for (int64_t at = 0; at < n; at += (n > 100 ? 37 : 1))
      for (float b : bad) {
        std::vector<float> y = x;
        y[at] = b;
        ASSERT_FALSE(all_finite(y.data(), n)) << "n " << n << " at " << at << " value " << b;
      }
    std::vector<float> y = x;
    y[n - 1] = bad[2];
    ASSERT_FALSE(all_finite(y.data(), n)) << "last of " << n;
  }
  EXPECT_TRUE(all_finite(nullptr, 0));
}

// The int8 rounding on both paths against its rule written out (nearbyint, clamped), over lengths around the
// 8- and 32-value steps: exact halves round to even, an all-zero group gives scale 0 and zeros.
TEST(Convert, QuantizeI8RoundsAsItsRule) {
  SPARSE24_SEED_TRACE();
  auto g = rng(6);
  for (int64_t n : {1, 7, 8, 9, 31, 32, 33, 64, 100})
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> x = random_floats(g, n, -3, 3);
      if (kind == 1) {  // scale 1: halves exactly
        for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>(i % 9) - 4) + 0.5f;
        x[0] = -127.f;
      }
      if (kind == 2) x.assign(static_cast<size_t>(n), 0.f);
      float amax = 0.f;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const float scale = amax / 127.f;
      std::vector<int8_t> q(static_cast<size_t>(n) + 1, 99), qa = q;
      ASSERT_EQ(quantize_i8(x.data(), n, q.data()), scale) << n;
      for (int64_t i = 0; i < n; ++i) {
        const float want = scale == 0.f ? 0.f : std::clamp(std::nearbyint(x[i] / scale), -127.f, 127.f);
        ASSERT_EQ(q[i], static_cast<int8_t>(want)) << "n " << n << " kind " << kind << " at " << i;
      }
      ASSERT_EQ(q[n], 99) << "wrote past n " << n;
      if (!f16c_supported()) continue;
      ASSERT_EQ(quantize_i8_avx2(x.data(), n, qa.data()), scale);
      ASSERT_EQ(qa, q) << "n " << n << " kind " << kind;
    }
}

// prune24_row's AVX2 blocks against its plain loop (which test/unit/compressed_test.cc checks against the
// general pruning path, magnitude_mask), bit for bit: rows around the 16-value block with ties of magnitude
// (+-x), zeros (-0 too), tails; a NaN anywhere is reported by both.
TEST(Convert, Prune24RowPathsAgree) {
  SPARSE24_SEED_TRACE();
  auto g = rng(7);
  for (int64_t cols : {1, 2, 3, 4, 5, 8, 15, 16, 17, 31, 32, 33, 47, 64, 65, 100, 2048}) {
    std::vector<float> x = random_floats(g, cols, -2, 2);
    for (int64_t i = 0; i < cols; ++i) {
      if (i % 5 == 1) x[i] = -x[i - 1];
      if (i % 7 == 3) x[i] = (i % 2) ? 0.f : -0.f;
      if (i % 13 == 6) x[i] = x[i - 2];
      if (i % 11 == 7) x[i] = -x[i - 3];                                   // ties three apart
      if (i % 17 == 9) x[i - 1] = x[i - 2] = x[i - 3] = 0.f;               // a group of one or no nonzero
      if (i % 19 == 12) x[i] = x[i - 1] = x[i - 3], x[i - 2] = -x[i - 3];  // four alike
    }
    const int64_t G = (cols + 3) / 4;
    std::vector<float> v(static_cast<size_t>(2 * G), 7.f), vp = v;
    std::vector<uint8_t> m(static_cast<size_t>((G + 1) / 2), 0xAA), mp = m;
    ASSERT_TRUE(prune24_row_plain(x.data(), cols, vp.data(), mp.data()));
    ASSERT_TRUE(prune24_row(x.data(), cols, v.data(), m.data()));
    for (int64_t j = 0; j < 2 * G; ++j)
      ASSERT_EQ(bits(v[j]), bits(vp[j])) << "cols " << cols << " value " << j;
    ASSERT_EQ(m, mp) << "cols " << cols;
    for (int64_t at = 0; at < cols; at += (cols > 100 ? 97 : 1)) {
      std::vector<float> y = x;
      y[at] = std::numeric_limits<float>::quiet_NaN();
      ASSERT_FALSE(prune24_row(y.data(), cols, v.data(), m.data())) << "cols " << cols << " NaN at " << at;
      ASSERT_FALSE(prune24_row_plain(y.data(), cols, v.data(), m.data())) << "cols " << cols << " at " << at;
    }
  }
}

}  // namespace
}  // namespace sparse24::kernels
