// libFuzzer harness: the metadata decoder. A Compressed built from fuzz bytes (dtype, shape, then values and
// metadata) is validated; when valid it decompresses, compresses back to the same matrix, and re-encodes
// through the sparse-24-bitmask layout unchanged.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "sparse24/bitmask24.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/pattern.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  if (size < 4) return 0;
  Compressed c;
  c.dtype = static_cast<DType>(data[0] % 5);  // 4 = an invalid dtype code, which validate must refuse
  const int rank = 1 + data[1] % 4;
  const int64_t dims[4] = {1 + data[2] % 9, 1 + data[3] % 33, 1 + (size > 4 ? data[4] % 3 : 0),
                           1 + (size > 5 ? data[5] % 3 : 0)};
  c.shape.assign(dims, dims + rank);
  const MatrixView v = matrix_view(c.shape);
  c.rows = v.rows;
  c.cols = v.cols;
  size_t pos = 6;
  // Sizes come from the input too, so wrong sizes are exercised: mostly the right ones.
  const size_t es = c.dtype == DType{4} ? 1 : dtype_size(c.dtype);
  const bool exact = size > pos && data[pos++] % 8 != 0;
  size_t nvalues =
      exact ? static_cast<size_t>(c.rows * c.values_per_row()) * es : (size > pos ? data[pos++] : 0);
  size_t nmeta =
      exact ? static_cast<size_t>(c.rows * c.meta_bytes_per_row()) : (size > pos ? data[pos++] : 0);
  for (size_t i = 0; i < nmeta; ++i) c.metadata.push_back(pos < size ? data[pos++] : 0);
  for (size_t i = 0; i < nvalues; ++i) c.values.push_back(pos < size ? data[pos++] : 0);
  try {
    validate(c);
  } catch (const Error&) {
    return 0;
  }
  const Tensor dense = decompress(c);
  FUZZ_CHECK(dense.shape == c.shape);
  // Re-compressing keeps every nonzero in place (the positions chosen for zeros may differ).
  try {
    const Tensor again = decompress(compress(dense));
    for (int64_t i = 0; i < dense.numel(); ++i)
      FUZZ_CHECK(again.get(i) == dense.get(i) || dense.get(i) != dense.get(i));
  } catch (const Error&) {
    // NaN in the values: compress refuses it by contract.
  }
  if (bitmask24_representable(c)) {
    const Bitmask24Tensors b = to_bitmask24(c);
    auto view = [](const StTensor& s) { return StTensorView{s.dtype, s.shape, s.bytes}; };
    const Compressed back = from_bitmask24(view(b.compressed), view(b.bitmask), view(b.shape), "l", "fuzz");
    FUZZ_CHECK(back.values == c.values && back.metadata == c.metadata);
  }
  return 0;
}
