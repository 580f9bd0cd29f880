// sparse24.prune_model: one-shot 2:4 pruning of a Hugging Face encoder or decoder directory (or a GGUF
// decoder) into a new directory, calibrated through the engine, as `sparse24 prune-model` does
// (include/sparse24/prune_model.h: engine::prune_model); sparse24.convert, as `sparse24 convert`
// (engine::convert_model).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "sparse24/checkpoint.h"
#include "sparse24/decoder.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/prune_model.h"

namespace sparse24::py {
namespace {

nb::dict report_dict(const engine::PruneModelReport& r) {
  nb::list weights;
  for (const engine::PrunedWeight& w : r.weights) {
    nb::dict d;
    d["name"] = w.name;
    d["permutation"] = w.permutation;
    d["kept_identity"] = w.kept_identity;
    d["kept_permuted"] = w.kept_permuted;
    d["evaluations"] = w.evaluations;
    d["stopped_early"] = w.stopped_early;
    weights.append(d);
  }
  nb::dict seconds;
  seconds["forward"] = r.forward_s;
  seconds["statistics"] = r.statistics_s;
  seconds["permute"] = r.permute_s;
  seconds["prune"] = r.prune_s;
  nb::dict d;
  d["weights"] = weights;
  d["skipped"] = r.skipped;
  d["calibration_sequences"] = r.calibration_sequences;
  d["calibration_tokens"] = r.calibration_tokens;
  d["seconds"] = seconds;
  return d;
}

nb::dict prune_model(const std::string& model, const std::string& out, const std::string& method,
                     const std::optional<std::vector<std::string>>& calibration, bool permute,
                     const std::string& targets, const std::string& format, int threads, int64_t calib_ctx,
                     double permute_seconds, uint64_t permute_evaluations, nb::object progress, bool int8) {
  if (threads < 1 || threads > 1024)
    throw Error("threads " + std::to_string(threads) + ": expected 1 to 1024");
  if (calib_ctx < 2) throw Error("calib_ctx " + std::to_string(calib_ctx) + ": expected at least 2");
  if (!(permute_seconds >= 0 && permute_seconds <= 3600))
    throw Error("permute_seconds must be between 0 and 3600");
  engine::PruneModelOptions o;
  o.method = engine::parse_prune_method(method);
  o.permute = permute;
  o.targets = targets;
  o.threads = threads;
  o.sequence_tokens = calib_ctx;
  o.permute_seconds = permute_seconds;
  o.permute_evaluations = permute_evaluations;
  o.int8 = int8;
  if (calibration) o.calibration = *calibration;
  const CheckpointFormat to = parse_checkpoint_format(format);
  // Between steps: Ctrl-C (KeyboardInterrupt) or an exception from `progress` stops the pruning, and what
  // was written is removed.
  o.progress = [&](int64_t done, int64_t total) {
    nb::gil_scoped_acquire locked;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (!progress.is_none()) progress(done, total);
  };
  engine::PruneModelReport r;
  {
    nb::gil_scoped_release unlocked;
    engine::set_threads(threads);
    r = engine::prune_model(model, out, to, o);
  }
  return report_dict(r);
}

nb::dict convert(const std::string& input, const std::string& output, const std::string& to, bool prune,
                 const std::string& targets, const std::string& config, const std::string& config_out) {
  ConvertOptions o;
  o.to = parse_checkpoint_format(to);
  o.prune = prune;
  o.targets = targets;
  ConvertReport r;
  {
    nb::gil_scoped_release unlocked;
    r = engine::convert_model(input, output, o, config, config_out);
  }
  nb::dict d;
  d["tensors"] = r.tensors;
  d["shards"] = r.shards;
  d["sparse_in"] = r.sparse_in;
  d["sparse_out"] = r.sparse_out;
  d["compressed"] = r.sparsify.compressed;
  d["pruned"] = r.sparsify.pruned;
  d["skipped"] = r.sparsify.skipped;
  d["config_written"] = r.config_written;
  return d;
}

}  // namespace

void register_prune(nb::module_& m) {
  m.def(
      "convert", &convert, nb::arg("input"), nb::arg("output"), nb::arg("to"), nb::arg("prune") = false,
      nb::arg("targets") = "", nb::arg("config") = "", nb::arg("config_out") = "",
      "Converts a checkpoint between the layouts 'sparse24', 'sparse-24-bitmask' and 'dense' (as "
      "`sparse24 convert`): a Hugging Face directory a shard at a time, or a GGUF decoder a layer at a time, "
      "into the new directory `output`; or one .safetensors file into the file `output`, its config.json "
      "(`config`, default the one beside it) written with the sparsity config the layout needs "
      "(`config_out`, default beside the output). prune: magnitude-prune the candidate weights (`targets`, "
      "a regex; default every floating *.weight but embeddings and the output head) that are not 2:4. "
      "Returns the report: tensors, 2:4 weights read and written, and which were compressed, pruned or "
      "left dense (with why). Errors raise sparse24.Error; nothing is left at `output` on an error.");
  m.def(
      "prune_model", &prune_model, nb::arg("model"), nb::arg("out"), nb::arg("method") = "magnitude",
      nb::arg("calibration") = nb::none(), nb::arg("permute") = false, nb::arg("targets") = "",
      nb::arg("format") = "sparse24", nb::arg("threads") = 1, nb::arg("calib_ctx") = 512,
      nb::arg("permute_seconds") = 1.0, nb::arg("permute_evaluations") = 0, nb::arg("progress") = nb::none(),
      nb::arg("int8") = false,
      "Prunes a Hugging Face encoder or decoder directory, or a GGUF decoder, to 2:4 into the new directory "
      "`out` (as `sparse24 prune-model`): method 'magnitude', 'wanda' or 'sparsegpt' (the last two need "
      "`calibration`, a list of texts, run through the engine layer by layer; a decoder's are joined and cut "
      "into sequences of calib_ctx tokens), optional input-channel permutations (each search bounded by "
      "`permute_seconds` and, if not 0, by "
      "`permute_evaluations`, a work budget that stops it alike on every machine), `targets` a regex of the "
      "weights (default: every Linear of the layers), `format` 'sparse24' or 'sparse-24-bitmask'; int8: the "
      "pruned values stored as int8 with a "
      "scale per 64 positions, as a decoder loaded with int8=True runs them (sparse24 layout only). A "
      "decoder "
      "is read and written a layer at a time. `progress(done, total)` is called between steps. Returns the "
      "report: the pruned weights (with their permutation), those skipped and why, calibration tokens, "
      "seconds. Errors raise sparse24.Error; nothing is left at `out` on any error or KeyboardInterrupt.");
}

}  // namespace sparse24::py
