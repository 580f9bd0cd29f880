// libFuzzer harness: the compressed 2:4 file reader. An accepted file decompresses, and re-encodes to a file
// that loads to the same Compressed.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  Compressed c;
  try {
    c = parse_compressed(data, size, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  if (c.rows * c.cols > (int64_t{1} << 22)) return 0;  // a huge all-empty shape: nothing new to learn
  const Tensor dense = decompress(c);
  FUZZ_CHECK(dense.shape == c.shape);
  const std::vector<uint8_t> again = encode_compressed(c);
  const Compressed back = parse_compressed(again.data(), again.size(), "fuzz re-encoded");
  FUZZ_CHECK(back.values == c.values && back.metadata == c.metadata && back.shape == c.shape);
  return 0;
}
