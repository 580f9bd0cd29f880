// sparse24 compress IN.npy -o OUT.safetensors [--prune];  sparse24 decompress IN.safetensors -o OUT.npy
#include <cstdio>

#include "commands.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24::cli {

void register_compress(CLI::App& app) {
  struct Opts {
    std::string in, out;
    bool prune = false;
    std::string dtype;
    int64_t scale_group = 64;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("compress", "Compress a 2:4-sparse .npy matrix to the sparse24 safetensors file");
  cmd->add_option("input", o->in, "dense matrix (.npy)")->required();
  cmd->add_option("-o,--output", o->out, "compressed file (.safetensors)")->required();
  cmd->add_flag("--prune", o->prune,
                "prune to 2:4 by magnitude first (otherwise a non-2:4 input is an error)");
  cmd->add_option(
      "--dtype", o->dtype,
      "int8: quantise the kept values (float32 input) to int8 with fp32 scales; default: the input's dtype");
  cmd->add_option("--scale-group", o->scale_group,
                  "with --dtype int8: positions per scale along a row (a multiple of 4; 0 = one per row)")
      ->capture_default_str();
  cmd->callback([o] {
    Compressed c = compress(read_npy(o->in), o->prune);
    if (!o->dtype.empty()) {
      const DType want = parse_dtype(o->dtype);
      if (want == DType::kI8 && c.dtype != DType::kI8) {
        if (c.dtype != DType::kF32)
          throw Error(std::string("--dtype int8 needs a float32 input, got ") + dtype_name(c.dtype));
        c = quantize_int8(c, o->scale_group == 0 ? 4 * c.groups_per_row() : o->scale_group);
      } else if (want != c.dtype) {
        throw Error(std::string("--dtype ") + dtype_name(want) +
                    ": only int8 quantisation of a float32 input is supported");
      }
    }
    save_compressed(o->out, c);
    if (c.scale_group > 0)
      std::printf(
          "compressed %s int8 (scale group %lld): %zu value bytes + %zu metadata bytes + %zu scale bytes = "
          "%.4f bytes per weight -> %s\n",
          shape_string(c.shape).c_str(), static_cast<long long>(c.scale_group), c.values.size(),
          c.metadata.size(), c.scales.size() * sizeof(float), c.bytes_per_weight(), o->out.c_str());
    else
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
