// What `sparse24 inspect` reports about a dense or compressed matrix.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/pattern.h"
#include "sparse24/tensor.h"

namespace sparse24 {

struct SparsityReport {
  std::string format;  // "dense" or "sparse24"
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  Pattern pattern = kPattern24;
  int64_t rows = 0, cols = 0;  // the [rows, K] matrix the pattern applies to
  bool valid = false;          // every group satisfies the pattern
  int64_t groups = 0, bad_groups = 0;
  int64_t first_bad_row = -1, first_bad_group = -1;
  double sparsity = 0;           // fraction of elements equal to zero
  double kept_magnitude = 1;     // fraction of sum |w| a magnitude prune to the pattern keeps (1 if valid)
  double compression_ratio = 0;  // compressed 2:4 bytes (scales included) / dense bytes of the dtype
  double bytes_per_weight = 0;   // compressed: stored bytes (values, metadata, scales) / (rows * cols)
  int64_t scale_group = 0;       // scaled int8: positions per scale along K
};

SparsityReport inspect_dense(const Tensor& t, Pattern p = kPattern24);
SparsityReport inspect_compressed(const Compressed& c);

}  // namespace sparse24
