// Shared helpers of the extension sparse24._core: NumPy (or any DLPack CPU array) in and out, and the
// registration functions of each part. Every check here throws sparse24::Error, which errors.cc turns into
// sparse24.Error (a ValueError) with the same one-line message.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sparse24/dtype.h"
#include "sparse24/io.h"
#include "sparse24/tensor.h"

namespace nb = nanobind;

namespace sparse24::py {

// Any CPU array, any dtype and strides, writable or not: the binding checks it itself so that a wrong
// dtype or layout is a sparse24.Error with a message, not nanobind's generic TypeError.
using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;

// The array's element type as a library dtype (float32, float16, int8); Error naming `what` otherwise.
DType array_dtype(const AnyArray& a, const char* what);
// Error unless the array is C-contiguous (a view with gaps or reversed/transposed strides is refused).
void require_c_contiguous(const AnyArray& a, const char* what);
// Error unless a is float32 and its last dimension is contiguous; returns the row stride in elements
// (the leading dimension) for a 2-D array, the length for a 1-D one.
int64_t require_f32_rows(const AnyArray& a, const char* what);
std::vector<int64_t> array_shape(const AnyArray& a);
// A copy of a C-contiguous float32/float16/int8 array.
Tensor tensor_from_array(const AnyArray& a, const char* what);
// A NumPy array that owns the tensor's bytes (moved, not copied). bfloat16 has no NumPy dtype: converted to
// float32.
nb::object to_numpy(Tensor&& t);
// The same for a safetensors record of any dtype (BF16 converted to float32, F8 kept as raw uint8).
nb::object st_to_numpy(StTensor&& t);
// A float32 NumPy array of `shape` that owns `data`.
nb::object float_array(std::vector<float>&& data, const std::vector<size_t>& shape);

void register_errors(nb::module_& m);
void register_arrays(nb::module_& m);
void register_files(nb::module_& m);
void register_engine(nb::module_& m);
void register_decoder(nb::module_& m);
void register_prune(nb::module_& m);

}  // namespace sparse24::py
