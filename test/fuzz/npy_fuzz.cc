// libFuzzer harness: the .npy reader. An accepted file has bytes matching its shape and re-encodes (unless
// bfloat16, which .npy cannot hold) to a file that parses to the same tensor.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  Tensor t;
  try {
    t = parse_npy(data, size, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  FUZZ_CHECK(t.bytes.size() == static_cast<size_t>(t.numel()) * dtype_size(t.dtype));
  std::vector<uint8_t> again;
  try {
    again = encode_npy(t);
  } catch (const Error&) {
    return 0;  // more than 64 dimensions cannot be written
  }
  const Tensor back = parse_npy(again.data(), again.size(), "fuzz re-encoded");
  FUZZ_CHECK(back.shape == t.shape && back.dtype == t.dtype && back.bytes == t.bytes);
  return 0;
}
