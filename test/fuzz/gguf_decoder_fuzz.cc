// libFuzzer harness: the GGUF decoder loader (load_gguf_decoder: llama.* metadata mapped onto config.json's
// bounds, llama.cpp's tensor names and shapes, dequantization, Q/K rows reordered). Any input is either
// refused with sparse24::Error or yields a model whose every tensor has the size its config says. An
// accepted file is also read as a file through GgufCheckpoint (what prune-model and convert read a GGUF
// through: config, tokenizer, transformers' names): refused with Error or handing over, layer by layer, only
// tensors it listed, with the shapes and fp32 sizes it listed. And loaded mapped: the same model, an untied
// table left in the file with rows that read. And loaded pruned as read: the dense load's Linears pruned.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"

namespace {

const std::string& scratch_file() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/sparse24-fuzz-gguf-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    return std::string(tmpl) + "/m.gguf";
  }();
  return path;
}

// An accepted input (`m`, loaded from its bytes) loaded with --prune: accepted too, each Linear pruned as its
// rows are read into the 2:4 weights compress_pruned_f32 makes of the dense load's, the fingerprint the dense
// one's with the pruning's suffix.
void check_pruned(const uint8_t* data, size_t size, const sparse24::engine::DecoderModel& m) {
  using namespace sparse24;
  engine::DecoderLoadOptions o;
  o.prune = true;
  engine::DecoderModel p;
  try {
    p = engine::load_gguf_decoder(parse_gguf(data, size, "fuzz"), "fuzz", o);
  } catch (const Error&) {
    FUZZ_CHECK(false);  // (the dense load took it)
  }
  FUZZ_CHECK(p.fingerprint == m.fingerprint + "-magnitude24");
  for (size_t l = 0; l < m.layers.size(); ++l)
    for (auto G : {&engine::DecoderLayer::qkv, &engine::DecoderLayer::o, &engine::DecoderLayer::gate_up,
                   &engine::DecoderLayer::down}) {
      const engine::Gemm &dense = m.layers[l].*G, &pruned = p.layers[l].*G;
      FUZZ_CHECK(pruned.pruned && pruned.dense.empty() && pruned.bias == dense.bias);
      const Compressed want = compress_pruned_f32(dense.dense.data(), dense.m, dense.k);
      FUZZ_CHECK(pruned.sparse.values == want.values && pruned.sparse.metadata == want.metadata);
    }
}

// An accepted input (`m`, loaded from its bytes) as a file: loaded mapped, the same model (fingerprint), the
// tables left in the file (embeddings, a head that runs there) with readable rows, those the bytes' load
// holds; and read through GgufCheckpoint.
void check_as_file(const uint8_t* data, size_t size, const sparse24::engine::DecoderModel& m) {
  using namespace sparse24;
  put_file(scratch_file(), data, size);
  const engine::DecoderModel mapped = engine::load_gguf_decoder(scratch_file());
  FUZZ_CHECK(mapped.fingerprint == m.fingerprint);
  const engine::StoredRows &e = mapped.embed_stored, &h = mapped.head_stored;
  FUZZ_CHECK(h.empty() || (!m.config.tied && !e.empty()));
  FUZZ_CHECK(!m.config.tied || e.empty() || mapped.embed.empty());  // a tied table left there is the head
  for (const engine::StoredRows* s : {&e, &h}) {
    if (s->empty()) continue;
    FUZZ_CHECK(s->rows == m.config.vocab && s->cols == m.config.hidden && s->bytes() <= size);
    std::vector<float> row(static_cast<size_t>(s->cols)), held(row.size());
    for (int64_t r : {int64_t{0}, s->rows - 1}) {
      s->row(r, row.data());
      if (s == &e)
        m.embedding(static_cast<int32_t>(r), held.data());
      else
        held.assign(m.head.dense.begin() + r * s->cols, m.head.dense.begin() + (r + 1) * s->cols);
      FUZZ_CHECK(row == held);  // the rows the bytes' load holds (dequantized alike)
    }
  }
  try {
    const engine::GgufCheckpoint ck(scratch_file());
    FUZZ_CHECK(!ck.config_json().empty() && ck.files().count("tokenizer.json") == 1);
    std::vector<std::pair<std::string, StTensor>> read;
    const auto check = [&] {
      for (const auto& [name, t] : read) {
        const auto it = ck.tensors().find(name);
        FUZZ_CHECK(it != ck.tensors().end() && it->second.shape == t.shape && t.dtype == "F32");
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        FUZZ_CHECK(static_cast<int64_t>(t.bytes.size()) == 4 * n);
      }
      read.clear();
    };
    engine::DecoderLoadOptions o;
    o.on_layer = [&](engine::DecoderModel&, engine::DecoderLayer& layer, int64_t) {
      layer = engine::DecoderLayer{};
      check();
    };
    ck.load(o, read);
    check();
  } catch (const Error&) {
  }
}

}  // namespace

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
  FUZZ_CHECK(static_cast<int64_t>(m.embed.size() + m.embed_table.bf16.size()) == c.vocab * c.hidden);
  FUZZ_CHECK(static_cast<int64_t>(m.norm.size()) == c.hidden);
  FUZZ_CHECK(static_cast<int64_t>(m.layers.size()) == c.layers);
  for (const engine::DecoderLayer& l : m.layers) {
    FUZZ_CHECK(l.qkv.m == (c.heads + 2 * c.kv_heads) * c.head_dim && l.qkv.k == c.hidden);
    FUZZ_CHECK(static_cast<int64_t>(l.qkv.dense.size()) == l.qkv.m * l.qkv.k);
    FUZZ_CHECK(static_cast<int64_t>(l.o.dense.size()) == c.hidden * c.heads * c.head_dim);
    FUZZ_CHECK(static_cast<int64_t>(l.gate_up.dense.size()) == 2 * c.ffn * c.hidden);
    FUZZ_CHECK(static_cast<int64_t>(l.down.dense.size()) == c.hidden * c.ffn);
  }
  check_pruned(data, size, m);
  check_as_file(data, size, m);
  return 0;
}
