// sparse24 compress IN.npy -o OUT.safetensors [--prune];  sparse24 decompress IN.safetensors -o OUT.npy
#include <cstdio>

#include "commands.h"
#include "sparse24/compressed.h"
#include "sparse24/io.h"

namespace sparse24::cli {

void register_compress(CLI::App& app) {
  struct Opts {
    std::string in, out;
    bool prune = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("compress", "Compress a 2:4-sparse .npy matrix to the sparse24 safetensors file");
  cmd->add_option("input", o->in, "dense matrix (.npy)")->required();
  cmd->add_option("-o,--output", o->out, "compressed file (.safetensors)")->required();
  cmd->add_flag("--prune", o->prune,
                "prune to 2:4 by magnitude first (otherwise a non-2:4 input is an error)");
  cmd->callback([o] {
    const Compressed c = compress(read_npy(o->in), o->prune);
    save_compressed(o->out, c);
    std::printf("compressed %s %s: %zu value bytes + %zu metadata bytes = %.4f of dense -> %s\n",
                shape_string(c.shape).c_str(), dtype_name(c.dtype), c.values.size(), c.metadata.size(),
                c.compression_ratio(), o->out.c_str());
  });
}

void register_decompress(CLI::App& app) {
  struct Opts {
    std::string in, out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("decompress", "Expand a compressed file back to a dense .npy matrix");
  cmd->add_option("input", o->in, "compressed file (.safetensors)")->required();
  cmd->add_option("-o,--output", o->out, "dense matrix (.npy)")->required();
  cmd->callback([o] {
    const Tensor t = decompress(load_compressed(o->in));
    write_npy(o->out, t);
    std::printf("decompressed %s %s -> %s\n", shape_string(t.shape).c_str(), dtype_name(t.dtype),
                o->out.c_str());
  });
}

}  // namespace sparse24::cli
