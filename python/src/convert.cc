// Arrays in and out of the extension (common.h).
#include <cstring>
#include <utility>

#include "common.h"
#include "sparse24/error.h"

namespace sparse24::py {
namespace {

namespace dl = nb::dlpack;

dl::dtype make_dtype(dl::dtype_code code, int bits) {
  return dl::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
}

std::string dtype_text(dl::dtype t) {
  const char* kind = t.code == static_cast<uint8_t>(dl::dtype_code::Float)     ? "float"
                     : t.code == static_cast<uint8_t>(dl::dtype_code::Int)     ? "int"
                     : t.code == static_cast<uint8_t>(dl::dtype_code::UInt)    ? "uint"
                     : t.code == static_cast<uint8_t>(dl::dtype_code::Bool)    ? "bool"
                     : t.code == static_cast<uint8_t>(dl::dtype_code::Bfloat)  ? "bfloat"
                     : t.code == static_cast<uint8_t>(dl::dtype_code::Complex) ? "complex"
                                                                               : "unknown";
  return kind + std::to_string(t.bits);
}

dl::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return make_dtype(dl::dtype_code::Float, 32);
    case DType::kF16:
      return make_dtype(dl::dtype_code::Float, 16);
    case DType::kI8:
      return make_dtype(dl::dtype_code::Int, 8);
    case DType::kBF16:
      break;
  }
  return make_dtype(dl::dtype_code::UInt, 16);  // bfloat16 bits, where a raw view is wanted
}

template <class Owner>
nb::object owned_array(Owner* held, void* data, const std::vector<size_t>& shape, dl::dtype t) {
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<Owner*>(p); });
  return nb::cast(nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, t));
}

}  // namespace

DType array_dtype(const AnyArray& a, const char* what) {
  const dl::dtype t = a.dtype();
  if (t == make_dtype(dl::dtype_code::Float, 32)) return DType::kF32;
  if (t == make_dtype(dl::dtype_code::Float, 16)) return DType::kF16;
  if (t == make_dtype(dl::dtype_code::Int, 8)) return DType::kI8;
  throw Error(std::string(what) + ": dtype " + dtype_text(t) +
              " is not supported (float32, float16 or int8)");
}

std::vector<int64_t> array_shape(const AnyArray& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

void require_c_contiguous(const AnyArray& a, const char* what) {
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect)
      throw Error(std::string(what) + ": array is not C-contiguous (use numpy.ascontiguousarray)");
    expect *= static_cast<int64_t>(a.shape(i));
  }
}

int64_t require_f32_rows(const AnyArray& a, const char* what) {
  if (a.dtype() != make_dtype(dl::dtype_code::Float, 32))
    throw Error(std::string(what) + ": dtype " + dtype_text(a.dtype()) + ", expected float32");
  if (a.ndim() == 1) {
    if (a.shape(0) > 1 && a.stride(0) != 1) throw Error(std::string(what) + ": array is not contiguous");
    return static_cast<int64_t>(a.shape(0));
  }
  if (a.ndim() != 2)
    throw Error(std::string(what) + ": expected 1 or 2 dimensions, got " + std::to_string(a.ndim()));
  if (a.shape(1) > 1 && a.stride(1) != 1)
    throw Error(std::string(what) + ": rows are not contiguous (use numpy.ascontiguousarray)");
  const int64_t ld = a.shape(0) > 1 ? a.stride(0) : static_cast<int64_t>(a.shape(1));
  if (ld < static_cast<int64_t>(a.shape(1)))
    throw Error(std::string(what) + ": row stride " + std::to_string(ld) + " is below the row length");
  return ld;
}

Tensor tensor_from_array(const AnyArray& a, const char* what) {
  Tensor t;
  t.dtype = array_dtype(a, what);
  require_c_contiguous(a, what);
  t.shape = array_shape(a);
  const size_t n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
  t.bytes.resize(n);
  if (n) std::memcpy(t.bytes.data(), a.data(), n);
  return t;
}

nb::object float_array(std::vector<float>&& data, const std::vector<size_t>& shape) {
  auto* held = new std::vector<float>(std::move(data));
  held->reserve(1);  // a non-null data pointer even when empty
  return owned_array(held, held->data(), shape, make_dtype(dl::dtype_code::Float, 32));
}

nb::object to_numpy(Tensor&& t) {
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  if (t.dtype == DType::kBF16) return float_array(t.to_float(), shape);
  const dl::dtype dt = numpy_dtype(t.dtype);
  auto* held = new Tensor(std::move(t));
  held->bytes.reserve(1);
  return owned_array(held, held->bytes.data(), shape, dt);
}

nb::object st_to_numpy(StTensor&& t) {
  if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "I8")
    return to_numpy(from_st(t, "tensor"));
  static const std::pair<const char*, dl::dtype> kTypes[] = {
      {"F64", make_dtype(dl::dtype_code::Float, 64)}, {"I16", make_dtype(dl::dtype_code::Int, 16)},
      {"I32", make_dtype(dl::dtype_code::Int, 32)},   {"I64", make_dtype(dl::dtype_code::Int, 64)},
      {"U16", make_dtype(dl::dtype_code::UInt, 16)},  {"U32", make_dtype(dl::dtype_code::UInt, 32)},
      {"U64", make_dtype(dl::dtype_code::UInt, 64)},  {"BOOL", make_dtype(dl::dtype_code::Bool, 8)},
  };
  dl::dtype dt = make_dtype(dl::dtype_code::UInt, 8);  // U8, and F8 kinds as raw bytes
  for (const auto& [name, type] : kTypes)
    if (t.dtype == name) dt = type;
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  auto* held = new StTensor(std::move(t));
  held->bytes.reserve(1);
  return owned_array(held, held->bytes.data(), shape, dt);
}

}  // namespace sparse24::py
