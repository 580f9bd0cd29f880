// The CUTLASS / PyTorch metadata layout: published examples, hand-derived offsets, round trips, and the
// link to the mma.sp m16n8k32 metadata registers.
#include "sparse24/gpu_meta.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "common/seed.h"
#include "emu/emu_test_util.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mma_sp.h"
#include "sparse24/reference.h"

namespace sparse24 {
namespace {

using testing::random_24;
using testing::random_exact;
using testing::rng;

// A [rows, K] matrix whose every group keeps positions p0 < p1.
Compressed all_groups(int64_t rows, int64_t cols, int p0, int p1, DType t) {
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.f);
  for (int64_t i = 0; i < rows * cols / 4; ++i) {
    w[static_cast<size_t>(4 * i + p0)] = 1.f;
    w[static_cast<size_t>(4 * i + p1)] = -2.f;
  }
  return compress(Tensor::from_float(w, {rows, cols}, t));
}

TEST(GpuMeta, GroupsKeepingPositions2And3GiveEEEEWords) {
  const Compressed c = all_groups(32, 64, 2, 3, DType::kF16);
  for (uint16_t w : meta_words(c)) EXPECT_EQ(w, 0xEEEE);
  const CutlassSparse s = to_cutlass(c);
  ASSERT_EQ(s.meta.size(), 32u * 4u);
  for (uint16_t w : s.meta) EXPECT_EQ(w, 0xEEEE);
  // And positions 0, 1 (code 0x4), 0, 2 (0x8), 1, 3 (0xD).
  EXPECT_EQ(meta_words(all_groups(32, 32, 0, 1, DType::kBF16))[0], 0x4444);
  EXPECT_EQ(meta_words(all_groups(32, 32, 0, 2, DType::kBF16))[0], 0x8888);
  EXPECT_EQ(meta_words(all_groups(32, 32, 1, 3, DType::kBF16))[0], 0xDDDD);
}

TEST(GpuMeta, WordHoldsFourGroupsLowNibbleFirst) {
  // Row 0, groups 0..3 keep (0,1), (0,2), (1,3), (2,3): codes 4, 8, D, E -> word 0xED84.
  std::vector<float> w(32 * 32, 0.f);
  const int pairs[4][2] = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  for (int r = 0; r < 32; ++r)
    for (int g = 0; g < 8; ++g)
      for (int j = 0; j < 2; ++j) w[static_cast<size_t>(r * 32 + 4 * g + pairs[g % 4][j])] = 1.f;
  const std::vector<uint16_t> words = meta_words(compress(Tensor::from_float(w, {32, 32}, DType::kF16)));
  EXPECT_EQ(words[0], 0xED84);
  EXPECT_EQ(words[1], 0xED84);
}

// Offsets worked out by hand from the reordering rule (docs/gpu.md): rows r, r+8 of a 32-row block become
// neighbours, then the 2x2 (row, word) blocks swap their off-diagonal, stored column-major interleaved by 2.
TEST(GpuMeta, HandDerivedOffsets) {
  // rows = 32, 2 words per row: memory order (0,0) (8,0) (0,1) (8,1) (16,0) (24,0) (16,1) (24,1) (1,0) ...
  const int64_t m = 32;
  EXPECT_EQ(cutlass_meta_offset(0, 0, m), 0);
  EXPECT_EQ(cutlass_meta_offset(8, 0, m), 1);
  EXPECT_EQ(cutlass_meta_offset(0, 1, m), 2);
  EXPECT_EQ(cutlass_meta_offset(8, 1, m), 3);
  EXPECT_EQ(cutlass_meta_offset(16, 0, m), 4);
  EXPECT_EQ(cutlass_meta_offset(24, 0, m), 5);
  EXPECT_EQ(cutlass_meta_offset(16, 1, m), 6);
  EXPECT_EQ(cutlass_meta_offset(24, 1, m), 7);
  EXPECT_EQ(cutlass_meta_offset(1, 0, m), 8);
  EXPECT_EQ(cutlass_meta_offset(9, 0, m), 9);
  EXPECT_EQ(cutlass_meta_offset(7, 1, m), 58);
  EXPECT_EQ(cutlass_meta_offset(31, 1, m), 63);
  // rows = 64, 4 words per row: the second word pair starts after all rows' first pair (2 * 64 words), the
  // second 32-row block after the first (64 words).
  EXPECT_EQ(cutlass_meta_offset(32, 0, 64), 64);
  EXPECT_EQ(cutlass_meta_offset(40, 0, 64), 65);
  EXPECT_EQ(cutlass_meta_offset(32, 2, 64), 192);
  EXPECT_EQ(cutlass_meta_offset(40, 3, 64), 195);
  EXPECT_EQ(cutlass_meta_offset(33, 3, 64), 128 + 2 * 37 + 0);  // row 36 -> 37, word 3 -> 2
}

TEST(GpuMeta, OffsetsAreABijection) {
  for (int64_t rows : {32, 64, 96}) {
    for (int64_t ncols : {2, 4, 6}) {
      std::vector<int> seen(static_cast<size_t>(rows * ncols), 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t w = 0; w < ncols; ++w) {
          const int64_t o = cutlass_meta_offset(r, w, rows);
          ASSERT_GE(o, 0);
          ASSERT_LT(o, rows * ncols);
          ++seen[static_cast<size_t>(o)];
        }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
  }
}

TEST(GpuMeta, ReorderRoundTripAndBadSizes) {
  SPARSE24_SEED_TRACE();
  auto g = rng(701);
  std::vector<uint16_t> words(64 * 4);
  for (auto& w : words) w = static_cast<uint16_t>(g());
  const std::vector<uint16_t> re = cutlass_reorder_meta(words, 64, 4);
  EXPECT_NE(re, words);
  EXPECT_EQ(cutlass_unreorder_meta(re, 64, 4), words);
  EXPECT_THROW(cutlass_reorder_meta(words, 16, 16), Error);  // rows not a multiple of 32
  EXPECT_THROW(cutlass_reorder_meta(std::vector<uint16_t>(32 * 3), 32, 3), Error);  // odd word count
  EXPECT_THROW(cutlass_reorder_meta(words, 64, 2), Error);                          // size mismatch
}

TEST(GpuMeta, CompressedRoundTripsBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = rng(702);
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{32, 32}, {64, 96}, {96, 64}}) {
      const Compressed c = random_24(g, rows, cols, t);
      const CutlassSparse s = to_cutlass(c);
      EXPECT_EQ(s.values, c.values);
      const Compressed back = from_cutlass(s);
      EXPECT_EQ(back.metadata, c.metadata);
      EXPECT_EQ(back.values, c.values);
      EXPECT_EQ(back.shape, c.shape);
      EXPECT_EQ(back.dtype, c.dtype);
      // Through the file.
      const std::vector<uint8_t> bytes = encode_safetensors(encode_cutlass_file(s));
      const SafeTensors st = parse_safetensors(bytes.data(), bytes.size(), "mem");
      EXPECT_EQ(st.at("metadata").dtype, "I16");
      EXPECT_EQ(st.at("metadata").shape, (std::vector<int64_t>{rows, cols / 16}));
      EXPECT_EQ(st.at("values").shape, (std::vector<int64_t>{rows, cols / 2}));
      EXPECT_EQ(st.metadata.at("layout"), "cutlass");
      const CutlassSparse s2 = decode_cutlass_file(st, "mem");
      EXPECT_EQ(s2.meta, s.meta);
      EXPECT_EQ(s2.values, s.values);
      EXPECT_EQ(s2.shape, s.shape);
    }
  }
}

TEST(GpuMeta, RefusesWhatTheLayoutCannotHold) {
  auto g = rng(703);
  EXPECT_THROW(to_cutlass(random_24(g, 32, 32, DType::kF32)), Error);
  EXPECT_THROW(to_cutlass(random_24(g, 32, 32, DType::kI8)), Error);
  EXPECT_THROW(to_cutlass(random_24(g, 16, 32, DType::kF16)), Error);
  EXPECT_THROW(to_cutlass(random_24(g, 32, 48, DType::kF16)), Error);
  try {
    to_cutlass(random_24(g, 32, 32, DType::kF32));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float16 or bfloat16"), std::string::npos) << e.what();
  }
  // A corrupted word (code 0x0 in a group) is refused on the way back.
  CutlassSparse s = to_cutlass(random_24(g, 32, 32, DType::kF16));
  s.meta[5] &= 0xFFF0;
  EXPECT_THROW(from_cutlass(s), Error);
  const SafeTensors st = encode_cutlass_file(to_cutlass(random_24(g, 32, 32, DType::kF16)));
  SafeTensors bad = st;
  bad.metadata["shape"] = "[32, 64]";
  EXPECT_THROW(decode_cutlass_file(bad, "x"), Error);
  bad = st;
  bad.metadata["layout"] = "other";
  EXPECT_THROW(decode_cutlass_file(bad, "x"), Error);
}

TEST(GpuMeta, ConvertValuesToHalf) {
  auto g = rng(704);
  const Compressed c = random_24(g, 32, 32, DType::kF32);
  const Compressed h = convert_values(c, DType::kF16);
  EXPECT_EQ(h.dtype, DType::kF16);
  EXPECT_EQ(h.metadata, c.metadata);
  for (int64_t i = 0; i < 32 * 16; ++i)
    EXPECT_EQ(h.value(i / 16, i % 16), half_to_float(float_to_half(c.value(i / 16, i % 16))));
  Compressed big = c;
  const float huge = 1e6f;
  std::memcpy(big.values.data(), &huge, 4);
  EXPECT_THROW(convert_values(big, DType::kF16), Error);
  EXPECT_NO_THROW(convert_values(big, DType::kBF16));
}

// The point of the reordering: a kernel loading one 32-bit word per lane from the reordered metadata gets
// exactly the metadata registers mma.sp m16n8k32 needs, selector 0 for rows 0..15 of a 32-row block and
// selector 1 for rows 16..31.
TEST(GpuMeta, ReorderedWordsAreTheM16N8K32MetadataRegisters) {
  SPARSE24_SEED_TRACE();
  auto g = rng(705);
  for (DType t : {DType::kF16, DType::kBF16}) {
    const int64_t rows = 64, K = 64;
    const Compressed w = random_24(g, rows, K, t);
    const CutlassSparse s = to_cutlass(w);
    std::vector<float> b(static_cast<size_t>(K * 8));
    for (auto& v : b) v = random_exact(g, t);
    std::vector<float> ref(static_cast<size_t>(rows * 8));
    spmm_reference(w, b.data(), 8, 8, ref.data(), 8);
    const Tensor dense = decompress(w);
    for (int64_t rb = 0; rb < rows / 32; ++rb) {
      for (int64_t kb = 0; kb < K / 32; ++kb) {
        // The 32-bit words of this (32-row, 32-column) block: words (kb) of the reordered array start at
        // kb * rows * 2 (16-bit units), the row block at rb * 64 within it.
        const uint16_t* blk = s.meta.data() + kb * rows * 2 + rb * 64;
        for (int tile = 0; tile < 2; ++tile) {
          // The 16x32 tile: rows 32*rb + 16*tile .. +15, columns 32*kb .. +31, as its own Compressed.
          std::vector<float> tile_dense(16 * 32);
          for (int r = 0; r < 16; ++r)
            for (int k = 0; k < 32; ++k)
              tile_dense[static_cast<size_t>(r * 32 + k)] =
                  dense.get((32 * rb + 16 * tile + r) * K + 32 * kb + k);
          const Compressed a = compress(Tensor::from_float(tile_dense, {16, 32}, t));
          WarpFragments f = build_fragments(MmaShape::kM16N8K32, a, b.data() + 32 * kb * 8, nullptr, tile);
          const WarpFragments built = f;
          for (int lane = 0; lane < 32; ++lane) {
            f.e[lane] = static_cast<uint32_t>(blk[2 * lane]) | static_cast<uint32_t>(blk[2 * lane + 1]) << 16;
            const bool selected = lane % 4 / 2 == tile;
            if (selected) {
              EXPECT_EQ(f.e[lane], built.e[lane]) << "lane " << lane << " tile " << tile;
            }
          }
          // And the multiply with those registers is the reference's partial product for this block.
          std::vector<float> d(128), part(128);
          gather_d(mma_sp(MmaShape::kM16N8K32, t, f, tile), d.data());
          spmm_reference(a, b.data() + 32 * kb * 8, 8, 8, part.data(), 8);
          EXPECT_EQ(d, part);
        }
      }
    }
    (void)ref;
  }
}

}  // namespace
}  // namespace sparse24
