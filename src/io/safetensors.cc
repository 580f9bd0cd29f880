// safetensors reader and writer (format of huggingface/safetensors): u64 LE header length N, N bytes of
// JSON header, then the data buffer the header's data_offsets point into.
#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "io_util.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

using io_detail::fail;
using io_detail::printable;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "the safetensors code assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr size_t kMaxRank = 64;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeInfo {
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {{"BOOL", 1}, {"U8", 1},   {"I8", 1},  {"I16", 2},     {"U16", 2},
                                 {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},
                                 {"F64", 8},  {"I64", 8},  {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

// 0 for an unknown name.
size_t dtype_size_or_0(const std::string& name) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) return d.size;
  return 0;
}

// A valid header nests at most 3 deep: the top object, a tensor entry, its shape array. Checked on the raw
// text before parsing, so hostile nesting never becomes a deep tree.
bool nesting_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // skip the escaped character
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

// Parses the header, refusing duplicate keys in any object (nlohmann keeps the last silently, which would let
// two entries for one tensor name pass unnoticed).
json parse_header(std::string_view text, const std::string& what) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool has_duplicate = false;
  auto on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && !has_duplicate) {
        has_duplicate = true;
        duplicate = key;
      }
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    // e.what() quotes the input, which may be binary: report the position only.
    const auto* pe = dynamic_cast<const json::parse_error*>(&e);
    fail(what, "header is not valid JSON" + (pe ? " (error at byte " + std::to_string(pe->byte) + ")" : ""));
  }
  if (has_duplicate) fail(what, "header has a duplicate key '" + printable(duplicate) + "'");
  return j;
}

// A non-negative JSON integer, or an Error naming `field`.
uint64_t get_count(const json& v, const std::string& what, const std::string& field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    if (v.get<int64_t>() < 0) fail(what, field + " is negative");
    return static_cast<uint64_t>(v.get<int64_t>());
  }
  fail(what, field + " is not an integer");
}

struct Record {
  std::string name;
  StTensor tensor;  // dtype and shape; the bytes stay in the buffer (see parse_safetensors_view)
  uint64_t begin = 0, end = 0;
};

Record parse_entry(const std::string& name, const json& entry, uint64_t data_size, const std::string& what) {
  const std::string where = "tensor '" + printable(name) + "'";
  if (!entry.is_object()) fail(what, where + " is not a JSON object");
  for (const auto& [key, value] : entry.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(what, where + " has an unexpected key '" + printable(key) + "'");
  Record r;
  r.name = name;

  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) fail(what, where + " has no string 'dtype'");
  r.tensor.dtype = dtype->get<std::string>();
  const size_t elem = dtype_size_or_0(r.tensor.dtype);
  if (elem == 0) fail(what, where + " has unknown dtype '" + printable(r.tensor.dtype) + "'");

  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) fail(what, where + " has no array 'shape'");
  if (shape->size() > kMaxRank)
    fail(what, where + " has more than " + std::to_string(kMaxRank) + " dimensions");
  for (const json& d : *shape) {
    uint64_t dim = get_count(d, what, where + " shape dimension");
    if (dim > static_cast<uint64_t>(INT64_MAX)) fail(what, where + " shape dimension is too large");
    r.tensor.shape.push_back(static_cast<int64_t>(dim));
  }
  int64_t nbytes = 0;
  if (!io_detail::checked_nbytes(r.tensor.shape, elem, &nbytes))
    fail(what, where + " shape " + shape_string(r.tensor.shape) + " is too large");

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2)
    fail(what, where + " has no 'data_offsets' [begin, end]");
  r.begin = get_count((*offsets)[0], what, where + " data_offsets begin");
  r.end = get_count((*offsets)[1], what, where + " data_offsets end");
  if (r.begin > r.end)
    fail(what, where + " data_offsets [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                   "] end before they begin");
  if (r.end > data_size)
    fail(what, where + " data_offsets end " + std::to_string(r.end) + " is past the end of the data (" +
                   std::to_string(data_size) + " bytes)");
  if (r.end - r.begin != static_cast<uint64_t>(nbytes))
    fail(what, where + " has " + std::to_string(r.end - r.begin) + " bytes but " + r.tensor.dtype + " " +
                   shape_string(r.tensor.shape) + " needs " + std::to_string(nbytes));
  return r;
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& what) {
  if (!m.is_object()) fail(what, "__metadata__ is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) fail(what, "__metadata__ value for '" + printable(key) + "' is not a string");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

}  // namespace

size_t st_dtype_size(const std::string& dtype) {
  size_t n = dtype_size_or_0(dtype);
  if (n == 0) throw Error("unknown safetensors dtype '" + printable(dtype) + "'");
  return n;
}

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI8:
      return "I8";
  }
  throw Error("invalid DType");
}

DType dtype_from_st(const std::string& dtype) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8})
    if (dtype == st_dtype_name(t)) return t;
  throw Error("safetensors dtype '" + printable(dtype) +
              "' is not supported here (supported: F32, F16, BF16, I8)");
}

StTensor to_st(const Tensor& t) { return StTensor{st_dtype_name(t.dtype), t.shape, t.bytes}; }

Tensor from_st(const StTensor& st, const std::string& what) {
  Tensor t;
  try {
    t.dtype = dtype_from_st(st.dtype);
  } catch (const Error& e) {
    fail(what, e.what());
  }
  int64_t nbytes = 0;
  if (!io_detail::checked_nbytes(st.shape, dtype_size(t.dtype), &nbytes) ||
      static_cast<uint64_t>(nbytes) != st.bytes.size())
    fail(what, "shape " + shape_string(st.shape) + " does not match " + std::to_string(st.bytes.size()) +
                   " bytes of data");
  t.shape = st.shape;
  t.bytes = st.bytes;
  return t;
}

const StTensor* SafeTensors::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const StTensor& SafeTensors::at(const std::string& name) const {
  const StTensor* t = find(name);
  if (!t) throw Error("no tensor '" + printable(name) + "'");
  return *t;
}

void SafeTensors::add(const std::string& name, StTensor t) {
  if (name == kMetadataKey) throw Error("'__metadata__' is reserved and cannot name a tensor");
  if (find(name)) throw Error("duplicate tensor name '" + printable(name) + "'");
  tensors.emplace_back(name, std::move(t));
}

SafeTensorsView parse_safetensors_view(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 8)
    fail(what, "too short to be a safetensors file (" + std::to_string(size) + " bytes, need at least 8)");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(data[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes)
    fail(what, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > size - 8)
    fail(what, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  std::string_view text(reinterpret_cast<const char*>(data + 8), header_len);
  // nlohmann's lexer takes a NUL byte for the end of input, which would let anything follow it.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(what, "header is not valid JSON (NUL byte at byte " + std::to_string(nul) + ")");
  if (!nesting_within(text, 3)) fail(what, "header JSON is nested too deeply");
  const json header = parse_header(text, what);
  if (!header.is_object()) fail(what, "header is not a JSON object");

  const uint8_t* buffer = data + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  SafeTensorsView out;
  std::vector<Record> records;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey)
      out.metadata = parse_metadata(entry, what);
    else
      records.push_back(parse_entry(name, entry, data_size, what));
  }

  // In data order; then no tensor may start before the previous one ends.
  std::sort(records.begin(), records.end(), [](const Record& a, const Record& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  for (size_t i = 1; i < records.size(); ++i) {
    const Record& prev = records[i - 1];
    const Record& cur = records[i];
    if (cur.begin < prev.end)
      fail(what, "tensors '" + printable(prev.name) + "' [" + std::to_string(prev.begin) + ", " +
                     std::to_string(prev.end) + ") and '" + printable(cur.name) + "' [" +
                     std::to_string(cur.begin) + ", " + std::to_string(cur.end) + ") overlap");
  }

  // Everything is validated: the spans lie inside the data buffer.
  out.tensors.reserve(records.size());
  for (Record& r : records) {
    StTensorView v{std::move(r.tensor.dtype), std::move(r.tensor.shape),
                   std::span<const uint8_t>(buffer + r.begin, static_cast<size_t>(r.end - r.begin))};
    out.tensors.emplace_back(std::move(r.name), std::move(v));
  }
  return out;
}

SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& what) {
  SafeTensorsView view = parse_safetensors_view(data, size, what);
  // Copying is bounded by the file size (the tensors do not overlap).
  SafeTensors out;
  out.metadata = std::move(view.metadata);
  out.tensors.reserve(view.tensors.size());
  for (auto& [name, v] : view.tensors) out.tensors.emplace_back(std::move(name), v.copy());
  return out;
}

SafeTensors read_safetensors(const std::string& path) {
  MappedFile file(path);
  return parse_safetensors(file.data(), file.size(), path);
}

const StTensorView* SafeTensorsView::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

namespace {

// The file's first part: the header's length (8 bytes, little-endian), then the header, padded.
std::string encoded_header(const SafeTensors& st) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!st.metadata.empty()) {
    auto& m = header[kMetadataKey] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : st.metadata) m[k] = v;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : st.tensors) {
    const std::string where = "cannot encode safetensors: tensor '" + printable(name) + "'";
    if (name == kMetadataKey) throw Error(where + ": the name is reserved");
    if (header.contains(name)) throw Error(where + ": duplicate name");
    const size_t elem = dtype_size_or_0(t.dtype);
    if (elem == 0) throw Error(where + ": unknown dtype '" + printable(t.dtype) + "'");
    int64_t nbytes = 0;
    if (!io_detail::checked_nbytes(t.shape, elem, &nbytes) || static_cast<uint64_t>(nbytes) != t.bytes.size())
      throw Error(where + ": shape " + shape_string(t.shape) + " does not match " +
                  std::to_string(t.bytes.size()) + " bytes of data");
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception&) {
    throw Error("cannot encode safetensors: a tensor name or metadata string is not valid UTF-8");
  }
  // The reference implementation pads with spaces so the data buffer starts 8-byte aligned
  // (SafeTensors::align more).
  const size_t align = st.align;
  if (align < 8 || (align & (align - 1)) != 0 || align > 4096)
    throw Error("cannot encode safetensors: alignment " + std::to_string(align));
  text.append((align - (8 + text.size()) % align) % align, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text;
}

}  // namespace

std::vector<uint8_t> encode_safetensors(const SafeTensors& st) {
  const std::string head = encoded_header(st);
  size_t size = head.size();
  for (const auto& [name, t] : st.tensors) size += t.bytes.size();
  std::vector<uint8_t> out;
  out.reserve(size);
  out.insert(out.end(), head.begin(), head.end());
  for (const auto& [name, t] : st.tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

// The header, then each tensor's bytes where they are: the file is never a second copy in memory.
void write_safetensors(const std::string& path, const SafeTensors& st) {
  const std::string head = encoded_header(st);
  std::vector<std::string_view> pieces = {head};
  for (const auto& [name, t] : st.tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  write_file_atomic(path, pieces);
}

}  // namespace sparse24
