// libFuzzer harness: the GGUF decoder loader (load_gguf_decoder: llama.* metadata mapped onto config.json's
// bounds, llama.cpp's tensor names and shapes, dequantization, Q/K rows reordered). Any input is either
// refused with sparse24::Error or yields a model whose every tensor has the size its config says.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  engine::DecoderModel m;
  try {
    m = engine::load_gguf_decoder(parse_gguf(data, size, "fuzz"), "fuzz");
  } catch (const Error&) {
    return 0;
  }
  const engine::DecoderConfig& c = m.config;
  FUZZ_CHECK(c.vocab > 0 && c.hidden > 0 && c.layers > 0 && c.heads % c.kv_heads == 0);
  FUZZ_CHECK(static_cast<int64_t>(m.embed.size()) == c.vocab * c.hidden);
  FUZZ_CHECK(static_cast<int64_t>(m.norm.size()) == c.hidden);
  FUZZ_CHECK(static_cast<int64_t>(m.layers.size()) == c.layers);
  for (const engine::DecoderLayer& l : m.layers) {
    FUZZ_CHECK(l.qkv.m == (c.heads + 2 * c.kv_heads) * c.head_dim && l.qkv.k == c.hidden);
    FUZZ_CHECK(static_cast<int64_t>(l.qkv.dense.size()) == l.qkv.m * l.qkv.k);
    FUZZ_CHECK(static_cast<int64_t>(l.o.dense.size()) == c.hidden * c.heads * c.head_dim);
    FUZZ_CHECK(static_cast<int64_t>(l.gate_up.dense.size()) == 2 * c.ffn * c.hidden);
    FUZZ_CHECK(static_cast<int64_t>(l.down.dense.size()) == c.hidden * c.ffn);
  }
  return 0;
}
