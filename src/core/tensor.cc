#include "sparse24/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "../kernels/convert.h"
#include "sparse24/error.h"

namespace sparse24 {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("negative dimension in shape " + shape_string(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      throw Error("shape " + shape_string(shape) + " has more elements than fit in 64 bits");
    }
    n *= d;
  }
  return n;
}

float Tensor::get(int64_t i) const {
  return element_to_float(dtype, bytes.data() + static_cast<size_t>(i) * dtype_size(dtype));
}

void Tensor::set(int64_t i, float v) {
  uint8_t* p = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(p, &v, 4);
      return;
    case DType::kF16: {
      uint16_t h = float_to_half(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kBF16: {
      uint16_t h = float_to_bf16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kI8: {
      float r = std::isnan(v) ? 0.f : std::nearbyint(std::fmin(127.f, std::fmax(-128.f, v)));
      *p = static_cast<uint8_t>(static_cast<int8_t>(r));
      return;
    }
  }
}

std::vector<float> Tensor::to_float() const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  kernels::elements_to_floats(dtype, bytes.data(), n, out.data());
  return out;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<size_t>(t.numel()) * dtype_size(dtype), 0);
  return t;
}

Tensor Tensor::from_float(const std::vector<float>& values, std::vector<int64_t> shape, DType dtype) {
  Tensor t = zeros(dtype, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel()) {
    throw Error("from_float: " + std::to_string(values.size()) + " values for shape " +
                shape_string(t.shape));
  }
  if (dtype == DType::kF32) {
    if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), values.size() * sizeof(float));
    return t;
  }
  const auto n = static_cast<int64_t>(values.size());
  for (int64_t i = 0; i < n; ++i) t.set(i, values[static_cast<size_t>(i)]);
  return t;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace sparse24
