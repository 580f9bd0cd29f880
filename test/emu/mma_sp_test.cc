// The mma.sp emulator: fragments built from a compressed tile reproduce the reference multiply, registers
// laid out by hand follow the documented layout, the selector matters, invalid codes are rejected.
#include "sparse24/mma_sp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/seed.h"
#include "emu/emu_test_util.h"
#include "sparse24/error.h"
#include "sparse24/reference.h"

namespace sparse24 {
namespace {

using testing::random_24;
using testing::random_exact;
using testing::rng;

struct Case {
  MmaShape shape;
  DType dtype;
};
const Case kCases[] = {{MmaShape::kM16N8K16, DType::kF16},
                       {MmaShape::kM16N8K16, DType::kBF16},
                       {MmaShape::kM16N8K32, DType::kF16},
                       {MmaShape::kM16N8K32, DType::kBF16}};

std::string name(const Case& c) { return std::string(mma_shape_name(c.shape)) + " " + dtype_name(c.dtype); }

std::vector<float> random_b(std::mt19937_64& g, int k, DType t) {
  std::vector<float> b(static_cast<size_t>(k * 8));
  for (auto& v : b) v = random_exact(g, t);
  return b;
}

// D from the emulator, as a [16, 8] matrix.
std::vector<float> run(MmaShape shape, DType t, const WarpFragments& f, int sel,
                       MetaVariant v = MetaVariant::kOrdered) {
  std::vector<float> d(128);
  gather_d(mma_sp(shape, t, f, sel, v), d.data());
  return d;
}

TEST(MmaSp, FragmentsFromCompressedTileGiveTheReferenceResult) {
  SPARSE24_SEED_TRACE();
  auto g = rng(601);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const int K = mma_k(c.shape);
    for (int trial = 0; trial < 20; ++trial) {
      const Compressed a = random_24(g, 16, K, c.dtype);
      const std::vector<float> b = random_b(g, K, c.dtype);
      std::vector<float> ref(128);
      spmm_reference(a, b.data(), 8, 8, ref.data(), 8);
      std::vector<float> cmat = testing::random_floats(g, 128);
      // Bounds on |sum of terms| for the tolerance.
      std::vector<float> mag(128, 0.f);
      const Tensor dense = decompress(a);
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n)
          for (int k = 0; k < K; ++k) mag[r * 8 + n] += std::fabs(dense.get(r * K + k) * b[k * 8 + n]);
      for (int sel = 0; sel < mma_selectors(c.shape); ++sel) {
        // C = 0: the emulator adds the exact products in increasing K order, as the reference does.
        const std::vector<float> d0 =
            run(c.shape, c.dtype, build_fragments(c.shape, a, b.data(), nullptr, sel), sel);
        for (int i = 0; i < 128; ++i) ASSERT_EQ(d0[i], ref[i]) << "selector " << sel << " element " << i;
        // With C: D = A B + C within fp32 rounding of the sum.
        const std::vector<float> d =
            run(c.shape, c.dtype, build_fragments(c.shape, a, b.data(), cmat.data(), sel), sel);
        for (int i = 0; i < 128; ++i) {
          const float tol = 4 * 1.2e-7f * (mag[i] + std::fabs(cmat[i]));
          ASSERT_NEAR(d[i], ref[i] + cmat[i], tol) << "selector " << sel << " element " << i;
        }
      }
    }
  }
}

// Registers written by hand from the PTX layout (not through build_fragments): one nonzero row chunk.
TEST(MmaSp, HandWrittenRegistersFollowTheDocumentedLayout) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const auto bits = [&](float v) -> uint32_t {
      return c.dtype == DType::kF16 ? float_to_half(v) : float_to_bf16(v);
    };
    const int sel = mma_selectors(c.shape) - 1;
    WarpFragments f;
    // Every chunk of every row keeps positions 0 and 1 (code 0x4) with zero values...
    for (int lane = 0; lane < 32; ++lane) {
      const int t = lane % 4;
      const bool meta_lane = c.shape == MmaShape::kM16N8K16 ? t == sel : t / 2 == sel;
      if (meta_lane) f.e[lane] = 0x44444444u;
    }
    // ...except row 9, columns 8..11 for k16 (chunk 2) or 24..27 for k32 (chunk 6): A[9][c0+1] = 2,
    // A[9][c0+3] = 3, code idx0 = 1, idx1 = 3 = 0xD.
    // Row 9 = group 1, upper half (rows 8..15). Chunk q's values sit in lane 4*1 + q%4, register
    // (half) + 2*(q/4); its code in the selected lane of group 1, bits 16 + 4*(q%4) ...
    const int q = c.shape == MmaShape::kM16N8K16 ? 2 : 6;
    const int c0 = 4 * q;
    f.a[4 + q % 4][1 + 2 * (q / 4)] = bits(2.f) | bits(3.f) << 16;
    const int meta_lane = c.shape == MmaShape::kM16N8K16 ? 4 + sel : 4 + 2 * sel + q / 4;
    const int shift = 16 + 4 * (q % 4);
    f.e[meta_lane] = (f.e[meta_lane] & ~(0xFu << shift)) | 0xDu << shift;
    // B[c0+1][5] = 1 and B[c0+3][5] = 10: B[k][n] is in lane 4n + (k%8)/2, register k/8, half k%2.
    const auto set_b = [&](int k, int n, float v) {
      uint32_t& r = f.b[4 * n + (k % 8) / 2][k / 8];
      r |= bits(v) << (16 * (k % 2));
    };
    set_b(c0 + 1, 5, 1.f);
    set_b(c0 + 3, 5, 10.f);
    set_b(c0 + 0, 5, 1000.f);  // rows of B the metadata does not select: must not contribute
    set_b(c0 + 2, 5, 1000.f);
    // C[9][5] = 0.5: C[r][n] is in lane 4*(r%8) + n/2, register 2*(r/8) + n%2.
    f.c[4 * 1 + 5 / 2][2 + 1] = 0.5f;
    const WarpAccumulators d = mma_sp(c.shape, c.dtype, f, sel);
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 4; ++i) {
        const float want = (lane == 6 && i == 3) ? 2.f * 1.f + 3.f * 10.f + 0.5f : 0.f;
        EXPECT_EQ(d.d[lane][i], want) << "lane " << lane << " register " << i;
      }
    }
  }
}

TEST(MmaSp, WrongSelectorReadsOtherThreadsMetadata) {
  SPARSE24_SEED_TRACE();
  auto g = rng(602);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const int K = mma_k(c.shape);
    const Compressed a = random_24(g, 16, K, c.dtype);
    const std::vector<float> b = random_b(g, K, c.dtype);
    std::vector<float> ref(128);
    spmm_reference(a, b.data(), 8, 8, ref.data(), 8);
    WarpFragments f = build_fragments(c.shape, a, b.data(), nullptr, 0);
    // The threads selector 0 does not name hold 0 (invalid): using selector 1 is caught...
    EXPECT_THROW(mma_sp(c.shape, c.dtype, f, 1), Error);
    // ...and when they hold valid but different metadata (every code replaced by another valid one), the
    // result is silently wrong, as it would be on the GPU.
    const int width = c.shape == MmaShape::kM16N8K16 ? 1 : 2;
    for (int grp = 0; grp < 8; ++grp) {
      for (int h = 0; h < width; ++h) {
        const uint32_t e = f.e[4 * grp + h];
        uint32_t other = 0;
        for (int s = 0; s < 32; s += 4) {
          const uint32_t code = (e >> s) & 0xF;
          other |= (code == 0x4 ? 0xEu : 0x4u) << s;
        }
        f.e[4 * grp + width + h] = other;
      }
    }
    const std::vector<float> right = run(c.shape, c.dtype, f, 0);
    const std::vector<float> wrong = run(c.shape, c.dtype, f, 1);
    EXPECT_EQ(right, ref);
    EXPECT_NE(wrong, ref);
  }
}

TEST(MmaSp, InvalidCodesAreRejected) {
  SPARSE24_SEED_TRACE();
  auto g = rng(603);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const int K = mma_k(c.shape);
    const Compressed a = random_24(g, 16, K, c.dtype);
    const std::vector<float> b = random_b(g, K, c.dtype);
    const WarpFragments good = build_fragments(c.shape, a, b.data(), nullptr, 0);
    for (uint32_t code = 0; code < 16; ++code) {
      const uint32_t i0 = code & 3, i1 = code >> 2;
      for (const int shift : {0, 12, 16, 28}) {
        WarpFragments f = good;
        f.e[8] = (f.e[8] & ~(0xFu << shift)) | code << shift;  // lane 8: group 2, selector-0 thread
        if (i0 < i1) {
          EXPECT_NO_THROW(mma_sp(c.shape, c.dtype, f, 0, MetaVariant::kOrdered)) << code;
        } else {
          try {
            mma_sp(c.shape, c.dtype, f, 0, MetaVariant::kOrdered);
            ADD_FAILURE() << "code " << code << " accepted";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("invalid metadata code"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("lane 8"), std::string::npos) << e.what();
          }
        }
        if (i0 != i1) {
          EXPECT_NO_THROW(mma_sp(c.shape, c.dtype, f, 0, MetaVariant::kSp)) << code;
        } else {
          EXPECT_THROW(mma_sp(c.shape, c.dtype, f, 0, MetaVariant::kSp), Error) << code;
        }
      }
    }
  }
}

// mma.sp (unordered) with idx0 > idx1 puts the first value at idx0: swapping both indices and both values
// describes the same matrix.
TEST(MmaSp, UnorderedVariantAcceptsSwappedPairs) {
  SPARSE24_SEED_TRACE();
  auto g = rng(604);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const int K = mma_k(c.shape);
    const Compressed a = random_24(g, 16, K, c.dtype);
    const std::vector<float> b = random_b(g, K, c.dtype);
    std::vector<float> ref(128);
    spmm_reference(a, b.data(), 8, 8, ref.data(), 8);
    WarpFragments f = build_fragments(c.shape, a, b.data(), nullptr, 0);
    // Swap every pair: values in every A register, indices in every metadata nibble.
    for (int lane = 0; lane < 32; ++lane) {
      for (int r = 0; r < mma_ab_regs(c.shape); ++r) f.a[lane][r] = f.a[lane][r] >> 16 | f.a[lane][r] << 16;
      uint32_t e = 0;
      for (int s = 0; s < 32; s += 4) {
        const uint32_t code = (f.e[lane] >> s) & 0xF;
        e |= ((code >> 2) | (code & 3) << 2) << s;
      }
      f.e[lane] = e;
    }
    EXPECT_THROW(mma_sp(c.shape, c.dtype, f, 0, MetaVariant::kOrdered), Error);
    EXPECT_EQ(run(c.shape, c.dtype, f, 0, MetaVariant::kSp), ref);
  }
}

TEST(MmaSp, BadArgumentsAreErrors) {
  auto g = rng(605);
  const Compressed a16 = random_24(g, 16, 16, DType::kF16);
  const Compressed a32 = random_24(g, 16, 32, DType::kF16);
  const std::vector<float> b(32 * 8, 1.f);
  EXPECT_THROW(build_fragments(MmaShape::kM16N8K16, a32, b.data(), nullptr, 0), Error);  // K mismatch
  EXPECT_THROW(build_fragments(MmaShape::kM16N8K32, a16, b.data(), nullptr, 0), Error);
  EXPECT_THROW(build_fragments(MmaShape::kM16N8K16, a16, b.data(), nullptr, 4), Error);  // selector
  EXPECT_THROW(build_fragments(MmaShape::kM16N8K32, a32, b.data(), nullptr, 2), Error);
  EXPECT_THROW(build_fragments(MmaShape::kM16N8K16, a16, b.data(), nullptr, -1), Error);
  EXPECT_THROW(build_fragments(MmaShape::kM16N8K16, random_24(g, 16, 16, DType::kF32), b.data(), nullptr, 0),
               Error);
  EXPECT_THROW(build_fragments(MmaShape::kM16N8K16, random_24(g, 32, 16, DType::kF16), b.data(), nullptr, 0),
               Error);
  const WarpFragments f = build_fragments(MmaShape::kM16N8K16, a16, b.data(), nullptr, 3);
  EXPECT_THROW(mma_sp(MmaShape::kM16N8K16, DType::kF32, f, 3), Error);
  EXPECT_THROW(mma_sp(MmaShape::kM16N8K16, DType::kF16, f, 4), Error);
  EXPECT_NO_THROW(mma_sp(MmaShape::kM16N8K16, DType::kF16, f, 3));
}

}  // namespace
}  // namespace sparse24
