// The memory-bound layout as a file stores it (lanes_stored.h).
#include "lanes_stored.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "convert.h"
#include "kernel_list.h"
#include "sparse24/error.h"

namespace sparse24::kernels {

namespace {

using L = LanesLayout;

std::string at(int64_t row, int64_t pos) {
  return "row " + std::to_string(row) + ", positions " + std::to_string(pos) + "..";
}

// The entry holding row block mb and super chunk s.
const uint8_t* entry_of(const LanesLayout& lay, int64_t mb, int64_t s) {
  const int64_t per = lay.kb / L::kSuper;
  return lay.data.data() + lay.entry(s / per, mb) +
         static_cast<size_t>((s % per) * L::entry_bytes(lay.weights));
}

}  // namespace

DType lanes_dtype(ValueType w) {
  return w == ValueType::kI8 ? DType::kI8 : (w == ValueType::kBf16 ? DType::kBF16 : DType::kF32);
}

ValueType lanes_value_type(DType d) {
  return d == DType::kI8 ? ValueType::kI8 : (d == DType::kBF16 ? ValueType::kBf16 : ValueType::kF32);
}

bool lanes_stores(const Compressed& c) {
  return c.dtype == DType::kF32 || c.dtype == DType::kBF16 ||
         (c.dtype == DType::kI8 && c.scale_group > 0 &&
          (c.scale_group % L::kSuper == 0 || c.scale_group >= c.cols));
}

ValueType lanes_type_of(const Compressed& c) {
  if (lanes_stores(c)) return lanes_value_type(c.dtype);
  throw Error(std::string("lanes: ") + dtype_name(c.dtype) + " values" +
              (c.dtype == DType::kI8 ? " without a scale per 64 positions or per row" : "") +
              " are not stored in the kernels' layout (fp32, bf16, or int8 with a scale per 64 positions)");
}

LanesLayout lanes_of(const Compressed& c, int kb) {
  return pack_lanes(c, kb, lanes_type_of(c) == ValueType::kBf16);
}

const char* lanes_type_name(ValueType w) {
  return w == ValueType::kI8 ? "I8" : (w == ValueType::kBf16 ? "BF16" : "F32");
}

bool parse_lanes_type(const std::string& text, ValueType* w) {
  for (ValueType t : {ValueType::kF32, ValueType::kBf16, ValueType::kI8})
    if (text == lanes_type_name(t)) {
      *w = t;
      return true;
    }
  return false;
}

size_t lanes_bytes(int64_t rows, int64_t cols, ValueType w) {
  return static_cast<size_t>((rows + L::kRows - 1) / L::kRows) *
         static_cast<size_t>((cols + L::kSuper - 1) / L::kSuper) * static_cast<size_t>(L::entry_bytes(w));
}

LanesLayout lanes_over(std::span<const uint8_t> bytes, int64_t rows, int64_t cols, int kb, ValueType w,
                       std::shared_ptr<const void> owner) {
  if (rows <= 0 || cols <= 0) throw Error("lanes: the matrix is empty");
  if (!valid_lanes_kb(kb))
    throw Error("lanes: K block " + std::to_string(kb) + " is not a positive multiple of 64 up to 2^20");
  const size_t want = lanes_bytes(rows, cols, w);
  if (bytes.size() != want)
    throw Error("lanes: " + std::to_string(bytes.size()) + " bytes, expected " + std::to_string(want));
  LanesLayout p;
  p.weights = w;
  p.kb = kb;
  p.m_blocks = (rows + L::kRows - 1) / L::kRows;
  p.supers = (cols + L::kSuper - 1) / L::kSuper;
  p.k_blocks = (cols + kb - 1) / kb;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 32 == 0) {  // (entries are multiples of 32 bytes)
    p.data = AlignedArray<uint8_t>::borrowed(bytes.data(), bytes.size(), std::move(owner));
  } else {
    p.data = AlignedArray<uint8_t>(bytes.size());
    std::memcpy(p.data.data(), bytes.data(), bytes.size());
  }
  return p;
}

void check_lanes(const LanesLayout& lay, int64_t rows, int64_t cols) {
  const ValueType w = lay.weights;
  if (lay.data.size() != lanes_bytes(rows, cols, w)) throw Error("internal: check_lanes of another layout");
  if (rows % L::kRows != 0 || cols % L::kSuper != 0) {  // padding to check: the slow way
    (void)unpack_lanes(lay, rows, cols);
    return;
  }
  // Whole entries: the codes are the rows' metadata words as they are; the scales (int8) or the values
  // (fp32, bf16) the rows' own.
  for (int64_t mb = 0; mb < lay.m_blocks; ++mb)
    for (int64_t s = 0; s < lay.supers; ++s) {
      const uint8_t* e = entry_of(lay, mb, s);
      uint64_t c[8];
      std::memcpy(c, e + L::code_offset(w), sizeof(c));
      bool ok = true;
      for (int i = 0; i < 8; ++i) ok = ok && all_codes_valid(c[i]);
      if (w == ValueType::kI8) {
        float scale[L::kRows];
        std::memcpy(scale, e + L::scale_offset(w), sizeof(scale));
        for (float v : scale) ok = ok && std::isfinite(v);
      } else {
        ok = ok && all_finite_elements(lanes_dtype(w), e + L::slot_at(w, 0), L::kSlots * L::kRows);
      }
      if (!ok) (void)unpack_lanes(lay, rows, cols);  // (names the first bad one)
    }
}

Compressed unpack_lanes(const LanesLayout& lay, int64_t rows, int64_t cols) {
  const ValueType w = lay.weights;
  if (lay.data.size() != lanes_bytes(rows, cols, w)) throw Error("internal: unpack_lanes of another layout");
  const int vb = lanes_slot_bytes(w);
  Compressed c;
  c.shape = {rows, cols};
  c.rows = rows;
  c.cols = cols;
  c.dtype = lanes_dtype(w);
  if (w == ValueType::kI8)
    c.scale_group = std::min<int64_t>(L::kSuper, (cols + 3) / 4 * 4);  // (short: per row)
  const int64_t groups = c.groups_per_row(), vpr = c.values_per_row(), mbpr = c.meta_bytes_per_row(),
                spr = c.scales_per_row();
  c.values.assign(static_cast<size_t>(rows * vpr * vb), 0);
  c.metadata.assign(static_cast<size_t>(rows * mbpr), 0);
  c.scales.assign(static_cast<size_t>(rows * spr), 0.f);
  static constexpr uint8_t kCodes[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};  // (valid_code's, in this order)
  for (int64_t mb = 0; mb < lay.m_blocks; ++mb)
    for (int64_t s = 0; s < lay.supers; ++s) {
      const uint8_t* e = entry_of(lay, mb, s);
      uint32_t codes[2][L::kRows];
      std::memcpy(codes, e + L::code_offset(w), sizeof(codes));
      const uint8_t* v = e + L::slot_at(w, 0);
      const int64_t g0 = 16 * s, g1 = std::min(groups, g0 + 16);
      for (int lane = 0; lane < L::kRows && mb * L::kRows + lane < rows; ++lane) {
        const int64_t r = mb * L::kRows + lane;
        if (w == ValueType::kI8)
          std::memcpy(&c.scales[static_cast<size_t>(r * spr + s)], e + L::scale_offset(w) + 4 * lane, 4);
        for (int64_t g = g0; g < g1; ++g) {
          const int slot = 2 * static_cast<int>(g - g0);
          const uint32_t word = codes[slot / 16][lane] >> (2 * (slot % 16));
          uint8_t code = static_cast<uint8_t>(word & 0xF);
          const int64_t valid = cols - 4 * g;  // positions of the group inside the matrix
          if (valid < 4)  // pack_lanes stored padding positions as 0: the first code that reads back so
            for (uint8_t k : kCodes) {
              const uint8_t p0 = k & 3, p1 = k >> 2;
              if ((p0 < valid ? p0 : 0) == (code & 3) && (p1 < valid ? p1 : 0) == (code >> 2)) {
                code = k;
                break;
              }
            }
          c.metadata[static_cast<size_t>(r * mbpr + g / 2)] |= static_cast<uint8_t>(code << (4 * (g % 2)));
          for (int t = 0; t < 2; ++t)
            std::memcpy(&c.values[static_cast<size_t>((r * vpr + 2 * g + t) * vb)],
                        v + static_cast<size_t>(((slot + t) * L::kRows + lane) * vb),
                        static_cast<size_t>(vb));
        }
      }
    }
  try {
    validate(c);
  } catch (const Error& e) {
    throw Error(std::string("lanes: ") + e.what());
  }
  if (w != ValueType::kI8)
    for (int64_t r = 0; r < rows; ++r)
      if (!all_finite_elements(c.dtype, c.values.data() + static_cast<size_t>(r * vpr * vb), vpr))
        throw Error("lanes: row " + std::to_string(r) + " holds a non-finite value");
  // Everything else (padding rows and positions, the stored form of the last group's codes) must be what
  // packing the matrix gives.
  const LanesLayout again = pack_lanes(c, lay.kb, w == ValueType::kBf16);
  for (int64_t mb = 0; mb < lay.m_blocks; ++mb)
    for (int64_t s = 0; s < lay.supers; ++s)
      if (std::memcmp(entry_of(lay, mb, s), entry_of(again, mb, s), L::entry_bytes(w)) != 0)
        throw Error("lanes: " + at(mb * L::kRows, s * L::kSuper) +
                    ": padding or codes differ from what packing the matrix gives");
  return c;
}

}  // namespace sparse24::kernels
