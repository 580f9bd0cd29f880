// N:M structured sparsity patterns: in every contiguous group of M elements along the reduction (last)
// dimension at most N are nonzero. 2:4 is what Ampere's Sparse Tensor Cores run; 1:2 and 4:8 are
// supported for masks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sparse24 {

struct Pattern {
  int n = 2;
  int m = 4;
  bool operator==(const Pattern&) const = default;
};

inline constexpr Pattern kPattern24{2, 4};

// Parses "2:4", "1:2" or "4:8"; throws Error naming the text otherwise.
Pattern parse_pattern(const std::string& text);
std::string pattern_string(Pattern p);

// How a tensor of any rank is seen as the [rows, K] matrix that patterns apply to (K = reduction dim):
//   rank 1 [K]                 -> [1, K]
//   rank 2 [rows, K]           -> as is
//   rank 3 [a, b, K]           -> [a*b, K]
//   rank 4 [out, in, kh, kw]   -> conv weight, pruned along `in`: row (o*kh + h)*kw + w, column i
//                                 (NVIDIA ASP's convention: groups run along input channels).
struct MatrixView {
  int64_t rows = 0;
  int64_t cols = 0;
  bool conv = false;  // rank-4 permutation applies
};
MatrixView matrix_view(const std::vector<int64_t>& shape);

// Gathers a tensor's float elements into the [rows, K] matrix order of matrix_view (a copy; identity for
// ranks 1-3). scatter_from_matrix is its inverse.
std::vector<float> gather_matrix(const std::vector<float>& tensor_order, const std::vector<int64_t>& shape);
std::vector<float> scatter_from_matrix(const std::vector<float>& matrix_order,
                                       const std::vector<int64_t>& shape);
// The same permutation as element indices: result[matrix_index] = tensor_index.
std::vector<int64_t> matrix_to_tensor_index(const std::vector<int64_t>& shape);

}  // namespace sparse24
