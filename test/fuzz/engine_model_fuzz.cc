// libFuzzer harness: the engine's model loader (load_model: model.json + the safetensors it names). The
// input is [2-byte little-endian length L][L bytes of model.json][model.safetensors]. An accepted model is
// consistent (Model::check) and small enough to have been described by the file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/sparse24-fuzz-model-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    return std::string(tmpl);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  if (size < 2) return 0;
  const size_t json_len = std::min<size_t>(data[0] | data[1] << 8, size - 2);
  const std::string& dir = scratch_dir();
  put_file(dir + "/model.json", data + 2, json_len);
  put_file(dir + "/model.safetensors", data + 2 + json_len, size - 2 - json_len);
  engine::Model m;
  try {
    m = engine::load_model(dir);
  } catch (const Error&) {
    return 0;
  }
  m.check();  // throws (a crash here) if the loader accepted an inconsistent model
  FUZZ_CHECK(m.input_size() > 0 && m.output_size() > 0 && !m.fingerprint.empty());
  for (const engine::Gemm& g : m.gemms) FUZZ_CHECK(g.m > 0 && g.k > 0);
  return 0;
}
