// The compressed 2:4 file: a safetensors file with "values" and "metadata" tensors and the original shape,
// dtype and pattern in __metadata__ (see io.h). Loading cross-checks all of it before sparse24::validate.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io_util.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/pattern.h"

namespace sparse24 {
namespace {

using io_detail::fail;
using io_detail::parse_scale_group;
using io_detail::parse_shape_text;
using io_detail::printable;
using io_detail::products_fit;

constexpr const char* kFormat = "sparse24";
constexpr const char* kPattern = "2:4";
const std::string& require_meta(const SafeTensors& st, const char* key, const std::string& what) {
  auto it = st.metadata.find(key);
  if (it == st.metadata.end())
    fail(what, std::string("not a sparse24 compressed file: __metadata__ has no '") + key + "'");
  return it->second;
}

void check_tensor(const StTensor& t, const char* name, const std::string& dtype, int64_t rows,
                  int64_t per_row, const std::string& matrix, const std::string& what) {
  if (t.dtype != dtype)
    fail(what, std::string("tensor '") + name + "' has dtype " + printable(t.dtype) + ", expected " + dtype);
  if (t.shape != std::vector<int64_t>{rows, per_row})
    fail(what, std::string("tensor '") + name + "' has shape " + shape_string(t.shape) + ", expected " +
                   shape_string({rows, per_row}) + " for a " + matrix + " matrix");
}

}  // namespace

std::vector<uint8_t> encode_compressed(const Compressed& c) {
  validate(c);  // never write a file load_compressed would refuse
  SafeTensors st;
  st.metadata = {{"format", kFormat},
                 {"pattern", kPattern},
                 {"shape", shape_string(c.shape)},
                 {"dtype", dtype_name(c.dtype)}};
  st.add("values", StTensor{st_dtype_name(c.dtype), {c.rows, c.values_per_row()}, c.values});
  st.add("metadata", StTensor{"U8", {c.rows, c.meta_bytes_per_row()}, c.metadata});
  if (c.scale_group > 0) {  // scaled int8
    st.metadata["scale_group"] = std::to_string(c.scale_group);
    st.add("scales", StTensor{"F32", {c.rows, c.scales_per_row()}, io_detail::float_bytes(c.scales)});
  }
  return encode_safetensors(st);
}

StoredCompressed stored_compressed(const SafeTensorsView& st, const std::string& name,
                                   const std::vector<int64_t>& shape, std::optional<DType> dtype,
                                   int64_t scale_group) {
  const std::string vname = name + ".values", mname = name + ".metadata";
  const StTensorView* values = st.find(vname);
  const StTensorView* metadata = st.find(mname);
  if (!values) throw Error("missing tensor '" + printable(vname) + "'");
  if (!metadata) throw Error("missing tensor '" + printable(mname) + "'");
  StoredCompressed s;
  Compressed& c = s.header;
  c.dtype = dtype ? *dtype : dtype_from_st(values->dtype);
  c.shape = shape;
  const MatrixView view = matrix_view(shape);
  c.rows = view.rows;
  c.cols = view.cols;
  const std::vector<int64_t> vshape{c.rows, c.values_per_row()}, mshape{c.rows, c.meta_bytes_per_row()};
  const std::string of = " (2:4 of a " + shape_string(shape) + " matrix)";
  if (values->dtype != st_dtype_name(c.dtype) || values->shape != vshape)
    throw Error("tensor '" + printable(vname) + "' is " + printable(values->dtype) + " " +
                shape_string(values->shape) + ", expected " + st_dtype_name(c.dtype) + " " +
                shape_string(vshape) + of);
  if (metadata->dtype != "U8" || metadata->shape != mshape)
    throw Error("tensor '" + printable(mname) + "' is " + printable(metadata->dtype) + " " +
                shape_string(metadata->shape) + ", expected U8 " + shape_string(mshape) + of);
  s.values = values->bytes;
  s.metadata = metadata->bytes;
  if (scale_group > 0) {
    const std::string sname = name + ".scales";
    if (c.dtype != DType::kI8)
      throw Error("tensor '" + printable(vname) + "' is " + printable(values->dtype) +
                  " but the layer has scales (only int8 values have them)");
    c.scale_group = scale_group;
    const std::vector<int64_t> sshape{c.rows, c.scales_per_row()};
    const StTensorView* scales = st.find(sname);
    if (!scales) throw Error("missing tensor '" + printable(sname) + "'");
    if (scales->dtype != "F32" || scales->shape != sshape)
      throw Error("tensor '" + printable(sname) + "' is " + printable(scales->dtype) + " " +
                  shape_string(scales->shape) + ", expected F32 " + shape_string(sshape) + of);
    s.scales = scales->bytes;
  }
  return s;
}

Compressed compressed_from_st(const SafeTensorsView& st, const std::string& name,
                              const std::vector<int64_t>& shape, std::optional<DType> dtype,
                              int64_t scale_group) {
  StoredCompressed s = stored_compressed(st, name, shape, dtype, scale_group);
  Compressed c = std::move(s.header);
  c.values.assign(s.values.begin(), s.values.end());
  c.metadata.assign(s.metadata.begin(), s.metadata.end());
  c.scales.resize(s.scales.size() / sizeof(float));
  if (!c.scales.empty()) std::memcpy(c.scales.data(), s.scales.data(), s.scales.size());
  try {
    validate(c);
  } catch (const Error& e) {
    throw Error("tensor '" + printable(name) + "': " + e.what());
  }
  return c;
}

Compressed parse_compressed(const uint8_t* data, size_t size, const std::string& what) {
  SafeTensors st = parse_safetensors(data, size, what);

  const std::string& format = require_meta(st, "format", what);
  if (format != kFormat)
    fail(what, "not a sparse24 compressed file: __metadata__ 'format' is '" + printable(format) +
                   "', expected 'sparse24'");
  const std::string& pattern = require_meta(st, "pattern", what);
  if (pattern != kPattern)
    fail(what, "__metadata__ 'pattern' is '" + printable(pattern) + "'; only '2:4' is supported");

  Compressed c;
  const std::string& dtype_text = require_meta(st, "dtype", what);
  try {
    c.dtype = parse_dtype(dtype_text);
  } catch (const Error& e) {
    fail(what, std::string("__metadata__ 'dtype': ") + e.what());
  }

  const std::string& shape_text = require_meta(st, "shape", what);
  if (!parse_shape_text(shape_text, &c.shape) || !products_fit(c.shape))
    fail(what, "__metadata__ 'shape' '" + printable(shape_text) + "' is not a valid shape like [64, 128]");
  MatrixView view;
  try {
    view = matrix_view(c.shape);
  } catch (const Error& e) {
    fail(what, "__metadata__ 'shape' " + shape_string(c.shape) + ": " + e.what());
  }
  // Bounds the group arithmetic below (and Compressed's own (cols + 3) / 4) away from overflow.
  if (view.cols > INT64_MAX - 8)
    fail(what, "__metadata__ 'shape' " + shape_string(c.shape) + " is too large");
  c.rows = view.rows;
  c.cols = view.cols;

  // Scaled int8: "scale_group" (positions per scale along K) and the tensor "scales".
  if (auto it = st.metadata.find("scale_group"); it != st.metadata.end()) {
    if (c.dtype != DType::kI8)
      fail(what, "__metadata__ 'scale_group' with dtype " + std::string(dtype_name(c.dtype)) +
                     " (only int8 has scales)");
    if (!parse_scale_group(it->second, c.groups_per_row(), &c.scale_group))
      fail(what, "__metadata__ 'scale_group' '" + printable(it->second) +
                     "' is not a positive multiple of 4 up to the padded row length");
  }

  StTensor* values = nullptr;
  StTensor* metadata = nullptr;
  StTensor* scales = nullptr;
  for (auto& [name, t] : st.tensors) {
    if (name == "values")
      values = &t;
    else if (name == "metadata")
      metadata = &t;
    else if (name == "scales" && c.scale_group > 0)
      scales = &t;
    else
      fail(what, "unexpected tensor '" + printable(name) + "'");
  }
  if (!values) fail(what, "not a sparse24 compressed file: no tensor 'values'");
  if (!metadata) fail(what, "not a sparse24 compressed file: no tensor 'metadata'");
  if (c.scale_group > 0 && !scales) fail(what, "__metadata__ 'scale_group' without a tensor 'scales'");
  const std::string matrix = shape_string({c.rows, c.cols});
  const int64_t groups = c.groups_per_row();
  check_tensor(*values, "values", st_dtype_name(c.dtype), c.rows, 2 * groups, matrix, what);
  check_tensor(*metadata, "metadata", "U8", c.rows, (groups + 1) / 2, matrix, what);
  // The safetensors reader has checked each tensor's byte count against its shape.
  c.values = std::move(values->bytes);
  c.metadata = std::move(metadata->bytes);
  if (scales) {
    check_tensor(*scales, "scales", "F32", c.rows, c.scales_per_row(), matrix, what);
    c.scales.resize(scales->bytes.size() / sizeof(float));
    if (!c.scales.empty())
      std::memcpy(c.scales.data(), scales->bytes.data(), c.scales.size() * sizeof(float));
  }

  try {
    validate(c);
  } catch (const Error& e) {
    fail(what, e.what());
  }
  return c;
}

void save_compressed(const std::string& path, const Compressed& c) {
  write_file_atomic(path, encode_compressed(c));
}

Compressed load_compressed(const std::string& path) {
  MappedFile file(path);
  return parse_compressed(file.data(), file.size(), path);
}

}  // namespace sparse24
