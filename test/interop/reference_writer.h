// An independent writer of compressed-tensors 'sparse-24-bitmask' checkpoints, written for the tests from the
// layout's description only (it shares no code with src/io): each 2-D weight "<prefix>.weight" [rows, cols]
// becomes "<prefix>.compressed" [rows, cols/2] (the kept values of each group of 4, in position order),
// "<prefix>.bitmask" U8 [rows, ceil(cols/8)] (bit j of byte b = column 8b+j, 1 = kept) and "<prefix>.shape"
// I64 [[rows], [cols]]. The safetensors container is written by hand the way the reference safetensors writer
// lays it out: header {"__metadata__": ..., then tensors sorted by descending dtype alignment and then name},
// each {"dtype", "shape", "data_offsets"}, compact JSON padded with spaces to a multiple of 8.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace sparse24::testing::reference {

struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "U8", "I64", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline size_t element_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  return 1;
}

// True when the element's value is zero (+0.0 and -0.0 alike).
inline bool is_zero(const std::string& dtype, const uint8_t* p) {
  if (dtype == "F32") {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return (u & 0x7FFFFFFFu) == 0;
  }
  if (dtype == "F16" || dtype == "BF16") return ((p[0] | (p[1] << 8)) & 0x7FFF) == 0;
  return p[0] == 0;  // I8
}

// The reference writer's order: larger alignment first, then by name.
inline int alignment_rank(const std::string& dtype) {
  const char* order[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                         "BF16", "I32", "U32", "F32",     "F64",     "I64", "U64"};
  for (int i = 0; i < 15; ++i)
    if (dtype == order[i]) return i;
  return -1;
}

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

inline std::vector<uint8_t> write_safetensors_file(std::vector<RawTensor> tensors,
                                                   const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const RawTensor& a, const RawTensor& b) {
    if (alignment_rank(a.dtype) != alignment_rank(b.dtype))
      return alignment_rank(a.dtype) > alignment_rank(b.dtype);
    return a.name < b.name;
  });
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) header += ",";
      first = false;
      header += json_string(k) + ":" + json_string(v);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    if (!first) header += ",";
    first = false;
    header += json_string(t.name) + ":{\"dtype\":" + json_string(t.dtype) + ",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::vector<uint8_t> out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const RawTensor& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

// The three tensors of one 2:4 weight. `dense` holds rows*cols elements of `dtype`, at most 2 nonzeros in
// each group of 4. A group with fewer than 2 nonzeros keeps zeros at positions chosen with `g` (the reference
// library picks them with topk, whose choice among ties is unspecified, so a reader must take any).
inline std::vector<RawTensor> bitmask24_layer(const std::string& prefix, const std::string& dtype,
                                              int64_t rows, int64_t cols, const std::vector<uint8_t>& dense,
                                              std::mt19937_64& g) {
  const size_t es = element_bytes(dtype);
  RawTensor compressed{prefix + ".compressed", dtype, {rows, cols / 2}, {}};
  const int64_t mask_cols = (cols + 7) / 8;
  RawTensor bitmask{prefix + ".bitmask", "U8", {rows, mask_cols}, std::vector<uint8_t>(rows * mask_cols, 0)};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += 4) {
      bool keep[4] = {false, false, false, false};
      int kept = 0;
      for (int i = 0; i < 4; ++i)
        if (!is_zero(dtype, &dense[(r * cols + c0 + i) * es])) keep[i] = true, ++kept;
      while (kept < 2) {
        const int i = static_cast<int>(g() % 4);
        if (!keep[i]) keep[i] = true, ++kept;
      }
      for (int i = 0; i < 4; ++i) {
        if (!keep[i]) continue;
        const int64_t col = c0 + i;
        const uint8_t* p = &dense[(r * cols + col) * es];
        compressed.bytes.insert(compressed.bytes.end(), p, p + es);
        bitmask.bytes[r * mask_cols + col / 8] |= static_cast<uint8_t>(1 << (col % 8));
      }
    }
  }
  RawTensor shape{prefix + ".shape", "I64", {2, 1}, {}};
  for (int64_t d : {rows, cols})
    for (int i = 0; i < 8; ++i)
      shape.bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(d) >> (8 * i)));
  return {compressed, bitmask, shape};
}

// A random 2:4 matrix of `dtype` as raw bytes: in every group 0, 1 or 2 nonzeros at random positions, the
// other elements +0.0 or -0.0; nonzeros are random bit patterns (NaN and inf included) that are not zero.
inline std::vector<uint8_t> random_24_matrix(const std::string& dtype, int64_t rows, int64_t cols,
                                             std::mt19937_64& g) {
  const size_t es = element_bytes(dtype);
  std::vector<uint8_t> m(static_cast<size_t>(rows * cols) * es, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += 4) {
      for (int i = 0; i < 4; ++i)  // zeros, some negative
        if (g() % 3 == 0 && dtype != "I8") m[((r * cols + c0 + i) + 1) * es - 1] = 0x80;
      const int n = static_cast<int>(g() % 3);
      for (int k = 0; k < n; ++k) {
        uint8_t* p = &m[(r * cols + c0 + static_cast<int64_t>(g() % 4)) * es];
        do {
          for (size_t b = 0; b < es; ++b) p[b] = static_cast<uint8_t>(g());
        } while (is_zero(dtype, p));
      }
    }
  return m;
}

}  // namespace sparse24::testing::reference
