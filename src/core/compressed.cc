#include "sparse24/compressed.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "../kernels/convert.h"
#include "../kernels/huge_pages.h"
#include "sparse24/error.h"
#include "sparse24/mask.h"
#include "sparse24/pattern.h"

namespace sparse24 {

namespace {

// Positions to store for each set of kept nonzeros of a group (4 bits): those positions (the first two),
// completed with the lowest other positions to make two, in increasing order; `real` marks the kept
// nonzeros, the only ones copied (the completing positions hold zero: values start zeroed).
struct Slots {
  int pos[2];
  bool real[2];
};
const std::array<Slots, 16>& slots24() {
  static const std::array<Slots, 16> table = [] {
    std::array<Slots, 16> t{};
    for (int m = 0; m < 16; ++m) {
      Slots& s = t[static_cast<size_t>(m)];
      int n = 0;
      s.real[0] = s.real[1] = false;
      for (int i = 0; i < 4 && n < 2; ++i)
        if ((m >> i) & 1) {
          s.real[n] = true;
          s.pos[n++] = i;
        }
      for (int i = 0; i < 4 && n < 2; ++i)
        if (n == 0 || s.pos[0] != i) s.pos[n++] = i;
      if (s.pos[0] > s.pos[1]) {
        std::swap(s.pos[0], s.pos[1]);
        std::swap(s.real[0], s.real[1]);
      }
    }
    return t;
  }();
  return table;
}

std::string at(int64_t r, int64_t g) { return "row " + std::to_string(r) + ", group " + std::to_string(g); }

// Element index in the tensor of matrix position (r, c): identity except for conv weights.
struct IndexMap {
  std::vector<int64_t> conv;  // empty = identity
  int64_t cols;
  int64_t operator()(int64_t r, int64_t c) const {
    return conv.empty() ? r * cols + c : conv[static_cast<size_t>(r * cols + c)];
  }
};

IndexMap index_map(const std::vector<int64_t>& shape, const MatrixView& v) {
  IndexMap m{{}, v.cols};
  if (v.conv) m.conv = matrix_to_tensor_index(shape);
  return m;
}

// Row r of a matrix, at `row`, pruned and compressed (kernels::prune24_row); a NaN is magnitude_mask's error.
void prune_row(const float* row, int64_t r, int64_t cols, float* values, uint8_t* meta) {
  if (kernels::prune24_row(row, cols, values, meta)) return;
  for (int64_t i = 0; i < cols; ++i)
    if (std::isnan(row[i])) throw Error("NaN at row " + std::to_string(r) + ", column " + std::to_string(i));
}

}  // namespace

bool valid_code(uint8_t code) {
  const int i0 = code & 3, i1 = (code >> 2) & 3;
  return code < 16 && i0 < i1;
}

float Compressed::value(int64_t r, int64_t j) const {
  const size_t es = dtype_size(dtype);
  const float v = element_to_float(dtype, values.data() + static_cast<size_t>(r * values_per_row() + j) * es);
  if (scale_group <= 0) return v;
  // Value j belongs to group j / 2, positions 4 (j / 2) .. + 3, all under one scale.
  return v * scales[static_cast<size_t>(r * scales_per_row() + 4 * (j / 2) / scale_group)];
}

double Compressed::bytes_per_weight() const {
  const double dense = static_cast<double>(rows) * static_cast<double>(cols);
  return dense > 0
             ? static_cast<double>(values.size() + metadata.size() + scales.size() * sizeof(float)) / dense
             : 0.0;
}

namespace {

// An empty int8 matrix like `shape` (rows x cols as a matrix), the scale group checked and clamped to a row:
// its values, scales and metadata sized, to be filled.
Compressed int8_layout(const std::vector<int64_t>& shape, int64_t rows, int64_t cols, int64_t scale_group) {
  if (scale_group <= 0 || scale_group % 4 != 0)
    throw Error("int8 scale group must be a positive multiple of 4 positions, got " +
                std::to_string(scale_group));
  Compressed q;
  q.dtype = DType::kI8;
  q.shape = shape;
  q.rows = rows;
  q.cols = cols;
  q.scale_group = std::min(scale_group, 4 * q.groups_per_row());  // one scale per row at most
  q.scales.resize(static_cast<size_t>(rows * q.scales_per_row()));
  kernels::resize_huge(q.values, static_cast<size_t>(rows * q.values_per_row()));
  kernels::resize_huge(q.metadata, static_cast<size_t>(rows * q.meta_bytes_per_row()));
  return q;
}

// Row r's kept values (fp32) into q's int8 values and scales, kernels::quantize_i8 per scale group.
void quantize_row(const float* values, Compressed& q, int64_t r) {
  const int64_t ns = q.scales_per_row(), vpr = q.values_per_row(),
                per = q.scale_group / 2;  // values per scale
  auto* out = reinterpret_cast<int8_t*>(q.values.data()) + r * vpr;
  for (int64_t s = 0; s < ns; ++s)
    q.scales[static_cast<size_t>(r * ns + s)] =
        kernels::quantize_i8(values + s * per, std::min(vpr, (s + 1) * per) - s * per, out + s * per);
}

void check_matrix(int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0)
    throw Error("invalid matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "] (K must be positive)");
}

}  // namespace

Compressed quantize_int8(const Compressed& f, int64_t scale_group) {
  if (f.dtype != DType::kF32 && f.dtype != DType::kBF16 && f.dtype != DType::kF16)
    throw Error(std::string("int8 quantisation needs float values, got ") + dtype_name(f.dtype));
  Compressed q = int8_layout(f.shape, f.rows, f.cols, scale_group);
  validate(f);
  q.metadata = f.metadata;
  const int64_t vpr = f.values_per_row();
  if (f.dtype == DType::kF32) {
    const auto* in = reinterpret_cast<const float*>(f.values.data());
    for (int64_t r = 0; r < f.rows; ++r) quantize_row(in + r * vpr, q, r);
    return q;
  }
  std::vector<float> row(static_cast<size_t>(vpr));  // a 16-bit row widened (exactly)
  for (int64_t r = 0; r < f.rows; ++r) {
    kernels::elements_to_floats(f.dtype, f.values.data() + 2 * r * vpr, vpr, row.data());
    quantize_row(row.data(), q, r);
  }
  return q;
}

Compressed pruned_layout(int64_t rows, int64_t cols, DType dtype, int64_t scale_group) {
  check_matrix(rows, cols);
  if (dtype == DType::kI8) return int8_layout({rows, cols}, rows, cols, scale_group);
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw Error(std::string("pruned values are float32, bfloat16 or int8, not ") + dtype_name(dtype));
  Compressed c;
  c.dtype = dtype;
  c.shape = {rows, cols};
  c.rows = rows;
  c.cols = cols;
  kernels::resize_huge(c.values, static_cast<size_t>(rows * c.values_per_row()) * dtype_size(dtype));
  kernels::resize_huge(c.metadata, static_cast<size_t>(rows * c.meta_bytes_per_row()));
  return c;
}

void prune_rows(Compressed& c, int64_t r0, const float* w, int64_t n) {
  if (r0 < 0 || n < 0 || r0 + n > c.rows) throw Error("prune_rows: rows out of range");
  const int64_t vpr = c.values_per_row(), mpr = c.meta_bytes_per_row();
  std::vector<float> values(c.dtype == DType::kF32 ? 0
                                                   : static_cast<size_t>(vpr));  // a row's, before rounding
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = r0 + i;
    float* f = c.dtype == DType::kF32 ? reinterpret_cast<float*>(c.values.data()) + r * vpr : values.data();
    prune_row(w + i * c.cols, r, c.cols, f, c.metadata.data() + r * mpr);
    if (c.dtype == DType::kI8) quantize_row(f, c, r);
    if (c.dtype == DType::kBF16) {
      auto* out = reinterpret_cast<uint16_t*>(c.values.data()) + r * vpr;
      kernels::floats_to_bf16(f, vpr, out);  // as to_bf16 rounds them
    }
  }
}

double compression_ratio(int64_t rows, int64_t cols, DType t) {
  const int64_t groups = (cols + 3) / 4;
  const int64_t row_bytes = 2 * groups * static_cast<int64_t>(dtype_size(t)) + (groups + 1) / 2;
  const double dense = static_cast<double>(rows) * static_cast<double>(cols) * dtype_size(t);
  return dense > 0 ? static_cast<double>(rows) * static_cast<double>(row_bytes) / dense : 0.0;
}

double Compressed::compression_ratio() const { return sparse24::compression_ratio(rows, cols, dtype); }

Compressed compress_pruned_f32(const float* w, int64_t rows, int64_t cols) {
  Compressed c = pruned_layout(rows, cols, DType::kF32);
  prune_rows(c, 0, w, rows);
  return c;
}

Compressed compress(const Tensor& dense, bool prune) {
  const MatrixView v = matrix_view(dense.shape);
  const size_t es = dtype_size(dense.dtype);
  if (dense.bytes.size() != static_cast<size_t>(dense.numel()) * es) {
    throw Error("tensor data is " + std::to_string(dense.bytes.size()) + " bytes, shape " +
                shape_string(dense.shape) + " of " + dtype_name(dense.dtype) + " needs " +
                std::to_string(static_cast<size_t>(dense.numel()) * es));
  }
  if (prune && dense.dtype == DType::kF32 && !v.conv) {  // the common case, in one pass
    std::vector<float> w(static_cast<size_t>(dense.numel()));
    if (!w.empty()) std::memcpy(w.data(), dense.bytes.data(), dense.bytes.size());
    Compressed c = compress_pruned_f32(w.data(), v.rows, v.cols);
    c.shape = dense.shape;
    return c;
  }
  const IndexMap idx = index_map(dense.shape, v);
  std::vector<float> w = dense.to_float();
  if (v.conv) w = gather_matrix(w, dense.shape);  // (a 2-D matrix is already in matrix order)

  // The kept elements: the mask when pruning (magnitude_mask refuses NaN); otherwise the nonzeros, which
  // must already be 2:4.
  Mask keep;
  if (prune) {
    keep = magnitude_mask(w.data(), v.rows, v.cols, kPattern24);
  } else {
    reject_nan(w.data(), v.rows, v.cols);
    const PatternCheck chk = check_pattern(w.data(), v.rows, v.cols, kPattern24);
    if (!chk.valid) {
      throw Error("matrix is not 2:4 sparse: " + at(chk.first_bad_row, chk.first_bad_group) +
                  " has more than 2 nonzeros (" + std::to_string(chk.bad_groups) +
                  " bad groups); prune it first (--prune)");
    }
    keep.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) keep[i] = w[i] != 0.f;
  }

  Compressed c;
  c.dtype = dense.dtype;
  c.shape = dense.shape;
  c.rows = v.rows;
  c.cols = v.cols;
  const int64_t G = c.groups_per_row();
  c.values.assign(static_cast<size_t>(v.rows * c.values_per_row()) * es, 0);
  c.metadata.assign(static_cast<size_t>(v.rows * c.meta_bytes_per_row()), 0);
  const std::array<Slots, 16>& slots = slots24();
  for (int64_t r = 0; r < v.rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      int m = 0;
      for (int i = 0; i < 4; ++i) {
        const int64_t col = 4 * g + i;
        const size_t at_rc = static_cast<size_t>(r * v.cols + col);
        m |= static_cast<int>(col < v.cols && keep[at_rc] && w[at_rc] != 0.f) << i;
      }
      const Slots& s = slots[static_cast<size_t>(m)];
      for (int j = 0; j < 2; ++j) {
        if (!s.real[j]) continue;  // copy the element's own bytes: exact for every dtype
        std::memcpy(c.values.data() + static_cast<size_t>(r * c.values_per_row() + 2 * g + j) * es,
                    dense.bytes.data() + static_cast<size_t>(idx(r, 4 * g + s.pos[j])) * es, es);
      }
      const uint8_t code = static_cast<uint8_t>(s.pos[0] | s.pos[1] << 2);
      c.metadata[static_cast<size_t>(r * c.meta_bytes_per_row() + g / 2)] |=
          static_cast<uint8_t>((g & 1) ? code << 4 : code);
    }
  return c;
}

void validate(const Compressed& c) {
  if (static_cast<uint8_t>(c.dtype) > static_cast<uint8_t>(DType::kI8)) throw Error("invalid dtype code");
  const MatrixView v = matrix_view(c.shape);
  if (v.rows != c.rows || v.cols != c.cols) {
    throw Error("shape " + shape_string(c.shape) + " does not match the compressed matrix [" +
                std::to_string(c.rows) + ", " + std::to_string(c.cols) + "]");
  }
  const size_t es = dtype_size(c.dtype);
  const size_t want_values = static_cast<size_t>(c.rows * c.values_per_row()) * es;
  if (c.values.size() != want_values) {
    throw Error("values: " + std::to_string(c.values.size()) + " bytes, expected " +
                std::to_string(want_values));
  }
  const size_t want_meta = static_cast<size_t>(c.rows * c.meta_bytes_per_row());
  if (c.metadata.size() != want_meta) {
    throw Error("metadata: " + std::to_string(c.metadata.size()) + " bytes, expected " +
                std::to_string(want_meta));
  }
  if (c.scale_group != 0 || !c.scales.empty()) {
    if (c.dtype != DType::kI8)
      throw Error(std::string("scales with ") + dtype_name(c.dtype) + " values (only int8 has scales)");
    if (c.scale_group <= 0 || c.scale_group % 4 != 0 || c.scale_group > 4 * c.groups_per_row())
      throw Error("scale group " + std::to_string(c.scale_group) +
                  " is not a positive multiple of 4 positions up to the padded row");
    const size_t want = static_cast<size_t>(c.rows * c.scales_per_row());
    if (c.scales.size() != want)
      throw Error("scales: " + std::to_string(c.scales.size()) + " floats, expected " + std::to_string(want));
  }
  validate_rows(c, 0, c.rows);
}

// Whether all 16 codes in 8 metadata bytes are valid (valid_code: position 0 < position 1): per nibble,
// (4 + position 1) - position 0 - 1 keeps bit 2 set exactly when position 0 < position 1, and never
// borrows from the next nibble (it is 0..6).
bool all_codes_valid(uint64_t w) {
  constexpr uint64_t kLow2 = 0x3333333333333333ull, kOnes = 0x1111111111111111ull;
  const uint64_t p0 = w & kLow2, p1 = (w >> 2) & kLow2;
  return (((p1 | 4 * kOnes) - p0 - kOnes) & 4 * kOnes) == 4 * kOnes;
}

void validate_rows(const Compressed& c, int64_t r0, int64_t r1) {
  const int64_t G = c.groups_per_row(), mbpr = c.meta_bytes_per_row(), spr = c.scales_per_row();
  if (r0 < 0 || r1 < r0 || r1 > c.rows ||
      c.values.size() < static_cast<size_t>(r1 * c.values_per_row()) * dtype_size(c.dtype) ||
      c.metadata.size() < static_cast<size_t>(r1 * mbpr) || c.scales.size() < static_cast<size_t>(r1 * spr))
    throw Error("internal: validate_rows past the matrix's arrays");
  for (size_t i = static_cast<size_t>(r0 * spr); i < static_cast<size_t>(r1 * spr); ++i)
    if (!std::isfinite(c.scales[i])) {
      const size_t at_row = i - static_cast<size_t>(r0 * spr);
      throw Error("scale " + std::to_string(at_row) + " of row " +
                  std::to_string(at_row / static_cast<size_t>(spr)) + " is not finite");
    }
  // The metadata bytes whose two codes are both valid (valid_code's rule, checked a byte at a time where
  // eight at once found an invalid one).
  std::array<bool, 256> valid_byte{};
  for (int b = 0; b < 256; ++b)
    valid_byte[b] = valid_code(b & 0xF) && valid_code(static_cast<uint8_t>(b >> 4));
  const auto bad_code = [&](int64_t r, int64_t g) {
    const uint8_t code = c.code(r, g);
    return Error("invalid metadata code 0x" + std::string(1, "0123456789abcdef"[code]) + " at " +
                 at(r - r0, g) + " (positions must be two distinct indices in increasing order)");
  };
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* meta = c.metadata.data() + r * mbpr;
    int64_t i = 0;
    for (uint64_t w; i + 8 <= G / 2; i += 8) {
      std::memcpy(&w, meta + i, 8);
      if (!all_codes_valid(w)) break;
    }
    for (; i < G / 2; ++i)
      if (!valid_byte[meta[i]]) throw bad_code(r, valid_code(meta[i] & 0xF) ? 2 * i + 1 : 2 * i);
    if (G % 2 == 1 && !valid_code(meta[G / 2] & 0xF)) throw bad_code(r, G - 1);
    if (c.cols % 4 != 0) {  // only the last group has positions past K
      const int64_t g = G - 1;
      const uint8_t code = c.code(r, g);
      for (int j = 0; j < 2; ++j) {
        const int64_t col = 4 * g + ((code >> (2 * j)) & 3);
        if (col >= c.cols && c.value(r, 2 * g + j) != 0.f) {
          throw Error("nonzero value stored in the zero padding past K at " + at(r - r0, g));
        }
      }
    }
    if (G % 2 == 1 && (meta[G / 2] >> 4) != 0) {
      throw Error("row " + std::to_string(r - r0) + ": the unused last metadata nibble is not zero");
    }
  }
}

Compressed to_f32(Compressed c) {
  validate(c);
  if (c.dtype == DType::kF32) return c;
  const int64_t n = c.rows * c.values_per_row();
  std::vector<uint8_t> values(static_cast<size_t>(n) * sizeof(float));
  auto* out = reinterpret_cast<float*>(values.data());
  if (c.scale_group > 0) {
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.values_per_row(); ++j) out[r * c.values_per_row() + j] = c.value(r, j);
  } else {
    kernels::elements_to_floats(c.dtype, c.values.data(), n, out);
  }
  c.values = std::move(values);
  c.dtype = DType::kF32;
  c.scale_group = 0;
  c.scales.clear();
  return c;
}

Compressed to_bf16(Compressed c) {
  if (c.dtype == DType::kBF16) {
    validate(c);
    return c;
  }
  c = to_f32(std::move(c));
  const int64_t n = c.rows * c.values_per_row();
  const auto* in = reinterpret_cast<const float*>(c.values.data());
  std::vector<uint8_t> values(static_cast<size_t>(n) * sizeof(uint16_t));
  auto* out = reinterpret_cast<uint16_t*>(values.data());
  kernels::floats_to_bf16(in, n, out);
  c.values = std::move(values);
  c.dtype = DType::kBF16;
  return c;
}

Tensor decompress(const Compressed& c) {
  validate(c);
  const MatrixView v = matrix_view(c.shape);
  const IndexMap idx = index_map(c.shape, v);
  if (c.scale_group > 0) {  // scaled int8: the dequantised float32 matrix
    Tensor t = Tensor::zeros(DType::kF32, c.shape);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t g = 0; g < c.groups_per_row(); ++g)
        for (int j = 0; j < 2; ++j) {
          const int64_t col = 4 * g + ((c.code(r, g) >> (2 * j)) & 3);
          if (col >= c.cols) continue;
          const float val = c.value(r, 2 * g + j);
          std::memcpy(t.bytes.data() + static_cast<size_t>(idx(r, col)) * 4, &val, 4);
        }
    return t;
  }
  const size_t es = dtype_size(c.dtype);
  Tensor t = Tensor::zeros(c.dtype, c.shape);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t g = 0; g < c.groups_per_row(); ++g) {
      const uint8_t code = c.code(r, g);
      for (int j = 0; j < 2; ++j) {
        const int64_t col = 4 * g + ((code >> (2 * j)) & 3);
        if (col >= c.cols) continue;  // zero padding
        std::memcpy(t.bytes.data() + static_cast<size_t>(idx(r, col)) * es,
                    c.values.data() + static_cast<size_t>(r * c.values_per_row() + 2 * g + j) * es, es);
      }
    }
  return t;
}

}  // namespace sparse24
