#include "sparse24/pattern.h"

#include "sparse24/error.h"
#include "sparse24/tensor.h"

namespace sparse24 {

Pattern parse_pattern(const std::string& text) {
  if (text == "2:4") return {2, 4};
  if (text == "1:2") return {1, 2};
  if (text == "4:8") return {4, 8};
  throw Error("unsupported pattern '" + text + "' (expected 2:4, 1:2 or 4:8)");
}

std::string pattern_string(Pattern p) { return std::to_string(p.n) + ":" + std::to_string(p.m); }

MatrixView matrix_view(const std::vector<int64_t>& shape) {
  for (int64_t d : shape) {
    if (d < 0) throw Error("negative dimension in shape " + shape_string(shape));
  }
  int64_t total = 1;
  for (int64_t d : shape) {
    if (d != 0 && total > INT64_MAX / d) throw Error("shape " + shape_string(shape) + " overflows");
    total *= d;
  }
  MatrixView v;
  switch (shape.size()) {
    case 0:
      throw Error("a scalar has no reduction dimension to prune along");
    case 1:
      v.rows = 1;
      v.cols = shape[0];
      break;
    case 2:
      v.rows = shape[0];
      v.cols = shape[1];
      break;
    case 3:
      v.rows = shape[0] * shape[1];
      v.cols = shape[2];
      break;
    case 4:
      v.rows = shape[0] * shape[2] * shape[3];
      v.cols = shape[1];
      v.conv = true;
      break;
    default:
      throw Error("tensors of rank " + std::to_string(shape.size()) + " are not supported (1 to 4)");
  }
  if (v.cols == 0) throw Error("shape " + shape_string(shape) + " has an empty reduction dimension (K = 0)");
  return v;
}

std::vector<int64_t> matrix_to_tensor_index(const std::vector<int64_t>& shape) {
  const MatrixView v = matrix_view(shape);
  std::vector<int64_t> idx(static_cast<size_t>(v.rows * v.cols));
  if (!v.conv) {
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    return idx;
  }
  const int64_t out = shape[0], in = shape[1], kh = shape[2], kw = shape[3];
  for (int64_t o = 0; o < out; ++o)
    for (int64_t h = 0; h < kh; ++h)
      for (int64_t w = 0; w < kw; ++w) {
        const int64_t row = (o * kh + h) * kw + w;
        for (int64_t i = 0; i < in; ++i)
          idx[static_cast<size_t>(row * in + i)] = ((o * in + i) * kh + h) * kw + w;
      }
  return idx;
}

std::vector<float> gather_matrix(const std::vector<float>& tensor_order, const std::vector<int64_t>& shape) {
  if (!matrix_view(shape).conv) return tensor_order;
  const std::vector<int64_t> idx = matrix_to_tensor_index(shape);
  std::vector<float> out(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) out[i] = tensor_order[static_cast<size_t>(idx[i])];
  return out;
}

std::vector<float> scatter_from_matrix(const std::vector<float>& matrix_order,
                                       const std::vector<int64_t>& shape) {
  if (!matrix_view(shape).conv) return matrix_order;
  const std::vector<int64_t> idx = matrix_to_tensor_index(shape);
  std::vector<float> out(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) out[static_cast<size_t>(idx[i])] = matrix_order[i];
  return out;
}

}  // namespace sparse24
