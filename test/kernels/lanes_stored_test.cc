// The memory-bound layout as a file stores it (kernels/lanes_stored.h): stored bytes read back to the matrix
// packed, run in place bit for bit as pack() runs the matrix, and every damaged byte either refused or
// harmless (reading back to a matrix that packs to the same bytes).
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

std::vector<uint8_t> bytes_of(const LanesLayout& l) { return {l.data.data(), l.data.data() + l.data.size()}; }

// A stored copy of bytes, 64-byte aligned (as a file the writer laid out), or `shift` bytes past that.
struct Stored {
  std::shared_ptr<std::vector<uint8_t>> buf;
  std::span<const uint8_t> bytes;
  Stored(const std::vector<uint8_t>& b, size_t shift = 0) : buf(std::make_shared<std::vector<uint8_t>>()) {
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
  for (int64_t m : {1, 7, 8, 9, 16, 33})
    for (int64_t k : {4, 5, 63, 64, 65, 130, 1088, 2100})
      for (int kb : {64, 1024}) {
        SCOPED_TRACE("m " + std::to_string(m) + " k " + std::to_string(k) + " kb " + std::to_string(kb));
        const Compressed c = quantize_int8(random_24(g, m, k), 64);
        const LanesLayout packed = kernels::pack_lanes(c, kb, false);
        ASSERT_EQ(packed.data.size(), kernels::lanes_i8_bytes(m, k));
        for (size_t shift : {size_t{0}, size_t{8}}) {
          const Stored s(bytes_of(packed), shift);
          const LanesLayout over = kernels::lanes_i8_over(s.bytes, m, k, kb, s.buf);
          EXPECT_EQ(over.data.is_borrowed(), shift == 0);  // (bytes not 32-byte aligned are copied)
          EXPECT_NO_THROW(kernels::check_lanes_i8(over, m, k));
          const Compressed back = kernels::unpack_lanes_i8(over, m, k);
          EXPECT_EQ(dense(back), dense(c));
          EXPECT_EQ(back.scale_group, std::min<int64_t>(64, (k + 3) / 4 * 4));
        }
      }
}

TEST(LanesStored, RunsInPlaceAsPackRunsTheMatrix) {
  SPARSE24_SEED_TRACE();
  std::mt19937_64 g = rng(2);
  for (Isa isa : isas_here()) {
    if (isa == Isa::kRef) continue;
    for (auto [m, k] : {std::pair<int64_t, int64_t>{24, 2048}, {9, 130}, {40, 1088}, {64, 64}}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " m " + std::to_string(m) + " k " + std::to_string(k));
      const Compressed c = quantize_int8(random_24(g, m, k), 64);
      PackOptions o;
      o.isa_set = true;
      o.isa = isa;
      o.layouts = PackLayouts::kSmallN;
      const PackedMatrix want = pack(c, o);
      const Stored s(bytes_of(kernels::pack_lanes(c, 1024, false)));
      const PackedMatrix got =
          kernels::packed_from_lanes(kernels::lanes_i8_over(s.bytes, m, k, 1024, s.buf), m, k, o);
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

// Every single damaged byte: check_lanes_i8 refuses it exactly when unpack_lanes_i8 does, and what it
// accepts reads back to a matrix that packs to the damaged bytes.
TEST(LanesStored, DamagedBytesAreRefusedOrHarmless) {
  SPARSE24_SEED_TRACE();
  std::mt19937_64 g = rng(3);
  for (auto [m, k] : {std::pair<int64_t, int64_t>{16, 128}, {9, 70}}) {
    const Compressed c = quantize_int8(random_24(g, m, k), 64);
    const std::vector<uint8_t> good = bytes_of(kernels::pack_lanes(c, 64, false));
    int refused = 0;
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<uint8_t> b = good;
      const size_t at = std::uniform_int_distribution<size_t>(0, b.size() - 1)(g);
      b[at] ^= static_cast<uint8_t>(1u << std::uniform_int_distribution<int>(0, 7)(g));
      const Stored s(b);
      const LanesLayout over = kernels::lanes_i8_over(s.bytes, m, k, 64, s.buf);
      bool check_refused = false, unpack_refused = false;
      try {
        kernels::check_lanes_i8(over, m, k);
      } catch (const Error&) {
        check_refused = true;
      }
      try {
        const Compressed back = kernels::unpack_lanes_i8(over, m, k);
        EXPECT_EQ(bytes_of(kernels::pack_lanes(back, 64, false)), b) << "byte " << at;
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
  const Compressed c = quantize_int8(random_24(g, m, k), 64);
  const std::vector<uint8_t> good = bytes_of(kernels::pack_lanes(c, 64, false));
  const auto message = [&](const std::vector<uint8_t>& b) -> std::string {
    const Stored s(b);
    try {
      kernels::check_lanes_i8(kernels::lanes_i8_over(s.bytes, m, k, 64, s.buf), m, k);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::vector<uint8_t> b = good;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(b.data() + LanesLayout::scale_offset(kernels::ValueType::kI8) + 4 * 3, &nan, 4);
  EXPECT_NE(message(b).find("row 3"), std::string::npos) << message(b);
  EXPECT_NE(message(b).find("not finite"), std::string::npos) << message(b);
  b = good;
  b[LanesLayout::code_offset(kernels::ValueType::kI8) + 4 * 5] = 0x00;  // row 5's first two codes: 0x0
  EXPECT_NE(message(b).find("invalid metadata code"), std::string::npos) << message(b);
  const Stored s(good);
  EXPECT_THROW(kernels::lanes_i8_over(s.bytes.first(good.size() - 1), m, k, 64, s.buf), Error);
  EXPECT_THROW(kernels::lanes_i8_over(s.bytes, m, k, 96, s.buf), Error);
  // A padding row's value (rows 9..15 of a 9-row matrix) is not what packing gives.
  const Compressed c9 = quantize_int8(random_24(g, 9, 64), 64);
  std::vector<uint8_t> p = bytes_of(kernels::pack_lanes(c9, 64, false));
  p[LanesLayout::entry_bytes(kernels::ValueType::kI8) + LanesLayout::slot_at(kernels::ValueType::kI8, 0) +
    3] = 1;
  const Stored s9(p);
  try {
    kernels::check_lanes_i8(kernels::lanes_i8_over(s9.bytes, 9, 64, 64, s9.buf), 9, 64);
    ADD_FAILURE() << "a nonzero padding row was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("padding"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sparse24::testing
