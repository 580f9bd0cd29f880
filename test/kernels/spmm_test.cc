// Every kernel under every ISA this CPU runs against spmm_reference: shapes across tile edges, K tails,
// zero rows and groups, misaligned and strided X and Y, bias and epilogues, 1 and 2 threads, bf16 weights.
#include "sparse24/spmm.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/seed.h"
#include "kernels/spmm_test_util.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/reference.h"

namespace sparse24 {
namespace {

using testing::isas_here;
using testing::kEdges;
using testing::random_24;
using testing::random_floats;
using testing::rng;
using testing::variant_is_large_n;

Compressed with_abs_values(Compressed c) {
  for (size_t i = 0; i + 4 <= c.values.size(); i += 4) {
    float v;
    std::memcpy(&v, &c.values[i], 4);
    v = std::fabs(v);
    std::memcpy(&c.values[i], &v, 4);
  }
  return c;
}

Compressed with_bf16_values(Compressed c) {
  for (size_t i = 0; i + 4 <= c.values.size(); i += 4) {
    float v;
    std::memcpy(&v, &c.values[i], 4);
    v = bf16_to_float(float_to_bf16(v));
    std::memcpy(&c.values[i], &v, 4);
  }
  return c;
}

struct Case {
  int64_t m, k, n;
  int64_t ldx_pad = 0, ldy_pad = 0;  // ldx = n + ldx_pad, ldy = n + ldy_pad
  int64_t x_off = 0, y_off = 0;      // floats past a 64-byte boundary (misalignment)
  bool bias = false;
  Epilogue ep = Epilogue::kNone;
  int threads = 1;
  bool bf16 = false;
  int64_t int8_group = 0;  // > 0: int8 weights, quantize_int8 with this scale group (clamped to the row)
  // PackOptions::bf16_activations. With a bf16-activation variant forced: against the reference on X rounded
  // to bf16 (exact up to summation order); through dispatch (which may or may not round): within the
  // rounding's bound of it as well.
  bool bf16_act = false;
  bool variant_rounds_x = false;
  // PackOptions::int8_activations, with an int8-activation variant forced: against the reference on X as
  // round_activations_int8 leaves it (exact up to summation order).
  bool i8_act = false;
  PackLayouts layouts = PackLayouts::kBoth;
  std::string variant = {};  // non-empty: spmm_variant(variant, ...) instead of spmm
  std::string str() const {
    return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + " ldx+" +
           std::to_string(ldx_pad) + " ldy+" + std::to_string(ldy_pad) + " xoff " + std::to_string(x_off) +
           " yoff " + std::to_string(y_off) + (bias ? " bias " : " ") + epilogue_name(ep) + " threads " +
           std::to_string(threads) + (bf16 ? " bf16" : "") +
           (int8_group ? " int8/" + std::to_string(int8_group) : "") + (bf16_act ? " bf16-activations" : "") +
           (i8_act ? " int8-activations" : "") +
           (layouts == PackLayouts::kBoth     ? ""
            : layouts == PackLayouts::kLargeN ? " large-n only"
                                              : " small-n only") +
           (variant.empty() ? "" : " variant " + variant);
  }
};

void check(Isa isa, const Case& t, std::mt19937_64& g) {
  SCOPED_TRACE(std::string(isa_name(isa)) + " " + t.str());
  const Compressed c =
      t.int8_group ? quantize_int8(random_24(g, t.m, t.k), t.int8_group) : random_24(g, t.m, t.k);
  const int64_t ldx = t.n + t.ldx_pad, ldy = t.n + t.ldy_pad;
  // X in a 64-byte aligned buffer, offset by x_off floats; only rows < K exist.
  std::vector<float> xbuf(static_cast<size_t>(t.k * ldx + 32));
  const size_t xa = (64 - reinterpret_cast<uintptr_t>(xbuf.data()) % 64) % 64 / 4;
  float* x = xbuf.data() + xa + t.x_off;
  const std::vector<float> xv = random_floats(g, static_cast<size_t>(t.k * ldx), -2.f, 2.f);
  std::copy(xv.begin(), xv.end(), x);
  std::vector<float> xabs(xv);
  for (float& v : xabs) v = std::fabs(v);
  const std::vector<float> bias = random_floats(g, static_cast<size_t>(t.m));
  const float* b = t.bias ? bias.data() : nullptr;

  const Compressed want_w = t.bf16 ? with_bf16_values(c) : c;
  std::vector<float> want(static_cast<size_t>(t.m * ldy)), mag(want.size());
  // int8: the int8 reference (scaled values in fp32); the bound from the dequantised magnitudes.
  std::vector<float> xr(x, x + t.k * ldx);
  if (t.bf16_act)
    for (float& v : xr) v = bf16_to_float(float_to_bf16(v));
  if (t.i8_act) round_activations_int8(xr.data(), t.k, t.n, ldx);
  spmm_reference(want_w, xr.data(), t.n, ldx, want.data(), ldy, b, t.ep);
  spmm_reference(with_abs_values(t.int8_group ? compress(decompress(c)) : want_w), xabs.data(), t.n, ldx,
                 mag.data(), ldy);

  PackOptions o;
  o.isa_set = true;
  o.isa = isa;
  o.bf16_weights = t.bf16;
  o.bf16_activations = t.bf16_act;
  o.int8_activations = t.i8_act;
  o.layouts = t.layouts;
  const PackedMatrix p = pack(c, o);
  ASSERT_EQ(p.isa(), isa);
  ASSERT_EQ(p.rows(), t.m);
  ASSERT_EQ(p.cols(), t.k);
  const float sentinel = -12345.f;
  std::vector<float> ybuf(static_cast<size_t>(t.m * ldy + 64), sentinel);
  const size_t ya = (64 - reinterpret_cast<uintptr_t>(ybuf.data()) % 64) % 64 / 4;
  float* y = ybuf.data() + ya + t.y_off;
  if (t.variant.empty())
    spmm(p, x, t.n, ldx, y, ldy, b, t.ep, t.threads);
  else
    spmm_variant(t.variant, p, x, t.n, ldx, y, ldy, b, t.ep, t.threads);

  const float eps = 6e-8f;
  for (int64_t r = 0; r < t.m; ++r) {
    for (int64_t j = 0; j < ldy; ++j) {
      const size_t i = static_cast<size_t>(r * ldy + j);
      if (j >= t.n) {
        ASSERT_EQ(y[i], sentinel) << "wrote into the ldy padding at row " << r << " col " << j;
        continue;
      }
      // Summation-order and FMA differences: bounded by K eps times the sum of |w x|; GELU's
      // approximation adds 1e-6 relative.
      // bf16 activations through dispatch: X may be rounded (2^-8 relative each) or not; GELU steepens it.
      const float xeps = t.bf16_act && !t.variant_rounds_x ? 0x1p-7f : 0.f;
      const float tol =
          (2.f * static_cast<float>(t.k) * eps + xeps) * (mag[i] + (b ? std::fabs(b[r]) : 0.f)) +
          2e-6f * std::fabs(want[i]) + 1e-6f;
      ASSERT_NEAR(y[i], want[i], tol) << "row " << r << " col " << j;
    }
  }
  for (size_t i = 0; i < ya + t.y_off; ++i) ASSERT_EQ(ybuf[i], sentinel) << "wrote before y";
  for (size_t i = ya + t.y_off + static_cast<size_t>(t.m * ldy); i < ybuf.size(); ++i)
    ASSERT_EQ(ybuf[i], sentinel) << "wrote after y";
}

Case random_case(std::mt19937_64& g, int64_t m, int64_t k, int64_t n) {
  std::uniform_int_distribution<int> d(0, 1 << 20);
  Case t{m, k, n};
  t.ldx_pad = d(g) % 3 == 0 ? d(g) % 19 : 0;
  t.ldy_pad = d(g) % 3 == 0 ? d(g) % 19 : 0;
  t.x_off = d(g) % 2 ? d(g) % 16 : 0;
  t.y_off = d(g) % 2 ? d(g) % 16 : 0;
  t.bias = d(g) % 2;
  t.ep = static_cast<Epilogue>(d(g) % 3);
  t.threads = 1 + d(g) % 2;
  t.bf16 = d(g) % 4 == 0;
  if (!t.bf16 && d(g) % 3 == 0) t.int8_group = std::array<int64_t, 3>{64, 128, 1 << 20}[d(g) % 3];
  t.bf16_act = d(g) % 4 == 0;
  return t;
}

// Every N from 1 to 17 (the memory-bound path and its edge to the compute path) with sampled M and K.
TEST(Spmm, SmallNAllIsas) {
  SPARSE24_SEED_TRACE();
  auto g = rng(301);
  std::uniform_int_distribution<size_t> pick(0, std::size(kEdges) - 1);
  for (Isa isa : isas_here())
    for (int64_t n = 1; n <= 17; ++n)
      for (int rep = 0; rep < 4; ++rep) {
        check(isa, random_case(g, kEdges[pick(g)], kEdges[pick(g)], n), g);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// Sampled M, K, N across the tile edges (N up to 129: partial and multiple panels).
TEST(Spmm, TileEdgesAllIsas) {
  SPARSE24_SEED_TRACE();
  auto g = rng(302);
  std::uniform_int_distribution<size_t> pick(0, std::size(kEdges) - 1);
  for (Isa isa : isas_here())
    for (int rep = 0; rep < 60; ++rep) {
      check(isa, random_case(g, kEdges[pick(g)], kEdges[pick(g)], kEdges[pick(g)]), g);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

// Every K from 1 to 17 at fixed M and N on both paths: the padded last group never reads X rows >= K
// (the X buffer ends at row K and ASan watches it).
TEST(Spmm, KTails) {
  SPARSE24_SEED_TRACE();
  auto g = rng(303);
  for (Isa isa : isas_here())
    for (int64_t k = 1; k <= 17; ++k)
      for (int64_t n : {1, 5, 16, 40, 64}) {
        Case t{9, k, n};
        t.bias = true;
        check(isa, t, g);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// Several K blocks of both layouts, larger M chunks, two threads.
TEST(Spmm, LargerShapes) {
  SPARSE24_SEED_TRACE();
  auto g = rng(304);
  for (Isa isa : isas_here()) {
    if (isa == Isa::kRef) continue;
    for (int64_t n : {1, 3, 8, 13, 16, 24, 80})
      for (int threads : {1, 2}) {
        Case t{70, 1100, n};
        t.threads = threads;
        t.bias = true;
        t.ep = n % 2 ? Epilogue::kGelu : Epilogue::kRelu;
        t.ldx_pad = 3;
        t.x_off = 1;
        t.bf16 = n == 3 || n == 13;  // bf16 weights at an odd N below and above 8
        check(isa, t, g);
        if (::testing::Test::HasFatalFailure()) return;
        t.bf16 = false;
        t.int8_group = 64;  // int8 weights: several K blocks (K split at N = 1, 2), two passes at N > 8
        check(isa, t, g);
        if (::testing::Test::HasFatalFailure()) return;
      }
    // The compute-bound path's loop orders, rows in two chunks: small packed X (chunk-outer, each thread
    // packing its own panels); packed X too large for that (panel-outer, K in super blocks, so partial sums
    // wait across chunks); few rows and many N panels (the threads split the panels). bf16 and int8
    // weights over several panels of the AVX2 tiles have each K block widened once for a group of panels
    // (spmm_driver.h, multiply_widened): at N = 600 over 64 row blocks, several groups of 24-column panels.
    for (const Case& shape :
         {Case{300, 300, 70}, Case{300, 1100, 70}, Case{20, 200, 600}, Case{300, 300, 600}})
      for (int threads : {1, 2})
        for (int wt = 0; wt < 3; ++wt) {  // fp32, bf16, int8
          Case t = shape;
          t.threads = threads;
          t.bias = true;
          t.ep = Epilogue::kRelu;
          t.ldy_pad = 5;
          t.bf16 = wt == 1;
          t.int8_group = wt == 2 ? 64 : 0;
          t.layouts = PackLayouts::kLargeN;
          check(isa, t, g);
          if (::testing::Test::HasFatalFailure()) return;
        }
  }
}

// A pack with one layout runs every N on it: the compute-bound layout at small N, the memory-bound one at
// large N in whole panels of a tile over it and column chunks (int8 too). One layout takes less memory than
// both.
TEST(Spmm, SingleLayoutAnyN) {
  SPARSE24_SEED_TRACE();
  auto g = rng(307);
  for (Isa isa : isas_here()) {
    if (isa == Isa::kRef) continue;
    for (PackLayouts l : {PackLayouts::kLargeN, PackLayouts::kSmallN})
      for (int64_t n : {1, 7, 16, 17, 33, 70, 130})
        for (int threads : {1, 2}) {
          Case t{37, 131, n};
          t.layouts = l;
          t.threads = threads;
          t.bias = true;
          t.ep = Epilogue::kRelu;
          t.ldx_pad = 2;
          t.ldy_pad = 1;
          t.bf16 = n == 7 && l == PackLayouts::kSmallN;
          check(isa, t, g);
          if (::testing::Test::HasFatalFailure()) return;
        }
    // Where the small-N limit is below what the small-N rows take (int8 on AVX2: picked up to 9, taking
    // 16; AVX-512 on a non-Intel CPU: fp32 up to 8, bf16 and int8 up to 12), a pack with only the
    // memory-bound layout runs chunks of up to 16 columns past the pick ranges, and a pack with both layouts
    // moves to the compute-bound one past the limit. Every weight type, on either side of it.
    for (int wt = 0; wt < 3; ++wt)
      for (PackLayouts l : {PackLayouts::kSmallN, PackLayouts::kBoth})
        for (int64_t n : {8, 9, 10, 12, 13, 15, 16, 17, 33, 64, 100}) {
          Case t{37, 131, n};
          t.layouts = l;
          t.threads = 1 + static_cast<int>(n % 2);
          t.bias = true;
          t.bf16 = wt == 1;
          t.int8_group = wt == 2 ? 64 : 0;
          check(isa, t, g);
          if (::testing::Test::HasFatalFailure()) return;
        }
    const Compressed c = random_24(g, 64, 256);
    PackOptions o;
    o.isa_set = true;
    o.isa = isa;
    const size_t both = pack(c, o).bytes();
    o.layouts = PackLayouts::kLargeN;
    const size_t large = pack(c, o).bytes();
    o.layouts = PackLayouts::kSmallN;
    const size_t small = pack(c, o).bytes();
    EXPECT_EQ(large + small, both) << isa_name(isa);
  }
}

// The compute-bound layout keeps bf16 and int8 weights in their type (int8 where its scale groups are whole
// halves of a K block, 64 positions, or the row; a group of 32 positions holds fp32): its bytes against
// fp32's, on every SIMD ISA. (What the narrow values compute: every test above against the reference.)
TEST(Spmm, ComputeBoundLayoutKeepsNarrowWeights) {
  SPARSE24_SEED_TRACE();
  auto g = rng(318);
  const Compressed f32 = random_24(g, 96, 1000);
  for (Isa isa : isas_here()) {
    if (isa == Isa::kRef) continue;
    PackOptions o;
    o.isa_set = true;
    o.isa = isa;
    o.layouts = PackLayouts::kLargeN;
    const double full = static_cast<double>(pack(f32, o).bytes());
    auto ratio = [&](const Compressed& c, bool bf16) {
      PackOptions b = o;
      b.bf16_weights = bf16;
      return static_cast<double>(pack(c, b).bytes()) / full;
    };
    // Values 2 bytes per weight, codes 0.125: bf16 1.125, int8 0.625 + 4 / 64 scales per 4 rows.
    EXPECT_NEAR(ratio(f32, true), 1.125 / 2.125, 0.01) << isa_name(isa);
    EXPECT_NEAR(ratio(quantize_int8(f32, 64), false), 0.6875 / 2.125, 0.01) << isa_name(isa);
    EXPECT_NEAR(ratio(quantize_int8(f32, 1 << 20), false), 0.6875 / 2.125, 0.01) << isa_name(isa);
    EXPECT_NEAR(ratio(quantize_int8(f32, 32), false), 1.0, 0.01) << isa_name(isa);
  }
}

// layouts_for_n names the layout a pack with both runs at that N, per weight and activation type (the rows
// of each stop at their own N): every call of the pack with both is on it, up to a larger N's rest after
// whole compute-bound panels, which runs on the memory-bound layout (at most its limit). The single-layout
// pack it names gives the same bits as the pack with both at every N up to past the largest small-N
// limit, in the columns both run on that layout.
TEST(Spmm, LayoutsForNIsTheLayoutDispatchRuns) {
  SPARSE24_SEED_TRACE();
  auto g = rng(311);
  const int64_t m = 37, k = 131;
  const Compressed f32 = random_24(g, m, k);
  const std::vector<float> x = random_floats(g, static_cast<size_t>(k * 20));
  int rests = 0;
  for (Isa isa : isas_here())
    for (int wt = 0; wt < 6; ++wt) {  // fp32, bf16, int8; then with bf16 activations
      const Compressed c = wt % 3 == 2 ? quantize_int8(f32, 64) : f32;
      PackOptions o;
      o.isa_set = true;
      o.isa = isa;
      o.bf16_weights = wt % 3 == 1;
      o.bf16_activations = wt >= 3;
      const PackedMatrix both = pack(c, o);
      EXPECT_NE(layouts_for_n(1, c, o), PackLayouts::kLargeN) << isa_name(isa) << " weights " << wt;
      EXPECT_NE(layouts_for_n(512, c, o), PackLayouts::kSmallN) << isa_name(isa) << " weights " << wt;
      for (int64_t n = 1; n <= 20; ++n) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " weights " + std::to_string(wt % 3) +
                     (wt >= 3 ? " bf16 activations" : "") + " n " + std::to_string(n));
        o.layouts = layouts_for_n(n, c, o);
        EXPECT_EQ(o.layouts == PackLayouts::kBoth, isa == Isa::kRef);
        const bool large = o.layouts == PackLayouts::kLargeN;
        const PackedMatrix one = pack(c, o);
        o.layouts = PackLayouts::kBoth;
        int64_t same = n;  // the columns both packs run on the named layout
        const std::vector<KernelCall> plan = spmm_plan(both, n);
        for (size_t i = 0; i < plan.size(); ++i) {
          if (variant_is_large_n(plan[i].variant) == large) continue;
          EXPECT_TRUE(large && i > 0 && i + 1 == plan.size()) << "call " << i << " " << plan[i].variant;
          EXPECT_EQ(plan[i].columns, n - plan[i].first);
          same = plan[i].first;
          ++rests;
        }
        std::vector<float> y1(static_cast<size_t>(m * n)), y2(y1.size());
        spmm(both, x.data(), n, n, y1.data(), n);
        spmm(one, x.data(), n, n, y2.data(), n);
        for (int64_t r = 0; r < m; ++r)
          ASSERT_EQ(
              0, std::memcmp(y1.data() + r * n, y2.data() + r * n, static_cast<size_t>(same) * sizeof(float)))
              << "row " << r;
      }
    }
  if (isa_supported(Isa::kAvx512)) {
    EXPECT_GT(rests, 0) << "no N up to 20 split with a rest on the memory-bound layout";
  }
}

// bfloat16 values (a bf16 checkpoint's) pack as bf16 weights: the same layouts, bytes and results, bit for
// bit, as their float32 copies packed with bf16_weights, on every ISA (the reference's included).
TEST(Spmm, Bf16ValuesPackAsBf16Weights) {
  SPARSE24_SEED_TRACE();
  auto g = rng(317);
  for (Isa isa : isas_here())
    for (int64_t k : {1, 5, 63, 64, 65, 129, 200})
      for (int64_t n : {1, 7, 24}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " k " + std::to_string(k) + " n " + std::to_string(n));
        const int64_t m = 19;
        const Compressed f32 = with_bf16_values(random_24(g, m, k)), bf16 = to_bf16(f32);  // (exact)
        PackOptions o;
        o.isa_set = true;
        o.isa = isa;
        const PackedMatrix from_bf16 = pack(bf16, o);
        o.bf16_weights = true;
        const PackedMatrix from_f32 = pack(f32, o);
        EXPECT_EQ(from_bf16.bytes(), from_f32.bytes());
        const std::vector<float> x = random_floats(g, static_cast<size_t>(k * n));
        std::vector<float> y1(static_cast<size_t>(m * n)), y2(y1.size());
        spmm(from_bf16, x.data(), n, n, y1.data(), n);
        spmm(from_f32, x.data(), n, n, y2.data(), n);
        EXPECT_EQ(y1, y2);
      }
}

// Every row of the kernel list (src/kernels/kernel_list.inc) that this CPU runs, forced by name, against
// the reference: every N it takes up to 17 (and wider N for the compute-bound rows), sampled M and K across
// the tile edges, each weight type it reads, strides, offsets, bias, epilogues, 1 and 2 threads. The rows
// come from the library itself, so a variant cannot be left out of this test.
TEST(Spmm, EveryVariantByName) {
  SPARSE24_SEED_TRACE();
  auto g = rng(308);
  std::uniform_int_distribution<size_t> pick(0, std::size(kEdges) - 1);
  int runnable = 0, tested = 0;
  for (const KernelVariantInfo& v : kernel_variants()) {
    if (!v.runs) continue;
    ++runnable;
    std::vector<int64_t> ns;
    for (int64_t n = 1; n <= 17 && (v.n_max == 0 || n <= v.n_max); ++n) ns.push_back(n);
    if (v.n_max == 0)
      for (int64_t n : {31, 33, 64, 65, 129}) ns.push_back(n);
    bool any = false;
    for (int wt = 0; wt < 3; ++wt) {  // fp32, bf16, int8
      if (!(wt == 0 ? v.fp32 : wt == 1 ? v.bf16 : v.int8)) continue;
      for (int64_t n : ns)
        for (int rep = 0; rep < 2; ++rep) {
          Case t = random_case(g, kEdges[pick(g)], kEdges[pick(g)], n);
          t.bf16 = wt == 1;
          // The compute-bound rows also at a scale group of 32 positions, which that layout holds as fp32.
          t.int8_group = wt == 2 ? (rep ? 64 : (v.large_n && n % 2 ? 32 : 128)) : 0;
          t.layouts = v.large_n ? PackLayouts::kLargeN : PackLayouts::kSmallN;
          t.variant = v.name;
          t.bf16_act = t.variant_rounds_x = v.bf16_activations;
          t.i8_act = v.int8_activations;
          check(v.isa, t, g);
          if (::testing::Test::HasFatalFailure()) return;
          any = true;
        }
    }
    tested += any;
  }
  EXPECT_EQ(tested, runnable) << "a runnable variant was not tested";
  if (isa_supported(Isa::kAvx2)) {
    EXPECT_GT(runnable, 0);
  }
}

// Every small-N variant by name with K over three K blocks (1024 positions each) and a tail that is not a
// whole super chunk (the per-K-block offsets into the packed weights and into each kernel's copy of X),
// a partial last row block, 1 and 2 threads, at the N where tiles and passes change (1, 7, 8, 9, 15, 16).
// The compute-bound rows with an n_max (rows in lanes over that layout) the same way over its blocks:
// 100 row blocks (two chunks of 64, split between 2 threads inside the first) with a partial last one,
// three K blocks of 128 positions whose last holds 1, 2 or 3 groups.
TEST(Spmm, EveryVariantByNameLongK) {
  SPARSE24_SEED_TRACE();
  auto g = rng(316);
  for (const KernelVariantInfo& v : kernel_variants()) {
    if (!v.runs || (v.large_n && v.n_max == 0)) continue;
    for (int wt = 0; wt < 3; ++wt) {  // fp32, bf16, int8
      if (!(wt == 0 ? v.fp32 : wt == 1 ? v.bf16 : v.int8)) continue;
      for (int64_t n : {1, 7, 8, 9, 15, 16}) {
        if (v.n_max != 0 && n > v.n_max) continue;
        Case t = v.large_n ? Case{4 * 100 - 1, 2 * 128 + 1 + 4 * (n % 3), n}
                           : Case{8 * 3 - 3, 2 * 1024 + 64 + 5, n};
        t.threads = 1 + static_cast<int>(n % 2);
        t.bias = true;
        t.bf16 = wt == 1;
        t.int8_group = wt == 2 ? (n % 2 ? 64 : 128) : 0;
        t.layouts = v.large_n ? PackLayouts::kLargeN : PackLayouts::kSmallN;
        t.variant = v.name;
        t.bf16_act = t.variant_rounds_x = v.bf16_activations;
        t.i8_act = v.int8_activations;
        check(v.isa, t, g);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// The small-N path reads a thread's row blocks as several regions at once (spmm_lanes.h: 4 at N = 1, 2 up
// to N = 4) and the blocks left over as adjacent streams, then one at a time: every count of 8-row blocks
// from 1 to 13 (so every remainder, and fewer blocks than streams) on 1 and 2 threads, with a partial last
// block, K over two K blocks with a short tail, each weight type, N = 1..5; and regions that start a multiple
// of 4 KB apart (staggered: kernel_list.h).
TEST(Spmm, SmallNRowRegions) {
  SPARSE24_SEED_TRACE();
  auto g = rng(312);
  for (Isa isa : isas_here())
    for (int64_t blocks = 1; blocks <= 13; ++blocks)
      for (int64_t n = 1; n <= 5; ++n) {
        Case t{8 * blocks - (blocks % 3 == 0 ? 3 : 0), 1024 + 64 + 4 * (blocks % 4) + 1, n};
        t.threads = 1 + (blocks + n) % 2;
        t.bias = n % 2 == 1;
        t.bf16 = (blocks + n) % 3 == 1;
        t.int8_group = (blocks + n) % 3 == 2 ? 64 : 0;
        t.layouts = PackLayouts::kSmallN;
        check(isa, t, g);
        if (::testing::Test::HasFatalFailure()) return;
      }
  // Regions a multiple of 4 KB apart (32 blocks of K = 1024: 8 blocks per region of 16 entries per block,
  // for every weight type), which the staggering lowers to 7 blocks per region, so 4 blocks then go as
  // adjacent streams; 35 blocks leave 3 more one at a time.
  for (Isa isa : isas_here())
    for (int64_t blocks : {32, 35})
      for (int64_t n = 1; n <= 2; ++n)
        for (int type = 0; type < 3; ++type) {
          Case t{8 * blocks, 1024, n};
          t.threads = static_cast<int>(n);
          t.bf16 = type == 1;
          t.int8_group = type == 2 ? 64 : 0;
          t.layouts = PackLayouts::kSmallN;
          check(isa, t, g);
          if (::testing::Test::HasFatalFailure()) return;
        }
}

// int8 weights: raw integers (no scales) and scaled ones on every path; a scale group the int8 layout
// cannot hold (32 positions, a super chunk under two scales) is a one-line error at pack.
TEST(Spmm, Int8Weights) {
  SPARSE24_SEED_TRACE();
  auto g = rng(310);
  for (Isa isa : isas_here())
    for (int64_t n : {1, 2, 5, 9, 16, 17, 40})
      for (int64_t group : {64, 192, 1 << 20}) {
        Case t{41, 700, n};
        t.int8_group = group;
        t.bias = true;
        t.threads = 1 + n % 2;
        check(isa, t, g);
        if (::testing::Test::HasFatalFailure()) return;
      }
  // Raw int8 (scale 1) against the reference.
  std::vector<float> w = random_floats(g, 24 * 200, -100.f, 100.f);
  for (float& v : w) v = std::nearbyint(v);
  const Compressed c = compress(Tensor::from_float(w, {24, 200}, DType::kI8), true);
  ASSERT_EQ(c.scale_group, 0);
  const std::vector<float> x = random_floats(g, 200 * 3);
  std::vector<float> want(24 * 3), got(24 * 3);
  spmm_reference(c, x.data(), 3, 3, want.data(), 3);
  for (Isa isa : isas_here()) {
    PackOptions o;
    o.isa_set = true;
    o.isa = isa;
    spmm(pack(c, o), x.data(), 3, 3, got.data(), 3);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3f * (1.f + std::fabs(want[i])));
    if (isa == Isa::kRef) continue;
    const Compressed c32 = quantize_int8(random_24(g, 8, 256), 32);
    EXPECT_THROW(pack(c32, o), Error);
  }
}

// spmm_variant refuses what a variant cannot run.
TEST(Spmm, VariantByNameRejects) {
  auto g = rng(309);
  const Compressed c = random_24(g, 16, 64);
  const std::vector<float> x(64 * 20, 1.f);
  std::vector<float> y(16 * 20);
  const PackedMatrix p = pack(c);
  EXPECT_THROW(spmm_variant("no_such_kernel", p, x.data(), 1, 1, y.data(), 1), Error);
  for (const KernelVariantInfo& v : kernel_variants()) {
    if (v.isa != p.isa()) {
      EXPECT_THROW(spmm_variant(v.name, p, x.data(), 1, 1, y.data(), 1), Error) << v.name;
    } else if (v.n_max != 0) {
      EXPECT_THROW(spmm_variant(v.name, p, x.data(), v.n_max + 1, v.n_max + 1, y.data(), v.n_max + 1), Error)
          << v.name;
    }
  }
}

// All-zero weights: Y is the epilogue of the bias.
TEST(Spmm, AllZeroWeights) {
  SPARSE24_SEED_TRACE();
  auto g = rng(305);
  for (Isa isa : isas_here())
    for (int64_t n : {1, 8, 70}) {
      const Compressed c = random_24(g, 37, 45, 1.0);
      PackOptions o;
      o.isa_set = true;
      o.isa = isa;
      const PackedMatrix p = pack(c, o);
      const std::vector<float> x = random_floats(g, static_cast<size_t>(45 * n));
      const std::vector<float> bias = random_floats(g, 37);
      std::vector<float> y(static_cast<size_t>(37 * n), 5.f);
      spmm(p, x.data(), n, n, y.data(), n, bias.data(), Epilogue::kRelu, 2);
      for (int64_t r = 0; r < 37; ++r)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(y[static_cast<size_t>(r * n + j)], bias[r] > 0 ? bias[r] : 0.f);
    }
}

// The memory-bound kernels' X copies live in per-thread scratch that keeps earlier calls' values; the
// padding slots past K (weight 0) must read zeros there, not a stale NaN. Every small-N variant, by name:
// a call with X all NaN over a long K, then K = 4t + 1 (a super chunk mostly past K) with finite X.
TEST(Spmm, MemoryBoundScratchIsClearedPastK) {
  SPARSE24_SEED_TRACE();
  auto g = rng(309);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const KernelVariantInfo& v : kernel_variants()) {
    if (!v.runs || v.large_n) continue;
    for (int wt = 0; wt < 3; ++wt) {  // fp32, bf16, int8
      if (!(wt == 0 ? v.fp32 : wt == 1 ? v.bf16 : v.int8)) continue;
      for (int64_t n : {2, 3, 9, 16}) {
        if (n > v.n_max) continue;
        SCOPED_TRACE(v.name + " weights " + std::to_string(wt) + " n " + std::to_string(n));
        PackOptions o;
        o.isa_set = true;
        o.isa = v.isa;
        o.bf16_weights = wt == 1;
        o.bf16_activations = v.bf16_activations;
        o.int8_activations = v.int8_activations;
        o.layouts = PackLayouts::kSmallN;
        auto packed = [&](const Compressed& c) { return pack(wt == 2 ? quantize_int8(c, 64) : c, o); };
        const Compressed big = random_24(g, 16, 300, 0, 0);
        const std::vector<float> xnan(static_cast<size_t>(300 * n), nan);
        std::vector<float> y(static_cast<size_t>(16 * n));
        spmm_variant(v.name, packed(big), xnan.data(), n, n, y.data(), n);
        const Compressed c = random_24(g, 16, 21, 0, 0);
        const Compressed cr = wt == 2 ? quantize_int8(c, 64) : wt == 1 ? with_bf16_values(c) : c;
        const std::vector<float> x = random_floats(g, static_cast<size_t>(21 * n), -2.f, 2.f);
        std::vector<float> want(static_cast<size_t>(16 * n)), xr(x);
        if (v.bf16_activations)
          for (float& e : xr) e = bf16_to_float(float_to_bf16(e));
        if (v.int8_activations) round_activations_int8(xr.data(), 21, n, n);
        spmm_reference(cr, xr.data(), n, n, want.data(), n);
        spmm_variant(v.name, packed(c), x.data(), n, n, y.data(), n);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << i;
      }
    }
  }
}

// PackOptions::bf16_activations or int8_activations (int8 = true) through dispatch: where the option is
// supported (bf16_activations_supported(), int8_activations_supported()), the memory-bound path of the
// weights it applies to (bf16 and int8; int8 only) rounds X (to bf16; round_activations_int8; the result
// matches the reference on that X, not on X: the test fails if the option is ignored), at every N on a pack
// of only the small-N layout (chunks of 16 past the limit) and up to the small-N limit on a pack of both (16
// for such packs); int8 activations from N = 2 (kernel_list.inc: at N = 1, the memory bound, they gain
// nothing, and X stays exact). Other weights, and a CPU without the instructions or where dispatch does not
// pick those kernels (bf16: Intel's), keep fp32 activations.
void check_activations_option(bool int8, std::mt19937_64& g) {
  const int64_t m = 40, k = 300;
  for (int wt = 0; wt < 3; ++wt)  // fp32, bf16, int8
    for (PackLayouts layouts : {PackLayouts::kSmallN, PackLayouts::kBoth})
      for (int64_t n : {1, 2, 5, 8, 12, 16, 20}) {
        SCOPED_TRACE(std::string(int8 ? "int8" : "bf16") + " activations, weights " + std::to_string(wt) +
                     " n " + std::to_string(n) +
                     (layouts == PackLayouts::kBoth ? " both layouts" : " small-n layout"));
        const Compressed c0 = random_24(g, m, k);
        const Compressed c = wt == 2 ? quantize_int8(c0, 64) : c0;
        const Compressed cr = wt == 1 ? with_bf16_values(c) : c;
        PackOptions o;
        o.bf16_weights = wt == 1;
        (int8 ? o.int8_activations : o.bf16_activations) = true;
        o.layouts = layouts;
        const PackedMatrix p = pack(c, o);
        const std::vector<float> x = random_floats(g, static_cast<size_t>(k * n), -2.f, 2.f);
        std::vector<float> xr(x);
        if (int8)
          round_activations_int8(xr.data(), k, n, n);
        else
          for (float& v : xr) v = bf16_to_float(float_to_bf16(v));
        std::vector<float> exact(static_cast<size_t>(m * n)), rounded(exact.size()), y(exact.size());
        spmm_reference(cr, x.data(), n, n, exact.data(), n);
        spmm_reference(cr, xr.data(), n, n, rounded.data(), n);
        spmm(p, x.data(), n, n, y.data(), n);
        // A call of `cols` columns on the memory-bound layout rounds where the option applies.
        auto rounds = [&](int64_t cols) {
          return p.isa() == Isa::kAvx512 && (int8 ? int8_activations_supported() && wt == 2 && cols >= 2
                                                  : bf16_activations_supported() && wt != 0);
        };
        // Per column: the whole N on the memory-bound layout (a pack of only it, or N <= 16), else
        // compute-bound panels and on a pack with both a rest past them of at most 16 columns, which is
        // on the memory-bound layout (its call in spmm_plan).
        std::vector<char> col_rounds(static_cast<size_t>(n),
                                     layouts == PackLayouts::kSmallN || n <= 16 ? rounds(n) : 0);
        if (layouts == PackLayouts::kBoth && n > 16)
          for (const KernelCall& call : spmm_plan(p, n))
            if (call.first > 0 && n - call.first <= 16)
              std::fill_n(col_rounds.begin() + call.first, call.columns, rounds(call.columns));
        double worst = 0, apart = 0;
        for (size_t i = 0; i < y.size(); ++i) {
          const bool r = col_rounds[i % static_cast<size_t>(n)];
          const std::vector<float>& want = r ? rounded : exact;
          const std::vector<float>& other = r ? exact : rounded;
          const double scale = 1.0 + std::fabs(want[i]);
          worst = std::max(worst, std::fabs(y[i] - want[i]) / scale);
          apart = std::max(apart, std::fabs(other[i] - want[i]) / scale);
        }
        EXPECT_LT(worst, 2e-5) << "X as expected per column";
        EXPECT_GT(apart, 10 * worst + 1e-6) << "the two references do not tell the paths apart";
      }
}

TEST(Spmm, Bf16ActivationsRoundX) {
  SPARSE24_SEED_TRACE();
  auto g = rng(317);
  check_activations_option(false, g);
}

// Both activation options at once are refused.
TEST(Spmm, Int8ActivationsQuantiseX) {
  SPARSE24_SEED_TRACE();
  auto g = rng(318);
  check_activations_option(true, g);
  PackOptions both;
  both.int8_activations = both.bf16_activations = true;
  EXPECT_THROW(pack(quantize_int8(random_24(g, 8, 64), 64), both), Error);
}

// round_activations_int8: per column and block of 64 positions, codes in -127..127 times max|x| / 127 (the
// largest magnitude kept exactly, every value within half a step); a block of zeros stays zero; an
// infinity or a NaN makes its block NaN (not a finite value that hides it), and only its block.
TEST(Spmm, RoundActivationsInt8) {
  SPARSE24_SEED_TRACE();
  auto g = rng(319);
  const int64_t k = 150, n = 3, ldx = 5;
  std::vector<float> x = random_floats(g, static_cast<size_t>(k * ldx), -3.f, 3.f);
  for (int64_t kk = 64; kk < 128; ++kk) x[kk * ldx + 1] = 0.f;  // column 1, block 1: zeros
  x[70 * ldx + 2] = std::numeric_limits<float>::infinity();     // column 2, block 1
  x[140 * ldx + 0] = std::numeric_limits<float>::quiet_NaN();   // column 0, block 2
  std::vector<float> r(x);
  round_activations_int8(r.data(), k, n, ldx);
  for (int64_t j = 0; j < ldx; ++j)
    for (int64_t b = 0; b * 64 < k; ++b) {
      const int64_t k0 = b * 64, k1 = std::min<int64_t>(k, k0 + 64);
      float amax = 0;
      for (int64_t kk = k0; kk < k1; ++kk) amax = std::max(amax, std::fabs(x[kk * ldx + j]));
      for (int64_t kk = k0; kk < k1; ++kk) {
        const size_t i = static_cast<size_t>(kk * ldx + j);
        SCOPED_TRACE("column " + std::to_string(j) + " position " + std::to_string(kk));
        if (j >= n) {
          ASSERT_EQ(r[i], x[i]) << "a column past n changed";
        } else if ((j == 2 && b == 1) || (j == 0 && b == 2)) {
          ASSERT_TRUE(std::isnan(r[i]));
        } else if (j == 1 && b == 1) {
          ASSERT_EQ(r[i], 0.f);
        } else {
          const float step = amax / 127.f;
          ASSERT_LE(std::fabs(r[i] - x[i]), 0.5001f * step);
          const float code = r[i] / step;
          ASSERT_NEAR(code, std::nearbyint(code), 1e-3f);
          if (std::fabs(x[i]) == amax) {
            ASSERT_NEAR(std::fabs(r[i]), amax, 1e-6f * amax);
          }
        }
      }
    }
}

// The vectorised GELU against the exact form evaluated in double: within 1e-6 relative.
TEST(Spmm, GeluAccuracy) {
  std::vector<float> ys;
  for (float v = -12.f; v <= 12.f; v += 0.001953125f) ys.push_back(v);
  for (float v : {1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.f, 100.f, -100.f}) ys.push_back(v);
  const int64_t n = static_cast<int64_t>(ys.size());
  // W = [1]: Y = gelu(X).
  const Compressed c = compress(Tensor::from_float({1.f}, {1, 1}));
  for (Isa isa : isas_here()) {
    if (isa == Isa::kRef) continue;         // the reference's own float erf cancels in the tail (y < -5)
    for (int64_t cols : {n, int64_t{5}}) {  // the compute path and the memory-bound path
      SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(cols));
      PackOptions o;
      o.isa_set = true;
      o.isa = isa;
      const PackedMatrix p = pack(c, o);
      std::vector<float> y(ys.size());
      for (int64_t j0 = 0; j0 < n; j0 += cols) {
        const int64_t w = std::min(cols, n - j0);
        spmm(p, ys.data() + j0, w, w, y.data() + j0, w, nullptr, Epilogue::kGelu);
      }
      double worst = 0;
      for (size_t i = 0; i < ys.size(); ++i) {
        const double v = ys[i];
        const double exact = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
        const double err = std::fabs(y[i] - exact);
        ASSERT_LE(err, 1e-6 * std::fabs(exact) + 1e-9) << "y=" << v;
        if (std::fabs(exact) > 1e-9) worst = std::max(worst, err / std::fabs(exact));
      }
      std::printf("gelu %s n=%lld: worst relative error %.3g\n", isa_name(isa), static_cast<long long>(cols),
                  worst);
    }
  }
}

TEST(Spmm, RejectsBadArguments) {
  auto g = rng(306);
  const Compressed c = random_24(g, 4, 8);
  const PackedMatrix p = pack(c);
  std::vector<float> x(64), y(64);
  EXPECT_THROW(spmm(p, x.data(), 4, 3, y.data(), 4), Error);
  EXPECT_THROW(spmm(p, x.data(), 4, 4, y.data(), 3), Error);
  EXPECT_THROW(spmm(p, x.data(), 4, 4, y.data(), 4, nullptr, Epilogue::kNone, 0), Error);
  Compressed h = c;
  h.dtype = DType::kF16;
  EXPECT_THROW(pack(h), Error);
}

TEST(Isa, ParseAndNames) {
  for (Isa i : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) EXPECT_EQ(parse_isa(isa_name(i)), i);
  EXPECT_THROW(parse_isa("junk"), Error);
  EXPECT_THROW(parse_isa(""), Error);
  EXPECT_THROW(parse_isa("AVX2"), Error);
  EXPECT_THROW(parse_isa(nullptr), Error);
  EXPECT_TRUE(isa_supported(Isa::kRef));
  EXPECT_TRUE(isa_supported(active_isa()));
}

// SPARSE24_ISA is read once per process: each case runs in a fresh process (a threadsafe death test
// re-executes the binary).
int active_isa_under(const char* value) {
  setenv("SPARSE24_ISA", value, 1);
  try {
    return static_cast<int>(active_isa());
  } catch (const Error&) {
    return 100;
  }
}

TEST(IsaDeathTest, EnvironmentOverride) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (Isa i : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    const int want = isa_supported(i) ? static_cast<int>(i) : 100;
    EXPECT_EXIT(std::exit(active_isa_under(isa_name(i))), ::testing::ExitedWithCode(want), "") << isa_name(i);
  }
  EXPECT_EXIT(std::exit(active_isa_under("junk")), ::testing::ExitedWithCode(100), "");
}

}  // namespace
}  // namespace sparse24
