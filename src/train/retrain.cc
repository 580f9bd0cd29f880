#include "train/retrain.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "sparse24/bitmask24.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "text/wordpiece.h"
#include "train/cpu_env.h"
#include "train/distill.h"
#include "train/lm_model.h"
#include "train/progress.h"

namespace sparse24::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> read_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

// The teacher and the student must be the same architecture: the same config fields that shape it and the
// same tensor names and shapes (2:4 or dense).
void check_compatible(const HfDir& teacher, const HfDir& student) {
  const nlohmann::json a = nlohmann::json::parse(teacher.config_json, nullptr, false);
  const nlohmann::json b = nlohmann::json::parse(student.config_json, nullptr, false);
  for (const char* k : {"model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                        "intermediate_size", "max_position_embeddings", "layer_norm_eps", "pad_token_id",
                        "relative_attention_num_buckets", "type_vocab_size"}) {
    const auto x = a.find(k), y = b.find(k);
    const bool same = (x == a.end()) == (y == b.end()) && (x == a.end() || *x == *y);
    if (!same)
      throw Error(student.dir + ": config.json '" + k + "' differs from " + teacher.dir +
                  "'s: not the model it was pruned from");
  }
  auto shape = [](const CheckpointTensor& t) { return t.sparse ? t.sparse->shape : t.dense.shape; };
  for (const CheckpointTensor& t : teacher.weights.tensors) {
    const CheckpointTensor* s = student.weights.find(t.name);
    if (!s) throw Error(student.dir + ": no tensor '" + t.name + "', which " + teacher.dir + " has");
    if (shape(*s) != shape(t))
      throw Error(student.dir + ": tensor '" + t.name + "' is " + shape_string(shape(*s)) + ", " +
                  teacher.dir + "'s is " + shape_string(shape(t)));
  }
  for (const CheckpointTensor& t : student.weights.tensors)
    if (!teacher.weights.find(t.name))
      throw Error(student.dir + ": tensor '" + t.name + "' is not in " + teacher.dir);
}

// Mean cosine between two encoders' embeddings of `texts` (the engine, dense GEMMs: no plan to build).
double engine_cosine(const engine::Model& a, const engine::TextModelInfo& ia, const engine::Model& b,
                     const engine::TextModelInfo& ib, const std::string& tokenizer_dir,
                     const std::vector<std::string>& texts, int threads) {
  engine::TextEncoder::Options eo;
  eo.threads = threads;
  eo.mode = engine::Mode::kDense;
  eo.batch = 32;
  engine::TextEncoder ea = engine::TextEncoder::from_model(a, ia, tokenizer_dir, "", eo);
  engine::TextEncoder eb = engine::TextEncoder::from_model(b, ib, tokenizer_dir, "", eo);
  const std::vector<float> x = ea.embed(texts), y = eb.embed(texts);
  const int64_t d = ea.dim();
  double sum = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    double xy = 0, xx = 0, yy = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double p = x[i * d + j], q = y[i * d + j];
      xy += p * q;
      xx += p * p;
      yy += q * q;
    }
    sum += xy / std::max(std::sqrt(xx * yy), 1e-30);
  }
  return sum / static_cast<double>(texts.size());
}

}  // namespace

std::string kjv_training_books(const std::string& raw) {
  static const std::regex heldout("^(Ruth|Prv|Mark|Rom)[0-9]+:[0-9]+ ");
  std::string out;
  std::istringstream in(raw);
  std::string line;
  while (std::getline(in, line)) {
    if (std::regex_search(line, heldout)) continue;
    const size_t space = line.find(' ');
    out += space == std::string::npos ? std::string() : line.substr(space + 1);
    out += '\n';
  }
  return out;
}

void run_retrain(const RetrainOptions& o) {
  const auto t0 = Clock::now();
  if (o.out_dir.empty()) throw Error("no output directory (-o)");
  if (fs::exists(o.out_dir)) throw Error(o.out_dir + ": already exists");
  if (o.steps < 1 || o.batch < 1 || o.max_tokens < 3) throw Error("--steps, --batch must be at least 1");
  keep_freed_memory();
  const int threads = o.threads > 0 ? o.threads : usable_cores();
  torch::set_num_threads(threads);
  engine::set_threads(threads);
  torch::manual_seed(o.seed);

  // ---- Read and check both directories ----
  HfDir teacher_dir = read_hf_dir(o.model_dir);
  HfDir student_dir = read_hf_dir(o.pruned_dir);
  if (student_dir.weights.sparse_count() == 0)
    throw Error(o.pruned_dir + ": no 2:4 weights (a dense directory? `sparse24 prune-model` makes one)");
  check_compatible(teacher_dir, student_dir);
  HfEncoder teacher = load_hf_torch(teacher_dir);
  HfEncoder student = load_hf_torch(student_dir);
  MaskSet masks = MaskSet::fixed(*student, stored_masks(student, student_dir.weights));
  int64_t pruned = 0;
  for (const LayerMask& l : masks.layers()) pruned += l.pruned;
  const auto sc = parse_sparsity_config(student_dir.config_json, o.pruned_dir + "/config.json");
  const CheckpointFormat layout =
      sc && sc->format == kBitmask24Format ? CheckpointFormat::kBitmask24 : CheckpointFormat::kSparse24;

  // ---- Corpus, tokenized ----
  const std::string text = o.corpus.empty() ? kjv_training_books(read_kjv("bible", "")) : [&] {
    const std::vector<uint8_t> b = read_file(o.corpus);
    return std::string(b.begin(), b.end());
  }();
  const std::vector<std::string> lines = read_lines(text);
  if (lines.empty()) throw Error((o.corpus.empty() ? "the KJV" : o.corpus) + ": no text lines");
  const text::WordPiece tok = text::WordPiece::from_dir(o.model_dir);
  const int64_t max_tokens = std::min(o.max_tokens, student->config.max_tokens);
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(lines.size());
  for (const std::string& l : lines) ids.push_back(tok.encode(l, max_tokens).ids);
  for (const auto& s : ids)
    for (int32_t id : s)
      if (id < 0 || id >= student->config.vocab)
        throw Error(o.model_dir + ": the tokenizer gives id " + std::to_string(id) +
                    ", outside the model's vocabulary");
  const double t_read = since(t0);
  std::printf(
      "retrain %s: %lld 2:4 Linears fixed, %zu sentences from %s (at most %lld tokens), %lld steps "
      "of %lld, lr %g, %d threads\n",
      o.pruned_dir.c_str(), static_cast<long long>(pruned), lines.size(),
      o.corpus.empty() ? "the KJV training books" : o.corpus.c_str(), static_cast<long long>(max_tokens),
      static_cast<long long>(o.steps), static_cast<long long>(o.batch), o.lr, threads);
  std::fflush(stdout);

  // ---- Before ----
  std::vector<std::string> eval_lines;
  engine::TextModelInfo teacher_info;
  std::optional<engine::Model> teacher_model;
  double before = 0;
  const auto t1 = Clock::now();
  if (!o.eval.empty()) {
    const std::vector<uint8_t> b = read_file(o.eval);
    eval_lines = read_lines(std::string(b.begin(), b.end()));
    if (eval_lines.empty()) throw Error(o.eval + ": no text lines");
    teacher_model = engine::load_hf_encoder(teacher_dir, &teacher_info);
    engine::TextModelInfo si;
    const engine::Model sm = engine::load_hf_encoder(student_dir, &si);
    before = engine_cosine(*teacher_model, teacher_info, sm, si, o.model_dir, eval_lines, threads);
    std::printf("before: mean cosine to %s on %s (%zu lines): %.4f\n", o.model_dir.c_str(), o.eval.c_str(),
                eval_lines.size(), before);
    std::fflush(stdout);
  }
  double t_eval = since(t1);

  // ---- Train ----
  DistillOptions d;
  d.steps = o.steps;
  d.batch = o.batch;
  d.lr = o.lr;
  d.hidden_weight = o.hidden_weight;
  d.similarity_weight = o.similarity_weight;
  d.train_embeddings = o.train_embeddings;
  d.seed = o.seed;
  const auto t2 = Clock::now();
  Progress bar("retrain", o.steps, stdout, "cos");
  double run_loss = 0, run_cos = 0;
  const bool tty = isatty(fileno(stdout)) != 0;
  const int64_t every = std::max<int64_t>(1, o.steps / 20);
  const std::vector<DistillStep> h =
      distill(student, teacher, masks, ids, tok.pad_id(), d, [&](int64_t i, const DistillStep& s) {
        const double a = i == 0 ? 1.0 : 0.05;  // running means
        run_loss += a * (s.loss - run_loss);
        run_cos += a * (s.cosine - run_cos);
        bar.update(i + 1, run_loss, run_cos);
        if (!tty && (i + 1) % every == 0 && i + 1 < o.steps) {  // a log gets a line every 5% instead
          const double el = bar.seconds();
          std::printf("step %lld/%lld: loss %.4f, cos %.4f, %s, ETA %s\n", static_cast<long long>(i + 1),
                      static_cast<long long>(o.steps), run_loss, run_cos, format_duration(el).c_str(),
                      format_duration(el * static_cast<double>(o.steps - i - 1) / static_cast<double>(i + 1))
                          .c_str());
          std::fflush(stdout);
        }
      });
  bar.finish("");
  const double t_train = since(t2);

  // ---- Check the masks, write ----
  const auto t3 = Clock::now();
  {
    torch::NoGradGuard no_grad;
    for (const LayerMask& l : masks.layers()) {
      if (!l.pruned) continue;
      if ((l.weight * (1 - l.mask)).abs().max().item<float>() != 0.0f)
        throw Error("internal: a pruned weight of '" + l.name + "' is no longer 0 (nothing written)");
      if (!torch::isfinite(l.weight).all().item<bool>())
        throw Error("'" + l.name + "' holds a non-finite weight after training (nothing written)");
    }
  }
  const Checkpoint ck = export_weights(student, student_dir.weights);
  write_hf_dir(student_dir, ck, layout, o.out_dir);
  const double t_write = since(t3);
  std::printf("wrote %s (%s): %lld 2:4 weights, masks as in %s\n", o.out_dir.c_str(),
              checkpoint_format_name(layout), static_cast<long long>(ck.sparse_count()),
              o.pruned_dir.c_str());
  std::fflush(stdout);

  // ---- After: the written directory, read back by the engine ----
  if (!o.eval.empty()) {
    const auto t4 = Clock::now();
    engine::TextModelInfo oi;
    const engine::Model om = engine::load_hf_encoder(o.out_dir, &oi);
    const double after =
        engine_cosine(*teacher_model, teacher_info, om, oi, o.model_dir, eval_lines, threads);
    std::printf("after:  mean cosine to %s on %s (%zu lines): %.4f (before %.4f)\n", o.model_dir.c_str(),
                o.eval.c_str(), eval_lines.size(), after, before);
    std::fflush(stdout);
    t_eval += since(t4);
  }
  std::printf(
      "time %s: read and tokenize %.1f s, training %.1f s (%.2f s/step), evaluation %.1f s, write %.1f s; "
      "final loss %.4f, batch cosine %.4f\n",
      format_duration(since(t0)).c_str(), t_read, t_train, t_train / static_cast<double>(o.steps), t_eval,
      t_write, h.back().loss, h.back().cosine);
}

}  // namespace sparse24::train
