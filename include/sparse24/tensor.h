// A dense tensor: dtype, shape and its bytes in C (row-major) order. The interchange type between the
// file readers/writers and the pattern, mask and compression code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sparse24/dtype.h"

namespace sparse24 {

struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel() * dtype_size(dtype) bytes

  // Product of the shape; throws Error if it overflows int64 or a dimension is negative.
  int64_t numel() const;
  // Element i converted to float (exact for every dtype).
  float get(int64_t i) const;
  // Stores v at element i, converted to dtype (rounded to nearest even for f16/bf16; int8 saturates after
  // rounding to nearest).
  void set(int64_t i, float v);
  // All elements as floats.
  std::vector<float> to_float() const;
  // A tensor of the given dtype and shape with every element converted from `values`.
  static Tensor from_float(const std::vector<float>& values, std::vector<int64_t> shape,
                           DType dtype = DType::kF32);
  // Zero-filled tensor.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
};

// "[3, 64]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace sparse24
