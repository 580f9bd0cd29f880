// The memory-bound layout as a file stores it (kernels/lanes_stored.h), for fp32, bf16 and int8 values:
// stored bytes read back to the matrix packed, run in place bit for bit as pack() runs the matrix, and
// every damaged byte either refused or harmless (reading back to a matrix that packs to the same bytes).
#include "kernels/lanes_stored.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/kernel_list.h"
#include "spmm_test_util.h"

namespace sparse24::testing {
namespace {

using kernels::LanesLayout;
using kernels::ValueType;

constexpr ValueType kTypes[] = {ValueType::kF32, ValueType::kBf16, ValueType::kI8};
const char* type_name(ValueType w) { return kernels::lanes_type_name(w); }

// A random 2:4 matrix with values of type w (int8: a scale per 64 positions).
Compressed random_of(std::mt19937_64& g, ValueType w, int64_t m, int64_t k) {
  Compressed c = random_24(g, m, k);
  if (w == ValueType::kI8) return quantize_int8(c, 64);
  if (w == ValueType::kBf16) return to_bf16(std::move(c));
  return c;
}

std::vector<uint8_t> bytes_of(const LanesLayout& l) { return {l.data.data(), l.data.data() + l.data.size()}; }

// A stored copy of bytes, 64-byte aligned (as a file the writer laid out), or `shift` bytes past that.
struct Stored {
  std::shared_ptr<std::vector<uint8_t>> buf;
  std::span<const uint8_t> bytes;
  explicit Stored(const std::vector<uint8_t>& b, size_t shift = 0)
      : buf(std::make_shared<std::vector<uint8_t>>()) {
    buf->resize(b.size() + 128 + shift);
    const auto at = reinterpret_cast<uintptr_t>(buf->data());
    uint8_t* p = buf->data() + ((64 - at % 64) % 64) + shift;
    std::memcpy(p, b.data(), b.size());
    bytes = {p, b.size()};
  }
};

std::vector<float> dense(const Compressed& c) { return decompress(c).to_float(); }

TEST(LanesStored, ReadsBackTheMatrixAcrossEdgeSizes) {
  SPARSE24_SEED_TRACE();
  std::mt19937_64 g = rng(1);
  for (ValueType w : kTypes)
    for (int64_t m : {1, 7, 8, 9, 16, 33})
      for (int64_t k : {4, 5, 63, 64, 65, 130, 1088, 2100})
        for (int kb : {64, 1024}) {
          SCOPED_TRACE(std::string(type_name(w)) + " m " + std::to_string(m) + " k " + std::to_string(k) +
                       " kb " + std::to_string(kb));
          const Compressed c = random_of(g, w, m, k);
          ASSERT_EQ(kernels::lanes_type_of(c), w);
          const LanesLayout packed = kernels::lanes_of(c, kb);
          ASSERT_EQ(packed.data.size(), kernels::lanes_bytes(m, k, w));
          for (size_t shift : {size_t{0}, size_t{8}}) {
            const Stored s(bytes_of(packed), shift);
            const LanesLayout over = kernels::lanes_over(s.bytes, m, k, kb, w, s.buf);
            EXPECT_EQ(over.data.is_borrowed(), shift == 0);  // (bytes not 32-byte aligned are copied)
            EXPECT_NO_THROW(kernels::check_lanes(over, m, k));
            const Compressed back = kernels::unpack_lanes(over, m, k);
            EXPECT_EQ(back.dtype, c.dtype);
            EXPECT_EQ(dense(back), dense(c));
            if (w == ValueType::kI8) {
              EXPECT_EQ(back.scale_group, std::min<int64_t>(64, (k + 3) / 4 * 4));
            }
          }
        }
  const Compressed f16 = compress(Tensor::from_float(random_floats(g, 8 * 64), {8, 64}, DType::kF16), true);
  ASSERT_EQ(f16.dtype, DType::kF16);
  EXPECT_FALSE(kernels::lanes_stores(f16));  // (f16 and int8 without a scale per 64 are not stored so)
  EXPECT_FALSE(kernels::lanes_stores(quantize_int8(random_24(g, 8, 128), 32)));
  EXPECT_THROW(kernels::lanes_of(quantize_int8(random_24(g, 8, 128), 32), 64), Error);
}

TEST(LanesStored, RunsInPlaceAsPackRunsTheMatrix) {
  SPARSE24_SEED_TRACE();
  std::mt19937_64 g = rng(2);
  for (Isa isa : isas_here()) {
    if (isa == Isa::kRef) continue;
    for (ValueType w : kTypes)
      for (auto [m, k] : {std::pair<int64_t, int64_t>{24, 2048}, {9, 130}, {40, 1088}, {64, 64}}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + type_name(w) + " m " + std::to_string(m) + " k " +
                     std::to_string(k));
        const Compressed c = random_of(g, w, m, k);
        PackOptions o;
        o.isa_set = true;
        o.isa = isa;
        o.layouts = PackLayouts::kSmallN;
        const PackedMatrix want = pack(c, o);
        const Stored s(bytes_of(kernels::lanes_of(c, 1024)));
        const LanesLayout over = kernels::lanes_over(s.bytes, m, k, 1024, w, s.buf);
        kernels::check_lanes(over, m, k);
        const PackedMatrix got =
            kernels::packed_from_lanes(kernels::lanes_over(s.bytes, m, k, 1024, w, s.buf), m, k, o);
        EXPECT_EQ(got.bytes(), want.bytes());
        for (int64_t n : {1, 2, 3, 8, 16, 17, 40}) {
          const std::vector<float> x = random_floats(g, static_cast<size_t>(k * n));
          std::vector<float> y1(static_cast<size_t>(m * n)), y2(y1.size());
          spmm(want, x.data(), n, n, y1.data(), n, nullptr, Epilogue::kNone, 2);
          spmm(got, x.data(), n, n, y2.data(), n, nullptr, Epilogue::kNone, 2);
          EXPECT_EQ(y1, y2) << "n " << n;
        }
      }
  }
}

// Every single damaged byte: check_lanes refuses it exactly when unpack_lanes does, and what it accepts
// reads back to a matrix that packs to the damaged bytes.
TEST(LanesStored, DamagedBytesAreRefusedOrHarmless) {
  SPARSE24_SEED_TRACE();
  std::mt19937_64 g = rng(3);
  for (ValueType w : kTypes)
    for (auto [m, k] : {std::pair<int64_t, int64_t>{16, 128}, {9, 70}}) {
      SCOPED_TRACE(std::string(type_name(w)) + " m " + std::to_string(m) + " k " + std::to_string(k));
      const Compressed c = random_of(g, w, m, k);
      const std::vector<uint8_t> good = bytes_of(kernels::lanes_of(c, 64));
      int refused = 0;
      for (int trial = 0; trial < 400; ++trial) {
        std::vector<uint8_t> b = good;
        const size_t at = std::uniform_int_distribution<size_t>(0, b.size() - 1)(g);
        b[at] ^= static_cast<uint8_t>(1u << std::uniform_int_distribution<int>(0, 7)(g));
        const Stored s(b);
        const LanesLayout over = kernels::lanes_over(s.bytes, m, k, 64, w, s.buf);
        bool check_refused = false, unpack_refused = false;
        try {
          kernels::check_lanes(over, m, k);
        } catch (const Error&) {
          check_refused = true;
        }
        try {
          const Compressed back = kernels::unpack_lanes(over, m, k);
          EXPECT_EQ(bytes_of(kernels::lanes_of(back, 64)), b) << "byte " << at;
        } catch (const Error&) {
          unpack_refused = true;
        }
        EXPECT_EQ(check_refused, unpack_refused) << "byte " << at;
        refused += check_refused;
      }
      EXPECT_GT(refused, 0);
    }
}

TEST(LanesStored, RefusalsNameTheProblem) {
  SPARSE24_SEED_TRACE();
  std::mt19937_64 g = rng(4);
  const int64_t m = 8, k = 64;
  const auto message = [&](const std::vector<uint8_t>& b, ValueType w, int64_t rows = 8) -> std::string {
    const Stored s(b);
    try {
      kernels::check_lanes(kernels::lanes_over(s.bytes, rows, k, 64, w, s.buf), rows, k);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<uint8_t> i8 = bytes_of(kernels::lanes_of(random_of(g, ValueType::kI8, m, k), 64));
  std::vector<uint8_t> b = i8;
  std::memcpy(b.data() + LanesLayout::scale_offset(ValueType::kI8) + 4 * 3, &nan, 4);
  EXPECT_NE(message(b, ValueType::kI8).find("row 3"), std::string::npos) << message(b, ValueType::kI8);
  EXPECT_NE(message(b, ValueType::kI8).find("not finite"), std::string::npos) << message(b, ValueType::kI8);
  b = i8;
  b[LanesLayout::code_offset(ValueType::kI8) + 4 * 5] = 0x00;  // row 5's first two codes: 0x0
  EXPECT_NE(message(b, ValueType::kI8).find("invalid metadata code"), std::string::npos);
  const std::vector<uint8_t> f32 = bytes_of(kernels::lanes_of(random_of(g, ValueType::kF32, m, k), 64));
  b = f32;
  std::memcpy(b.data() + LanesLayout::slot_at(ValueType::kF32, 2) + 4 * 6, &nan, 4);  // row 6's third value
  EXPECT_NE(message(b, ValueType::kF32).find("row 6 holds a non-finite value"), std::string::npos)
      << message(b, ValueType::kF32);
  const Stored s(i8);
  EXPECT_THROW(kernels::lanes_over(s.bytes.first(i8.size() - 1), m, k, 64, ValueType::kI8, s.buf), Error);
  EXPECT_THROW(kernels::lanes_over(s.bytes, m, k, 96, ValueType::kI8, s.buf), Error);
  EXPECT_THROW(kernels::lanes_over(s.bytes, m, k, 64, ValueType::kBf16, s.buf), Error);  // (its size)
  // A padding row's value (rows 9..15 of a 9-row matrix) is not what packing gives.
  std::vector<uint8_t> p = bytes_of(kernels::lanes_of(random_of(g, ValueType::kI8, 9, 64), 64));
  p[LanesLayout::entry_bytes(ValueType::kI8) + LanesLayout::slot_at(ValueType::kI8, 0) + 3] = 1;
  EXPECT_NE(message(p, ValueType::kI8, 9).find("padding"), std::string::npos)
      << message(p, ValueType::kI8, 9);
}

}  // namespace
}  // namespace sparse24::testing
