// Helpers shared by the file readers and writers (private to src/io).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "sparse24/error.h"

namespace sparse24::io_detail {

// Throws Error("<what>: <problem>").
[[noreturn]] inline void fail(const std::string& what, const std::string& problem) {
  throw Error(what + ": " + problem);
}

// Text taken from a file, made safe to put in a one-line message: control and non-ASCII bytes become \xNN
// and anything past `max_len` bytes is cut with "...".
inline std::string printable(std::string_view s, size_t max_len = 120) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

// Product of `shape` in *numel; false if a dimension is negative or the product overflows int64.
// The product of the non-zero dimensions must fit too, so the answer does not depend on the order of the
// dimensions (with a 0 among them the count is 0 in any order, but [2^40, 2^40, 0] would pass only when the 0
// came first, and strides computed from its other dimensions would overflow; found by the gguf fuzzer).
inline bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0)
      zero = true;
    else if (__builtin_mul_overflow(n, d, &n))
      return false;
  }
  *numel = zero ? 0 : n;
  return true;
}

// numel * elem_size in *bytes; false on a bad shape or overflow (of int64, so the result also fits size_t).
inline bool checked_nbytes(const std::vector<int64_t>& shape, size_t elem_size, int64_t* bytes) {
  int64_t n = 0;
  return checked_numel(shape, &n) && !__builtin_mul_overflow(n, static_cast<int64_t>(elem_size), bytes);
}

// "[64, 128]", "[5]", "[]": the text shape_string writes (whitespace anywhere between tokens), at most 64
// dimensions, each fitting int64.
inline bool parse_shape_text(const std::string& s, std::vector<int64_t>* shape) {
  size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  ws();
  if (i == s.size() || s[i++] != '[') return false;
  ws();
  if (i < s.size() && s[i] == ']') {
    ++i;
  } else {
    for (;;) {
      if (i == s.size() || s[i] < '0' || s[i] > '9' || shape->size() == 64) return false;
      int64_t d = 0;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, s[i] - '0', &d)) return false;
        ++i;
      }
      shape->push_back(d);
      ws();
      if (i < s.size() && s[i] == ',') {
        ++i;
        ws();
      } else if (i < s.size() && s[i] == ']') {
        ++i;
        break;
      } else {
        return false;
      }
    }
  }
  ws();
  return i == s.size();
}

// True if no product of dimensions can overflow: the product of the nonzero ones fits int64. (A zero makes
// numel 0, but matrix_view still multiplies the others, e.g. rows = a*b of [a, b, 0].)
inline bool products_fit(const std::vector<int64_t>& shape) {
  int64_t p = 1;
  for (int64_t d : shape)
    if (d != 0 && __builtin_mul_overflow(p, d, &p)) return false;
  return true;
}

// The bytes of fp32 values (a scaled int8 matrix's scales as an F32 tensor).
inline std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A scaled int8 matrix's "scale_group" text: a positive multiple of 4 up to the padded row length (4 times
// `groups_per_row`), in decimal digits only. False for anything else.
inline bool parse_scale_group(const std::string& t, int64_t groups_per_row, int64_t* group) {
  int64_t g = 0;
  bool ok = !t.empty() && t.size() <= 18;
  for (char ch : t) {
    ok = ok && ch >= '0' && ch <= '9';
    if (ok) g = g * 10 + (ch - '0');
  }
  if (!ok || g <= 0 || g % 4 != 0 || g > 4 * groups_per_row) return false;
  *group = g;
  return true;
}

}  // namespace sparse24::io_detail
