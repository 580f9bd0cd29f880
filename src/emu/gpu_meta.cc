// CUTLASS / PyTorch semi-structured metadata for fp16/bf16 weights. Layout: include/sparse24/gpu_meta.h and
// docs/gpu.md.
#include "sparse24/gpu_meta.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "sparse24/error.h"
#include "sparse24/pattern.h"

namespace sparse24 {

namespace {

std::string matrix_text(int64_t rows, int64_t cols) { return shape_string({rows, cols}); }

void check_layout_dims(int64_t rows, int64_t cols, const std::string& what) {
  if (rows <= 0 || cols <= 0 || rows % 32 != 0 || cols % 32 != 0) {
    throw Error(what +
                ": the CUTLASS metadata layout needs rows and K to be positive multiples of 32, got a " +
                matrix_text(rows, cols) + " matrix");
  }
}

void check_word_dims(int64_t rows, int64_t ncols, size_t have) {
  if (rows <= 0 || rows % 32 != 0 || ncols <= 0 || ncols % 2 != 0) {
    throw Error(
        "CUTLASS metadata reordering needs rows a positive multiple of 32 and an even number of words "
        "per row, got " +
        matrix_text(rows, ncols) + " words");
  }
  if (rows > std::numeric_limits<int64_t>::max() / ncols || static_cast<uint64_t>(rows * ncols) != have) {
    throw Error("CUTLASS metadata reordering: " + std::to_string(have) + " words given for a " +
                matrix_text(rows, ncols) + " word matrix");
  }
}

bool half_dtype(DType t) { return t == DType::kF16 || t == DType::kBF16; }

[[noreturn]] void fail(const std::string& what, const std::string& problem) {
  throw Error(what + ": " + problem);
}

const std::string& require_meta(const SafeTensors& st, const std::string& key, const std::string& what) {
  auto it = st.metadata.find(key);
  if (it == st.metadata.end()) fail(what, "__metadata__ has no '" + key + "'");
  return it->second;
}

// "[64, 128]" -> {64, 128}; false on anything else (negative, non-integer, overflowing product, rank > 8).
bool parse_shape(const std::string& text, std::vector<int64_t>* shape) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.empty() || j.size() > 8) return false;
  shape->clear();
  int64_t prod = 1;
  for (const auto& d : j) {
    if (!d.is_number_unsigned()) return false;
    const uint64_t v = d.get<uint64_t>();
    if (v == 0 || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / prod)) return false;
    prod *= static_cast<int64_t>(v);
    shape->push_back(static_cast<int64_t>(v));
  }
  return true;
}

}  // namespace

std::vector<uint16_t> meta_words(const Compressed& c) {
  if (c.cols % 16 != 0) {
    throw Error("16-bit metadata words need K to be a multiple of 16, got K = " + std::to_string(c.cols));
  }
  const int64_t ncols = c.cols / 16;
  const int64_t mb = c.meta_bytes_per_row();  // = 2 * ncols
  if (c.metadata.size() != static_cast<size_t>(c.rows * mb))
    throw Error("metadata size does not match the shape");
  std::vector<uint16_t> words(static_cast<size_t>(c.rows * ncols));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t w = 0; w < ncols; ++w) {
      // Bytes 2w and 2w+1 of the row hold groups 4w..4w+3, group 4w+i in nibble i counted from the low end.
      const uint8_t* p = c.metadata.data() + r * mb + 2 * w;
      words[static_cast<size_t>(r * ncols + w)] = static_cast<uint16_t>(p[0] | p[1] << 8);
    }
  }
  return words;
}

int64_t cutlass_meta_offset(int64_t r, int64_t w, int64_t rows) {
  // Rows: within each block of 32, row r goes to 4 * (r % 8) + (r % 32) / 8, so rows r, r+8, r+16, r+24
  // become neighbours.
  int64_t dst_row = r / 32 * 32 + (r % 8) * 4 + (r % 32) / 8;
  int64_t dst_col = w;
  // Then each 2x2 block of (row, word) swaps its off-diagonal: (even row, odd word) <-> (odd row, even word).
  if (dst_row % 2 == 0 && dst_col % 2 == 1) {
    ++dst_row;
    --dst_col;
  } else if (dst_row % 2 == 1 && dst_col % 2 == 0) {
    --dst_row;
    ++dst_col;
  }
  // Stored column-major interleaved by 2 (CUTLASS ColumnMajorInterleaved<2>): word pairs of a row together.
  return (dst_col / 2) * rows * 2 + dst_row * 2 + dst_col % 2;
}

std::vector<uint16_t> cutlass_reorder_meta(const std::vector<uint16_t>& words, int64_t rows, int64_t ncols) {
  check_word_dims(rows, ncols, words.size());
  std::vector<uint16_t> out(words.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t w = 0; w < ncols; ++w)
      out[static_cast<size_t>(cutlass_meta_offset(r, w, rows))] = words[static_cast<size_t>(r * ncols + w)];
  return out;
}

std::vector<uint16_t> cutlass_unreorder_meta(const std::vector<uint16_t>& reordered, int64_t rows,
                                             int64_t ncols) {
  check_word_dims(rows, ncols, reordered.size());
  std::vector<uint16_t> out(reordered.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t w = 0; w < ncols; ++w)
      out[static_cast<size_t>(r * ncols + w)] =
          reordered[static_cast<size_t>(cutlass_meta_offset(r, w, rows))];
  return out;
}

CutlassSparse to_cutlass(const Compressed& c) {
  if (!half_dtype(c.dtype)) {
    throw Error(std::string("the CUTLASS layout is for float16/bfloat16 weights, this one is ") +
                dtype_name(c.dtype) + " (convert it to float16 or bfloat16 first)");
  }
  check_layout_dims(c.rows, c.cols, "export-gpu");
  validate(c);
  CutlassSparse s;
  s.dtype = c.dtype;
  s.shape = c.shape;
  s.rows = c.rows;
  s.cols = c.cols;
  s.values = c.values;  // [rows, K/2], position order: the same bytes
  s.meta = cutlass_reorder_meta(meta_words(c), c.rows, c.cols / 16);
  return s;
}

Compressed from_cutlass(const CutlassSparse& s) {
  if (!half_dtype(s.dtype)) throw Error("CUTLASS layout: dtype must be float16 or bfloat16");
  check_layout_dims(s.rows, s.cols, "CUTLASS layout");
  MatrixView v;
  try {
    v = matrix_view(s.shape);
  } catch (const Error& e) {
    throw Error("CUTLASS layout: shape " + shape_string(s.shape) + ": " + e.what());
  }
  if (v.rows != s.rows || v.cols != s.cols) {
    throw Error("CUTLASS layout: shape " + shape_string(s.shape) + " is not a " +
                matrix_text(s.rows, s.cols) + " matrix");
  }
  const int64_t ncols = s.cols / 16;
  if (s.values.size() != static_cast<size_t>(s.rows * (s.cols / 2) * 2)) {
    throw Error("CUTLASS layout: " + std::to_string(s.values.size()) + " value bytes for a " +
                matrix_text(s.rows, s.cols) + " matrix");
  }
  const std::vector<uint16_t> words = cutlass_unreorder_meta(s.meta, s.rows, ncols);
  Compressed c;
  c.dtype = s.dtype;
  c.shape = s.shape;
  c.rows = s.rows;
  c.cols = s.cols;
  c.values = s.values;
  c.metadata.resize(static_cast<size_t>(s.rows * c.meta_bytes_per_row()));
  for (size_t i = 0; i < words.size(); ++i) {
    c.metadata[2 * i] = static_cast<uint8_t>(words[i] & 0xFF);
    c.metadata[2 * i + 1] = static_cast<uint8_t>(words[i] >> 8);
  }
  validate(c);
  return c;
}

Compressed convert_values(const Compressed& c, DType to) {
  if (!half_dtype(to)) throw Error(std::string("convert_values: target must be float16 or bfloat16"));
  Compressed out = c;
  out.dtype = to;
  const int64_t n = c.rows * c.values_per_row();
  if (c.values.size() != static_cast<size_t>(n) * dtype_size(c.dtype))
    throw Error("values size does not match");
  out.values.assign(static_cast<size_t>(n) * 2, 0);
  for (int64_t i = 0; i < n; ++i) {
    const float v = element_to_float(c.dtype, c.values.data() + static_cast<size_t>(i) * dtype_size(c.dtype));
    const uint16_t h = to == DType::kF16 ? float_to_half(v) : float_to_bf16(v);
    const float back = to == DType::kF16 ? half_to_float(h) : bf16_to_float(h);
    if (std::isfinite(v) && !std::isfinite(back)) {
      throw Error("value " + std::to_string(v) + " at row " + std::to_string(i / c.values_per_row()) +
                  " overflows " + dtype_name(to));
    }
    std::memcpy(out.values.data() + 2 * i, &h, 2);
  }
  return out;
}

SafeTensors encode_cutlass_file(const CutlassSparse& s) {
  // Re-check everything (sizes, codes) by converting back.
  (void)from_cutlass(s);
  SafeTensors st;
  st.metadata = {
      {"format", "sparse24-gpu"},
      {"layout", "cutlass"},
      {"pattern", "2:4"},
      {"dtype", dtype_name(s.dtype)},
      {"shape", shape_string(s.shape)},
      {"matrix", matrix_text(s.rows, s.cols)},
      {"meta_dtype", "int16"},
      {"meta_words",
       "16-bit words, 4 groups of 4 each: group 4w+i of a row in bits 4i..4i+3 of its word w, "
       "code idx0 | idx1 << 2"},
      {"meta_reorder",
       "CUTLASS ColumnMajorInterleaved<2> reordering (PyTorch "
       "_calculate_meta_reordering_scatter_offsets): rows r, r+8, r+16, r+24 interleaved "
       "in blocks of 32, 2x2 word blocks transposed"},
  };
  StTensor values;
  values.dtype = st_dtype_name(s.dtype);
  values.shape = {s.rows, s.cols / 2};
  values.bytes = s.values;
  st.add("values", std::move(values));
  StTensor meta;
  meta.dtype = "I16";
  meta.shape = {s.rows, s.cols / 16};
  meta.bytes.resize(s.meta.size() * 2);
  for (size_t i = 0; i < s.meta.size(); ++i) {
    meta.bytes[2 * i] = static_cast<uint8_t>(s.meta[i] & 0xFF);
    meta.bytes[2 * i + 1] = static_cast<uint8_t>(s.meta[i] >> 8);
  }
  st.add("metadata", std::move(meta));
  return st;
}

CutlassSparse decode_cutlass_file(const SafeTensors& st, const std::string& what) {
  if (require_meta(st, "format", what) != "sparse24-gpu")
    fail(what, "__metadata__ 'format' is not 'sparse24-gpu'");
  if (require_meta(st, "layout", what) != "cutlass") fail(what, "__metadata__ 'layout' is not 'cutlass'");
  CutlassSparse s;
  try {
    s.dtype = parse_dtype(require_meta(st, "dtype", what));
  } catch (const Error& e) {
    fail(what, std::string("__metadata__ 'dtype': ") + e.what());
  }
  if (!half_dtype(s.dtype)) fail(what, "__metadata__ 'dtype' must be float16 or bfloat16");
  if (!parse_shape(require_meta(st, "shape", what), &s.shape))
    fail(what, "__metadata__ 'shape' is not a shape");
  MatrixView v;
  try {
    v = matrix_view(s.shape);
  } catch (const Error& e) {
    fail(what, std::string("__metadata__ 'shape': ") + e.what());
  }
  s.rows = v.rows;
  s.cols = v.cols;
  try {
    check_layout_dims(s.rows, s.cols, "matrix");
  } catch (const Error& e) {
    fail(what, e.what());
  }
  const StTensor& values = st.at("values");
  if (values.dtype != st_dtype_name(s.dtype) || values.shape != std::vector<int64_t>{s.rows, s.cols / 2}) {
    fail(what, "tensor 'values' must be " + std::string(st_dtype_name(s.dtype)) + " " +
                   matrix_text(s.rows, s.cols / 2) + ", got " + values.dtype + " " +
                   shape_string(values.shape));
  }
  const StTensor& meta = st.at("metadata");
  if ((meta.dtype != "I16" && meta.dtype != "U16") ||
      meta.shape != std::vector<int64_t>{s.rows, s.cols / 16}) {
    fail(what, "tensor 'metadata' must be I16 " + matrix_text(s.rows, s.cols / 16) + ", got " + meta.dtype +
                   " " + shape_string(meta.shape));
  }
  s.values = values.bytes;
  s.meta.resize(meta.bytes.size() / 2);
  for (size_t i = 0; i < s.meta.size(); ++i)
    s.meta[i] = static_cast<uint16_t>(meta.bytes[2 * i] | meta.bytes[2 * i + 1] << 8);
  try {
    (void)from_cutlass(s);
  } catch (const Error& e) {
    fail(what, e.what());
  }
  return s;
}

}  // namespace sparse24
