// sparse24 convert IN.safetensors OUT.safetensors --to sparse24|sparse-24-bitmask|dense
//   [--prune] [--targets REGEX] [--config IN_CONFIG] [--config-out OUT_CONFIG]
// sparse24 convert MODEL_DIR|MODEL.gguf OUT_DIR --to ... (a GGUF decoder becomes a Hugging Face directory)
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli_util.h"
#include "commands.h"
#include "sparse24/bitmask24.h"
#include "sparse24/checkpoint.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"

namespace sparse24::cli {
namespace {

namespace fs = std::filesystem;

std::string beside(const std::string& file, const std::string& name) {
  return (fs::path(file).parent_path() / name).string();
}

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  return std::string(bytes.begin(), bytes.end());
}

// Tensors that may become sparse; applied to a checkpoint about to be written in layout `to`.
SparsifyReport convert_weights(Checkpoint& ck, CheckpointFormat to, bool prune, const std::string& targets) {
  if (to == CheckpointFormat::kDense) {
    densify(ck);
    return {};
  }
  SparsifyOptions opts;
  opts.prune = prune;
  opts.targets = targets;
  opts.rank2_only = to == CheckpointFormat::kBitmask24;
  return sparsify(ck, opts);
}

void print_report(const SparsifyReport& report) {
  if (!report.compressed.empty() || !report.pruned.empty())
    std::printf("compressed %zu weights that were 2:4, pruned %zu to 2:4\n", report.compressed.size(),
                report.pruned.size());
  for (const std::string& s : report.skipped) std::printf("left dense: %s\n", s.c_str());
}

// A Hugging Face directory (config.json + model.safetensors or shards) into a new directory.
// `shown`: the input as the user named it (a GGUF file's converted directory is a temporary one).
void convert_dir(const std::string& in, const std::string& out, CheckpointFormat to, bool prune,
                 const std::string& targets, const std::string& shown) {
  HfDir d = read_hf_dir(in);
  const int64_t sparse_in = d.weights.sparse_count();
  print_report(convert_weights(d.weights, to, prune, targets));
  write_hf_dir(d, d.weights, to, out);
  std::printf("read %s: %zu shard(s), %zu tensors, %lld compressed 2:4\n", shown.c_str(), d.shards.size(),
              d.weights.tensors.size(), static_cast<long long>(sparse_in));
  std::printf("wrote %s (%s, one model.safetensors)\n", out.c_str(), checkpoint_format_name(to));
}

}  // namespace

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
    const CheckpointFormat to = parse_checkpoint_format(o->to);
    if (fs::is_directory(o->in)) {
      convert_dir(o->in, o->out, to, o->prune, o->targets, o->in);
      return;
    }
    if (is_gguf_file(o->in)) {  // a GGUF decoder: a Hugging Face directory in the chosen layout
      if (fs::exists(o->out)) throw Error(o->out + ": already exists (give a new directory)");
      if (!o->prune) {  // nothing becomes 2:4: the converted directory is the answer, written layer by layer
        engine::gguf_to_hf_dir(o->in, o->out);
        std::printf("wrote %s (dense: a GGUF file's weights, a shard per layer)\n", o->out.c_str());
        return;
      }
      const engine::GgufAsHfDir hf(o->in, o->out);
      convert_dir(hf.dir(), o->out, to, o->prune, o->targets, o->in);
      return;
    }

    // The input config: read (and checked) before anything is written.
    std::string config_in = o->config;
    if (config_in.empty() && fs::exists(beside(o->in, "config.json")))
      config_in = beside(o->in, "config.json");
    std::optional<std::string> config_text;
    if (!config_in.empty()) config_text = read_text(config_in);

    Checkpoint ck;
    {
      MappedSafeTensors file(o->in);
      const bool has_bitmask = !find_bitmask24_layers(file.view, o->in).empty();
      if (has_bitmask && config_text) {
        const auto sc = parse_sparsity_config(*config_text, config_in);
        if (sc && (sc->format != kBitmask24Format || sc->sparsity_structure != "2:4"))
          throw Error(config_in + ": sparsity_config says format '" + sc->format + "', structure '" +
                      sc->sparsity_structure + "', but the checkpoint holds sparse-24-bitmask layers");
      }
      ck = read_checkpoint(file.view, o->in);
    }
    const int64_t sparse_in = ck.sparse_count();

    const SparsifyReport report = convert_weights(ck, to, o->prune, o->targets);

    // The output config: the input's, with the sparsity config the output layout needs.
    const std::string what = config_in.empty() ? std::string("config.json") : config_in;
    const std::optional<std::string> config_out_text = config_for_layout(config_text, ck, to, what);
    const std::string config_out = o->config_out.empty() ? beside(o->out, "config.json") : o->config_out;
    const bool same_config =
        !config_in.empty() && fs::exists(config_out) && fs::equivalent(config_in, config_out);
    if (same_config && config_out_text != config_text)
      throw Error("the output config '" + config_out + "' is the input's config.json, which the " + o->to +
                  " checkpoint needs changed; pass --config-out (or write the output to another directory)");

    write_safetensors(o->out, encode_checkpoint(ck, to));
    if (config_out_text && !same_config) write_file_atomic(config_out, *config_out_text);

    int64_t sparse_out = 0;
    for (const CheckpointTensor& t : ck.tensors)
      if (t.sparse && (to == CheckpointFormat::kSparse24 || bitmask24_keeps_sparse(t))) ++sparse_out;
    std::printf("read %s: %zu tensors, %lld compressed 2:4\n", o->in.c_str(), ck.tensors.size(),
                static_cast<long long>(sparse_in));
    print_report(report);
    std::printf("wrote %s (%s): %lld compressed 2:4 weights, %lld tensors dense\n", o->out.c_str(),
                o->to.c_str(), static_cast<long long>(sparse_out),
                static_cast<long long>(ck.tensors.size()) - sparse_out);
    if (config_out_text && !same_config) std::printf("wrote %s\n", config_out.c_str());
  });
}

}  // namespace sparse24::cli
