// sparse24 prune-model, eval-embed, prune-experiment: one-shot 2:4 pruning of real encoders with calibration
// through the engine (include/sparse24/prune_model.h), its quality against the dense model
// (include/sparse24/embed_eval.h), and the table of methods (docs/accuracy.md).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "sparse24/checkpoint.h"
#include "sparse24/decoder.h"
#include "sparse24/embed_eval.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "sparse24/prune_model.h"
#include "sparse24/spmm.h"
#include "text/bpe.h"

namespace sparse24::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct PruneModelOpts {
  std::string model, out, targets, format = "sparse24", method = "magnitude", calib;
  bool permute = false, quiet = false, int8 = false;
  int64_t calib_lines = 512, calib_ctx = 512;
  int threads = 1;
  double permute_seconds = 1.0;
  int64_t permute_evaluations = 0;
};

json report_json(const engine::PruneModelReport& r) {
  json layers = json::array();
  for (const auto& w : r.weights)
    layers.push_back({{"name", w.name},
                      {"permutation", w.permutation},
                      {"kept_identity", w.kept_identity},
                      {"kept_permuted", w.kept_permuted},
                      {"evaluations", w.evaluations},
                      {"stopped_early", w.stopped_early}});
  return {{"weights", layers},
          {"skipped", r.skipped},
          {"calibration_sequences", r.calibration_sequences},
          {"calibration_tokens", r.calibration_tokens},
          {"seconds",
           {{"forward", r.forward_s},
            {"statistics", r.statistics_s},
            {"permute", r.permute_s},
            {"prune", r.prune_s}}}};
}

// Prunes o.model into o.out; returns the report (with the total seconds, reading and writing included).
json prune_model(const PruneModelOpts& o) {
  const auto t0 = Clock::now();
  engine::PruneModelOptions po;
  po.method = engine::parse_prune_method(o.method);
  po.permute = o.permute;
  po.int8 = o.int8;
  po.threads = o.threads;
  po.permute_seconds = o.permute_seconds;
  po.permute_evaluations = static_cast<uint64_t>(o.permute_evaluations);
  if (po.method != engine::PruneMethod::kMagnitude) {
    if (o.calib.empty()) throw Error(o.method + " needs calibration text: --calib FILE (one text per line)");
    po.calibration = spread_lines(read_lines(o.calib), o.calib_lines);
    if (po.calibration.empty()) throw Error(o.calib + ": no lines");
  }
  po.targets = o.targets;
  po.sequence_tokens = o.calib_ctx;
  std::optional<Progress> bar;
  stop_on_signals();  // the output is written while the model is pruned: interrupted, it is removed
  po.progress = [&](int64_t done, int64_t total) {
    if (stop_asked()) throw Error("interrupted: " + o.out + " not written");
    if (o.quiet) return;
    if (!bar) bar.emplace("calibrating and pruning: steps", total);
    bar->update(done);
  };
  const engine::PruneModelReport r =
      engine::prune_model(o.model, o.out, parse_checkpoint_format(o.format), po);
  const double total_s = ms_since(t0) / 1000;
  json j = report_json(r);
  j["method"] = o.method;
  j["permute"] = o.permute;
  j["int8"] = o.int8;
  j["seconds"]["total"] = total_s;
  if (!o.quiet) {
    for (const std::string& s : r.skipped) std::fprintf(stderr, "left dense: %s\n", s.c_str());
    if (o.permute)
      for (const auto& w : r.weights) {
        std::string detail;
        if (w.kept_identity > 0)
          detail = " (importance kept " + std::to_string(w.kept_identity) + " -> " +
                   std::to_string(w.kept_permuted) + "; " + std::to_string(w.evaluations) + " evaluations" +
                   (w.stopped_early ? ", stopped at the budget)" : ")");
        std::fprintf(stderr, "  %s: %s%s\n", w.name.c_str(), w.permutation.c_str(), detail.c_str());
      }
    std::printf(
        "wrote %s (%s, %s%s%s): %zu weights 2:4 from %lld calibration tokens; %.1f s (reading and writing "
        "included): forward %.1f, statistics %.1f, permutations %.1f, pruning %.1f\n",
        o.out.c_str(), o.format.c_str(), o.method.c_str(), o.permute ? " + permutations" : "",
        o.int8 ? ", int8 values" : "", r.weights.size(), static_cast<long long>(r.calibration_tokens),
        total_s, r.forward_s, r.statistics_s, r.permute_s, r.prune_s);
  }
  return j;
}

// Embeddings of `texts` by the model in `dir` (dense GEMMs for a dense model, the 2:4 kernels for a pruned
// one).
std::vector<float> embed_texts(const std::string& dir, const std::vector<std::string>& texts, int threads,
                               const char* label, int64_t* dim, const EncoderPrecisionFlags& precision = {},
                               int64_t batch = 16) {
  engine::TextEncoder::Options eo;
  precision.apply(eo);
  eo.threads = threads;
  eo.batch = batch;
  eo.mode = engine::Mode::kSparse;  // every pruned GEMM sparse; a dense model runs dense
  engine::TextEncoder enc = engine::TextEncoder::load(dir, eo);
  *dim = enc.dim();
  std::vector<float> out;
  out.reserve(texts.size() * static_cast<size_t>(*dim));
  Progress bar(label, static_cast<int64_t>(texts.size()));
  for (size_t i = 0; i < texts.size(); i += 64) {
    const std::vector<std::string> part(texts.begin() + static_cast<int64_t>(i),
                                        texts.begin() + static_cast<int64_t>(std::min(texts.size(), i + 64)));
    const std::vector<float> e = enc.embed(part);
    out.insert(out.end(), e.begin(), e.end());
    bar.update(static_cast<int64_t>(std::min(texts.size(), i + 64)));
  }
  return out;
}

json agreement_json(const engine::EmbeddingAgreement& a) {
  return {{"texts", a.texts}, {"mean_cosine", a.mean_cosine}, {"min_cosine", a.min_cosine},
          {"pairs", a.pairs}, {"spearman", a.spearman},       {"recall_at_10", a.recall_at_k}};
}

void print_agreement(const char* what, const engine::EmbeddingAgreement& a) {
  std::printf("%s: %lld texts: mean cosine %.6f (min %.6f), Spearman %.6f over %lld pairs, recall@%d %.4f\n",
              what, static_cast<long long>(a.texts), a.mean_cosine, a.min_cosine, a.spearman,
              static_cast<long long>(a.pairs), a.k, a.recall_at_k);
}

void register_prune_model_cmd(CLI::App& app) {
  auto o = std::make_shared<PruneModelOpts>();
  auto rep = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "prune-model",
      "Prune a Hugging Face encoder's or Llama decoder's Linear weights to 2:4 (magnitude, "
      "Wanda or SparseGPT with calibration text run through the engine; optional channel "
      "permutations) into a new model directory");
  cmd->add_option("model", o->model, "model directory, or a GGUF decoder (.gguf)")->required();
  cmd->add_option("-o,--output", o->out, "new model directory (must not exist)")->required();
  cmd->add_option("--method", o->method, "magnitude, wanda or sparsegpt")
      ->check(CLI::IsMember({"magnitude", "wanda", "sparsegpt"}));
  cmd->add_flag("--permute", o->permute, "permute input channels first where a producer absorbs it");
  cmd->add_flag(
      "--int8", o->int8,
      "store the pruned weights' values, and a decoder's embeddings and head, as int8 with a scale per 64 "
      "positions (sparse24 layout; what --int8 runs, without rounding at every load)");
  cmd->add_option("--calib", o->calib, "calibration text, one text per line (wanda, sparsegpt)");
  cmd->add_option("--calib-lines", o->calib_lines, "calibration lines, spread over the file (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--calib-ctx", o->calib_ctx,
                  "decoders: the calibration lines are joined and cut into sequences of this many tokens")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--targets", o->targets,
                  std::string("regex selecting the weights to prune (default: encoders ") +
                      engine::kEncoderLinears + ", decoders " + engine::kDecoderLinears + ")");
  cmd->add_option("--format", o->format, "weights layout of the output")
      ->check(CLI::IsMember({"sparse24", "sparse-24-bitmask"}));
  cmd->add_option("--threads", o->threads, "threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--permute-seconds", o->permute_seconds, "permutation search budget per Linear (per head)")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--permute-evaluations", o->permute_evaluations,
                  "work budget of each permutation search (0: none); reached before --permute-seconds, the "
                  "permutations are the same on every machine")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  cmd->add_option("--report", *rep, "write the per-weight report as JSON");
  cmd->callback([o, rep] {
    const json j = prune_model(*o);
    if (!rep->empty()) write_file_atomic(*rep, j.dump(2) + "\n");
  });
}

void register_eval_embed(CLI::App& app) {
  struct Opts {
    std::string model, reference, input, json_out;
    int64_t max_lines = 0, batch = 16;
    int threads = 1;
    EncoderPrecisionFlags precision;  // the model's, not the reference's
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("eval-embed",
                         "How closely a (pruned) encoder's embeddings agree with a reference model's on a "
                         "text file: mean cosine, "
                         "Spearman correlation of pairwise similarities, recall@10 of nearest neighbours");
  cmd->add_option("model", o->model, "model directory")->required();
  cmd->add_option("reference", o->reference, "reference model directory (e.g. the dense original)")
      ->required();
  cmd->add_option("--input", o->input, "texts, one per line")->required();
  cmd->add_option("--max-lines", o->max_lines, "at most this many lines, spread over the file (0: all)");
  cmd->add_option("--threads", o->threads, "threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--json", o->json_out, "write the metrics as JSON");
  cmd->add_option(
         "--batch", o->batch,
         "texts per engine call (1: each text alone, as a query; the kernels follow the tokens per call)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  o->precision.add_to(cmd);
  cmd->callback([o] {
    const auto t0 = Clock::now();
    const std::vector<std::string> texts = spread_lines(read_lines(o->input), o->max_lines);
    if (texts.size() < 11) throw Error(o->input + ": recall@10 needs at least 11 lines");
    int64_t dim = 0, rdim = 0;
    const std::vector<float> a =
        embed_texts(o->model, texts, o->threads, "model", &dim, o->precision, o->batch);
    const std::vector<float> b =
        embed_texts(o->reference, texts, o->threads, "reference", &rdim, {}, o->batch);
    if (dim != rdim) throw Error("the two models' embeddings have different sizes");
    const engine::EmbeddingAgreement r =
        engine::compare_embeddings(a, b, static_cast<int64_t>(texts.size()), dim);
    print_agreement(o->input.c_str(), r);
    std::fprintf(stderr, "%.1f s\n", ms_since(t0) / 1000);
    if (!o->json_out.empty()) {
      json j = agreement_json(r);
      j["model"] = o->model;
      j["reference"] = o->reference;
      j["input"] = o->input;
      j["batch"] = o->batch;
      j["values"] = engine::sparse_values_name(o->precision.values());
      j["activations"] = engine::sparse_activations_name(o->precision.activations());
      write_file_atomic(o->json_out, j.dump(2) + "\n");
    }
  });
}

// ---- prune-experiment ------------------------------------------------------------------------------------

std::string self_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

struct ExperimentOpts {
  std::string model, out, corpora, methods = "magnitude,wanda,sparsegpt";
  int threads = 1;
  int64_t calib_lines = 512, eval_lines = 1000, eval_tokens = 32768, retrain_steps = 0;
  bool no_retrain = false;
};

struct EvalSet {
  std::string name, path;
  std::vector<std::string> texts;
  std::vector<float> reference;
};

void write_plot(const std::string& dir, const json& rows) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return;
  std::string data = "# method mean_cosine spearman recall_at_10 (held-out KJV)\n";
  for (const json& r : rows) {
    const json& m = r.at("eval").at("kjv-heldout");
    data += "\"" + r.at("name").get<std::string>() + "\" " +
            std::to_string(m.at("mean_cosine").get<double>()) + " " +
            std::to_string(m.at("spearman").get<double>()) + " " +
            std::to_string(m.at("recall_at_10").get<double>()) + "\n";
  }
  write_file_atomic(dir + "/report.dat", data);
  const std::string gp =
      "set terminal pngcairo size 1100,520 font ',10' noenhanced\nset output 'report.png'\n"
      "set title 'Agreement with the dense model on held-out KJV books'\n"
      "set style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8 border -1\n"
      "set yrange [0:1.05]\nset xtics rotate by -30\nset key outside right\nset grid ytics\n"
      "plot 'report.dat' using 2:xtic(1) title 'mean cosine', '' using 3 title 'Spearman', '' using 4 title "
      "'recall@10'\n";
  write_file_atomic(dir + "/report.gp", gp);
  if (std::system(("cd " + quote(dir) + " && gnuplot report.gp >/dev/null 2>&1").c_str()) != 0)
    std::fprintf(stderr, "gnuplot failed: no report.png\n");
}

void write_report_md(const std::string& dir, const json& j) {
  std::string md = "# One-shot 2:4 pruning of " + j.at("model").get<std::string>() + "\n\n";
  md += "Reference: the dense model. Calibration and retraining: " + j.at("calibration").get<std::string>() +
        ". Evaluation: held-out KJV books (Ruth, Proverbs, Mark, Romans) and prose fortunes (`fortunes` "
        "package). CPU: " +
        j.at("cpu").get<std::string>() + ", " + std::to_string(j.at("threads").get<int>()) +
        " thread(s).\n\n";
  md +=
      "| method | KJV held-out: mean cos | Spearman | recall@10 | fortunes: mean cos | Spearman | recall@10 "
      "| "
      "seconds |\n|---|---|---|---|---|---|---|---|\n";
  char buf[512];
  for (const json& r : j.at("methods")) {
    const json& k = r.at("eval").at("kjv-heldout");
    const json& f = r.at("eval").at("fortunes");
    std::snprintf(buf, sizeof buf, "| %s | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.1f |\n",
                  r.at("name").get<std::string>().c_str(), k.at("mean_cosine").get<double>(),
                  k.at("spearman").get<double>(), k.at("recall_at_10").get<double>(),
                  f.at("mean_cosine").get<double>(), f.at("spearman").get<double>(),
                  f.at("recall_at_10").get<double>(), r.at("seconds").get<double>());
    md += buf;
  }
  md += "\nSeconds: pruning (calibration included) or retraining, not evaluation.\n";
  if (fs::exists(dir + "/report.png")) md += "\n![metrics per method](report.png)\n";
  write_file_atomic(dir + "/report.md", md);
}

// A decoder's table: perplexity on each held-out text per method (docs/accuracy.md).
void write_decoder_report(const std::string& dir, const json& j) {
  const json& rows = j.at("methods");
  std::string data;
  for (const json& r : rows)
    data += "\"" + r.at("name").get<std::string>() + "\" " +
            std::to_string(r.at("eval").at("kjv-heldout").at("perplexity").get<double>()) + " " +
            std::to_string(r.at("eval").at("fortunes").at("perplexity").get<double>()) + "\n";
  write_file_atomic(dir + "/report.dat", data);
  write_file_atomic(
      dir + "/report.gp",
      "set terminal pngcairo size 1100,520 font ',10' noenhanced\nset output 'report.png'\n"
      "set title 'Perplexity on held-out text (lower is better)'\n"
      "set style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8 border -1\n"
      "set logscale y\nset xtics rotate by -30\nset key outside right\nset grid ytics\n"
      "plot 'report.dat' using 2:xtic(1) title 'KJV held-out', '' using 3 title 'fortunes'\n");
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0 &&
      std::system(("cd " + quote(dir) + " && gnuplot report.gp >/dev/null 2>&1").c_str()) != 0)
    std::fprintf(stderr, "gnuplot failed: no report.png\n");
  std::string md = "# One-shot 2:4 pruning of " + j.at("model").get<std::string>() + "\n\n";
  md += "Reference: the dense model. Calibration: " + j.at("calibration").get<std::string>() +
        ". Evaluation: perplexity over windows of " + std::to_string(j.at("ctx").get<int64_t>()) +
        " tokens of the held-out KJV books (Ruth, Proverbs, Mark, Romans) and of prose fortunes "
        "(`fortunes` package), " +
        j.at("eval_tokens_note").get<std::string>() + ". CPU: " + j.at("cpu").get<std::string>() + ", " +
        std::to_string(j.at("threads").get<int>()) + " thread(s).\n\n";
  md += "| method | KJV held-out perplexity | fortunes perplexity | seconds |\n|---|---|---|---|\n";
  char buf[256];
  for (const json& r : rows) {
    std::snprintf(buf, sizeof buf, "| %s | %.2f | %.2f | %.1f |\n", r.at("name").get<std::string>().c_str(),
                  r.at("eval").at("kjv-heldout").at("perplexity").get<double>(),
                  r.at("eval").at("fortunes").at("perplexity").get<double>(), r.at("seconds").get<double>());
    md += buf;
  }
  md += "\nSeconds: pruning (calibration included), not evaluation.\n";
  if (fs::exists(dir + "/report.png")) md += "\n![perplexity per method](report.png)\n";
  write_file_atomic(dir + "/report.md", md);
}

std::string cpu_name() {
  return sparse24::cpu_name() + (isa_supported(Isa::kAvx512) ? " (AVX-512)" : " (AVX2 only)");
}

void cmd_prune_experiment(const ExperimentOpts& o) {
  const auto t0 = Clock::now();
  fs::create_directories(o.out + "/models");
  // A GGUF decoder: the experiment runs on its Hugging Face directory (DIR/models/dense-from-gguf).
  std::string model = o.model;
  if (is_gguf_file(o.model)) {
    model = o.out + "/models/dense-from-gguf";
    if (!fs::exists(model)) engine::gguf_to_hf_dir(o.model, model);
  }
  std::string corpora = o.corpora;
  if (corpora.empty()) {
    corpora = o.out + "/corpora";
    run_or_throw("bash " + quote(source_dir() + "/scripts/make_corpora.sh") + " " + quote(corpora),
                 "corpora");
  }
  const std::string train = corpora + "/kjv-train.txt";
  std::vector<EvalSet> sets = {{"kjv-heldout", corpora + "/kjv-heldout.txt", {}, {}},
                               {"fortunes", corpora + "/fortunes.txt", {}, {}}};
  const bool decoder = engine::is_hf_decoder(model);
  json rows = json::array();
  std::function<json(const std::string&)> measure;  // a model directory's "eval" object
  // Encoders: embeddings against the dense model's. The dense row compares the reference embeddings
  // with themselves (no second pass over the texts).
  int64_t dim = 0;
  // Decoders: perplexity over windows of 512 tokens of each text's first eval_tokens tokens.
  const int64_t ctx = 512;
  std::vector<std::vector<int32_t>> ids(sets.size());
  if (decoder) {
    const text::ByteBpe bpe = text::ByteBpe::from_dir(model);
    for (size_t i = 0; i < sets.size(); ++i) {
      const std::vector<uint8_t> b = read_file(sets[i].path);
      ids[i] = bpe.encode(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
      if (o.eval_tokens > 0 && static_cast<int64_t>(ids[i].size()) > o.eval_tokens)
        ids[i].resize(o.eval_tokens);
    }
    measure = [&](const std::string& dir) {
      engine::DecoderOptions d;
      d.threads = o.threads;
      d.max_context = ctx;
      d.prefill_layout = true;
      const engine::DecoderModel m = engine::load_hf_decoder(dir);
      engine::Decoder dec(m, d);
      json e;
      for (size_t i = 0; i < sets.size(); ++i) {
        std::optional<Progress> bar;
        const engine::Perplexity p = engine::perplexity(dec, ids[i], ctx, [&](int64_t done, int64_t total) {
          if (!bar) bar.emplace("perplexity on " + sets[i].name + ": windows", total);
          bar->update(done);
        });
        std::printf("%s, %s: perplexity %.4f over %lld tokens\n", dir.c_str(), sets[i].name.c_str(),
                    p.perplexity, static_cast<long long>(p.scored));
        std::fflush(stdout);
        e[sets[i].name] = {
            {"perplexity", p.perplexity}, {"mean_nll", p.mean_nll}, {"tokens_scored", p.scored}};
      }
      return e;
    };
  } else {
    for (EvalSet& s : sets) {
      s.texts = spread_lines(read_lines(s.path), s.name == "fortunes" ? o.eval_lines : 0);
      s.reference = embed_texts(model, s.texts, o.threads, ("dense on " + s.name).c_str(), &dim);
    }
    measure = [&](const std::string& dir) {
      json e;
      for (const EvalSet& s : sets) {
        int64_t d = dim;
        const std::vector<float> emb =
            dir == model ? s.reference
                         : embed_texts(dir, s.texts, o.threads, (dir + " on " + s.name).c_str(), &d);
        const engine::EmbeddingAgreement a =
            engine::compare_embeddings(emb, s.reference, static_cast<int64_t>(s.texts.size()), d);
        print_agreement((dir + ", " + s.name).c_str(), a);
        e[s.name] = agreement_json(a);
      }
      return e;
    };
  }
  auto evaluate = [&](const std::string& name, const std::string& dir, double seconds, json extra) {
    json r = {{"name", name}, {"dir", dir}, {"seconds", seconds}};
    r.update(extra);
    r["eval"] = measure(dir);
    rows.push_back(r);
    return r;
  };
  evaluate("dense", model, 0, json::object());

  std::vector<std::string> methods;
  for (size_t p = 0; p <= o.methods.size();) {
    const size_t e = std::min(o.methods.find(',', p), o.methods.size());
    if (e > p) methods.push_back(o.methods.substr(p, e - p));
    p = e + 1;
  }
  std::string best;
  double best_score = -std::numeric_limits<double>::infinity();
  for (const std::string& m : methods)
    for (bool permute : {false, true}) {
      PruneModelOpts po;
      po.model = model;
      po.method = m;
      po.permute = permute;
      po.calib = train;
      po.calib_lines = o.calib_lines;
      po.threads = o.threads;
      const std::string name = m + (permute ? "+permute" : "");
      po.out = o.out + "/models/" + name;
      fs::remove_all(po.out);
      std::fprintf(stderr, "== %s\n", name.c_str());
      const json pr = prune_model(po);
      const json r = evaluate(name, po.out, pr.at("seconds").at("total").get<double>(),
                              {{"calibration_tokens", pr.at("calibration_tokens")}});
      const json& k = r.at("eval").at("kjv-heldout");
      const double score = decoder ? -k.at("perplexity").get<double>()
                                   : k.at("recall_at_10").get<double>() + k.at("spearman").get<double>();
      if (score > best_score) {
        best_score = score;
        best = name;
      }
    }
  if (decoder && !o.no_retrain)
    std::fprintf(stderr, "retrain: encoders only so far; the decoder's table is one-shot\n");
  if (!decoder && !o.no_retrain && !best.empty()) {
    const std::string out = o.out + "/models/" + best + "+retrain";
    fs::remove_all(out);
    std::string cmd = quote(self_dir() + "/sparse24-train") + " retrain " + quote(model) + " " +
                      quote(o.out + "/models/" + best) + " -o " + quote(out) + " --corpus " + quote(train) +
                      " --threads " + std::to_string(o.threads);
    if (o.retrain_steps > 0) cmd += " --steps " + std::to_string(o.retrain_steps);
    const auto t1 = Clock::now();
    run_or_throw(cmd, "retraining");
    evaluate(best + "+retrain", out, ms_since(t1) / 1000, json::object());
  }
  json j = {{"model", o.model},
            {"cpu", cpu_name()},
            {"threads", o.threads},
            {"calibration", std::to_string(o.calib_lines) + " lines of " + train},
            {"best_one_shot", best},
            {"methods", rows},
            {"seconds", ms_since(t0) / 1000}};
  if (decoder) {
    j["ctx"] = ctx;
    j["eval_tokens"] = {{"kjv-heldout", ids[0].size()}, {"fortunes", ids[1].size()}};
    j["eval_tokens_note"] =
        "the first " + std::to_string(ids[0].size()) + " and " + std::to_string(ids[1].size()) + " tokens";
    write_file_atomic(o.out + "/report.json", j.dump(2) + "\n");
    write_decoder_report(o.out, j);
  } else {
    j["eval_texts"] = {{"kjv-heldout", sets[0].texts.size()}, {"fortunes", sets[1].texts.size()}};
    write_file_atomic(o.out + "/report.json", j.dump(2) + "\n");
    write_plot(o.out, rows);
    write_report_md(o.out, j);
  }
  std::printf("wrote %s/report.md, report.json%s (%.0f s)\n", o.out.c_str(),
              fs::exists(o.out + "/report.png") ? ", report.png" : "", ms_since(t0) / 1000);
}

void register_prune_experiment(CLI::App& app) {
  auto o = std::make_shared<ExperimentOpts>();
  CLI::App* cmd = app.add_subcommand(
      "prune-experiment",
      "The one-shot methods (magnitude, Wanda, SparseGPT; with and without permutations) and, for an "
      "encoder, "
      "the best one retrained, measured on held-out text (encoders: agreement with the dense embeddings; "
      "decoders: perplexity): DIR/report.md, report.json, report.png");
  cmd->add_option("model", o->model, "dense model directory, or a GGUF decoder (.gguf)")->required();
  cmd->add_option("--out", o->out, "output directory (pruned models, corpora, report)")->required();
  cmd->add_option("--corpora", o->corpora, "directory from scripts/make_corpora.sh (default: made in --out)");
  cmd->add_option("--methods", o->methods, "comma-separated one-shot methods");
  cmd->add_option("--calib-lines", o->calib_lines, "calibration lines from the KJV training books");
  cmd->add_option("--eval-lines", o->eval_lines,
                  "encoders: fortunes evaluated (spread over the file; 0: all)");
  cmd->add_option("--eval-tokens", o->eval_tokens, "decoders: tokens of each text evaluated (0: all)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--retrain-steps", o->retrain_steps, "steps of the retraining (default: retrain's own)");
  cmd->add_flag("--no-retrain", o->no_retrain, "one-shot methods only");
  cmd->callback([o] { cmd_prune_experiment(*o); });
}

}  // namespace

void register_prune_model(CLI::App& app) {
  register_prune_model_cmd(app);
  register_eval_embed(app);
  register_prune_experiment(app);
}

}  // namespace sparse24::cli
