// NumPy .npy reader and writer. Format (numpy/lib/format.py): magic "\x93NUMPY", major and minor version
// bytes, header length (u16 LE in 1.0, u32 LE in 2.0 and 3.0), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded with spaces and ended by '\n', then the
// data in C order. The dict is parsed by hand, accepting only what the format allows.
#include <bit>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "io_util.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

using io_detail::fail;
using io_detail::printable;

// Tensor bytes are copied to and from the file as they are, which is right only on a little-endian host.
static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kMaxRank = 64;  // numpy's own limit (NPY_MAXDIMS) is 32 or 64

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A recursive-descent parser for the one dict literal the format allows.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{');
    skip_ws();
    while (!at('}')) {
      std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad("duplicate key 'descr'");
        if (at('[')) fail(what_, "structured (record) dtypes are not supported");
        h.descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_fortran) bad("duplicate key 'fortran_order'");
        h.fortran_order = parse_bool();
        have_fortran = true;
      } else if (key == "shape") {
        if (have_shape) bad("duplicate key 'shape'");
        h.shape = parse_shape();
        have_shape = true;
      } else {
        bad("unexpected key '" + printable(key) + "'");
      }
      skip_ws();
      if (at(',')) {
        ++pos_;
        skip_ws();
      } else if (!at('}')) {
        bad("expected ',' or '}'");
      }
    }
    ++pos_;  // '}'
    skip_ws();
    if (pos_ != s_.size()) bad("unexpected text after the dict");
    if (!have_descr) bad("missing key 'descr'");
    if (!have_fortran) bad("missing key 'fortran_order'");
    if (!have_shape) bad("missing key 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& problem) const {
    fail(what_, "bad .npy header: " + problem + " at header offset " + std::to_string(pos_));
  }
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  void expect(char c) {
    if (!at(c)) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  // 'text' or "text"; escapes never occur in valid headers and are refused.
  std::string parse_string() {
    if (!at('\'') && !at('"')) bad("expected a quoted string");
    char quote = s_[pos_++];
    size_t begin = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote && s_[pos_] != '\n') {
      if (s_[pos_] == '\\') bad("unsupported escape in a string");
      ++pos_;
    }
    if (!at(quote)) bad("unterminated string");
    return std::string(s_.substr(begin, pos_++ - begin));
  }
  bool parse_bool() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  // A tuple of non-negative integers: (), (5,), (3, 4). A Python 2 'L' suffix is accepted.
  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(');
    skip_ws();
    while (!at(')')) {
      if (at('-')) bad("negative dimension");
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') bad("expected a dimension");
      int64_t d = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, s_[pos_] - '0', &d))
          bad("dimension too large");
        ++pos_;
      }
      if (at('L')) ++pos_;
      if (shape.size() == kMaxRank) bad("more than " + std::to_string(kMaxRank) + " dimensions");
      shape.push_back(d);
      skip_ws();
      if (at(',')) {
        ++pos_;
        skip_ws();
      } else if (!at(')')) {
        bad("expected ',' or ')'");
      }
    }
    ++pos_;  // ')'
    return shape;
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
};

DType dtype_from_descr(const std::string& descr, const std::string& what) {
  if (descr == "<f4") return DType::kF32;
  if (descr == "<f2") return DType::kF16;
  // One-byte types have no byte order; numpy writes '|i1'.
  if (descr == "|i1" || descr == "<i1" || descr == ">i1" || descr == "=i1" || descr == "i1")
    return DType::kI8;
  if (descr == ">f4" || descr == ">f2")
    fail(what, "big-endian data ('" + descr + "') is not supported; save with arr.astype('<" +
                   descr.substr(1) + "')");
  fail(what, "unsupported .npy dtype '" + printable(descr) + "' (supported: <f4, <f2, |i1)");
}

const char* descr_of(DType t) {
  switch (t) {
    case DType::kF32:
      return "<f4";
    case DType::kF16:
      return "<f2";
    case DType::kI8:
      return "|i1";
    case DType::kBF16:
      break;
  }
  throw Error("bfloat16 has no .npy dtype; convert to float32 or use safetensors");
}

uint32_t read_le(const uint8_t* p, size_t n) {
  uint32_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

Tensor parse_npy(const uint8_t* data, size_t size, const std::string& what) {
  if (size < kMagicLen || std::memcmp(data, kMagic, kMagicLen) != 0)
    fail(what, "not a .npy file (bad magic)");
  if (size < kMagicLen + 2) fail(what, "truncated .npy file (no version)");
  const int major = data[6], minor = data[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(what, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (supported: 1.0, 2.0, 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (size < prefix) fail(what, "truncated .npy file (no header length)");
  const size_t header_len = read_le(data + kMagicLen + 2, len_bytes);
  if (header_len > size - prefix)
    fail(what, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");

  std::string_view text(reinterpret_cast<const char*>(data + prefix), header_len);
  NpyHeader h = HeaderParser(text, what).parse();
  if (h.fortran_order) fail(what, "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  Tensor t;
  t.dtype = dtype_from_descr(h.descr, what);
  int64_t expected = 0;
  if (!io_detail::checked_nbytes(h.shape, dtype_size(t.dtype), &expected))
    fail(what, "shape " + shape_string(h.shape) + " is too large");
  // Checked against the file before anything is allocated for the data.
  const size_t found = size - prefix - header_len;
  if (found != static_cast<uint64_t>(expected))
    fail(what, std::string(found < static_cast<uint64_t>(expected) ? "truncated" : "trailing bytes") +
                   ": expected " + std::to_string(expected) + " bytes of data, found " +
                   std::to_string(found));
  t.shape = std::move(h.shape);
  t.bytes.assign(data + prefix + header_len, data + size);
  return t;
}

Tensor read_npy(const std::string& path) {
  std::vector<uint8_t> bytes = read_file(path);
  return parse_npy(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> encode_npy(const Tensor& t) {
  const char* descr = descr_of(t.dtype);
  int64_t nbytes = 0;
  if (!io_detail::checked_nbytes(t.shape, dtype_size(t.dtype), &nbytes) ||
      static_cast<uint64_t>(nbytes) != t.bytes.size())
    throw Error("cannot encode .npy: tensor of shape " + shape_string(t.shape) + " has " +
                std::to_string(t.bytes.size()) + " bytes of data");
  if (t.shape.size() > kMaxRank)
    throw Error("cannot encode .npy: " + std::to_string(t.shape.size()) + " dimensions (at most " +
                std::to_string(kMaxRank) + ")");

  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
  if (t.shape.size() == 1) shape += ",";  // Python's one-element tuple
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";

  // numpy pads magic + version + length + header + '\n' to a multiple of 64 so the data is aligned.
  // Version 1.0 always suffices: with at most kMaxRank dimensions of at most 19 digits the header is far
  // below its 16-bit length limit (version 2.0 exists for structured dtypes with many fields, which we never
  // write).
  static_assert(kMaxRank * 21 + 128 < 0xFFFF);
  const size_t prefix = kMagicLen + 2 + 2;
  const int major = 1;
  size_t total = prefix + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';

  // Built from the magic rather than inserted into an empty vector: g++ 12 -O3 warns falsely on the latter.
  std::vector<uint8_t> out(kMagic, kMagic + kMagicLen);
  out.reserve(prefix + header.size() + t.bytes.size());
  out.push_back(static_cast<uint8_t>(major));
  out.push_back(0);
  out.push_back(static_cast<uint8_t>(header.size() & 0xFF));
  out.push_back(static_cast<uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) { write_file_atomic(path, encode_npy(t)); }

}  // namespace sparse24
