// libFuzzer harness: the safetensors reader. Any input is either refused with sparse24::Error or yields
// records whose sizes match their shapes, which re-encode and re-parse to the same records.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  SafeTensors st;
  try {
    st = parse_safetensors(data, size, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  const SafeTensorsView view = parse_safetensors_view(data, size, "fuzz");  // must agree
  FUZZ_CHECK(view.tensors.size() == st.tensors.size());
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    const StTensor& t = st.tensors[i].second;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    FUZZ_CHECK(t.bytes.size() == static_cast<size_t>(n) * st_dtype_size(t.dtype));
    FUZZ_CHECK(view.tensors[i].second.bytes.data() >= data &&
               view.tensors[i].second.bytes.data() + view.tensors[i].second.bytes.size() <= data + size);
  }
  std::vector<uint8_t> again;
  try {
    again = encode_safetensors(st);
  } catch (const Error&) {
    return 0;  // e.g. a name that is not valid UTF-8 cannot be written back
  }
  const SafeTensors back = parse_safetensors(again.data(), again.size(), "fuzz re-encoded");
  FUZZ_CHECK(back.metadata == st.metadata);
  FUZZ_CHECK(back.tensors.size() == st.tensors.size());
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    FUZZ_CHECK(back.tensors[i].first == st.tensors[i].first);
    FUZZ_CHECK(back.tensors[i].second.bytes == st.tensors[i].second.bytes);
  }
  return 0;
}
