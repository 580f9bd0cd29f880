// libFuzzer harness: the Hugging Face encoder loader (load_hf_encoder: config.json, the shard index, the
// safetensors weights, sentence-transformers' modules.json and pooling config). The input is
// [selector byte][contents]: the selected file of a tiny valid BERT directory (hf_template.h) is replaced by
// the contents, the others stay valid. An accepted model is consistent and runs.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "hf_template.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/sparse24-fuzz-hf-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    std::filesystem::create_directories(std::string(tmpl) + "/1_Pooling");
    return std::string(tmpl);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  static const auto files = hf_template::files();
  if (size < 1) return 0;
  const std::string target = hf_template::kFiles[data[0] % 5];
  const std::string& dir = scratch_dir();
  put_dir(dir, files, target, data + 1, size - 1);
  engine::Model m;
  try {
    m = engine::load_hf_encoder(dir);
  } catch (const Error&) {
    return 0;
  }
  m.check();
  FUZZ_CHECK(m.token_input && m.vocab > 0 && m.max_sequence > 0 && m.output_size() > 0);
  for (const engine::Gemm& g : m.gemms) FUZZ_CHECK(g.m > 0 && g.k > 0);
  return 0;
}
