// sparse24 convert IN.safetensors OUT.safetensors --to sparse24|sparse-24-bitmask|dense
//   [--prune] [--targets REGEX] [--config IN_CONFIG] [--config-out OUT_CONFIG]
// sparse24 convert MODEL_DIR|MODEL.gguf OUT_DIR --to ... (a GGUF decoder becomes a Hugging Face directory)
// The command line of engine::convert_model (decoder.h), which holds the rules.
#include <cstdio>
#include <memory>
#include <string>

#include "cli_util.h"
#include "commands.h"
#include "sparse24/checkpoint.h"
#include "sparse24/decoder.h"
#include "sparse24/hf_dir.h"

namespace sparse24::cli {

void register_convert(CLI::App& app) {
  struct Opts {
    std::string in, out, to, config, config_out, targets;
    bool prune = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Convert a safetensors checkpoint between dense, sparse24 and compressed-tensors sparse-24-bitmask "
      "(every 2:4 weight converted, everything else copied unchanged)");
  cmd->add_option(
         "input", o->in,
         "checkpoint (.safetensors) in any of the three layouts, a Hugging Face model directory "
         "(config.json + model.safetensors or shards), or a GGUF decoder (.gguf: written as a Hugging "
         "Face llama directory with its tokenizer)")
      ->required();
  cmd->add_option("output", o->out,
                  "converted checkpoint (.safetensors), or a new directory for a directory or GGUF input")
      ->required();
  cmd->add_option("--to", o->to, "output layout")
      ->required()
      ->check(CLI::IsMember({"sparse24", "sparse-24-bitmask", "dense"}));
  cmd->add_flag("--prune", o->prune,
                "magnitude-prune selected *.weight tensors that are not 2:4 yet (otherwise they stay dense)");
  cmd->add_option("--targets", o->targets,
                  "regex (searched in the tensor name) selecting which *.weight tensors may become sparse; "
                  "default: all 2-D/4-D floating *.weight tensors but embedding tables");
  cmd->add_option("--config", o->config,
                  "the input's config.json (default: config.json beside the input, if there is one)");
  cmd->add_option("--config-out", o->config_out, "where to write config.json (default: beside the output)");
  cmd->callback([o] {
    ConvertOptions c;
    c.to = parse_checkpoint_format(o->to);
    c.prune = o->prune;
    c.targets = o->targets;
    const ConvertReport r = engine::convert_model(o->in, o->out, c, o->config, o->config_out);
    std::printf("read %s: ", o->in.c_str());
    if (r.shards > 0) std::printf("%zu shard(s), ", r.shards);
    std::printf("%zu tensors, %lld compressed 2:4\n", r.tensors, static_cast<long long>(r.sparse_in));
    if (!r.sparsify.compressed.empty() || !r.sparsify.pruned.empty())
      std::printf("compressed %zu weights that were 2:4, pruned %zu to 2:4\n", r.sparsify.compressed.size(),
                  r.sparsify.pruned.size());
    for (const std::string& s : r.sparsify.skipped) std::printf("left dense: %s\n", s.c_str());
    std::printf("wrote %s (%s): %lld compressed 2:4 weights, %lld tensors dense\n", o->out.c_str(),
                o->to.c_str(), static_cast<long long>(r.sparse_out),
                static_cast<long long>(r.tensors) - r.sparse_out);
    if (!r.config_written.empty()) std::printf("wrote %s\n", r.config_written.c_str());
  });
}

}  // namespace sparse24::cli
