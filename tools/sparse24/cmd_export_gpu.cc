// sparse24 export-gpu IN.safetensors -o OUT.safetensors [--layout cutlass] [--dtype f16|bf16]
#include <cstdio>

#include "commands.h"
#include "sparse24/error.h"
#include "sparse24/gpu_meta.h"
#include "sparse24/io.h"

namespace sparse24::cli {

void register_export_gpu(CLI::App& app) {
  struct Opts {
    std::string in, out, layout = "cutlass", dtype;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "export-gpu", "Write a compressed fp16/bf16 weight with its metadata arranged for GPU sparse kernels");
  cmd->add_option("input", o->in, "compressed file (.safetensors, from 'sparse24 compress')")->required();
  cmd->add_option("-o,--output", o->out, "output file (.safetensors)")->required();
  cmd->add_option("--layout", o->layout, "metadata arrangement (cutlass: CUTLASS / PyTorch semi-structured)")
      ->check(CLI::IsMember({"cutlass"}));
  cmd->add_option("--dtype", o->dtype, "convert the values to this type first (needed for float32 input)")
      ->check(CLI::IsMember({"f16", "bf16", "float16", "bfloat16"}));
  cmd->callback([o] {
    Compressed c = load_compressed(o->in);
    if (!o->dtype.empty()) {
      c = convert_values(c, parse_dtype(o->dtype));
    } else if (c.dtype != DType::kF16 && c.dtype != DType::kBF16) {
      throw Error(
          std::string("'") + o->in + "' holds " + dtype_name(c.dtype) +
          " values; GPU sparse metadata layouts are for float16/bfloat16: pass --dtype f16 or --dtype "
          "bf16 to convert");
    }
    const CutlassSparse s = to_cutlass(c);
    write_safetensors(o->out, encode_cutlass_file(s));
    std::printf("exported %s %s as %s layout: values [%lld, %lld], metadata int16 [%lld, %lld] -> %s\n",
                shape_string(s.shape).c_str(), dtype_name(s.dtype), o->layout.c_str(),
                static_cast<long long>(s.rows), static_cast<long long>(s.cols / 2),
                static_cast<long long>(s.rows), static_cast<long long>(s.cols / 16), o->out.c_str());
  });
}

}  // namespace sparse24::cli
