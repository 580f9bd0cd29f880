// libFuzzer harness: the GGUF reader. Any input is either refused with sparse24::Error or yields tensors
// whose byte spans lie inside the input and match their shapes and types; every dequantizable tensor
// dequantizes; the parse re-encodes and re-parses to the same metadata and tensors.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  Gguf g;
  try {
    g = parse_gguf(data, size, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  FUZZ_CHECK(g.data_offset <= size);
  for (const GgufTensor& t : g.tensors) {
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    FUZZ_CHECK(ti != nullptr);
    FUZZ_CHECK(t.shape.size() <= 4);
    FUZZ_CHECK(t.bytes.size() == static_cast<size_t>(t.numel() / ti->block * ti->block_bytes));
    FUZZ_CHECK(t.bytes.empty() || (t.bytes.data() >= data && t.bytes.data() + t.bytes.size() <= data + size));
    // Bounded: the fuzzer's inputs are small, and numel <= bytes * block / block_bytes.
    if (ti->dequantizable) FUZZ_CHECK(dequantize(t).numel() == t.numel());
  }
  // A file without tensors may declare any alignment without padding to it; writing it back would pad.
  if (g.tensors.empty() && g.alignment > size) return 0;
  const std::vector<uint8_t> again = encode_gguf(g);  // whatever was read can be written back
  const Gguf back = parse_gguf(again.data(), again.size(), "fuzz re-encoded");
  FUZZ_CHECK(back.version == g.version && back.alignment == g.alignment);
  FUZZ_CHECK(back.metadata.size() == g.metadata.size());
  for (size_t i = 0; i < g.metadata.size(); ++i) {
    const GgufValue& a = g.metadata[i].second;
    const GgufValue& b = back.metadata[i].second;
    FUZZ_CHECK(back.metadata[i].first == g.metadata[i].first);
    FUZZ_CHECK(a.type == b.type && a.elem == b.elem && a.ints == b.ints && a.strings == b.strings);
    FUZZ_CHECK(a.floats.size() == b.floats.size());
  }
  FUZZ_CHECK(back.tensors.size() == g.tensors.size());
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    FUZZ_CHECK(back.tensors[i].name == g.tensors[i].name && back.tensors[i].shape == g.tensors[i].shape);
    FUZZ_CHECK(std::equal(back.tensors[i].bytes.begin(), back.tensors[i].bytes.end(),
                          g.tensors[i].bytes.begin(), g.tensors[i].bytes.end()));
  }
  return 0;
}
