// compressed-tensors 'sparse-24-bitmask' <-> the compressed 2:4 format (see bitmask24.h). Both keep exactly
// two positions per group and store the kept values in position order, so the values bytes are identical and
// only the position encoding differs (2 bits of an 8-column bitmask byte vs a 4-bit metadata code).
#include "sparse24/bitmask24.h"

#include <bit>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io_util.h"
#include "sparse24/error.h"
#include "sparse24/pattern.h"

namespace sparse24 {
namespace {

using io_detail::fail;
using io_detail::printable;
using json = nlohmann::json;

// Reads the [[rows], [cols]] shape tensor: I64 or I32, shape [2, 1] or [2].
std::pair<int64_t, int64_t> read_shape_tensor(const StTensorView& t, const std::string& name,
                                              const std::string& what) {
  const std::string where = "tensor '" + printable(name) + "'";
  size_t elem = 0;
  if (t.dtype == "I64")
    elem = 8;
  else if (t.dtype == "I32")
    elem = 4;
  else
    fail(what, where + " has dtype " + printable(t.dtype) + ", expected I64 (or I32)");
  if (t.shape != std::vector<int64_t>{2, 1} && t.shape != std::vector<int64_t>{2})
    fail(what, where + " has shape " + shape_string(t.shape) + ", expected [2, 1] ([[rows], [cols]])");
  if (t.bytes.size() != 2 * elem)
    fail(what, where + " has " + std::to_string(t.bytes.size()) + " bytes of data");
  int64_t dims[2];
  for (int i = 0; i < 2; ++i) {
    uint64_t u = 0;
    for (size_t b = 0; b < elem; ++b) u |= static_cast<uint64_t>(t.bytes[i * elem + b]) << (8 * b);
    if (elem == 4) u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(u)));  // sign-extend
    dims[i] = static_cast<int64_t>(u);
  }
  if (dims[0] < 0 || dims[1] <= 0)
    fail(what, where + " holds [" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) +
                   "]: rows must be >= 0 and cols > 0");
  if (dims[1] % 4 != 0)
    fail(what, where + " holds " + std::to_string(dims[1]) +
                   " columns; sparse-24-bitmask needs a multiple of 4 (groups of 4 along each row)");
  int64_t numel = 0;
  if (__builtin_mul_overflow(dims[0], dims[1], &numel) || numel > INT64_MAX / 8)
    fail(what, where + " holds [" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) +
                   "], which is too large");
  return {dims[0], dims[1]};
}

void expect_tensor(const StTensorView& t, const std::string& name, const std::string& dtype,
                   const std::vector<int64_t>& shape, const std::string& what) {
  if (t.dtype != dtype)
    fail(what, "tensor '" + printable(name) + "' has dtype " + printable(t.dtype) + ", expected " + dtype);
  if (t.shape != shape)
    fail(what, "tensor '" + printable(name) + "' has shape " + shape_string(t.shape) + ", expected " +
                   shape_string(shape));
  // Views from parse_safetensors_view always match; a hand-made view might not.
  if (t.bytes.size() != static_cast<size_t>(shape[0] * shape[1]) * st_dtype_size(dtype))
    fail(what, "tensor '" + printable(name) + "' has " + std::to_string(t.bytes.size()) + " bytes of data");
}

std::string column_range(int64_t g) { return std::to_string(4 * g) + ".." + std::to_string(4 * g + 3); }

json string_list(const std::vector<std::string>& v) {
  json a = json::array();
  for (const auto& s : v) a.push_back(s);
  return a;
}

std::vector<std::string> read_string_list(const json& sc, const char* key, const std::string& what) {
  std::vector<std::string> out;
  auto it = sc.find(key);
  if (it == sc.end() || it->is_null()) return out;
  if (!it->is_array()) fail(what, std::string("sparsity_config '") + key + "' is not a list of strings");
  for (const json& v : *it) {
    if (!v.is_string()) fail(what, std::string("sparsity_config '") + key + "' is not a list of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

json parse_config_object(std::string_view text, const std::string& what) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    const auto* pe = dynamic_cast<const json::parse_error*>(&e);
    fail(what, "not valid JSON" + (pe ? " (error at byte " + std::to_string(pe->byte) + ")" : ""));
  }
  if (!j.is_object()) fail(what, "not a JSON object");
  return j;
}

}  // namespace

std::string bitmask24_prefix(const std::string& weight_name) {
  static const std::string kSuffix = ".weight";
  if (weight_name.size() >= kSuffix.size() &&
      weight_name.compare(weight_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0)
    return weight_name.substr(0, weight_name.size() - kSuffix.size());
  return weight_name;
}

bool bitmask24_representable(const Compressed& c) {
  return c.shape.size() == 2 && c.cols > 0 && c.cols % 4 == 0 && c.scale_group == 0;
}

Bitmask24Tensors to_bitmask24(const Compressed& c) {
  validate(c);
  if (!bitmask24_representable(c))
    throw Error("sparse-24-bitmask holds 2-D weights whose column count is a multiple of 4, not " +
                shape_string(c.shape));
  const int64_t groups = c.groups_per_row();
  const int64_t mask_cols = (c.cols + 7) / 8;
  Bitmask24Tensors out;
  out.compressed = StTensor{st_dtype_name(c.dtype), {c.rows, c.cols / 2}, c.values};
  out.bitmask =
      StTensor{"U8", {c.rows, mask_cols}, std::vector<uint8_t>(static_cast<size_t>(c.rows * mask_cols))};
  for (int64_t r = 0; r < c.rows; ++r) {
    uint8_t* row = out.bitmask.bytes.data() + r * mask_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t code = c.code(r, g);
      for (int p : {code & 3, (code >> 2) & 3}) {
        const int64_t col = 4 * g + p;
        row[col / 8] = static_cast<uint8_t>(row[col / 8] | (1u << (col % 8)));
      }
    }
  }
  out.shape.dtype = "I64";
  out.shape.shape = {2, 1};
  for (int64_t d : {c.rows, c.cols})
    for (int b = 0; b < 8; ++b)
      out.shape.bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(d) >> (8 * b)));
  return out;
}

Compressed from_bitmask24(const StTensorView& compressed, const StTensorView& bitmask,
                          const StTensorView& shape, const std::string& prefix, const std::string& what) {
  const std::string cname = prefix + ".compressed", bname = prefix + ".bitmask", sname = prefix + ".shape";
  const auto [rows, cols] = read_shape_tensor(shape, sname, what);

  Compressed c;
  try {
    c.dtype = dtype_from_st(compressed.dtype);
  } catch (const Error& e) {
    fail(what, "tensor '" + printable(cname) + "': " + e.what());
  }
  c.shape = {rows, cols};
  c.rows = rows;
  c.cols = cols;
  const int64_t mask_cols = (cols + 7) / 8;
  expect_tensor(compressed, cname, compressed.dtype, {rows, cols / 2}, what);
  expect_tensor(bitmask, bname, "U8", {rows, mask_cols}, what);

  // Every group keeps exactly two positions; each becomes its metadata code.
  const int64_t groups = c.groups_per_row();
  c.metadata.assign(static_cast<size_t>(rows * c.meta_bytes_per_row()), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = bitmask.bytes.data() + r * mask_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const unsigned nibble = (row[g / 2] >> (4 * (g & 1))) & 0xFu;  // columns 4g..4g+3: 8 per byte
      const int set = std::popcount(nibble);
      if (set != 2)
        fail(what, "tensor '" + printable(bname) + "' row " + std::to_string(r) + ", group " +
                       std::to_string(g) + " (columns " + column_range(g) + ") has " + std::to_string(set) +
                       (set == 1 ? " bit" : " bits") + " set; sparse-24-bitmask keeps exactly 2 of every 4");
      const int p0 = std::countr_zero(nibble);
      const int p1 = std::countr_zero(nibble & (nibble - 1));
      const uint8_t code = static_cast<uint8_t>(p0 | p1 << 2);
      c.metadata[static_cast<size_t>(r * c.meta_bytes_per_row() + g / 2)] |=
          static_cast<uint8_t>((g & 1) ? code << 4 : code);
    }
    // cols is a multiple of 4, so only a last half byte can be padding.
    if (cols % 8 != 0 && (row[mask_cols - 1] >> 4) != 0)
      fail(what, "tensor '" + printable(bname) + "' row " + std::to_string(r) + " has bits set past column " +
                     std::to_string(cols - 1));
  }
  c.values.assign(compressed.bytes.begin(), compressed.bytes.end());
  try {
    validate(c);
  } catch (const Error& e) {
    fail(what, "layer '" + printable(prefix) + "': " + e.what());
  }
  return c;
}

std::vector<std::string> find_bitmask24_layers(const SafeTensorsView& st, const std::string& what) {
  static const std::string kSuffix = ".bitmask";
  std::vector<std::string> out;
  for (const auto& [name, t] : st.tensors) {
    if (name.size() <= kSuffix.size() ||
        name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    std::string prefix = name.substr(0, name.size() - kSuffix.size());
    if (st.find(prefix + ".row_offsets"))
      fail(
          what,
          "layer '" + printable(prefix) +
              "' is in the unstructured 'sparse-bitmask' layout (it has row_offsets), not sparse-24-bitmask");
    out.push_back(std::move(prefix));
  }
  return out;
}

Compressed read_bitmask24_layer(const SafeTensorsView& st, const std::string& prefix,
                                const std::string& what) {
  const StTensorView* parts[3];
  const char* suffixes[3] = {".compressed", ".bitmask", ".shape"};
  for (int i = 0; i < 3; ++i) {
    parts[i] = st.find(prefix + suffixes[i]);
    if (!parts[i])
      fail(what, "sparse-24-bitmask layer '" + printable(prefix) + "' has no tensor '" +
                     printable(prefix + suffixes[i]) + "'");
  }
  return from_bitmask24(*parts[0], *parts[1], *parts[2], prefix, what);
}

std::optional<SparsityConfig> parse_sparsity_config(std::string_view config_json, const std::string& what) {
  const json j = parse_config_object(config_json, what);
  auto qc = j.find("quantization_config");
  if (qc == j.end() || qc->is_null()) return std::nullopt;
  if (!qc->is_object()) fail(what, "quantization_config is not a JSON object");
  auto sc = qc->find("sparsity_config");
  if (sc == qc->end() || sc->is_null()) return std::nullopt;
  if (!sc->is_object()) fail(what, "quantization_config.sparsity_config is not a JSON object");
  SparsityConfig out;
  auto format = sc->find("format");
  if (format == sc->end() || !format->is_string()) fail(what, "sparsity_config has no string 'format'");
  out.format = format->get<std::string>();
  auto structure = sc->find("sparsity_structure");
  if (structure != sc->end() && !structure->is_null()) {
    if (!structure->is_string()) fail(what, "sparsity_config 'sparsity_structure' is not a string");
    out.sparsity_structure = structure->get<std::string>();
  } else {
    out.sparsity_structure = "unstructured";  // the reference library's default
  }
  out.targets = read_string_list(*sc, "targets", what);
  out.ignore = read_string_list(*sc, "ignore", what);
  auto gs = sc->find("global_sparsity");
  if (gs != sc->end() && !gs->is_null()) {
    if (!gs->is_number()) fail(what, "sparsity_config 'global_sparsity' is not a number");
    out.global_sparsity = gs->get<double>();
  }
  return out;
}

std::string with_sparsity_config(std::string_view config_json, const std::optional<SparsityConfig>& sc,
                                 const std::string& what) {
  json j = parse_config_object(config_json, what);
  auto qc = j.find("quantization_config");
  if (qc != j.end() && !qc->is_null() && !qc->is_object())
    fail(what, "quantization_config is not a JSON object");
  if (sc) {
    json& q = j["quantization_config"];
    if (q.is_null()) q = json{{"quant_method", "compressed-tensors"}};
    q["sparsity_config"] = json{{"format", sc->format},
                                {"global_sparsity", sc->global_sparsity},
                                {"ignore", string_list(sc->ignore)},
                                {"sparsity_structure", sc->sparsity_structure},
                                {"targets", string_list(sc->targets)}};
  } else if (qc != j.end() && qc->is_object()) {
    qc->erase("sparsity_config");
    if (qc->empty() || (qc->size() == 1 && qc->contains("quant_method"))) j.erase("quantization_config");
  }
  try {
    return j.dump(2) + "\n";
  } catch (const json::exception&) {
    fail(what, "a string in the config is not valid UTF-8");
  }
}

}  // namespace sparse24
