// Whole checkpoints in the dense, sparse24 and sparse-24-bitmask layouts (see checkpoint.h).
#include "sparse24/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../kernels/lanes_stored.h"
#include "io_util.h"
#include "sparse24/bitmask24.h"
#include "sparse24/error.h"
#include "sparse24/mask.h"
#include "sparse24/pattern.h"

namespace sparse24 {
namespace {

using io_detail::fail;
using io_detail::float_bytes;
using io_detail::parse_scale_group;
using io_detail::parse_shape_text;
using io_detail::printable;
using io_detail::products_fit;

constexpr const char* kFormatKey = "sparse24.format";
constexpr const char* kFormatValue = "checkpoint";
constexpr const char* kPatternKey = "sparse24.pattern";
constexpr const char* kValuesSuffix = ".values";
constexpr const char* kMetadataSuffix = ".metadata";
constexpr const char* kShapeSuffix = ".shape";
constexpr const char* kScalesSuffix = ".scales";           // scaled int8 values: F32 [rows, scales per row]
constexpr const char* kScaleGroupSuffix = ".scale_group";  // __metadata__: positions per scale
constexpr const char* kLanesSuffix = ".lanes";             // a layer in the kernels' layout: U8 [bytes]
constexpr const char* kLanesDtypeSuffix = ".lanes_dtype";  // __metadata__: its values' type
constexpr const char* kLanesKbSuffix = ".lanes_kb";        // __metadata__: its K block
// The largest scale group of a dense I8 matrix with rows of `cols`: the row padded to a multiple of 4, or 64
// for a shorter row (one scale per row: the decoder's int8 tables have one per 64 positions whatever the row
// length).
int64_t max_dense_group(int64_t cols) { return std::max<int64_t>((cols + 3) / 4 * 4, 64); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The dense shape of sparse24 layer <name>: its __metadata__ "<name>.shape", checked.
std::vector<int64_t> sparse24_shape(const std::string& name, const std::string& shape_text,
                                    const std::string& what) {
  const std::string layer = "sparse24 layer '" + printable(name) + "'";
  std::vector<int64_t> shape;
  if (!parse_shape_text(shape_text, &shape) || !products_fit(shape))
    fail(what, layer + ": __metadata__ '" + printable(name + kShapeSuffix) + "' is '" +
                   printable(shape_text) + "', not a shape like [64, 128]");
  MatrixView view;
  try {
    view = matrix_view(shape);
  } catch (const Error& e) {
    fail(what, layer + ": shape " + shape_string(shape) + ": " + e.what());
  }
  if (view.cols <= 0 || view.cols > INT64_MAX - 8)
    fail(what, layer + ": shape " + shape_string(shape) + " is not usable");
  return shape;
}

// The scale group of sparse24 layer <name> of that shape: 0 without a __metadata__ "<name>.scale_group",
// else its value, checked.
int64_t sparse24_scale_group(const SafeTensorsView& st, const std::string& name,
                             const std::vector<int64_t>& shape, const std::string& what) {
  const auto it = st.metadata.find(name + kScaleGroupSuffix);
  if (it == st.metadata.end()) return 0;
  int64_t g = 0;
  if (!parse_scale_group(it->second, (matrix_view(shape).cols + 3) / 4, &g))
    fail(what, "sparse24 layer '" + printable(name) + "': __metadata__ '" +
                   printable(name + kScaleGroupSuffix) + "' is '" + printable(it->second) +
                   "', not a positive multiple of 4 up to the padded row length");
  return g;
}

// One sparse24 layer "<name>.values" + "<name>.metadata" (+ "<name>.scales") of that shape, decoded and
// validated.
Compressed read_sparse24_layer(const SafeTensorsView& st, const std::string& name,
                               const std::vector<int64_t>& shape, int64_t scale_group,
                               const std::string& what) {
  const std::string layer = "sparse24 layer '" + printable(name) + "'";
  try {
    return compressed_from_st(st, name, shape, std::nullopt, scale_group);
  } catch (const Error& e) {
    fail(what, layer + ": " + e.what());
  }
}

// The K block of a sparse24 layer <name> stored in the kernels' layout (__metadata__ "<name>.lanes_kb"), its
// values' type (__metadata__ "<name>.lanes_dtype") and its bytes (tensor "<name>.lanes": U8, 1-D, as many
// bytes as that layout of the shape holds), checked.
int lanes_layer(const SafeTensorsView& st, const std::string& name, const std::vector<int64_t>& shape,
                const std::string& kb_text, const std::string& what, kernels::ValueType* type,
                std::span<const uint8_t>* bytes) {
  const std::string layer = "sparse24 layer '" + printable(name) + "'";
  const auto dtype = st.metadata.find(name + kLanesDtypeSuffix);
  if (dtype == st.metadata.end() || !kernels::parse_lanes_type(dtype->second, type))
    fail(what, layer + ": __metadata__ '" + printable(name + kLanesDtypeSuffix) + "' is " +
                   (dtype == st.metadata.end() ? "missing" : "'" + printable(dtype->second) + "'") +
                   ", expected F32, BF16 or I8");
  int64_t kb = 0;  // (the scale group's digits: a positive multiple of 4 up to 2^20, then the layout's rule)
  if (!parse_scale_group(kb_text, (1 << 20) / 4, &kb) || !kernels::valid_lanes_kb(kb))
    fail(what, layer + ": __metadata__ '" + printable(name + kLanesKbSuffix) + "' is '" + printable(kb_text) +
                   "', not a positive multiple of 64 up to 1048576");
  for (const char* other : {kValuesSuffix, kMetadataSuffix, kScalesSuffix})
    if (st.find(name + other))
      fail(what, layer + ": stored both in the kernels' layout and as '" + printable(name + other) + "'");
  if (st.metadata.count(name + kScaleGroupSuffix))
    fail(what, layer + ": the kernels' layout holds its scales; a '" + printable(name + kScaleGroupSuffix) +
                   "' key is not allowed");
  const MatrixView v = matrix_view(shape);
  const StTensorView* t = st.find(name + kLanesSuffix);
  const uint64_t want = kernels::lanes_bytes(v.rows, v.cols, *type);
  if (v.rows <= 0 || t->dtype != "U8" || t->shape.size() != 1 || t->bytes.size() != want)
    fail(what, "tensor '" + printable(name + kLanesSuffix) + "' is " + printable(t->dtype) + " " +
                   shape_string(t->shape) + ", expected U8 [" + std::to_string(want) + "] for shape " +
                   shape_string(shape));
  *bytes = t->bytes;
  return static_cast<int>(kb);
}

// The matrix a checked lanes layer holds (its shape as stored).
Compressed unpack_lanes_layer(std::span<const uint8_t> bytes, const std::vector<int64_t>& shape, int kb,
                              kernels::ValueType type, const std::string& name, const std::string& what) {
  const MatrixView v = matrix_view(shape);
  try {
    Compressed c =
        kernels::unpack_lanes(kernels::lanes_over(bytes, v.rows, v.cols, kb, type, nullptr), v.rows, v.cols);
    c.shape = shape;
    return c;
  } catch (const Error& e) {
    fail(what, "sparse24 layer '" + printable(name) + "': " + e.what());
  }
}

// The scales of dense tensor <name> (`d`) that __metadata__ "<name>.scale_group" (`group_text`) gives it:
// an I8 matrix [rows, cols], a valid group, tensor "<name>.scales" F32 [rows, ceil(cols / group)], every
// scale finite. Its group; the scales' view in *scales.
int64_t scaled_dense(const SafeTensorsView& st, const std::string& name, const StTensorView& d,
                     const std::string& group_text, const std::string& what, const StTensorView** scales) {
  const std::string tensor = "tensor '" + printable(name) + "'", key = printable(name + kScaleGroupSuffix);
  if (d.dtype != "I8" || d.shape.size() != 2)
    fail(what, tensor + ": __metadata__ '" + key + "' gives it scales, but it is " + printable(d.dtype) +
                   " " + shape_string(d.shape) + ", not an I8 matrix");
  int64_t g = 0;
  if (!parse_scale_group(group_text, max_dense_group(d.shape[1]) / 4, &g))
    fail(what, tensor + ": __metadata__ '" + key + "' is '" + printable(group_text) +
                   "', not a positive multiple of 4 up to the padded row length (or 64)");
  const std::string sname = name + kScalesSuffix;
  const std::vector<int64_t> sshape{d.shape[0], (d.shape[1] + g - 1) / g};
  *scales = st.find(sname);
  if (*scales == nullptr) fail(what, tensor + ": its scales '" + printable(sname) + "' are missing");
  if ((*scales)->dtype != "F32" || (*scales)->shape != sshape)
    fail(what, "tensor '" + printable(sname) + "' is " + printable((*scales)->dtype) + " " +
                   shape_string((*scales)->shape) + ", expected F32 " + shape_string(sshape));
  const std::span<const uint8_t> b = (*scales)->bytes;
  for (size_t i = 0; i < b.size() / sizeof(float); ++i) {
    float x;
    std::memcpy(&x, b.data() + i * sizeof(float), sizeof(float));
    if (!std::isfinite(x))
      fail(what, "tensor '" + printable(sname) + "': scale " + std::to_string(i % sshape[1]) + " of row " +
                     std::to_string(i / sshape[1]) + " is not finite");
  }
  return g;
}

// A scaled I8 tensor's scales per row, once its fields are checked (as the reader checks a file's).
int64_t scales_per_row(const CheckpointTensor& t) {
  const std::vector<int64_t>& s = t.dense.shape;
  const int64_t g = t.scale_group;
  if (t.dense.dtype != "I8" || s.size() != 2 || s[0] < 0 || s[1] < 0 || g <= 0 || g % 4 != 0 ||
      g > max_dense_group(s[1]) || t.dense.bytes.size() != static_cast<size_t>(s[0] * s[1]) ||
      t.scales.size() != static_cast<size_t>(s[0] * ((s[1] + g - 1) / g)) ||
      !std::all_of(t.scales.begin(), t.scales.end(), [](float x) { return std::isfinite(x); }))
    throw Error("tensor '" + printable(t.name) + "': not an I8 matrix with a finite scale per " +
                std::to_string(g) + " of a row");
  return (s[1] + g - 1) / g;
}

int dtype_rank(const std::string& dtype) {
  // The reference writer's Dtype enum order (ascending alignment); it sorts by it descending.
  static const char* kOrder[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                 "BF16", "I32", "U32", "F32",     "F64",     "I64", "U64"};
  for (int i = 0; i < static_cast<int>(std::size(kOrder)); ++i)
    if (dtype == kOrder[i]) return i;
  return -1;
}

bool is_float_st(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

}  // namespace

CheckpointFormat parse_checkpoint_format(const std::string& text) {
  if (text == "dense") return CheckpointFormat::kDense;
  if (text == "sparse24") return CheckpointFormat::kSparse24;
  if (text == kBitmask24Format) return CheckpointFormat::kBitmask24;
  throw Error("unknown checkpoint format '" + printable(text) +
              "' (expected sparse24, sparse-24-bitmask or dense)");
}

const char* checkpoint_format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::kDense:
      return "dense";
    case CheckpointFormat::kSparse24:
      return "sparse24";
    case CheckpointFormat::kBitmask24:
      return kBitmask24Format;
  }
  throw Error("invalid CheckpointFormat");
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

int64_t Checkpoint::sparse_count() const {
  return std::count_if(tensors.begin(), tensors.end(),
                       [](const CheckpointTensor& t) { return t.sparse.has_value(); });
}

CheckpointTensor CheckpointTensorView::copy() && {
  if (decode) sparse = decode();
  CheckpointTensor t{std::move(name), sparse ? StTensor{} : dense.copy(), std::move(sparse)};
  t.lanes_kb = lanes_kb;
  t.scale_group = scale_group;
  t.scales.resize(scales.size() / sizeof(float));
  if (!scales.empty()) std::memcpy(t.scales.data(), scales.data(), scales.size());
  return t;
}

void dequantize_rows(const uint8_t* q, std::span<const uint8_t> scales, int64_t r0, int64_t n, int64_t cols,
                     int64_t group, float* out) {
  const int64_t per_row = (cols + group - 1) / group;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      float scale;
      std::memcpy(&scale, scales.data() + sizeof(float) * static_cast<size_t>((r0 + r) * per_row + k / group),
                  sizeof(float));
      out[r * cols + k] = static_cast<float>(static_cast<int8_t>(q[r * cols + k])) * scale;
    }
}

StTensor dequantized(const CheckpointTensor& t) {
  if (t.scale_group == 0) return t.dense;
  scales_per_row(t);  // (checked)
  const int64_t rows = t.dense.shape[0], cols = t.dense.shape[1];
  std::vector<float> v(static_cast<size_t>(rows * cols));
  dequantize_rows(t.dense.bytes.data(),
                  {reinterpret_cast<const uint8_t*>(t.scales.data()), t.scales.size() * sizeof(float)}, 0,
                  rows, cols, t.scale_group, v.data());
  return StTensor{"F32", t.dense.shape, float_bytes(v)};
}

CheckpointView read_checkpoint_view(const SafeTensorsView& st, const std::string& what, bool defer_sparse24) {
  CheckpointView ck;
  std::set<std::string> consumed;  // tensor names that belong to a sparse layer
  // name -> its entry, keyed by the file position of the layer's first tensor (to keep file order).
  std::vector<std::pair<size_t, CheckpointTensorView>> entries;
  auto position = [&](const std::string& tensor_name) {
    for (size_t i = 0; i < st.tensors.size(); ++i)
      if (st.tensors[i].first == tensor_name) return i;
    return st.tensors.size();
  };

  // sparse24 layers and scaled I8 matrices: only in a file carrying the marker.
  std::set<std::string> layout_keys;
  std::map<std::string, std::pair<int64_t, std::span<const uint8_t>>> scaled;  // name -> group, scales
  auto marker = st.metadata.find(kFormatKey);
  if (marker != st.metadata.end()) {
    if (marker->second != kFormatValue)
      fail(what, std::string("__metadata__ '") + kFormatKey + "' is '" + printable(marker->second) +
                     "', expected '" + kFormatValue + "'");
    auto pattern = st.metadata.find(kPatternKey);
    if (pattern != st.metadata.end() && pattern->second != "2:4")
      fail(what, std::string("__metadata__ '") + kPatternKey + "' is '" + printable(pattern->second) +
                     "'; only 2:4 is supported");
    layout_keys = {kFormatKey, kPatternKey};
    for (const auto& [key, value] : st.metadata) {
      if (!ends_with(key, kShapeSuffix)) continue;
      const std::string name = key.substr(0, key.size() - std::string(kShapeSuffix).size());
      const auto lanes_kb = st.metadata.find(name + kLanesKbSuffix);
      const bool lanes = lanes_kb != st.metadata.end() && st.find(name + kLanesSuffix);
      if (!st.find(name + kValuesSuffix) && !st.find(name + kMetadataSuffix) && !lanes)
        continue;  // someone else's key
      CheckpointTensorView t;
      t.name = name;
      const std::vector<int64_t> shape = sparse24_shape(name, value, what);
      if (lanes) {  // the kernels' layout
        kernels::ValueType type{};
        t.lanes_kb = lanes_layer(st, name, shape, lanes_kb->second, what, &type, &t.lanes);
        t.lanes_shape = shape;
        t.lanes_dtype = kernels::lanes_dtype(type);
        if (defer_sparse24)
          t.decode = [bytes = t.lanes, shape, kb = t.lanes_kb, type, name, what] {
            return unpack_lanes_layer(bytes, shape, kb, type, name, what);
          };
        else
          t.sparse = unpack_lanes_layer(t.lanes, shape, t.lanes_kb, type, name, what);
        consumed.insert(name + kLanesSuffix);
        layout_keys.insert(key);
        layout_keys.insert(name + kLanesKbSuffix);
        layout_keys.insert(name + kLanesDtypeSuffix);
        entries.emplace_back(position(name + kLanesSuffix), std::move(t));
        continue;
      }
      const int64_t scale_group = sparse24_scale_group(st, name, shape, what);
      std::vector<const char*> suffixes = {kValuesSuffix, kMetadataSuffix};
      if (scale_group > 0) suffixes.push_back(kScalesSuffix);
      if (defer_sparse24) {
        SafeTensorsView own;  // the layer's tensors (views), for decode to find by name
        for (const char* suffix : suffixes)
          if (const StTensorView* v = st.find(name + suffix)) {
            own.tensors.emplace_back(name + suffix, *v);
            t.stored.push_back(v->bytes);
          }
        t.decode = [own, name, shape, scale_group, what] {
          return read_sparse24_layer(own, name, shape, scale_group, what);
        };
        t.stored_layer = [own = std::move(own), name, shape, scale_group, what] {
          try {
            return stored_compressed(own, name, shape, std::nullopt, scale_group);
          } catch (const Error& e) {
            fail(what, "sparse24 layer '" + printable(name) + "': " + e.what());
          }
        };
      } else {
        t.sparse = read_sparse24_layer(st, name, shape, scale_group, what);
      }
      for (const char* suffix : suffixes) consumed.insert(name + suffix);
      layout_keys.insert(key);
      if (scale_group > 0) layout_keys.insert(name + kScaleGroupSuffix);
      entries.emplace_back(std::min(position(name + kValuesSuffix), position(name + kMetadataSuffix)),
                           std::move(t));
    }
    // Dense I8 matrices with scales: a "<name>.scale_group" key that no layer took, naming a dense tensor.
    for (const auto& [key, value] : st.metadata) {
      if (!ends_with(key, kScaleGroupSuffix) || layout_keys.count(key)) continue;
      const std::string name = key.substr(0, key.size() - std::string(kScaleGroupSuffix).size());
      const StTensorView* d = st.find(name);
      if (d == nullptr || consumed.count(name)) continue;  // someone else's key
      const StTensorView* scales = nullptr;
      const int64_t g = scaled_dense(st, name, *d, value, what, &scales);
      if (!consumed.insert(name + kScalesSuffix).second)
        fail(what, "tensor '" + printable(name + kScalesSuffix) + "' belongs to two layers");
      scaled[name] = {g, scales->bytes};
      layout_keys.insert(key);
    }
  }

  // sparse-24-bitmask layers.
  for (const std::string& prefix : find_bitmask24_layers(st, what)) {
    CheckpointTensorView t;
    t.name = prefix + ".weight";
    t.sparse = read_bitmask24_layer(st, prefix, what);
    size_t pos = st.tensors.size();
    for (const char* s : {".compressed", ".bitmask", ".shape"}) {
      if (!consumed.insert(prefix + s).second)
        fail(what, "tensor '" + printable(prefix + s) + "' belongs to two sparse layers");
      pos = std::min(pos, position(prefix + s));
    }
    entries.emplace_back(pos, std::move(t));
  }

  for (size_t i = 0; i < st.tensors.size(); ++i) {
    const auto& [name, v] = st.tensors[i];
    if (consumed.count(name)) continue;
    CheckpointTensorView t{name, v, std::nullopt, {}, {}, {}, 0, {}, 0, {}, {}, DType::kI8};
    if (const auto s = scaled.find(name); s != scaled.end()) std::tie(t.scale_group, t.scales) = s->second;
    entries.emplace_back(i, std::move(t));
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::set<std::string> names;
  for (auto& [pos, t] : entries) {
    if (!names.insert(t.name).second)
      fail(what,
           "tensor '" + printable(t.name) + "' is stored both dense and compressed (or twice compressed)");
    ck.tensors.push_back(std::move(t));
  }
  for (const auto& [key, value] : st.metadata)
    if (!layout_keys.count(key)) ck.metadata.emplace(key, value);
  return ck;
}

Checkpoint read_checkpoint(const SafeTensorsView& st, const std::string& what) {
  CheckpointView v = read_checkpoint_view(st, what);
  Checkpoint ck;
  ck.metadata = std::move(v.metadata);
  for (CheckpointTensorView& t : v.tensors) ck.tensors.push_back(std::move(t).copy());
  return ck;
}

Checkpoint load_checkpoint(const std::string& path) {
  MappedSafeTensors file(path);
  return read_checkpoint(file.view, path);
}

bool bitmask24_keeps_sparse(const CheckpointTensor& t) {
  return t.sparse && bitmask24_representable(*t.sparse) && ends_with(t.name, ".weight");
}

int64_t stored_sparse(const Checkpoint& ck, CheckpointFormat to) {
  int64_t n = 0;
  for (const CheckpointTensor& t : ck.tensors)
    n += t.sparse && (to == CheckpointFormat::kSparse24 ||
                      (to == CheckpointFormat::kBitmask24 && bitmask24_keeps_sparse(t)));
  return n;
}

void sort_like_reference(SafeTensors& st) {
  std::stable_sort(st.tensors.begin(), st.tensors.end(), [](const auto& a, const auto& b) {
    const int ra = dtype_rank(a.second.dtype), rb = dtype_rank(b.second.dtype);
    if (ra != rb) return ra > rb;
    return a.first < b.first;
  });
}

SafeTensors encode_checkpoint(const Checkpoint& ck, CheckpointFormat to) {
  SafeTensors st;
  st.metadata = ck.metadata;
  if (to == CheckpointFormat::kSparse24) {
    for (const char* key : {kFormatKey, kPatternKey})
      if (st.metadata.count(key))
        throw Error(std::string("__metadata__ key '") + key + "' is reserved for sparse24");
    st.metadata[kFormatKey] = kFormatValue;
    st.metadata[kPatternKey] = "2:4";
  }
  for (const CheckpointTensor& t : ck.tensors) {
    if (!t.sparse && t.scale_group > 0 && to == CheckpointFormat::kSparse24) {
      const int64_t per_row = scales_per_row(t);
      if (st.metadata.count(t.name + kScaleGroupSuffix))
        throw Error("__metadata__ key '" + printable(t.name + kScaleGroupSuffix) +
                    "' is needed for the scales of '" + printable(t.name) + "' but is already taken");
      st.metadata[t.name + kScaleGroupSuffix] = std::to_string(t.scale_group);
      st.add(t.name, t.dense);
      st.add(t.name + kScalesSuffix, StTensor{"F32", {t.dense.shape[0], per_row}, float_bytes(t.scales)});
      continue;
    }
    if (!t.sparse) {
      if (to == CheckpointFormat::kSparse24 && st.metadata.count(t.name + kScaleGroupSuffix))
        throw Error("__metadata__ key '" + printable(t.name + kScaleGroupSuffix) + "' would give '" +
                    printable(t.name) + "' scales it does not have");
      st.add(t.name, dequantized(t));
      continue;
    }
    const Compressed& c = *t.sparse;
    // No place for scales in compressed-tensors' layout: refused, never dropped (dense: dequantized, below).
    if (c.scale_group > 0 && to == CheckpointFormat::kBitmask24)
      throw Error("tensor '" + printable(t.name) + "': int8 weights with scales are stored only in the " +
                  "sparse24 layout (or dense, dequantized), not " + checkpoint_format_name(to));
    if (to == CheckpointFormat::kSparse24) {
      validate(c);
      const auto claim = [&](const std::string& key, const std::string& value) {
        if (st.metadata.count(key))
          throw Error("__metadata__ key '" + printable(key) + "' is needed for the layout of '" +
                      printable(t.name) + "' but is already taken");
        st.metadata[key] = value;
      };
      claim(t.name + kShapeSuffix, shape_string(c.shape));
      if (t.lanes_kb >
          0) {  // the kernels' layout: fp32, bf16, or int8 with each 64 positions under one scale
        if (!kernels::valid_lanes_kb(t.lanes_kb) || c.rows == 0)
          throw Error("tensor '" + printable(t.name) +
                      "': the kernels' layout takes K blocks of a multiple of 64 positions, and rows");
        kernels::ValueType type{};
        try {
          type = kernels::lanes_type_of(c);
        } catch (const Error& e) {
          throw Error("tensor '" + printable(t.name) + "': " + e.what());
        }
        claim(t.name + kLanesKbSuffix, std::to_string(t.lanes_kb));
        claim(t.name + kLanesDtypeSuffix, kernels::lanes_type_name(type));
        const kernels::LanesLayout l = kernels::lanes_of(c, t.lanes_kb);
        try {  // (what the reader refuses, e.g. a non-finite value, is not written)
          kernels::check_lanes(l, c.rows, c.cols);
        } catch (const Error& e) {
          throw Error("tensor '" + printable(t.name) + "': " + e.what());
        }
        st.add(t.name + kLanesSuffix, StTensor{"U8",
                                               {static_cast<int64_t>(l.data.size())},
                                               {l.data.data(), l.data.data() + l.data.size()}});
        st.align = 64;  // (read in place by the kernels' vector loads)
        continue;
      }
      st.add(t.name + kValuesSuffix,
             StTensor{st_dtype_name(c.dtype), {c.rows, c.values_per_row()}, c.values});
      st.add(t.name + kMetadataSuffix, StTensor{"U8", {c.rows, c.meta_bytes_per_row()}, c.metadata});
      if (c.scale_group == 0 && st.metadata.count(t.name + kScaleGroupSuffix))
        throw Error("__metadata__ key '" + printable(t.name + kScaleGroupSuffix) + "' would give '" +
                    printable(t.name) + "' scales it does not have");
      if (c.scale_group > 0) {
        claim(t.name + kScaleGroupSuffix, std::to_string(c.scale_group));
        st.add(t.name + kScalesSuffix, StTensor{"F32", {c.rows, c.scales_per_row()}, float_bytes(c.scales)});
      }
    } else if (to == CheckpointFormat::kBitmask24 && bitmask24_keeps_sparse(t)) {
      Bitmask24Tensors b = to_bitmask24(c);
      const std::string prefix = bitmask24_prefix(t.name);
      st.add(prefix + ".compressed", std::move(b.compressed));
      st.add(prefix + ".bitmask", std::move(b.bitmask));
      st.add(prefix + ".shape", std::move(b.shape));
    } else {
      st.add(t.name, to_st(decompress(c)));
    }
  }
  // Refuse a file that would read back differently: a kept dense "<n>.values"/"<n>.metadata" pair that a
  // "<n>.shape" key turns into a sparse24 layer, or a "<p>.row_offsets" beside a bitmask layer.
  for (const CheckpointTensor& t : ck.tensors) {
    if (t.sparse) continue;
    for (const std::string suffix : {kValuesSuffix, kMetadataSuffix, kScalesSuffix, kLanesSuffix}) {
      const std::string layer = t.name.substr(0, t.name.size() - std::min(suffix.size(), t.name.size()));
      if (suffix == kLanesSuffix && to == CheckpointFormat::kSparse24 && ends_with(t.name, suffix) &&
          st.metadata.count(layer + kShapeSuffix) && st.metadata.count(layer + kLanesKbSuffix))
        throw Error("dense tensor '" + printable(t.name) + "' would read back as part of a sparse24 layer");
      if (suffix == kLanesSuffix) continue;
      if (to == CheckpointFormat::kSparse24 && ends_with(t.name, suffix) &&
          st.metadata.count(layer + (suffix == kScalesSuffix ? kScaleGroupSuffix : kShapeSuffix)) &&
          (suffix != kScalesSuffix || st.metadata.count(layer + kShapeSuffix) || st.find(layer)))
        throw Error("dense tensor '" + printable(t.name) + "' would read back as part of a sparse24 layer");
    }
    if (to == CheckpointFormat::kBitmask24 && ends_with(t.name, ".row_offsets") &&
        st.find(t.name.substr(0, t.name.size() - 12) + ".bitmask"))
      throw Error("dense tensor '" + printable(t.name) +
                  "' would make its layer read as unstructured sparse-bitmask");
  }
  sort_like_reference(st);
  return st;
}

SparsifyReport sparsify(Checkpoint& ck, const SparsifyOptions& opts) {
  SparsifyReport report;
  std::regex targets;
  try {
    targets = std::regex(opts.targets, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw Error("--targets '" + printable(opts.targets) + "' is not a valid regular expression: " + e.what());
  }
  // nn.Embedding tables by their usual names (embed_tokens, word_embeddings, position_embeddings, GPT-2's
  // wte and wpe): the engine looks their rows up and reads them dense.
  static const std::regex embedding(R"((^|\.)(\w*embed\w*|wte|wpe)\.weight$)", std::regex::ECMAScript);
  // A language model's output head: left dense by pruning recipes (llm-compressor's ignore lists, ASP), and
  // the decoder reads it dense.
  static const std::regex head(R"((^|\.)lm_head\.weight$)", std::regex::ECMAScript);
  for (CheckpointTensor& t : ck.tensors) {
    if (t.sparse || !ends_with(t.name, ".weight") || !is_float_st(t.dense.dtype)) continue;
    const size_t rank = t.dense.shape.size();
    if (rank != 2 && rank != 4) continue;
    if (!opts.targets.empty() && !std::regex_search(t.name, targets)) continue;
    if (opts.targets.empty() && std::regex_search(t.name, embedding)) {
      report.skipped.push_back(t.name +
                               ": an embedding table (a lookup, not a multiply; name it in --targets to "
                               "make it 2:4 anyway)");
      continue;
    }
    if (opts.targets.empty() && std::regex_search(t.name, head)) {
      report.skipped.push_back(t.name +
                               ": the output head (left dense; name it in --targets to make it 2:4 "
                               "anyway)");
      continue;
    }
    if (opts.rank2_only && (rank != 2 || t.dense.shape[1] == 0 || t.dense.shape[1] % 4 != 0)) {
      report.skipped.push_back(t.name +
                               ": sparse-24-bitmask holds only 2-D weights with columns a multiple of 4");
      continue;
    }
    try {
      const Tensor dense = from_st(t.dense, t.name);
      const MatrixView v = matrix_view(dense.shape);
      if (v.rows == 0 || v.cols == 0) {
        report.skipped.push_back(t.name + ": empty");
        continue;
      }
      const std::vector<float> w = gather_matrix(dense.to_float(), dense.shape);
      const PatternCheck chk = check_pattern(w.data(), v.rows, v.cols, kPattern24);
      if (!chk.valid && !opts.prune) {
        report.skipped.push_back(t.name + ": not 2:4 (" + std::to_string(chk.bad_groups) + " of " +
                                 std::to_string(chk.groups) + " groups have more than 2 nonzeros)");
        continue;
      }
      t.sparse = compress(dense, !chk.valid);
      (chk.valid ? report.compressed : report.pruned).push_back(t.name);
      t.dense = StTensor{};
    } catch (const Error& e) {
      report.skipped.push_back(t.name + ": " + e.what());
    }
  }
  return report;
}

void SparsifyReport::append(const SparsifyReport& r) {
  compressed.insert(compressed.end(), r.compressed.begin(), r.compressed.end());
  pruned.insert(pruned.end(), r.pruned.begin(), r.pruned.end());
  skipped.insert(skipped.end(), r.skipped.begin(), r.skipped.end());
}

SparsifyReport convert_weights(Checkpoint& ck, const ConvertOptions& o) {
  if (o.to == CheckpointFormat::kDense) {
    densify(ck);
    return {};
  }
  SparsifyOptions s;
  s.prune = o.prune;
  s.targets = o.targets;
  s.rank2_only = o.to == CheckpointFormat::kBitmask24;
  return sparsify(ck, s);
}

void densify(Checkpoint& ck) {
  for (CheckpointTensor& t : ck.tensors) {
    if (t.scale_group > 0) {
      t.dense = dequantized(t);
      t.scale_group = 0;
      t.scales.clear();
    }
    if (!t.sparse) continue;
    t.dense = to_st(decompress(*t.sparse));
    t.sparse.reset();
  }
}

std::pair<double, double> zero_count(const Checkpoint& ck) {
  double zeros = 0, total = 0;
  for (const CheckpointTensor& t : ck.tensors) {
    if (t.sparse) {
      const Compressed& c = *t.sparse;
      int64_t nonzero = 0;
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t j = 0; j < c.values_per_row(); ++j) nonzero += c.value(r, j) != 0.f;
      const double n = static_cast<double>(c.rows) * static_cast<double>(c.cols);
      zeros += n - static_cast<double>(nonzero);
      total += n;
    } else if (is_float_st(t.dense.dtype)) {
      const Tensor d = from_st(t.dense, t.name);
      for (float x : d.to_float()) zeros += x == 0.f;
      total += static_cast<double>(d.numel());
    }
  }
  return {zeros, total};
}

double zero_fraction(const Checkpoint& ck) {
  const auto [zeros, total] = zero_count(ck);
  return total > 0 ? zeros / total : 0.0;
}

}  // namespace sparse24
