#include "sparse24/report.h"

#include "sparse24/mask.h"

namespace sparse24 {
namespace {

SparsityReport analyze(const std::vector<float>& w, const std::vector<int64_t>& shape, DType dtype,
                       Pattern p) {
  SparsityReport r;
  r.shape = shape;
  r.dtype = dtype;
  r.pattern = p;
  const MatrixView v = matrix_view(shape);
  r.rows = v.rows;
  r.cols = v.cols;
  const PatternCheck chk = check_pattern(w.data(), v.rows, v.cols, p);
  r.valid = chk.valid;
  r.groups = chk.groups;
  r.bad_groups = chk.bad_groups;
  r.first_bad_row = chk.first_bad_row;
  r.first_bad_group = chk.first_bad_group;
  int64_t zeros = 0;
  for (float x : w) zeros += x == 0.f;
  r.sparsity = w.empty() ? 0.0 : static_cast<double>(zeros) / static_cast<double>(w.size());
  r.kept_magnitude = kept_magnitude(w.data(), magnitude_mask(w.data(), v.rows, v.cols, p));
  r.compression_ratio = compression_ratio(v.rows, v.cols, dtype);
  return r;
}

}  // namespace

SparsityReport inspect_dense(const Tensor& t, Pattern p) {
  SparsityReport r = analyze(gather_matrix(t.to_float(), t.shape), t.shape, t.dtype, p);
  r.format = "dense";
  return r;
}

SparsityReport inspect_compressed(const Compressed& c) {
  const Tensor t = decompress(c);
  SparsityReport r = analyze(gather_matrix(t.to_float(), t.shape), t.shape, t.dtype, kPattern24);
  r.format = "sparse24";
  r.dtype = c.dtype;  // scaled int8 decompresses to float32
  r.scale_group = c.scale_group;
  r.bytes_per_weight = c.bytes_per_weight();
  r.compression_ratio = r.bytes_per_weight / static_cast<double>(dtype_size(c.dtype));
  return r;
}

}  // namespace sparse24
