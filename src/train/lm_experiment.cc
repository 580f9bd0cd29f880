// One-shot 2:4 pruning of the language model (magnitude, Wanda, SparseGPT, with and without permutations),
// masked retraining, the dense-model cache and the report.
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"
#include "train/cpu_env.h"
#include "train/lm_model.h"
#include "train/masks.h"

namespace sparse24::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<float> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

void assign(torch::Tensor& param, const std::vector<float>& v) {
  torch::NoGradGuard no_grad;
  param.copy_(torch::from_blob(const_cast<float*>(v.data()), param.sizes(), torch::kFloat32));
}

torch::nn::Linear& layer_of(LmBlock& b, int which) {
  switch (which) {
    case 0:
      return b->qkv;
    case 1:
      return b->proj;
    case 2:
      return b->up;
    default:
      return b->down;
  }
}
const torch::Tensor& input_of(const BlockInputs& in, int which) {
  switch (which) {
    case 0:
      return in.qkv;
    case 1:
      return in.proj;
    case 2:
      return in.up;
    default:
      return in.down;
  }
}

// Column norms of every block Linear's input on the calibration data, from the model as it is.
std::vector<std::array<std::vector<float>, 4>> input_norms(Lm& lm, const torch::Tensor& calibration) {
  torch::NoGradGuard no_grad;
  std::vector<std::array<std::vector<float>, 4>> norms;
  torch::Tensor x = lm->embed(calibration);
  for (LmBlock& b : lm->blocks) {
    BlockInputs in;
    x = b->forward(x, &in);
    std::array<std::vector<float>, 4> n;
    for (int w = 0; w < 4; ++w) {
      const torch::Tensor& t = input_of(in, w);
      n[static_cast<size_t>(w)] = column_norms(t.data_ptr<float>(), t.size(0), t.size(1));
    }
    norms.push_back(std::move(n));
  }
  return norms;
}

// Diagnostics of the dense model on the calibration batch, in one pass through the blocks.
// reconstruction_error: per pruned layer (each alone, not the sequential pass), the relative output error
// ||(W - W') X||^2 / ||W X||^2 of magnitude 2:4 (the masks given), Wanda 2:4 and SparseGPT 2:4, and the
// share of each that is the same shift for every token. Wanda ranks by the diagonal of that error, so it
// should be the lower of magnitude and Wanda on most layers.
// feature_stats: how unequal the features are. Per layer kind (averaged over the blocks), of the input
// column norms ||X_j||: coefficient of variation, max / median, and kurtosis mean(s^2) / mean(s)^2 of
// s_j = ||X_j||^2 (He et al. 2024; 1 when every feature has the same norm). For the residual stream (each
// block's input and the final one): the same kurtosis and max |x| / median |x| over all activations (Sun et
// al. 2024's massive activations).
struct Diagnostics {
  nlohmann::json reconstruction_error = nlohmann::json::object();
  int wanda_lower = 0;  // layers where Wanda's error is below magnitude's
  nlohmann::json feature_stats;
};

Diagnostics diagnostics(Lm& lm, const torch::Tensor& calibration, const std::vector<Mask>& magnitude_masks) {
  torch::NoGradGuard no_grad;
  lm->eval();
  Diagnostics d;
  auto kurtosis = [](const torch::Tensor& sq) {  // sq: per-feature sums of squares, double
    return (sq.pow(2).mean() / sq.mean().pow(2)).item<double>();
  };
  double cv[4] = {}, mom[4] = {}, kurt[4] = {};
  std::vector<double> rk, rmax;
  auto residual = [&](const torch::Tensor& x) {
    const torch::Tensor f = x.reshape({-1, x.size(-1)}).to(torch::kFloat64);
    rk.push_back(kurtosis(f.pow(2).sum(0)));
    const torch::Tensor a = f.abs();
    rmax.push_back((a.max() / a.median()).item<double>());
  };
  torch::Tensor x = lm->embed(calibration);
  size_t li = 0;
  for (size_t bi = 0; bi < lm->blocks.size(); ++bi) {
    LmBlock& b = lm->blocks[bi];
    residual(x);
    BlockInputs in;
    x = b->forward(x, &in);
    for (int which = 0; which < 4; ++which, ++li) {
      const torch::Tensor& xin = input_of(in, which);
      const torch::Tensor sq = xin.to(torch::kFloat64).pow(2).sum(0);
      const torch::Tensor n = sq.sqrt();
      cv[which] += (n.std(/*unbiased=*/false) / n.mean()).item<double>();
      mom[which] += (n.max() / n.median()).item<double>();
      kurt[which] += kurtosis(sq);

      const torch::Tensor wt = layer_of(b, which)->weight.detach();
      const int64_t rows = wt.size(0), cols = wt.size(1);
      const std::vector<float> w = to_vector(wt);
      const double denom = xin.mm(wt.t()).pow(2).sum().item<double>();
      nlohmann::json mean_share;
      auto rel = [&](std::vector<float> pruned, const char* name) {
        const torch::Tensor p = torch::from_blob(pruned.data(), {rows, cols}, torch::kFloat32).clone();
        const torch::Tensor e = xin.mm((wt - p).t()).to(torch::kFloat64);
        const double total = e.pow(2).sum().item<double>();
        // The share of the error that is the same shift for every token (its mean over the tokens).
        mean_share[name] = e.mean(0).pow(2).sum().item<double>() * static_cast<double>(e.size(0)) / total;
        return total / denom;
      };
      std::vector<float> m = w, wa = w, sg = w;
      apply_mask(m.data(), magnitude_masks[li]);
      apply_mask(wa.data(),
                 wanda_mask(w.data(), rows, cols, column_norms(xin.data_ptr<float>(), xin.size(0), cols)));
      Hessian h(cols);
      h.add(xin.data_ptr<float>(), xin.size(0));
      sparsegpt_prune(sg.data(), rows, cols, h);
      const double em = rel(m, "magnitude"), ew = rel(wa, "wanda"), es = rel(sg, "sparsegpt");
      d.wanda_lower += ew < em;
      d.reconstruction_error["blocks." + std::to_string(bi) + "." + kLmLayerKinds[which]] = {
          {"magnitude", em}, {"wanda", ew}, {"sparsegpt", es}, {"mean_share", mean_share}};
    }
  }
  residual(x);
  const double nb = static_cast<double>(lm->blocks.size());
  for (int w = 0; w < 4; ++w)
    d.feature_stats[kLmLayerKinds[w]] = {
        {"cv", cv[w] / nb}, {"max_over_median", mom[w] / nb}, {"kurtosis", kurt[w] / nb}};
  d.feature_stats["residual"] = {{"kurtosis", rk}, {"max_abs_over_median", rmax}};
  return d;
}

// |W| or the Wanda score |W| * norm (norm per column), [rows, cols] as floats.
std::vector<float> score(const torch::Tensor& w, const std::vector<float>* norms) {
  std::vector<float> s = to_vector(w);
  const auto cols = static_cast<size_t>(w.size(1));
  for (size_t i = 0; i < s.size(); ++i) s[i] = std::abs(s[i]) * (norms ? (*norms)[i % cols] : 1.f);
  return s;
}

LmPermutation search_permutations(Lm& lm, const torch::Tensor& calibration, const LmPruneOptions& o,
                                  LmPruneStats& stats) {
  const LmConfig& c = lm->config;
  std::vector<std::array<std::vector<float>, 4>> norms;
  if (o.method != LmMethod::kMagnitude) norms = input_norms(lm, calibration);
  auto norm_of = [&](size_t block, int which) -> const std::vector<float>* {
    return norms.empty() ? nullptr : &norms[block][static_cast<size_t>(which)];
  };
  PermutationOptions po;
  po.max_seconds = o.permutation_seconds;
  po.max_evaluations = o.permutation_evaluations;
  po.seed = o.seed;
  auto search = [&](const std::vector<float>& m, int64_t rows, int64_t cols) {
    const PermutationResult r = search_permutation(m.data(), rows, cols, po);
    stats.kept_identity += r.kept_identity;
    stats.kept_permuted += r.kept_permuted;
    stats.kept_unstructured += r.kept_unstructured;
    ++stats.searches;
    return r.perm;
  };
  LmPermutation p;
  // The residual stream: qkv and up of every block read it (through their LayerNorm); their rows stacked.
  std::vector<float> stacked;
  int64_t rows = 0;
  for (size_t i = 0; i < lm->blocks.size(); ++i) {
    LmBlock& b = lm->blocks[i];
    for (int which : {0, 2}) {
      const torch::Tensor& w = layer_of(b, which)->weight;
      const std::vector<float> s = score(w, norm_of(i, which));
      stacked.insert(stacked.end(), s.begin(), s.end());
      rows += w.size(0);
    }
  }
  p.residual = search(stacked, rows, c.d_model);
  // Per block: FFN hidden channels (down's columns) and within-head channels (proj's columns).
  const int64_t hd = c.d_model / c.heads;
  for (size_t i = 0; i < lm->blocks.size(); ++i) {
    LmBlock& b = lm->blocks[i];
    p.ffn.push_back(search(score(b->down->weight, norm_of(i, 3)), c.d_model, c.d_ff));
    const std::vector<float> s = score(b->proj->weight, norm_of(i, 1));
    std::vector<int64_t> head_perm;
    for (int64_t h = 0; h < c.heads; ++h) {
      std::vector<float> part(static_cast<size_t>(c.d_model * hd));
      for (int64_t r = 0; r < c.d_model; ++r)
        for (int64_t j = 0; j < hd; ++j)
          part[static_cast<size_t>(r * hd + j)] = s[static_cast<size_t>(r * c.d_model + h * hd + j)];
      for (int64_t v : search(part, c.d_model, hd)) head_perm.push_back(h * hd + v);
    }
    p.head.push_back(std::move(head_perm));
  }
  return p;
}

void prune_layer(torch::nn::Linear& l, LmMethod method, const torch::Tensor* x) {
  torch::Tensor& weight = l->weight;
  const int64_t rows = weight.size(0), cols = weight.size(1);
  std::vector<float> w = to_vector(weight);
  if (method == LmMethod::kMagnitude) {
    apply_mask(w.data(), magnitude_mask(w.data(), rows, cols));
  } else if (method == LmMethod::kWanda) {
    const std::vector<float> norms = column_norms(x->data_ptr<float>(), x->size(0), cols);
    apply_mask(w.data(), wanda_mask(w.data(), rows, cols, norms));
  } else {
    Hessian h(cols);
    h.add(x->data_ptr<float>(), x->size(0));
    sparsegpt_prune(w.data(), rows, cols, h);
  }
  assign(weight, w);
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

nlohmann::json config_json(const LmConfig& c) {
  nlohmann::json j = {{"vocab", c.vocab}, {"d_model", c.d_model}, {"layers", c.layers},
                      {"heads", c.heads}, {"d_ff", c.d_ff},       {"context", c.context}};
  if (c.bos) j["bos"] = true;  // absent when false, so caches of models without BOS stay valid
  return j;
}

int64_t parameter_count(Lm& lm) {
  int64_t n = 0;
  for (const torch::Tensor& p : lm->parameters()) n += p.numel();
  return n;
}

// A copy of every parameter, to restore the dense model between methods.
std::vector<torch::Tensor> snapshot(Lm& lm) {
  std::vector<torch::Tensor> s;
  for (const torch::Tensor& p : lm->parameters()) s.push_back(p.detach().clone());
  return s;
}
void restore(Lm& lm, const std::vector<torch::Tensor>& s) {
  torch::NoGradGuard no_grad;
  size_t i = 0;
  for (torch::Tensor& p : lm->parameters()) p.copy_(s[i++]);
}

void make_out_dir(const std::string& out) {
  namespace fs = std::filesystem;
  if (out.empty()) throw Error("--out: empty directory name");
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec))
    throw Error("--out '" + out + "' exists and is not a directory");
  fs::create_directories(out, ec);
  if (ec) throw Error("cannot create output directory '" + out + "': " + ec.message());
  if (access(out.c_str(), W_OK) != 0) throw Error("output directory '" + out + "' is not writable");
}

}  // namespace

LmPruneStats prune_lm(Lm& lm, const torch::Tensor& calibration, const LmPruneOptions& o) {
  const auto t0 = Clock::now();
  LmPruneStats stats;
  torch::NoGradGuard no_grad;
  lm->eval();
  if (o.permute) permute_lm(lm, search_permutations(lm, calibration, o, stats));
  if (o.method == LmMethod::kMagnitude) {
    for (LmBlock& b : lm->blocks)
      for (int which = 0; which < 4; ++which) prune_layer(layer_of(b, which), o.method, nullptr);
  } else {
    torch::Tensor x = lm->embed(calibration);
    for (LmBlock& b : lm->blocks) {
      for (int which = 0; which < 4; ++which) {
        BlockInputs in;
        b->forward(x, &in);  // the inputs of this layer with the earlier layers already pruned
        prune_layer(layer_of(b, which), o.method, &input_of(in, which));
      }
      x = b->forward(x);
    }
  }
  for (size_t i = 0; i < lm->blocks.size(); ++i)
    for (int which = 0; which < 4; ++which) {
      const torch::Tensor& w = layer_of(lm->blocks[i], which)->weight;
      const std::vector<float> v = to_vector(w);
      if (!check_pattern(v.data(), w.size(0), w.size(1)).valid)
        throw Error("block " + std::to_string(i) + ": a pruned weight is not 2:4");
    }
  stats.seconds = since(t0);
  return stats;
}

LmExperimentResult run_lm_experiment(const LmExperimentOptions& o) {
  const auto t0 = Clock::now();
  o.config.validate();
  make_out_dir(o.out);
  const int threads = o.threads > 0 ? o.threads : usable_cores();
  keep_freed_memory();
  set_lm_threads(threads);
  std::FILE* log = o.log;

  const KjvSplit split = split_kjv(read_kjv(o.bible_program, o.text_file));
  const torch::Tensor train_tokens = to_tokens(split.train), valid_tokens = to_tokens(split.valid);
  const int64_t steps = o.steps > 0 ? o.steps : kDefaultSteps;
  const int64_t retrain_steps = o.retrain_steps > 0 ? o.retrain_steps : kDefaultRetrainSteps;
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::fprintf(log,
               "%s: King James Bible, %lld verses, %lld training / %lld validation bytes (validation books:",
               o.out.c_str(), static_cast<long long>(split.verses),
               static_cast<long long>(split.train.size()), static_cast<long long>(split.valid.size()));
  for (const std::string& b : split.valid_books) std::fprintf(log, " %s", b.c_str());
  std::fprintf(log, "); libtorch threads %d, OPENBLAS_CORETYPE=%s\n", threads, core ? core : "(unset)");

  // Dense model: cached in DIR/dense.pt, valid while DIR/dense.json matches this run's fingerprint.
  const nlohmann::json fingerprint = {{"format", "sparse24-lm-dense"},
                                      {"version", 1},
                                      {"config", config_json(o.config)},
                                      {"seed", o.seed},
                                      {"steps", steps},
                                      {"batch", o.batch},
                                      {"lr", o.lr},
                                      {"train_bytes", split.train.size()},
                                      {"train_fnv1a", fnv1a(split.train)},
                                      {"valid_fnv1a", fnv1a(split.valid)}};
  const std::string dense_pt = o.out + "/dense.pt", dense_json = o.out + "/dense.json";
  torch::manual_seed(o.seed);
  Lm lm(o.config);
  LmExperimentResult r;
  bool cached = false;
  std::error_code ec;
  if (std::filesystem::exists(dense_json, ec) && std::filesystem::exists(dense_pt, ec)) {
    try {
      const std::vector<uint8_t> bytes = read_file(dense_json);
      cached = nlohmann::json::parse(bytes.begin(), bytes.end()) == fingerprint;
    } catch (const std::exception&) {
      cached = false;
    }
  }
  if (cached) {
    torch::load(lm, dense_pt);
    std::fprintf(log, "dense model: loaded from %s (delete it to retrain)\n", dense_pt.c_str());
  } else {
    std::fprintf(log, "dense model: %lld parameters, training %lld steps of %lld x %lld bytes\n",
                 static_cast<long long>(parameter_count(lm)), static_cast<long long>(steps),
                 static_cast<long long>(o.batch), static_cast<long long>(o.config.context));
    LmTrainOptions to;
    to.steps = steps;
    to.batch = o.batch;
    to.lr = o.lr;
    to.seed = o.seed;
    to.label = "dense";
    to.log = log;
    to.valid = &valid_tokens;
    const auto tt = Clock::now();
    train_lm(lm, train_tokens, to, nullptr);
    r.dense_train_seconds = since(tt);
    const std::string tmp = dense_pt + ".tmp." + std::to_string(getpid());
    torch::save(lm, tmp);
    std::filesystem::rename(tmp, dense_pt, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      throw Error("cannot write '" + dense_pt + "'");
    }
    write_file_atomic(dense_json, fingerprint.dump(2) + "\n");
  }
  r.dense_cached = cached;
  const int64_t eval_windows = o.eval_sequences;
  auto eval = [&]() { return perplexity(lm, valid_tokens, eval_windows); };
  r.dense_ppl = eval();
  std::fprintf(log, "dense: validation perplexity %.4f\n", r.dense_ppl);
  const std::vector<torch::Tensor> dense = snapshot(lm);

  torch::Tensor calibration =
      sample_windows(train_tokens, o.calibration, o.config.context, o.seed, uint64_t{1} << 40);
  if (o.config.bos) {  // BOS and the window's first context - 1 bytes, as the model reads them
    torch::Tensor inputs, targets;
    split_window(o.config, calibration, inputs, targets);
    calibration = inputs;
  }
  // For the report: the magnitude masks of the dense weights (to compare the other methods' masks with, and
  // for the diagnostics).
  std::vector<Mask> magnitude_masks;
  for (LmBlock& b : lm->blocks)
    for (int which = 0; which < 4; ++which) {
      const std::vector<float> w = to_vector(layer_of(b, which)->weight);
      magnitude_masks.push_back(
          magnitude_mask(w.data(), layer_of(b, which)->weight.size(0), layer_of(b, which)->weight.size(1)));
    }
  auto agreement = [&]() {  // share of positions where the current zero pattern equals the magnitude mask's
    int64_t same = 0, total = 0;
    size_t li = 0;
    for (LmBlock& b : lm->blocks)
      for (int which = 0; which < 4; ++which, ++li) {
        const std::vector<float> w = to_vector(layer_of(b, which)->weight);
        for (size_t i = 0; i < w.size(); ++i) same += (w[i] != 0.f) == (magnitude_masks[li][i] != 0);
        total += static_cast<int64_t>(w.size());
      }
    return static_cast<double>(same) / static_cast<double>(total);
  };
  struct Run {
    const char* key;
    const char* label;
    LmMethod method;
    bool permute;
    LmMethodResult* out;
  };
  const Run runs[] = {
      {"magnitude", "magnitude", LmMethod::kMagnitude, false, &r.magnitude},
      {"magnitude_perm", "magnitude + permutation", LmMethod::kMagnitude, true, &r.magnitude_perm},
      {"wanda", "Wanda", LmMethod::kWanda, false, &r.wanda},
      {"wanda_perm", "Wanda + permutation", LmMethod::kWanda, true, &r.wanda_perm},
      {"sparsegpt", "SparseGPT", LmMethod::kSparseGpt, false, &r.sparsegpt},
      {"sparsegpt_perm", "SparseGPT + permutation", LmMethod::kSparseGpt, true, &r.sparsegpt_perm},
  };
  nlohmann::json report = {{"dense_ppl", r.dense_ppl}};
  {
    const auto td = Clock::now();
    Diagnostics d = diagnostics(lm, calibration, magnitude_masks);
    std::fprintf(log,
                 "diagnostics: Wanda's reconstruction error below magnitude's on %d of %zu layers (%.1f s)\n",
                 d.wanda_lower, d.reconstruction_error.size(), since(td));
    report["reconstruction_error"] = std::move(d.reconstruction_error);
    report["reconstruction_wanda_lower_layers"] = d.wanda_lower;
    nlohmann::json norm_cv;  // kept as its own key: earlier reports have it
    for (const char* kind : kLmLayerKinds) norm_cv[kind] = d.feature_stats[kind]["cv"];
    report["input_norm_cv"] = norm_cv;
    report["feature_stats"] = std::move(d.feature_stats);
  }
  for (const Run& run : runs) {
    restore(lm, dense);
    LmPruneOptions po;
    po.method = run.method;
    po.permute = run.permute;
    po.permutation_seconds = o.permutation_seconds;
    po.permutation_evaluations = static_cast<uint64_t>(o.permutation_evaluations);
    po.seed = o.seed;
    const LmPruneStats st = prune_lm(lm, calibration, po);
    run.out->seconds = st.seconds;
    run.out->ppl = eval();
    nlohmann::json j = {{"ppl", run.out->ppl}, {"seconds", st.seconds}};
    if (run.permute) {
      const double gap = st.kept_unstructured - st.kept_identity;
      j["permutation"] = {{"searches", st.searches},
                          {"kept_identity", st.kept_identity},
                          {"kept_permuted", st.kept_permuted},
                          {"kept_unstructured", st.kept_unstructured},
                          {"recovered", gap > 0 ? (st.kept_permuted - st.kept_identity) / gap : 0.0}};
    }
    if (!run.permute) j["mask_agreement_with_magnitude"] = agreement();
    report[run.key] = j;
    std::fprintf(log, "%s: validation perplexity %.4f (pruning %.1f s)\n", run.label, run.out->ppl,
                 st.seconds);
  }

  // Magnitude 2:4, then a short retraining with the mask fixed (masks.h).
  restore(lm, dense);
  const auto tr = Clock::now();
  MaskOptions mo;
  mo.allow = prunable_layers(o.config);
  MaskSet masks = MaskSet::prune(*lm, mo);
  LmTrainOptions ro;
  ro.steps = retrain_steps;
  ro.batch = o.batch;
  ro.lr = o.retrain_lr;
  ro.seed = o.seed + 1000;  // fresh batches, not a replay of the dense run's first steps
  ro.label = "retrain";
  ro.log = log;
  ro.valid = &valid_tokens;
  train_lm(lm, train_tokens, ro, &masks);
  r.magnitude_retrained.seconds = since(tr);
  int64_t pruned_layers = 0;
  for (const LayerMask& l : masks.layers()) {
    if (!l.pruned) continue;
    ++pruned_layers;
    const std::vector<float> w = to_vector(l.weight);
    if ((l.weight.detach() * (1 - l.mask)).abs().max().item<float>() != 0.f ||
        !check_pattern(w.data(), l.shape[0], l.shape[1]).valid)
      throw Error("layer '" + l.name + "': not 2:4 after retraining");
  }
  if (pruned_layers != static_cast<int64_t>(mo.allow.size()))
    throw Error("retraining: expected " + std::to_string(mo.allow.size()) + " pruned layers");
  r.magnitude_retrained.ppl = eval();
  std::fprintf(log, "magnitude + retraining: validation perplexity %.4f (%.1f s)\n",
               r.magnitude_retrained.ppl, r.magnitude_retrained.seconds);
  report["magnitude_retrained"] = {{"ppl", r.magnitude_retrained.ppl},
                                   {"seconds", r.magnitude_retrained.seconds},
                                   {"steps", retrain_steps},
                                   {"lr", o.retrain_lr}};

  // Control: the dense model trained for the same extra steps without a mask. Retraining is also extra
  // training of an undertrained model; this row shows how much of the retrained number that alone gives.
  restore(lm, dense);
  const auto tc = Clock::now();
  ro.label = "dense continued";
  train_lm(lm, train_tokens, ro, nullptr);
  r.dense_continued.seconds = since(tc);
  r.dense_continued.ppl = eval();
  std::fprintf(log, "dense + %lld more steps (control): validation perplexity %.4f\n",
               static_cast<long long>(retrain_steps), r.dense_continued.ppl);
  report["dense_continued"] = {
      {"ppl", r.dense_continued.ppl}, {"seconds", r.dense_continued.seconds}, {"steps", retrain_steps}};
  r.seconds = since(t0);

  report["dense_cached"] = cached;
  report["dense_train_seconds"] = r.dense_train_seconds;
  report["dense_steps"] = steps;
  report["dense_lr"] = o.lr;
  report["config"] = config_json(o.config);
  report["parameters"] = parameter_count(lm);
  report["pruned_layers"] = mo.allow;
  report["data"] = {{"verses", split.verses},
                    {"train_bytes", split.train.size()},
                    {"valid_bytes", split.valid.size()},
                    {"valid_books", split.valid_books},
                    {"eval_windows", eval_windows}};
  report["calibration_sequences"] = o.calibration;
  report["seed"] = o.seed;
  report["threads"] = threads;
  report["seconds"] = r.seconds;
  write_file_atomic(o.out + "/report.json", report.dump(2) + "\n");

  auto mean_error = [&](const char* method) {
    double sum = 0;
    for (const auto& layer : report["reconstruction_error"]) sum += layer[method].get<double>();
    return sum / static_cast<double>(report["reconstruction_error"].size());
  };
  std::string md = "# Language model: one-shot and retrained 2:4 (sparse24 lm-experiment)\n\n";
  md += "Byte-level decoder-only transformer (d_model " + std::to_string(o.config.d_model) + ", " +
        std::to_string(o.config.layers) + " blocks, " + std::to_string(o.config.heads) + " heads, d_ff " +
        std::to_string(o.config.d_ff) + ", context " + std::to_string(o.config.context) + ", " +
        std::to_string(parameter_count(lm)) +
        " parameters) on the King James Bible; validation = " + std::to_string(split.valid.size()) +
        " bytes of whole books (";
  for (size_t i = 0; i < split.valid_books.size(); ++i) md += (i ? ", " : "") + split.valid_books[i];
  md += "). Dense model " +
        std::string(cached ? "loaded from the cache" : "trained " + std::to_string(steps) + " steps") +
        ". Pruned: every Linear of the blocks (qkv, proj, up, down); embeddings and LM head dense.\n\n";
  md += "| method | validation perplexity | vs dense | seconds |\n|---|---|---|---|\n";
  md += "| dense | " + fixed(r.dense_ppl, 4) + " | | " + fixed(r.dense_train_seconds, 1) +
        (cached ? " (cached)" : " (training)") + " |\n";
  auto row = [&](const std::string& label, const LmMethodResult& m) {
    md += "| " + label + " | " + fixed(m.ppl, 4) + " | " + (m.ppl >= r.dense_ppl ? "+" : "") +
          fixed(100 * (m.ppl / r.dense_ppl - 1), 2) + "% | " + fixed(m.seconds, 1) + " |\n";
  };
  for (const Run& run : runs) row(std::string("2:4 ") + run.label, *run.out);
  row("2:4 magnitude + retraining (" + std::to_string(retrain_steps) + " steps)", r.magnitude_retrained);
  row("control: dense + " + std::to_string(retrain_steps) + " more steps, no mask", r.dense_continued);
  md +=
      "\nSeconds: pruning time (permutation search, calibration forward passes, masks) without the "
      "evaluation; for the retrained row pruning plus retraining, for the control its training. Whole run: " +
      fixed(r.seconds, 0) +
      " s.\n\nRelative output error ||(W - W')X||^2 / ||WX||^2 of each pruned layer on the "
      "calibration inputs of the dense model, mean over the " +
      std::to_string(report["reconstruction_error"].size()) + " layers: magnitude " +
      fixed(mean_error("magnitude"), 4) + ", Wanda " + fixed(mean_error("wanda"), 4) + ", SparseGPT " +
      fixed(mean_error("sparsegpt"), 4) + "; Wanda below magnitude on " +
      std::to_string(report["reconstruction_wanda_lower_layers"].get<int>()) + " layers.\n";
  write_file_atomic(o.out + "/report.md", md);
  std::fprintf(log, "wrote %s/report.md and %s/report.json (%.0f s)\n", o.out.c_str(), o.out.c_str(),
               r.seconds);
  return r;
}

}  // namespace sparse24::train
