// GGUF reader, dequantization and writer (include/sparse24/gguf.h; layout in docs/formats.md, "GGUF").
#include "sparse24/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <tuple>

#include "io_util.h"
#include "sparse24/error.h"

namespace sparse24 {
namespace {

using io_detail::fail;
using io_detail::printable;

static_assert(std::endian::native == std::endian::little, "the GGUF code assumes a little-endian host");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxRank = 4;         // GGML_MAX_DIMS
constexpr size_t kMaxNameBytes = 63;     // ggml keeps tensor names in char[64]
constexpr uint64_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";

// Every type ggml defines (ggml.h / the gguf package's GGML_QUANT_SIZES): elements per block, bytes per
// block.
constexpr GgmlTypeInfo kTypes[] = {
    {0, "F32", 1, 4, true},         {1, "F16", 1, 2, true},          {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},      {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},      {9, "Q8_1", 32, 40, false},      {10, "Q2_K", 256, 84, true},
    {11, "Q3_K", 256, 110, true},   {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},   {15, "Q8_K", 256, 292, false},   {16, "IQ2_XXS", 256, 66, false},
    {17, "IQ2_XS", 256, 74, false}, {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, true},   {21, "IQ3_S", 256, 110, false},  {22, "IQ2_S", 256, 82, false},
    {23, "IQ4_XS", 256, 136, true}, {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},       {27, "I64", 1, 8, false},        {28, "F64", 1, 8, false},
    {29, "IQ1_M", 256, 56, false},  {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},  {39, "MXFP4", 32, 17, false},
};

bool is_known_value_type(uint32_t t) { return t <= 12; }

// Bytes of one scalar of a fixed-size type (0 for STRING and ARRAY).
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool is_integer(GgufType t) {
  return t != GgufType::kF32 && t != GgufType::kF64 && t != GgufType::kString && t != GgufType::kArray;
}
bool is_float(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF64; }

// Bounds-checked little-endian reads from the file; every failure names what was being read.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& what) : data_(data), size_(size), what_(what) {}
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  template <typename T>
  T get(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const std::string& field) {
    const uint64_t n = get<uint64_t>(field + " length");
    if (n > left())
      fail(what_, field + " length " + std::to_string(n) + " runs past the end of the file (" +
                      std::to_string(left()) + " bytes left at offset " + std::to_string(pos_) + ")");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  void need(size_t n, const std::string& field) const {
    if (n > left())
      fail(what_, "truncated: " + field + " needs " + std::to_string(n) + " bytes at offset " +
                      std::to_string(pos_) + ", the file has " + std::to_string(size_));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& what_;
};

// One scalar of type t appended to v.
void read_scalar(Cursor& c, GgufType t, GgufValue& v, const std::string& what, const std::string& field) {
  switch (t) {
    case GgufType::kU8:
      v.ints.push_back(c.get<uint8_t>(field));
      return;
    case GgufType::kI8:
      v.ints.push_back(c.get<int8_t>(field));
      return;
    case GgufType::kU16:
      v.ints.push_back(c.get<uint16_t>(field));
      return;
    case GgufType::kI16:
      v.ints.push_back(c.get<int16_t>(field));
      return;
    case GgufType::kU32:
      v.ints.push_back(c.get<uint32_t>(field));
      return;
    case GgufType::kI32:
      v.ints.push_back(c.get<int32_t>(field));
      return;
    case GgufType::kU64:
      v.ints.push_back(static_cast<int64_t>(c.get<uint64_t>(field)));
      return;
    case GgufType::kI64:
      v.ints.push_back(c.get<int64_t>(field));
      return;
    case GgufType::kBool: {
      const uint8_t b = c.get<uint8_t>(field);
      if (b > 1) fail(what, field + " is a BOOL of value " + std::to_string(b) + " (must be 0 or 1)");
      v.ints.push_back(b);
      return;
    }
    case GgufType::kF32:
      v.floats.push_back(c.get<float>(field));
      return;
    case GgufType::kF64:
      v.floats.push_back(c.get<double>(field));
      return;
    case GgufType::kString:
      v.strings.push_back(c.str(field));
      return;
    case GgufType::kArray:
      break;
  }
  fail(what, field + " has an invalid type");
}

GgufValue read_value(Cursor& c, const std::string& key, const std::string& what) {
  const std::string field = "metadata '" + printable(key) + "'";
  const uint32_t raw_type = c.get<uint32_t>(field + " type");
  if (!is_known_value_type(raw_type))
    fail(what, field + " has unknown value type " + std::to_string(raw_type));
  GgufValue v;
  v.type = v.elem = static_cast<GgufType>(raw_type);
  if (v.type != GgufType::kArray) {
    read_scalar(c, v.type, v, what, field);
    return v;
  }
  const uint32_t raw_elem = c.get<uint32_t>(field + " array element type");
  if (!is_known_value_type(raw_elem))
    fail(what, field + " is an array of unknown value type " + std::to_string(raw_elem));
  v.elem = static_cast<GgufType>(raw_elem);
  if (v.elem == GgufType::kArray) fail(what, field + " is an array of arrays (not supported)");
  const uint64_t n = c.get<uint64_t>(field + " array length");
  // Each element takes at least its scalar size (a string at least its 8-byte length): a count that cannot
  // fit in the bytes left is refused before anything is allocated for it.
  const size_t min_bytes = v.elem == GgufType::kString ? 8 : scalar_size(v.elem);
  if (n > c.left() / min_bytes)
    fail(what, field + " array length " + std::to_string(n) + " of " + gguf_type_name(v.elem) +
                   " cannot fit in the " + std::to_string(c.left()) + " bytes left");
  if (v.elem == GgufType::kString)
    v.strings.reserve(static_cast<size_t>(n));
  else if (is_float(v.elem))
    v.floats.reserve(static_cast<size_t>(n));
  else
    v.ints.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) read_scalar(c, v.elem, v, what, field + " element " + std::to_string(i));
  return v;
}

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

[[noreturn]] void wrong_type(const std::string& key, const GgufValue& v, const char* expected) {
  std::string got = v.is_array() ? std::string("ARRAY of ") + gguf_type_name(v.elem) : gguf_type_name(v.type);
  throw Error("metadata '" + printable(key) + "' is " + got + ", expected " + expected);
}

// Encoding helpers for encode_gguf.
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
void put_scalar(std::vector<uint8_t>& out, GgufType t, const GgufValue& v, size_t i) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kBool:
      put<uint8_t>(out, static_cast<uint8_t>(v.ints.at(i)));
      return;
    case GgufType::kI8:
      put<int8_t>(out, static_cast<int8_t>(v.ints.at(i)));
      return;
    case GgufType::kU16:
      put<uint16_t>(out, static_cast<uint16_t>(v.ints.at(i)));
      return;
    case GgufType::kI16:
      put<int16_t>(out, static_cast<int16_t>(v.ints.at(i)));
      return;
    case GgufType::kU32:
      put<uint32_t>(out, static_cast<uint32_t>(v.ints.at(i)));
      return;
    case GgufType::kI32:
      put<int32_t>(out, static_cast<int32_t>(v.ints.at(i)));
      return;
    case GgufType::kU64:
    case GgufType::kI64:
      put<int64_t>(out, v.ints.at(i));
      return;
    case GgufType::kF32:
      put<float>(out, static_cast<float>(v.floats.at(i)));
      return;
    case GgufType::kF64:
      put<double>(out, v.floats.at(i));
      return;
    case GgufType::kString:
      put_str(out, v.strings.at(i));
      return;
    case GgufType::kArray:
      break;
  }
  throw Error("cannot encode GGUF: nested array");
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* kNames[] = {"U8",   "I8",     "U16",   "I16", "U32", "I32", "F32",
                                 "BOOL", "STRING", "ARRAY", "U64", "I64", "F64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

size_t GgufValue::size() const {
  if (!is_array()) return 1;
  if (elem == GgufType::kString) return strings.size();
  return is_float(elem) ? floats.size() : ints.size();
}

GgufValue GgufValue::of_int(GgufType t, int64_t v) {
  if (!is_integer(t))
    throw Error(std::string("GgufValue::of_int: ") + gguf_type_name(t) + " is not an integer type");
  GgufValue g;
  g.type = g.elem = t;
  g.ints = {v};
  return g;
}
GgufValue GgufValue::of_float(GgufType t, double v) {
  if (!is_float(t)) throw Error(std::string("GgufValue::of_float: ") + gguf_type_name(t) + " is not F32/F64");
  GgufValue g;
  g.type = g.elem = t;
  g.floats = {v};
  return g;
}
GgufValue GgufValue::of_string(std::string s) {
  GgufValue g;
  g.type = g.elem = GgufType::kString;
  g.strings = {std::move(s)};
  return g;
}
GgufValue GgufValue::of_ints(GgufType elem, std::vector<int64_t> v) {
  if (!is_integer(elem))
    throw Error(std::string("GgufValue::of_ints: ") + gguf_type_name(elem) + " is not an integer type");
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem = elem;
  g.ints = std::move(v);
  return g;
}
GgufValue GgufValue::of_floats(GgufType elem, std::vector<double> v) {
  if (!is_float(elem))
    throw Error(std::string("GgufValue::of_floats: ") + gguf_type_name(elem) + " is not F32/F64");
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem = elem;
  g.floats = std::move(v);
  return g;
}
GgufValue GgufValue::of_strings(std::vector<std::string> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem = GgufType::kString;
  g.strings = std::move(v);
  return g;
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t ? t->name : "type " + std::to_string(id);
}

std::string dequantizable_type_names() {
  std::string s;
  for (const GgmlTypeInfo& t : kTypes)
    if (t.dequantizable) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

int64_t GgufTensor::numel() const {
  int64_t n = 0;
  if (!io_detail::checked_numel(shape, &n)) throw Error("tensor '" + printable(name) + "' shape overflows");
  return n;
}

const GgufValue* Gguf::find(const std::string& key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

const GgufTensor* Gguf::find_tensor(const std::string& name) const {
  for (const GgufTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {
const GgufValue& must_find(const Gguf& g, const std::string& key) {
  const GgufValue* v = g.find(key);
  if (!v) throw Error("metadata '" + printable(key) + "' is missing");
  return *v;
}
}  // namespace

int64_t Gguf::get_int(const std::string& key) const {
  const GgufValue& v = must_find(*this, key);
  if (v.is_array() || !is_integer(v.type) || v.type == GgufType::kBool) wrong_type(key, v, "an integer");
  if (v.type == GgufType::kU64 && v.ints[0] < 0)
    throw Error("metadata '" + printable(key) + "' = " + std::to_string(static_cast<uint64_t>(v.ints[0])) +
                " is too large");
  return v.ints[0];
}

double Gguf::get_float(const std::string& key) const {
  const GgufValue& v = must_find(*this, key);
  if (v.is_array() || v.type == GgufType::kString || v.type == GgufType::kBool)
    wrong_type(key, v, "a number");
  if (is_float(v.type)) return v.floats[0];
  return v.type == GgufType::kU64 ? static_cast<double>(static_cast<uint64_t>(v.ints[0]))
                                  : static_cast<double>(v.ints[0]);
}

bool Gguf::get_bool(const std::string& key) const {
  const GgufValue& v = must_find(*this, key);
  if (v.type != GgufType::kBool) wrong_type(key, v, "BOOL");
  return v.ints[0] != 0;
}

const std::string& Gguf::get_string(const std::string& key) const {
  const GgufValue& v = must_find(*this, key);
  if (v.type != GgufType::kString) wrong_type(key, v, "STRING");
  return v.strings[0];
}

const std::vector<std::string>& Gguf::get_strings(const std::string& key) const {
  const GgufValue& v = must_find(*this, key);
  if (!v.is_array() || v.elem != GgufType::kString) wrong_type(key, v, "an ARRAY of STRING");
  return v.strings;
}

const std::vector<int64_t>& Gguf::get_ints(const std::string& key) const {
  const GgufValue& v = must_find(*this, key);
  if (!v.is_array() || !is_integer(v.elem)) wrong_type(key, v, "an ARRAY of integers");
  return v.ints;
}

Gguf parse_gguf(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    if (size >= 4 && std::memcmp(data, "FUGG", 4) == 0) fail(what, "big-endian GGUF files are not supported");
    fail(what, "not a GGUF file (no 'GGUF' magic)");
  }
  Cursor c(data, size, what);
  (void)c.get<uint32_t>("magic");
  Gguf g;
  g.version = c.get<uint32_t>("version");
  if (g.version == 1) fail(what, "GGUF version 1 is not supported (only 2 and 3)");
  if (g.version != 2 && g.version != 3) {
    if ((g.version & 0xFFFF) == 0) fail(what, "big-endian GGUF files are not supported");
    fail(what, "unsupported GGUF version " + std::to_string(g.version) + " (only 2 and 3)");
  }
  const uint64_t n_tensors = c.get<uint64_t>("tensor count");
  const uint64_t n_kv = c.get<uint64_t>("metadata count");
  // The smallest metadata pair is 13 bytes (empty key, type, one byte); the smallest tensor info 24.
  if (n_kv > c.left() / 13)
    fail(what, "metadata count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(c.left()) +
                   " bytes left");
  if (n_tensors > c.left() / 24)
    fail(what, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                   std::to_string(c.left()) + " bytes left");

  std::set<std::string> keys;
  g.metadata.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("metadata key " + std::to_string(i));
    if (!keys.insert(key).second) fail(what, "duplicate metadata key '" + printable(key) + "'");
    GgufValue v = read_value(c, key, what);
    g.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = g.find(kAlignmentKey)) {
    if (a->type != GgufType::kU32)
      fail(what, std::string(kAlignmentKey) + " is " + gguf_type_name(a->type) + ", expected U32");
    const auto align = static_cast<uint64_t>(a->ints[0]);
    if (!is_power_of_two(align))
      fail(what, std::string(kAlignmentKey) + " " + std::to_string(align) + " is not a power of two");
    g.alignment = align;
  }

  struct Info {
    std::vector<int64_t> ne;  // innermost first
    int64_t nbytes = 0;
  };
  std::vector<Info> infos;
  std::set<std::string> names;
  g.tensors.reserve(static_cast<size_t>(n_tensors));
  infos.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.str("tensor " + std::to_string(i) + " name");
    const std::string where = "tensor '" + printable(t.name) + "'";
    if (t.name.size() > kMaxNameBytes)
      fail(what, where + " name is longer than " + std::to_string(kMaxNameBytes) + " bytes");
    if (!names.insert(t.name).second) fail(what, "duplicate " + where);
    const uint32_t rank = c.get<uint32_t>(where + " rank");
    if (rank > kMaxRank)
      fail(what,
           where + " has " + std::to_string(rank) + " dimensions (at most " + std::to_string(kMaxRank) + ")");
    Info info;
    for (uint32_t d = 0; d < rank; ++d) {
      const uint64_t ne = c.get<uint64_t>(where + " dimension");
      if (ne > static_cast<uint64_t>(INT64_MAX))
        fail(what, where + " dimension " + std::to_string(ne) + " is too large");
      info.ne.push_back(static_cast<int64_t>(ne));
    }
    t.shape.assign(info.ne.rbegin(), info.ne.rend());
    t.type = c.get<uint32_t>(where + " type");
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    if (!ti) fail(what, where + " has unknown ggml type " + std::to_string(t.type));
    int64_t numel = 0;
    if (!io_detail::checked_numel(info.ne, &numel))
      fail(what, where + " shape " + shape_string(t.shape) + " is too large");
    const int64_t ne0 = info.ne.empty() ? 1 : info.ne[0];
    if (ne0 % ti->block != 0)
      fail(what, where + " of type " + ti->name + " has a row of " + std::to_string(ne0) +
                     " elements, not a multiple of its block of " + std::to_string(ti->block));
    if (__builtin_mul_overflow(numel / ti->block, ti->block_bytes, &info.nbytes))
      fail(what, where + " shape " + shape_string(t.shape) + " is too large");
    t.offset = c.get<uint64_t>(where + " offset");
    if (t.offset % g.alignment != 0)
      fail(what, where + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                     std::to_string(g.alignment));
    g.tensors.push_back(std::move(t));
    infos.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment (the padding may be absent only when
  // there are no tensors, as in a metadata-only file).
  const uint64_t header_end = c.pos();
  const uint64_t data_offset =
      (header_end + g.alignment - 1) / g.alignment * g.alignment;  // alignment <= 2^31
  if (data_offset > size) {
    if (!g.tensors.empty())
      fail(what, "truncated: the data section would start at " + std::to_string(data_offset) +
                     ", past the end of the file (" + std::to_string(size) + " bytes)");
  }
  g.data_offset = std::min<uint64_t>(data_offset, size);
  const uint64_t data_size = size - g.data_offset;

  std::vector<size_t> order(g.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) {
    GgufTensor& t = g.tensors[i];
    const auto nbytes = static_cast<uint64_t>(infos[i].nbytes);
    if (t.offset > data_size || nbytes > data_size - t.offset)
      fail(what, "tensor '" + printable(t.name) + "' bytes [" + std::to_string(t.offset) + ", " +
                     std::to_string(t.offset) + " + " + std::to_string(nbytes) +
                     ") run past the end of the data section (" + std::to_string(data_size) + " bytes)");
    t.bytes = std::span<const uint8_t>(data + g.data_offset + t.offset, static_cast<size_t>(nbytes));
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(g.tensors[a].offset, a) < std::tie(g.tensors[b].offset, b);
  });
  // In offset order, no tensor may start before the end of the last non-empty one before it.
  const GgufTensor* last = nullptr;
  for (size_t k : order) {
    const GgufTensor& cur = g.tensors[k];
    if (cur.bytes.empty()) continue;
    if (last && cur.offset < last->offset + last->bytes.size())
      fail(what, "tensors '" + printable(last->name) + "' and '" + printable(cur.name) + "' overlap");
    last = &cur;
  }
  return g;
}

std::vector<uint8_t> encode_gguf(const Gguf& g) {
  const std::string cannot = "cannot encode GGUF: ";
  if (g.version != 2 && g.version != 3) throw Error(cannot + "version " + std::to_string(g.version));
  if (!is_power_of_two(g.alignment) || g.alignment > (1u << 31))
    throw Error(cannot + "alignment " + std::to_string(g.alignment) + " is not a power of two");
  const GgufValue* a = g.find(kAlignmentKey);
  const uint64_t declared = a ? static_cast<uint64_t>(a->ints.empty() ? 0 : a->ints[0]) : kDefaultAlignment;
  if ((a && a->type != GgufType::kU32) || declared != g.alignment)
    throw Error(cannot + "general.alignment does not match the alignment " + std::to_string(g.alignment));
  std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
  put<uint32_t>(out, g.version);
  put<uint64_t>(out, g.tensors.size());
  put<uint64_t>(out, g.metadata.size());
  std::set<std::string> keys;
  for (const auto& [key, v] : g.metadata) {
    if (!keys.insert(key).second) throw Error(cannot + "duplicate key '" + printable(key) + "'");
    put_str(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(v.type));
    if (v.is_array()) {
      if (v.elem == GgufType::kArray) throw Error(cannot + "'" + printable(key) + "' is an array of arrays");
      put<uint32_t>(out, static_cast<uint32_t>(v.elem));
      put<uint64_t>(out, v.size());
      for (size_t i = 0; i < v.size(); ++i) put_scalar(out, v.elem, v, i);
    } else {
      if (v.size() != 1) throw Error(cannot + "'" + printable(key) + "' is a scalar without one value");
      put_scalar(out, v.type, v, 0);
    }
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const GgufTensor& t : g.tensors) {
    const std::string where = cannot + "tensor '" + printable(t.name) + "'";
    if (!names.insert(t.name).second) throw Error(where + ": duplicate name");
    if (t.name.size() > kMaxNameBytes) throw Error(where + ": name too long");
    if (t.shape.size() > kMaxRank) throw Error(where + ": more than 4 dimensions");
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    if (!ti) throw Error(where + ": unknown type " + std::to_string(t.type));
    int64_t n = 0;
    if (!io_detail::checked_numel(t.shape, &n) || (!t.shape.empty() && t.shape.back() % ti->block != 0) ||
        (t.shape.empty() && ti->block != 1) ||
        static_cast<uint64_t>(n / ti->block) * ti->block_bytes != t.bytes.size())
      throw Error(where + ": " + std::to_string(t.bytes.size()) + " bytes do not hold " + ti->name + " " +
                  shape_string(t.shape));
    put_str(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      put<uint64_t>(out, static_cast<uint64_t>(*it));
    put<uint32_t>(out, t.type);
    put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset += (t.bytes.size() + g.alignment - 1) / g.alignment * g.alignment;
  }
  out.resize((out.size() + g.alignment - 1) / g.alignment * g.alignment, 0);
  const size_t base = out.size();
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    out.resize(base + offsets[i], 0);
    out.insert(out.end(), g.tensors[i].bytes.begin(), g.tensors[i].bytes.end());
  }
  return out;
}

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[4] = {};
  const bool yes = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  std::fclose(f);
  return yes;
}

}  // namespace sparse24
