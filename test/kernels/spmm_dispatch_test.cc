// Dispatch: the calls spmm makes for an N (spmm_plan) and that it runs exactly them, and spmm_tokens (the
// engine's token-major form) against spmm, across ISAs, weight types and layout choices.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/spmm_test_util.h"
#include "sparse24/error.h"

namespace sparse24 {
namespace {

using namespace sparse24::testing;  // spmm_test_util.h and common/seed.h

// pack from every value type it takes (fp32, bf16, int8) into each layout's weight type (fp32 or bf16;
// int8), on a matrix whose last group's code points past K (at its zero padding, as `validate` requires),
// over partial row blocks and super chunks: spmm on every ISA and N on either layout equals the reference on
// the values the pack holds.
TEST(Spmm, PackReadsEveryStoredType) {
  SPARSE24_SEED_TRACE();
  auto g = rng(331);
  const int64_t m = 13, k = 4 * 37 + 2, groups = 38;
  Compressed f32 = random_24(g, m, k);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t& b = f32.metadata[static_cast<size_t>(r * f32.meta_bytes_per_row() + (groups - 1) / 2)];
    b = static_cast<uint8_t>((b & 0x0F) | 0xE0);  // positions 2 and 3 of the last group: 150 and 151
    std::memset(&f32.values[static_cast<size_t>(4 * (r * 2 * groups + 2 * (groups - 1)))], 0, 8);
  }
  const Compressed bf16 = to_bf16(f32);
  const Compressed i8 = quantize_int8(f32, 64), f32c = f32;
  for (Isa isa : isas_here())
    for (const Compressed* c : {&f32c, &bf16, &i8})
      for (bool bf16_weights : {false, true}) {
        if (c == &i8 && bf16_weights) continue;
        PackOptions o;
        o.isa_set = true;
        o.isa = isa;
        o.bf16_weights = bf16_weights;
        const PackedMatrix p = pack(*c, o);
        const Compressed want_w = bf16_weights ? to_bf16(*c) : *c;
        for (int64_t n : {1, 3, 8, 16, 40}) {
          SCOPED_TRACE(std::string(isa_name(isa)) + " stored " + dtype_name(c->dtype) +
                       (bf16_weights ? " bf16 weights" : "") + " n " + std::to_string(n));
          const std::vector<float> x = random_floats(g, static_cast<size_t>(k * n), -2.f, 2.f);
          std::vector<float> want(static_cast<size_t>(m * n)), y(want.size());
          spmm_reference(want_w, x.data(), n, n, want.data(), n);
          spmm(p, x.data(), n, n, y.data(), n);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(y[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << i;
        }
      }
}

// spmm_plan: for every N up to 140 on every ISA, weight type and layout choice, the calls cover the columns
// in order, each on a variant this CPU runs that takes its columns; spmm gives exactly what those calls give
// one by one (spmm_variant on the column slices), so dispatch runs the plan.
TEST(Spmm, PlanCoversNAndIsWhatSpmmRuns) {
  SPARSE24_SEED_TRACE();
  auto g = rng(317);
  std::map<std::string, KernelVariantInfo> variants;
  for (const KernelVariantInfo& v : kernel_variants()) variants[v.name] = v;
  for (Isa isa : isas_here())
    for (int wt = 0; wt < 3; ++wt)
      for (PackLayouts layouts : {PackLayouts::kBoth, PackLayouts::kLargeN, PackLayouts::kSmallN}) {
        const int64_t m = 21, k = 70, nmax = 140;
        const PackedMatrix p = random_pack(g, isa, wt, layouts, m, k);
        const std::vector<float> x = random_floats(g, static_cast<size_t>(k * nmax), -2.f, 2.f);
        const std::vector<float> bias = random_floats(g, static_cast<size_t>(m));
        for (int64_t n = 1; n <= nmax; ++n) {
          SCOPED_TRACE(std::string(isa_name(isa)) + " weights " + std::to_string(wt) + " layouts " +
                       std::to_string(static_cast<int>(layouts)) + " n " + std::to_string(n));
          const std::vector<KernelCall> plan = spmm_plan(p, n);
          if (isa == Isa::kRef) {
            EXPECT_TRUE(plan.empty());
            continue;
          }
          ASSERT_FALSE(plan.empty());
          int64_t next = 0;
          for (const KernelCall& call : plan) {
            SCOPED_TRACE(call.variant);
            ASSERT_EQ(call.first, next);
            ASSERT_GT(call.columns, 0);
            ASSERT_TRUE(variants.count(call.variant));
            const KernelVariantInfo& v = variants[call.variant];
            EXPECT_TRUE(v.runs);
            EXPECT_EQ(v.isa, isa);
            EXPECT_TRUE(v.n_max == 0 || call.columns <= v.n_max);
            next += call.columns;
          }
          ASSERT_EQ(next, n);
          const Epilogue ep = static_cast<Epilogue>(n % 3);
          const float* b = n % 2 ? bias.data() : nullptr;
          const int threads = 1 + n % 2;
          std::vector<float> y(static_cast<size_t>(m * n)), by_calls(y.size());
          spmm(p, x.data(), n, n, y.data(), n, b, ep, threads);
          for (const KernelCall& call : plan)
            spmm_variant(call.variant, p, x.data() + call.first, call.columns, n,
                         by_calls.data() + call.first, n, b, ep, threads);
          ASSERT_EQ(0, std::memcmp(y.data(), by_calls.data(), y.size() * sizeof(float)));
        }
      }
  if (!isa_supported(Isa::kAvx2)) return;
  // 1024 x 4096 fp32 2:4, 8.9 MB packed (the compute-bound layout alone): past any core's L2, so 17-20
  // columns run as one call (16 + a rest on rows in lanes would read the weights again from L3 or DRAM).
  const int64_t m = 1024, k = 4096;
  PackOptions o;
  o.layouts = PackLayouts::kLargeN;
  const PackedMatrix big = pack(random_24(g, m, k, 0, 0), o);
  ASSERT_GT(big.bytes(), size_t{8} << 20);
  for (int64_t n = 17; n <= 20; ++n) EXPECT_EQ(spmm_plan(big, n).size(), 1u) << "n " << n;
  // int8 weights with both layouts: a rest on the memory-bound layout reads the int8 values once more, not
  // fp32 ones, so past L2 the plan is the one of weights in L2 (where the list's rates split N, it splits
  // here too), and the rest is the memory-bound layout's.
  o.layouts = PackLayouts::kBoth;
  const PackedMatrix big8 = pack(quantize_int8(random_24(g, m, k, 0, 0), 64), o);
  const PackedMatrix small8 = pack(quantize_int8(random_24(g, 64, 256, 0, 0), 64), o);
  for (int64_t n = 17; n <= 20; ++n) {
    const std::vector<KernelCall> plan = spmm_plan(big8, n), in_l2 = spmm_plan(small8, n);
    ASSERT_EQ(plan.size(), in_l2.size()) << "n " << n;
    for (size_t i = 0; i < plan.size(); ++i) {
      EXPECT_EQ(plan[i].variant, in_l2[i].variant) << "n " << n;
      EXPECT_EQ(plan[i].columns, in_l2[i].columns) << "n " << n;
      if (i > 0) {
        EXPECT_FALSE(variant_is_large_n(plan[i].variant)) << "n " << n;
      }
    }
  }
  // A pack with only the memory-bound layout (a decoder's) runs a large N as whole panels of the 4x64 tile
  // over that layout (AVX-512: from N = 64), and the rest in chunks of rows in lanes; the rows of its
  // activations where it has bf16 or int8 ones that dispatch picks (only chunks then).
  if (active_isa() != Isa::kAvx512) return;
  o.layouts = PackLayouts::kSmallN;
  const PackedMatrix lanes8 = pack(quantize_int8(random_24(g, 64, 256, 0, 0), 64), o);
  for (int64_t n : {17, 63, 64, 130, 200}) {
    const std::vector<KernelCall> plan = spmm_plan(lanes8, n);
    ASSERT_FALSE(plan.empty());
    const bool panels = plan[0].variant == "avx512_lanes_gemm_4x64";
    EXPECT_EQ(panels, n >= 64) << "n " << n;
    if (panels) {
      EXPECT_EQ(plan[0].columns, n / 64 * 64) << "n " << n;
    }
    for (size_t i = panels ? 1 : 0; i < plan.size(); ++i) {
      EXPECT_LE(plan[i].columns, 16) << "n " << n << " " << plan[i].variant;
      EXPECT_FALSE(variant_is_large_n(plan[i].variant)) << "n " << n;
    }
  }
  // Not on a pack whose int8 activations have rows to pick: those stay in chunks at every N.
  if (!int8_activations_supported()) return;
  o.int8_activations = true;
  const PackedMatrix lanes8x = pack(quantize_int8(random_24(g, 64, 256, 0, 0), 64), o);
  for (const KernelCall& call : spmm_plan(lanes8x, 128)) EXPECT_LE(call.columns, 16) << call.variant;
}

// spmm_tokens (X [N, K], Y [N, M]) against spmm on the transposes: the compute-bound path (its own packing
// and stores) and the small-N one, edge sizes around the 4 x 4 blocks and the panels, padded ldx and ldy
// (the padding never written), bias and every epilogue, 1 and 2 threads, fp32 and bf16 weights.
TEST(Spmm, TokensMatchTransposedSpmm) {
  SPARSE24_SEED_TRACE();
  auto g = rng(314);
  std::uniform_int_distribution<size_t> pick(0, std::size(kEdges) - 1);
  for (Isa isa : isas_here())
    for (int rep = 0; rep < 60; ++rep) {
      const int64_t m = kEdges[pick(g)], k = kEdges[pick(g)];
      const int64_t n =
          rep % 3 != 1 ? 1 + rep % 16 : std::array<int64_t, 6>{17, 24, 31, 33, 65, 130}[rep % 6];
      const int64_t ldx = k + rep % 5, ldy = m + rep % 3;
      const Epilogue ep = std::array<Epilogue, 3>{Epilogue::kNone, Epilogue::kRelu, Epilogue::kGelu}[rep % 3];
      const int threads = 1 + rep % 2;
      // Weights fp32, bf16 or int8; both layouts, only the small-N one (every N in chunks) or only the
      // compute-bound one (small N on its rows in lanes where they are picked).
      static const char* const kWeightNames[] = {"fp32", "bf16", "int8"};
      const int wt = rep % 7 == 3 ? 1 : rep % 7 == 5 ? 2 : 0;
      const PackLayouts layouts = rep % 4 == 2   ? PackLayouts::kSmallN
                                  : rep % 4 == 3 ? PackLayouts::kLargeN
                                                 : PackLayouts::kBoth;
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(m) + "x" + std::to_string(k) + "x" +
                   std::to_string(n) + " ldx " + std::to_string(ldx) + " ldy " + std::to_string(ldy) + " " +
                   epilogue_name(ep) + " threads " + std::to_string(threads) + " weights " +
                   kWeightNames[wt] +
                   (layouts == PackLayouts::kSmallN   ? " small-N layout only"
                    : layouts == PackLayouts::kLargeN ? " large-N layout only"
                                                      : ""));
      const PackedMatrix p = random_pack(g, isa, wt, layouts, m, k);
      const std::vector<float> x = random_floats(g, static_cast<size_t>(n * ldx), -2.f, 2.f);
      const std::vector<float> bias = random_floats(g, static_cast<size_t>(m));
      const float* b = rep % 4 == 1 ? nullptr : bias.data();
      std::vector<float> xt(static_cast<size_t>(k * n)), want(static_cast<size_t>(m * n));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t kk = 0; kk < k; ++kk) xt[kk * n + j] = x[j * ldx + kk];
      spmm(p, xt.data(), n, n, want.data(), n, b, ep, threads);
      const float sentinel = -777.f;
      std::vector<float> y(static_cast<size_t>(n * ldy), sentinel);
      spmm_tokens(p, x.data(), n, ldx, y.data(), ldy, b, ep, threads);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t r = 0; r < ldy; ++r) {
          if (r >= m) {
            ASSERT_EQ(y[j * ldy + r], sentinel) << "wrote into the ldy padding at token " << j;
            continue;
          }
          const float w = want[r * n + j];
          ASSERT_NEAR(y[j * ldy + r], w, 1e-5f * (1.f + std::fabs(w))) << "token " << j << " row " << r;
        }
    }
  std::vector<float> x(8), y(8);
  const PackedMatrix p = pack(random_24(g, 4, 8));
  EXPECT_THROW(spmm_tokens(p, x.data(), 1, 7, y.data(), 4), Error);  // ldx < K
  EXPECT_THROW(spmm_tokens(p, x.data(), 1, 8, y.data(), 3), Error);  // ldy < M
}

}  // namespace
}  // namespace sparse24
