#include "sparse24/compressed.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/seed.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/mask.h"

namespace sparse24 {
namespace {

using testing::random_floats;
using testing::rng;

const int64_t kSizes[] = {1, 3, 4, 5, 63, 64, 65};

// A random tensor of dtype already pruned to 2:4 (with some all-zero and single-nonzero groups).
Tensor random_sparse(std::mt19937_64& g, std::vector<int64_t> shape, DType dtype) {
  const MatrixView v = matrix_view(shape);
  std::vector<float> w = random_floats(g, static_cast<size_t>(v.rows * v.cols), -4.f, 4.f);
  if (dtype == DType::kI8)
    for (auto& x : w) x = std::round(x * 30);
  for (size_t i = 0; i < w.size(); i += 7) w[i] = 0.f;
  apply_mask(w.data(), magnitude_mask(w.data(), v.rows, v.cols, kPattern24));
  return Tensor::from_float(scatter_from_matrix(w, shape), shape, dtype);
}

TEST(Compress, RoundTripsBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = rng(10);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8})
    for (int64_t rows : kSizes)
      for (int64_t k : kSizes) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(k));
        const Tensor t = random_sparse(g, {rows, k}, dt);
        const Compressed c = compress(t);
        EXPECT_EQ(c.values.size(), static_cast<size_t>(rows * ((k + 3) / 4) * 2) * dtype_size(dt));
        EXPECT_EQ(c.metadata.size(), static_cast<size_t>(rows * (((k + 3) / 4 + 1) / 2)));
        const Tensor back = decompress(c);
        ASSERT_EQ(back.shape, t.shape);
        ASSERT_EQ(back.bytes, t.bytes);
        // Compressing the decompressed tensor gives the same bytes again.
        const Compressed again = compress(back);
        EXPECT_EQ(again.values, c.values);
        EXPECT_EQ(again.metadata, c.metadata);
      }
}

TEST(Compress, ConvWeightsAlongInputChannels) {
  SPARSE24_SEED_TRACE();
  auto g = rng(11);
  const std::vector<int64_t> shape = {6, 12, 3, 3};
  const Tensor t = random_sparse(g, shape, DType::kF32);
  const Compressed c = compress(t);
  EXPECT_EQ(c.rows, 6 * 9);
  EXPECT_EQ(c.cols, 12);
  EXPECT_EQ(decompress(c).bytes, t.bytes);
}

TEST(Compress, MetadataLayout) {
  // Row 0: groups keep (0,1)=all zero, (1,3), (2,3), (0,2) -> codes 0x4, 0xD, 0xE, 0x8.
  // Row 1: one nonzero at 3 -> (0,3) = 0xC; one nonzero at 0 -> (0,1) = 0x4; K=10 tail group: (0,1).
  const std::vector<float> w = {0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 7, 8, 9, 0, 1, 0,  //
                                0, 0, 0, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const Compressed c = compress(Tensor::from_float(w, {2, 16}));
  EXPECT_EQ(c.metadata, (std::vector<uint8_t>{0xD4, 0x8E, 0x4C, 0x44}));
  EXPECT_EQ(c.value(0, 2), 5.f);
  EXPECT_EQ(c.value(0, 3), 6.f);
  EXPECT_EQ(c.value(1, 0), 0.f);
  EXPECT_EQ(c.value(1, 1), 2.f);
  // Odd group count: the last high nibble stays zero.
  const Compressed odd = compress(Tensor::from_float({1, 0, 2, 0, 0, 3, 0, 4, 0, 0, 5, 6}, {1, 12}));
  EXPECT_EQ(odd.metadata, (std::vector<uint8_t>{0xD8, 0x0E}));
  const Compressed tail = compress(Tensor::from_float({1, 0, 0, 0, 0, 7}, {1, 6}));
  EXPECT_EQ(tail.metadata, (std::vector<uint8_t>{0x44}));
  EXPECT_EQ(tail.value(0, 3), 7.f);
}

TEST(Compress, RatioPerDType) {
  SPARSE24_SEED_TRACE();
  auto g = rng(12);
  const std::pair<DType, double> expect[] = {
      {DType::kF32, 0.53125}, {DType::kF16, 0.5625}, {DType::kBF16, 0.5625}, {DType::kI8, 0.625}};
  for (auto [dt, ratio] : expect) {
    const Compressed c = compress(random_sparse(g, {64, 128}, dt));
    EXPECT_DOUBLE_EQ(c.compression_ratio(), ratio) << dtype_name(dt);
  }
}

// The ratio formula (used by inspect on dense files) agrees with the bytes compress() stores, tails included.
TEST(Compress, RatioFormulaMatchesStoredBytes) {
  SPARSE24_SEED_TRACE();
  auto g = rng(13);
  for (DType dt : {DType::kF32, DType::kF16, DType::kI8})
    for (int64_t k : kSizes) {
      const Compressed c = compress(random_sparse(g, {3, k}, dt));
      const double stored = static_cast<double>(c.values.size() + c.metadata.size());
      EXPECT_DOUBLE_EQ(compression_ratio(3, k, dt), stored / static_cast<double>(3 * k * dtype_size(dt)))
          << dtype_name(dt) << " K=" << k;
    }
}

TEST(Compress, RefusesDenseUnlessPruning) {
  std::vector<float> w(2 * 8, 1.f);
  w[0] = w[1] = 0.f;  // row 0 group 0 is fine; group 1 is not
  try {
    compress(Tensor::from_float(w, {2, 8}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 0, group 1"), std::string::npos) << e.what();
  }
  const Compressed c = compress(Tensor::from_float(w, {2, 8}), /*prune=*/true);
  const std::vector<float> back = decompress(c).to_float();
  EXPECT_TRUE(check_pattern(back.data(), 2, 8, kPattern24).valid);
  EXPECT_EQ(back[2], 1.f);  // ties: the lower positions of each group are kept
  EXPECT_EQ(back[3], 1.f);
}

// The one-pass fp32 pruning (compress_pruned_f32, what the loaders and compress(F32, prune) run) against the
// general path: magnitude_mask and the per-dtype copy, run on the same values as bf16 (exact in fp32). Ties
// (equal magnitudes, +-x), zeros (-0 too) and tail groups at the edge sizes; a NaN is refused with the same
// error. Blocks of rows at a time into int8 or bf16 values (pruned_layout, prune_rows) against quantize_int8
// and to_bf16 of the fp32 result.
TEST(Compress, PrunedF32MatchesTheGeneralPath) {
  SPARSE24_SEED_TRACE();
  auto g = rng(14);
  for (int64_t rows : kSizes)
    for (int64_t k : kSizes) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(k));
      std::vector<float> w = random_floats(g, static_cast<size_t>(rows * k), -2.f, 2.f);
      for (size_t i = 0; i < w.size(); ++i) {
        w[i] = bf16_to_float(float_to_bf16(w[i]));
        if (i % 5 == 1) w[i] = -w[i - 1];  // ties of magnitude
        if (i % 11 == 3) w[i] = (i % 2) ? 0.f : -0.f;
        if (i % 13 == 6) w[i] = w[i - 2];
        if (i % 11 == 7) w[i] = -w[i - 3];
        if (i % 19 == 12) w[i] = w[i - 1] = w[i - 3], w[i - 2] = -w[i - 3];
      }
      const Compressed fast = compress_pruned_f32(w.data(), rows, k);
      const Compressed general = compress(Tensor::from_float(w, {rows, k}, DType::kBF16), true);
      EXPECT_EQ(fast.metadata, general.metadata);
      EXPECT_EQ(decompress(fast).to_float(), decompress(general).to_float());
      EXPECT_EQ(fast.shape, (std::vector<int64_t>{rows, k}));
      validate(fast);
      const Compressed via = compress(Tensor::from_float(w, {rows, k}), true);  // compress's F32 route
      EXPECT_EQ(via.values, fast.values);
      EXPECT_EQ(via.metadata, fast.metadata);
      for (int64_t group : {0, 4, 64}) {  // a block of rows at a time, bf16 (0) or int8 from each row
        const DType dt = group ? DType::kI8 : DType::kBF16;
        Compressed q = pruned_layout(rows, k, dt, group);
        for (int64_t r0 = 0; r0 < rows; r0 += 2)
          prune_rows(q, r0, w.data() + r0 * k, std::min<int64_t>(2, rows - r0));
        const Compressed want = group ? quantize_int8(fast, group) : to_bf16(fast);
        if (group) {  // from bf16 (w's are bf16 already: want's weights) and fp16 values: as from to_f32
          Compressed f16 = fast;
          f16.dtype = DType::kF16;
          f16.values.resize(fast.values.size() / 2);
          for (size_t i = 0; i < f16.values.size() / 2; ++i) {
            float v;
            std::memcpy(&v, &fast.values[4 * i], 4);
            const uint16_t h = float_to_half(v);
            std::memcpy(&f16.values[2 * i], &h, 2);
          }
          for (const Compressed& c : {to_bf16(fast), f16}) {
            const Compressed direct = quantize_int8(c, group), widened = quantize_int8(to_f32(c), group);
            EXPECT_EQ(direct.values, widened.values);
            EXPECT_EQ(direct.scales, widened.scales);
            EXPECT_EQ(direct.metadata, want.metadata);
          }
          EXPECT_EQ(quantize_int8(to_bf16(fast), group).values, want.values);
        }
        EXPECT_EQ(q.dtype, dt);
        EXPECT_EQ(q.values, want.values) << group;
        EXPECT_EQ(q.scales, want.scales) << group;
        EXPECT_EQ(q.metadata, want.metadata) << group;
        EXPECT_EQ(q.scale_group, want.scale_group) << group;
        validate(q);
      }
      w[w.size() / 2] = NAN;
      std::string fast_error, general_error;
      try {
        compress_pruned_f32(w.data(), rows, k);
      } catch (const Error& e) {
        fast_error = e.what();
      }
      Compressed q = pruned_layout(rows, k, DType::kI8, 64);
      EXPECT_THROW(prune_rows(q, 0, w.data(), rows), Error);
      EXPECT_THROW(prune_rows(q, 1, w.data(), rows), Error);  // (past the last row)
      try {
        magnitude_mask(w.data(), rows, k, kPattern24);
      } catch (const Error& e) {
        general_error = e.what();
      }
      EXPECT_FALSE(fast_error.empty());
      EXPECT_EQ(fast_error, general_error);
    }
}

TEST(Compress, RejectsNaN) { EXPECT_THROW(compress(Tensor::from_float({1, NAN, 0, 0}, {1, 4})), Error); }

TEST(Validate, RejectsInvalidCodesAndSizes) {
  Compressed c = compress(Tensor::from_float({1, 2, 0, 0, 0, 0, 3, 4}, {1, 8}));
  validate(c);
  for (uint8_t bad : {0x0, 0x5, 0xA, 0xF, 0x1, 0x6}) {
    Compressed b = c;
    b.metadata[0] = static_cast<uint8_t>((b.metadata[0] & 0xF0) | bad);
    EXPECT_THROW(decompress(b), Error) << int(bad);
  }
  Compressed shortv = c;
  shortv.values.pop_back();
  EXPECT_THROW(validate(shortv), Error);
  Compressed shape = c;
  shape.shape = {2, 4};
  EXPECT_THROW(validate(shape), Error);
  // Nonzero in the padding past K.
  Compressed pad = compress(Tensor::from_float({1, 2, 0, 0, 0, 0}, {1, 6}));
  const float five = 5.f;
  std::memcpy(pad.values.data() + 3 * 4, &five, 4);  // group 1 stores positions 0,1 -> cols 4,5 are real
  EXPECT_NO_THROW(validate(pad));
  pad.metadata[0] = static_cast<uint8_t>((pad.metadata[0] & 0x0F) | (0xC << 4));  // positions 0,3: col 7 pad
  EXPECT_THROW(validate(pad), Error);
}

// validate reads the metadata a byte (two groups) at a time: the first bad group is still the one named,
// whichever nibble it is in, also a last odd group's.
TEST(Validate, NamesTheFirstInvalidGroup) {
  auto g = rng(11);
  for (int64_t k : {8, 12, 24, 28, 64, 68, 92, 132}) {  // (64 on: eight bytes at a time, then the rest)
    const Compressed c = compress(random_sparse(g, {3, k}, DType::kF32));
    const int64_t groups = (k + 3) / 4;
    for (int64_t bad = 0; bad < groups; ++bad)
      for (int64_t later = bad; later < groups; ++later) {
        SCOPED_TRACE("k " + std::to_string(k) + ", bad groups " + std::to_string(bad) + ", " +
                     std::to_string(later));
        Compressed b = c;
        for (int64_t grp : {bad, later}) {
          uint8_t& byte = b.metadata[static_cast<size_t>(b.meta_bytes_per_row() + grp / 2)];  // row 1
          byte = static_cast<uint8_t>(grp % 2 ? (byte & 0x0F) | 0x50 : (byte & 0xF0) | 0x5);  // 0x5: 1, 1
        }
        try {
          validate(b);
          ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("row 1, group " + std::to_string(bad) + " "),
                    std::string::npos)
              << e.what();
        }
      }
  }
}

// Every metadata byte value, wherever it is in a row (eight bytes at a time or after them): refused exactly
// when one of its codes is not valid_code, naming that group (the low nibble's first).
TEST(Validate, ChecksEveryByteValueAsValidCodeDoes) {
  auto g = rng(12);
  const Compressed c = compress(random_sparse(g, {2, 92}, DType::kF32));  // 23 groups: 12 bytes a row
  for (int64_t at : {0, 3, 7, 8, 10, 11})
    for (int v = 0; v < 256; ++v) {
      Compressed b = c;
      uint8_t& byte = b.metadata[static_cast<size_t>(b.meta_bytes_per_row() + at)];  // row 1
      byte = static_cast<uint8_t>(at == 11 ? v & 0x0F : v);  // (the last byte's high nibble is unused)
      const bool lo = valid_code(byte & 0xF), hi = at == 11 || valid_code(static_cast<uint8_t>(byte >> 4));
      SCOPED_TRACE("byte " + std::to_string(at) + " = " + std::to_string(byte));
      if (lo && hi) {
        EXPECT_NO_THROW(validate(b));
        continue;
      }
      try {
        validate(b);
        ADD_FAILURE() << "accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("row 1, group " + std::to_string(2 * at + (lo ? 1 : 0)) + " "),
                  std::string::npos)
            << e.what();
      }
    }
}

// validate_rows checks the rows it is given and no others, numbering them from the first.
TEST(Validate, RowsAreCheckedAndNamedFromTheFirst) {
  auto g = rng(13);
  Compressed c = quantize_int8(compress(random_sparse(g, {4, 132}, DType::kF32)), 64);
  validate_rows(c, 0, 4);
  c.metadata[static_cast<size_t>(2 * c.meta_bytes_per_row() + 9)] = 0xF4;  // row 2, group 19
  EXPECT_NO_THROW(validate_rows(c, 0, 2));
  EXPECT_NO_THROW(validate_rows(c, 3, 4));
  try {
    validate_rows(c, 1, 3);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid metadata code 0xf at row 1, group 19 "), std::string::npos)
        << e.what();
  }
  Compressed s = quantize_int8(compress(random_sparse(g, {4, 132}, DType::kF32)), 64);
  s.scales[static_cast<size_t>(3 * s.scales_per_row() + 1)] = INFINITY;  // row 3's second scale
  EXPECT_NO_THROW(validate_rows(s, 0, 3));
  try {
    validate_rows(s, 2, 4);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scale 4 of row 1 is not finite"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_rows(s, 2, 5), Error);  // past the matrix
}

// check(c, dt) on a random 2:4 matrix of every stored type (int8 quantised with a scale per 4 positions) at
// every edge size.
template <class G, class F>
void for_each_stored_type(G& g, F check) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8})
    for (int64_t rows : kSizes)
      for (int64_t k : kSizes) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(k));
        Compressed c = compress(random_sparse(g, {rows, k}, dt));
        if (dt == DType::kI8) c = quantize_int8(compress(random_sparse(g, {rows, k}, DType::kF32)), 4);
        check(c, dt);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// to_f32 gives what decompress + compress of the float values gives, for every stored type.
TEST(Compress, ToF32MatchesRecompressingTheFloats) {
  SPARSE24_SEED_TRACE();
  auto g = rng(12);
  for_each_stored_type(g, [](const Compressed& c, DType) {
    const int64_t rows = c.rows, k = c.cols;
    const Compressed want = compress(Tensor::from_float(decompress(c).to_float(), {rows, k}));
    const Compressed got = to_f32(c);
    EXPECT_EQ(got.dtype, DType::kF32);
    EXPECT_EQ(got.shape, want.shape);
    EXPECT_EQ(got.scale_group, 0);
    EXPECT_TRUE(got.scales.empty());
    EXPECT_EQ(decompress(got).bytes, decompress(want).bytes);
    EXPECT_EQ(got.metadata, c.metadata);  // the codes as stored
  });
}

// to_bf16 rounds each kept value to nearest even (bf16 values stay as they are), codes unchanged.
TEST(Compress, ToBf16RoundsEachKeptValue) {
  SPARSE24_SEED_TRACE();
  auto g = rng(13);
  for_each_stored_type(g, [](const Compressed& c, DType dt) {
    const Compressed got = to_bf16(c);
    EXPECT_EQ(got.dtype, DType::kBF16);
    EXPECT_EQ(got.scale_group, 0);
    EXPECT_EQ(got.metadata, c.metadata);
    ASSERT_EQ(got.values.size(), static_cast<size_t>(c.rows * c.values_per_row()) * 2);
    const auto* v = reinterpret_cast<const uint16_t*>(got.values.data());
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.values_per_row(); ++j)
        ASSERT_EQ(v[r * c.values_per_row() + j], float_to_bf16(c.value(r, j))) << r << " " << j;
    if (dt == DType::kBF16) {
      EXPECT_EQ(got.values, c.values);
    }
  });
}

}  // namespace
}  // namespace sparse24
