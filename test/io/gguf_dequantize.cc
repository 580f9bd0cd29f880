// gguf_dequantize FILE.gguf OUT_DIR: every tensor of FILE dequantized to fp32 by sparse24, written as
// OUT_DIR/<index>.npy in the file's tensor order, and OUT_DIR/tensors.txt with one "<name> <type>" line each.
// The helper of compare_gguf.py (the comparison with the gguf Python package).
#include <cstdio>
#include <string>

#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gguf_dequantize FILE.gguf OUT_DIR\n");
    return 2;
  }
  try {
    const sparse24::MappedGguf m(argv[1]);
    std::string list;
    for (size_t i = 0; i < m.gguf.tensors.size(); ++i) {
      const sparse24::GgufTensor& t = m.gguf.tensors[i];
      sparse24::write_npy(std::string(argv[2]) + "/" + std::to_string(i) + ".npy", sparse24::dequantize(t));
      list += t.name + " " + sparse24::ggml_type_name(t.type) + "\n";
    }
    sparse24::write_file_atomic(std::string(argv[2]) + "/tensors.txt", list);
  } catch (const sparse24::Error& e) {
    std::fprintf(stderr, "gguf_dequantize: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
