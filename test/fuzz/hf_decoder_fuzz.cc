// libFuzzer harness: the Hugging Face decoder loader (load_hf_decoder: config.json mapped onto an
// architecture, the shard index, the safetensors weights with 2:4 layers in the sparse24 layout, int8 ones
// with scales among them, and an int8 table). The input is [selector byte][contents]: the selected file of a
// tiny valid Llama directory (hf_template.h) is replaced by the contents, the others stay valid. An accepted
// directory loads to a model whose every tensor has the size its config says (2:4 weights valid), loads alike
// read into memory first (the fingerprint), loads with what the kernels' layout and int8 tables hold left in
// the files (DecoderLoadOptions::in_place: the same fingerprint), and loads pruned and rounded to int8 as
// read.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "hf_template.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/sparse24-fuzz-hfdec-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    return std::string(tmpl);
  }();
  return dir;
}

// The model's tensors have the sizes its config says; its 2:4 weights are valid.
void check_model(const sparse24::engine::DecoderModel& m) {
  using namespace sparse24;
  const engine::DecoderConfig& c = m.config;
  FUZZ_CHECK(c.vocab > 0 && c.hidden > 0 && c.layers > 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0);
  FUZZ_CHECK(static_cast<int64_t>(m.norm.size()) == c.hidden);
  FUZZ_CHECK(static_cast<int64_t>(m.layers.size()) == c.layers);
  for (const engine::WeightTable* t : {&m.embed_table, &m.head_table})  // (int8 ones: a scale per 64)
    FUZZ_CHECK(t->empty() || (t->i8_size() == 0 ? static_cast<int64_t>(t->bf16.size()) == c.vocab * c.hidden
                                                : static_cast<int64_t>(t->i8_size()) == c.vocab * c.hidden &&
                                                      static_cast<int64_t>(t->scales_size()) ==
                                                          c.vocab * ((c.hidden + 63) / 64)));
  for (const engine::DecoderLayer& l : m.layers) {
    const int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
    const std::pair<const engine::Gemm*, std::pair<int64_t, int64_t>> shapes[] = {
        {&l.qkv, {q + 2 * kv, c.hidden}},
        {&l.o, {c.hidden, q}},
        {&l.gate_up, {2 * c.ffn, c.hidden}},
        {&l.down, {c.hidden, c.ffn}}};
    for (const auto& [g, mk] : shapes) {
      FUZZ_CHECK(g->m == mk.first && g->k == mk.second);
      if (g->pruned && !g->lanes.empty()) {  // left in the file: its parts' rows and bytes
        int64_t rows = 0;
        for (const engine::Gemm::StoredLanes& p : g->lanes) {
          FUZZ_CHECK(p.bytes.size() == static_cast<size_t>((p.rows + 7) / 8 * ((g->k + 63) / 64) *
                                                           (p.dtype == DType::kI8     ? 352
                                                            : p.dtype == DType::kBF16 ? 576
                                                                                      : 1088)));
          rows += p.rows;
        }
        FUZZ_CHECK(rows == g->m);
      } else if (g->pruned) {
        FUZZ_CHECK(g->sparse.rows == g->m && g->sparse.cols == g->k);
        validate(g->sparse);  // (throws: a crash of the harness)
      } else {
        FUZZ_CHECK(static_cast<int64_t>(g->dense.size()) == g->m * g->k);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  static const auto files = hf_template::decoder_files();
  if (size < 1) return 0;
  const std::string target = hf_template::kDecoderFiles[data[0] % 3];
  const std::string& dir = scratch_dir();
  put_dir(dir, files, target, data + 1, size - 1);
  engine::DecoderModel m;
  try {
    m = engine::load_hf_decoder(dir);
  } catch (const Error&) {
    return 0;
  }
  check_model(m);
  // Read into memory first (read_hf_dir, what convert and training read): the same model.
  try {
    FUZZ_CHECK(engine::load_hf_decoder(read_hf_dir(dir)).fingerprint == m.fingerprint);
  } catch (const Error&) {
    FUZZ_CHECK(false);
  }
  // What the files hold in the decoder's own forms left there: accepted alike, the same fingerprint.
  engine::DecoderLoadOptions here;
  here.in_place = true;
  try {
    const engine::DecoderModel h = engine::load_hf_decoder(dir, here);
    check_model(h);
    FUZZ_CHECK(h.fingerprint == m.fingerprint);
  } catch (const Error&) {
    FUZZ_CHECK(false);
  }
  // Pruned and rounded to int8 as read: accepted too (its dense Linears pruned, every 2:4 one int8).
  engine::DecoderLoadOptions o;
  o.prune = o.int8 = true;
  engine::DecoderModel p;
  try {
    p = engine::load_hf_decoder(dir, o);
  } catch (const Error&) {
    FUZZ_CHECK(false);
  }
  check_model(p);
  for (const engine::DecoderLayer& l : p.layers)
    for (const engine::Gemm* g : {&l.qkv, &l.o, &l.gate_up, &l.down})
      FUZZ_CHECK(g->pruned && g->sparse.dtype == DType::kI8 && g->sparse.scale_group > 0);
  return 0;
}
