// One-shot pruning of a Hugging Face encoder with calibration through the engine (prune_model.h).
#include "sparse24/prune_model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "sparse24/decoder.h"
#include "sparse24/dtype.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "text/bpe.h"
#include "text/wordpiece.h"

namespace sparse24::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What can absorb a permutation of a GEMM's input channels: the tensors whose rows produce them.
struct Producer {
  std::vector<std::string> rows_of;  // each takes the permutation on its rows (and bias); empty: none can
  int64_t head_dim = 0;              // > 0: the channels are attention heads' and may not leave their head
  int64_t group = 1;                 // query heads per V head (grouped-query attention): they share V's rows,
                                     // so one permutation serves the group
  std::string reason;                // rows_of empty: why not
};

const char* const kResidual =
    "its input is read by other layers too (the residual stream): nothing can absorb a permutation";

// An encoder graph's producer of GEMM `gemm`'s input: which op writes each tensor, how many ops read it.
Producer find_producer(const Model& m, int gemm) {
  std::vector<int> writer(m.tensors.size(), -1), readers(m.tensors.size(), 0);
  int in = -1;
  for (size_t i = 0; i < m.ops.size(); ++i) {
    const Op& op = m.ops[i];
    writer[op.out] = static_cast<int>(i);
    if (op.in >= 0) ++readers[op.in];
    if (op.in2 >= 0) ++readers[op.in2];
    if (op.kind == OpKind::kGemm && op.gemm == gemm) in = op.in;
  }
  Producer p;
  p.reason = kResidual;
  if (in < 0 || writer[in] < 0 || readers[in] != 1) return p;
  const Op& w = m.ops[writer[in]];
  if (w.kind == OpKind::kGemm) {
    if (m.gemms[w.gemm].sources.size() != 1) {
      p.reason = "its producer is a fused GEMM";
      return p;
    }
    p.rows_of = m.gemms[w.gemm].sources;
    return p;
  }
  if (w.kind == OpKind::kAttention && writer[w.in] >= 0 && readers[w.in] == 1 &&
      m.ops[writer[w.in]].kind == OpKind::kGemm && m.gemms[m.ops[writer[w.in]].gemm].sources.size() == 3) {
    p.rows_of = {m.gemms[m.ops[writer[w.in]].gemm].sources[2]};
    p.head_dim = m.gemms[gemm].k / w.heads;
    return p;
  }
  p.reason = "its producer cannot absorb a permutation";
  return p;
}

// The dtype a pruned or permuted tensor is stored in: its own when half precision (bf16 stays bf16), else
// fp32.
DType kept_dtype(const std::string& st_dtype) {
  return st_dtype == "BF16" || st_dtype == "F16" ? dtype_from_st(st_dtype) : DType::kF32;
}

// The checkpoint's float weights, read and written by name (float32 while the pruning runs).
class Tensors {
 public:
  explicit Tensors(Checkpoint& ck) {
    for (CheckpointTensor& t : ck.tensors) by_name_[t.name] = &t;
  }
  CheckpointTensor* find(const std::string& name) {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  std::vector<float> get(const std::string& name) {
    CheckpointTensor& t = *by_name_.at(name);
    return t.sparse ? decompress(*t.sparse).to_float() : from_st(t.dense, name).to_float();
  }
  std::vector<int64_t> shape(const std::string& name) {
    CheckpointTensor& t = *by_name_.at(name);
    return t.sparse ? t.sparse->shape : t.dense.shape;
  }
  // Stored in the tensor's own float dtype (bf16 stays bf16), float32 otherwise.
  void set(const std::string& name, const std::vector<float>& v) {
    CheckpointTensor& t = *by_name_.at(name);
    const std::vector<int64_t> s = shape(name);
    const DType d = t.sparse ? DType::kF32 : kept_dtype(t.dense.dtype);
    t.sparse.reset();
    t.dense = to_st(Tensor::from_float(v, s, d));
  }

 private:
  std::map<std::string, CheckpointTensor*> by_name_;
};

std::string bias_of(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() < suffix.size() ||
      weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return weight.substr(0, weight.size() - suffix.size()) + ".bias";
}

// Rows [row0, row0 + perm.size()) of a [rows, cols] tensor (and the same entries of its bias) permuted.
void permute_rows_of(Tensors& t, const std::string& weight, int64_t row0, const std::vector<int64_t>& perm) {
  std::vector<float> w = t.get(weight);
  const int64_t cols = t.shape(weight)[1], n = static_cast<int64_t>(perm.size());
  permute_rows(w.data() + row0 * cols, n, cols, perm);
  t.set(weight, w);
  const std::string b = bias_of(weight);
  if (!b.empty() && t.find(b) != nullptr) {
    std::vector<float> bias = t.get(b);
    std::vector<float> old(bias.begin() + row0, bias.begin() + row0 + n);
    for (int64_t r = 0; r < n; ++r) bias[static_cast<size_t>(row0 + r)] = old[static_cast<size_t>(perm[r])];
    t.set(b, bias);
  }
}

// The statistics of one GEMM's input over the calibration text.
struct Stats {
  std::optional<Hessian> hessian;  // SparseGPT
  std::vector<double> sumsq;       // Wanda
  Stats(PruneMethod m, int64_t k) {
    if (m == PruneMethod::kSparseGpt)
      hessian.emplace(k);
    else
      sumsq.assign(static_cast<size_t>(k), 0.0);
  }
  // x: [k, n] feature-major; xt: scratch.
  void add(const float* x, int64_t k, int64_t n, std::vector<float>& xt) {
    if (hessian) {
      xt.resize(static_cast<size_t>(k * n));  // [tokens, k]
      for (int64_t r = 0; r < k; ++r)
        for (int64_t j = 0; j < n; ++j) xt[static_cast<size_t>(j * k + r)] = x[r * n + j];
      hessian->add(xt.data(), n);
      return;
    }
    for (int64_t r = 0; r < k; ++r) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[r * n + j]) * x[r * n + j];
      sumsq[static_cast<size_t>(r)] += s;
    }
  }
  std::vector<float> norms() const {
    if (hessian) return hessian->column_norms();
    std::vector<float> n(sumsq.size());
    for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<float>(std::sqrt(sumsq[i]));
    return n;
  }
};

// What both model kinds share: the targets of each GEMM, the per-GEMM pruning (permutation, method) into
// the checkpoint's tensors, the report and the progress count.
class Pruner {
 public:
  Pruner(Checkpoint& weights, const PruneModelOptions& o, const char* default_targets)
      : o_(o), tensors_(weights), targets_(o.targets.empty() ? default_targets : o.targets) {
    if (o.threads < 1) throw Error("threads must be at least 1");
    if (o.tokens_per_call < 1) throw Error("tokens per call must be at least 1");
    try {
      re_ = std::regex(targets_, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      throw Error("--targets '" + targets_ + "' is not a valid regular expression");
    }
  }
  bool calibrated() const { return o_.method != PruneMethod::kMagnitude; }
  bool targeted(const std::string& name) const { return std::regex_search(name, re_); }
  const std::string& targets() const { return targets_; }
  // The weights read and written from now on (a decoder's layer at a time).
  void use(Checkpoint& weights) { tensors_ = Tensors(weights); }
  // The weights of `g` to prune: its sources the targets match (a weight already 2:4 or with columns not
  // a multiple of 4 is reported as skipped).
  std::vector<std::string> select(const Gemm& g) {
    std::vector<std::string> out;
    for (const std::string& s : g.sources) {
      if (!std::regex_search(s, re_)) continue;
      const CheckpointTensor* t = tensors_.find(s);
      if (t == nullptr) continue;
      if (t->sparse) {
        report_.skipped.push_back(s + ": already 2:4");
      } else if (g.k % 4 != 0) {
        report_.skipped.push_back(s + ": columns not a multiple of 4");
      } else {
        out.push_back(s);
      }
    }
    total_ += static_cast<int64_t>(out.size());
    return out;
  }
  void check_any() const {
    if (total_ == 0) throw Error("no weight matched --targets '" + targets_ + "'");
    if (calibrated() && o_.calibration.empty() && o_.calibration_ids.empty())
      throw Error(std::string(prune_method_name(o_.method)) + " needs calibration text");
  }
  int64_t total() const { return total_; }
  void step(int64_t units_total) {
    if (o_.progress) o_.progress(++done_, units_total);
  }
  Tensors& tensors() { return tensors_; }
  PruneModelReport& report() { return report_; }

  // Prunes the targets of GEMM g (their rows stacked), after permuting its input channels with `p`'s rows
  // when asked; `stats` holds its input statistics (calibrated methods).
  void prune(const Gemm& g, const std::vector<std::string>& targets, Stats* stats, const Producer& p,
             int64_t units_total) {
    const int64_t k = g.k;
    std::vector<float> w;
    std::vector<int64_t> rows_of;
    for (const std::string& s : targets) {
      const std::vector<float> v = tensors_.get(s);
      w.insert(w.end(), v.begin(), v.end());
      rows_of.push_back(static_cast<int64_t>(v.size()) / k);
    }
    const int64_t rows = static_cast<int64_t>(w.size()) / k;
    std::vector<float> norms;
    if (stats != nullptr) norms = stats->norms();

    PrunedWeight rec;
    if (o_.permute) {
      const auto t0 = Clock::now();
      permute(g, targets, w, rows, norms, stats, p, rec);
      report_.permute_s += seconds_since(t0);
    }
    const auto t1 = Clock::now();
    switch (o_.method) {
      case PruneMethod::kMagnitude:
        apply_mask(w.data(), magnitude_mask(w.data(), rows, k));
        break;
      case PruneMethod::kWanda:
        apply_mask(w.data(), wanda_mask(w.data(), rows, k, norms));
        break;
      case PruneMethod::kSparseGpt:
        sparsegpt_prune(w.data(), rows, k, *stats->hessian, o_.sparsegpt);
        break;
    }
    report_.prune_s += seconds_since(t1);
    int64_t r0 = 0;
    for (size_t i = 0; i < targets.size(); ++i) {
      const auto begin = w.begin() + r0 * k;
      tensors_.set(targets[i], std::vector<float>(begin, begin + rows_of[i] * k));
      r0 += rows_of[i];
      PrunedWeight pw = rec;
      pw.name = targets[i];
      report_.weights.push_back(pw);
      step(units_total);
    }
  }

  // Magnitude without permutations, whose targets' tensors may be placeholders (their stored type and
  // shape, no bytes: fast_placeholder): each target's rows of g's fp32 rows (rounded to its stored type, as
  // the general path reads them) pruned straight into its 2:4 tensor a block of rows at a time (prune_rows,
  // what loading with --prune runs; int8 values with options.int8): the values and codes of magnitude_mask
  // and compress, without the dense copies in between, whose fresh pages were most of a decoder's
  // prune-model (a 1B model's took 58 s, 30 of them in the kernel).
  static bool fast_kept(DType kept) { return kept == DType::kF32 || kept == DType::kBF16; }
  bool fast() const { return o_.method == PruneMethod::kMagnitude && !o_.permute; }
  void prune_magnitude_rows(const Gemm& g, const std::vector<std::string>& targets, int64_t units_total) {
    const auto t0 = Clock::now();
    const int64_t k = g.k;
    int64_t row0 = 0;
    std::vector<float> block;
    for (const std::string& s : g.sources) {
      const int64_t rows = tensors_.shape(s).at(0);
      if (std::find(targets.begin(), targets.end(), s) != targets.end()) {
        CheckpointTensor& t = *tensors_.find(s);
        const DType kept = dtype_from_st(t.dense.dtype);
        Compressed c = pruned_layout(rows, k, o_.int8 ? DType::kI8 : kept, detail::kInt8ScaleGroup);
        const int64_t step_rows = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(k, 1));
        for (int64_t r = 0; r < rows; r += step_rows) {
          const int64_t n = std::min(step_rows, rows - r);
          const float* w = g.dense.data() + (row0 + r) * k;
          if (kept == DType::kBF16) {
            block.resize(static_cast<size_t>(n * k));
            for (int64_t i = 0; i < n * k; ++i) block[i] = bf16_to_float(float_to_bf16(w[i]));
            w = block.data();
          }
          prune_rows(c, r, w, n);
        }
        t.sparse = std::move(c);
        t.dense = StTensor{};
        PrunedWeight pw;
        pw.name = s;
        report_.weights.push_back(pw);
        step(units_total);
      }
      row0 += rows;
    }
    report_.prune_s += seconds_since(t0);
  }
  // Whether the fast path takes weight `name`, kept as `kept` (a bf16 or fp32 target of a Linear whose
  // columns select() accepts): its checkpoint entry can be a placeholder.
  bool fast_placeholder(const std::string& name, DType kept, int64_t k) const {
    return fast() && fast_kept(kept) && k % 4 == 0 && targeted(name);
  }

  // Every weight pruned since the first `first` as 2:4 (a permuted producer pruned earlier is still 2:4: its
  // rows only moved; the fast path's are 2:4 already).
  // With options.int8 their values rounded to int8 (a scale per detail::kInt8ScaleGroup positions).
  void compress_pruned(size_t first = 0) {
    for (size_t i = first; i < report_.weights.size(); ++i) {
      CheckpointTensor& t = *tensors_.find(report_.weights[i].name);
      if (t.sparse) continue;
      t.sparse = compress(from_st(t.dense, t.name));
      if (o_.int8) t.sparse = quantize_int8(*t.sparse, detail::kInt8ScaleGroup);
      t.dense = StTensor{};
    }
  }
  PruneModelReport finish() {
    compress_pruned();
    return std::move(report_);
  }

 private:
  // The permutation of g's input channels that keeps the most of the method's importance (|W| for
  // magnitude, |W_ij| * ||X_j|| otherwise), searched per head (per group of heads sharing a V head) when
  // the channels may not leave their head; applied to w, the norms, the statistics, g's other sources and
  // the producer's rows.
  void permute(const Gemm& g, const std::vector<std::string>& targets, std::vector<float>& w, int64_t rows,
               std::vector<float>& norms, Stats* stats, const Producer& p, PrunedWeight& rec) {
    const int64_t k = g.k, d = p.head_dim > 0 ? p.head_dim : k, span = d * p.group;
    if (p.rows_of.empty()) {
      rec.permutation = "unpermuted: " + p.reason;
      return;
    }
    if (d % 4 != 0 || k % span != 0) {
      rec.permutation = "unpermuted: head size not a multiple of 4";
      return;
    }
    std::vector<int64_t> perm(static_cast<size_t>(k)), rows_perm(static_cast<size_t>(k / p.group));
    std::vector<float> score(static_cast<size_t>(p.group * rows * d));
    PermutationOptions po;
    po.max_seconds = o_.permute_seconds;
    po.max_evaluations = o_.permute_evaluations;
    for (int64_t c0 = 0; c0 < k; c0 += span) {
      // The group's heads stacked as more rows: [group * rows, d].
      for (int64_t h = 0; h < p.group; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < d; ++c) {
            const int64_t col = c0 + h * d + c;
            score[static_cast<size_t>((h * rows + r) * d + c)] =
                std::fabs(w[static_cast<size_t>(r * k + col)]) * (norms.empty() ? 1.f : norms[col]);
          }
      const PermutationResult pr = search_permutation(score.data(), p.group * rows, d, po);
      rec.kept_identity += pr.kept_identity;
      rec.kept_permuted += pr.kept_permuted;
      rec.evaluations += pr.evaluations;
      rec.stopped_early = rec.stopped_early || pr.stopped_early;
      for (int64_t h = 0; h < p.group; ++h)
        for (int64_t c = 0; c < d; ++c) perm[static_cast<size_t>(c0 + h * d + c)] = c0 + h * d + pr.perm[c];
      for (int64_t c = 0; c < d; ++c)
        rows_perm[static_cast<size_t>(c0 / p.group + c)] = c0 / p.group + pr.perm[c];
    }
    permute_columns(w.data(), rows, k, perm);
    rec.perm = perm;
    for (const std::string& s : g.sources)
      if (std::find(targets.begin(), targets.end(), s) == targets.end()) {
        std::vector<float> v = tensors_.get(s);
        permute_columns(v.data(), static_cast<int64_t>(v.size()) / k, k, perm);
        tensors_.set(s, v);
      }
    if (!norms.empty()) {
      const std::vector<float> old = norms;
      for (int64_t c = 0; c < k; ++c) norms[static_cast<size_t>(c)] = old[static_cast<size_t>(perm[c])];
    }
    if (stats != nullptr && stats->hessian) stats->hessian = stats->hessian->permuted(perm);
    rec.permutation = "with";
    for (const std::string& s : p.rows_of) {
      permute_rows_of(tensors_, s, 0, rows_perm);
      rec.permutation += (rec.permutation == "with" ? " " : " and ") + s;
    }
    if (p.head_dim > 0) rec.permutation += " (within heads)";
  }

  const PruneModelOptions& o_;
  Tensors tensors_;
  std::string targets_;
  std::regex re_;
  PruneModelReport report_;
  int64_t total_ = 0, done_ = 0;
};

}  // namespace

PruneMethod parse_prune_method(const std::string& name) {
  if (name == "magnitude") return PruneMethod::kMagnitude;
  if (name == "wanda") return PruneMethod::kWanda;
  if (name == "sparsegpt") return PruneMethod::kSparseGpt;
  throw Error("unknown pruning method '" + name + "' (expected magnitude, wanda or sparsegpt)");
}

const char* prune_method_name(PruneMethod m) {
  switch (m) {
    case PruneMethod::kMagnitude:
      return "magnitude";
    case PruneMethod::kWanda:
      return "wanda";
    case PruneMethod::kSparseGpt:
      return "sparsegpt";
  }
  return "?";
}

PruneModelReport prune_hf_encoder(HfDir& dir, const PruneModelOptions& o) {
  Pruner pruner(dir.weights, o, kEncoderLinears);
  PruneModelReport& report = pruner.report();
  TextModelInfo info;
  const Model first = load_hf_encoder(dir, &info);
  const int64_t ng = static_cast<int64_t>(first.gemms.size());

  // The weights to prune, per GEMM, and each GEMM's block ("layer3").
  std::vector<std::vector<std::string>> targets(static_cast<size_t>(ng));
  std::map<std::string, std::vector<int>> blocks;
  std::vector<std::string> block_order;
  for (int g = 0; g < ng; ++g) {
    const Gemm& gemm = first.gemms[g];
    targets[g] = pruner.select(gemm);
    if (targets[g].empty()) continue;
    const std::string block = gemm.name.substr(0, gemm.name.find('.'));
    if (!blocks.count(block)) block_order.push_back(block);
    blocks[block].push_back(g);
  }
  pruner.check_any();

  // Calibration: the texts tokenized once, packed into calls of at most tokens_per_call tokens.
  std::vector<TokenBatch> calls;
  if (pruner.calibrated()) {
    std::vector<std::vector<int32_t>> sequences = o.calibration_ids;
    if (sequences.empty()) {
      const text::WordPiece tokenizer = text::WordPiece::from_dir(dir.dir);
      const int64_t max_tokens = std::min(info.max_tokens, first.max_sequence);
      for (const std::string& line : o.calibration)
        sequences.push_back(tokenizer.encode(line, max_tokens).ids);
    }
    TokenBatch cur;
    for (const std::vector<int32_t>& ids : sequences) {
      if (cur.tokens() > 0 && cur.tokens() + static_cast<int64_t>(ids.size()) > o.tokens_per_call) {
        calls.push_back(std::move(cur));
        cur = TokenBatch{};
      }
      cur.add(ids);
      report.calibration_tokens += static_cast<int64_t>(ids.size());
    }
    calls.push_back(std::move(cur));
    report.calibration_sequences = static_cast<int64_t>(sequences.size());
  }
  int64_t capacity = 1;
  for (const TokenBatch& c : calls) capacity = std::max(capacity, c.tokens());

  // Each target block starts at its first GEMM op; the calibration runs the ops from one block's start to
  // the next's once per block, on the states the previous range left (Engine::run_tokens_range): once dense
  // for the block's statistics, once pruned to carry the states on.
  std::vector<size_t> begin;
  for (const std::string& name : block_order)
    for (size_t i = 0; i < first.ops.size(); ++i)
      if (first.ops[i].kind == OpKind::kGemm &&
          std::find(blocks[name].begin(), blocks[name].end(), first.ops[i].gemm) != blocks[name].end()) {
        begin.push_back(i);
        break;
      }
  std::vector<Engine::State> states(calls.size());
  const int64_t nb = static_cast<int64_t>(block_order.size());
  // Progress: per block one unit per calibration call (statistics) and one per call carrying the states on
  // (all blocks but the last), one per weight pruned.
  const int64_t units = pruner.calibrated()
                            ? (2 * nb - 1) * static_cast<int64_t>(calls.size()) + pruner.total()
                            : pruner.total();
  if (pruner.calibrated()) {
    const auto t0 = Clock::now();
    const Model m = load_hf_encoder(dir);
    Engine e(m, capacity, o.threads, Mode::kDense);
    for (size_t c = 0; c < calls.size(); ++c) e.run_tokens_range(calls[c], 0, begin[0], states[c]);
    report.forward_s += seconds_since(t0);
  }
  for (int64_t bi = 0; bi < nb; ++bi) {
    const std::vector<int>& block = blocks[block_order[bi]];
    const size_t end = bi + 1 < nb ? begin[bi + 1] : first.ops.size();
    std::map<int, Stats> stats;
    if (pruner.calibrated()) {
      auto t0 = Clock::now();
      const Model m = load_hf_encoder(dir);
      Engine e(m, capacity, o.threads, Mode::kDense);
      for (int g : block) stats.emplace(g, Stats(o.method, m.gemms[g].k));
      report.forward_s += seconds_since(t0);
      const int last = block.back();
      std::vector<float> xt;
      for (size_t c = 0; c < calls.size(); ++c) {
        double stat_s = 0;
        t0 = Clock::now();
        Engine::State st = states[c];
        e.run_tokens_range(calls[c], begin[bi], end, st, [&](int g, const float* x, int64_t k, int64_t n) {
          const auto it = stats.find(g);
          if (it != stats.end()) {
            const auto s0 = Clock::now();
            it->second.add(x, k, n, xt);
            stat_s += seconds_since(s0);
          }
          return g != last;  // the block's statistics are complete
        });
        report.statistics_s += stat_s;
        report.forward_s += seconds_since(t0) - stat_s;
        pruner.step(units);
      }
    }
    for (int g : block) {
      const Producer p = o.permute ? find_producer(first, g) : Producer{};
      pruner.prune(first.gemms[g], targets[g], stats.count(g) ? &stats.at(g) : nullptr, p, units);
    }
    if (!pruner.calibrated() || bi + 1 == nb) continue;
    // The block as pruned (and permuted) carries the states to the next one.
    const auto t0 = Clock::now();
    const Model m = load_hf_encoder(dir);
    Engine e(m, capacity, o.threads, Mode::kDense);
    for (size_t c = 0; c < calls.size(); ++c) {
      e.run_tokens_range(calls[c], begin[bi], end, states[c]);
      pruner.step(units);
    }
    report.forward_s += seconds_since(t0);
  }
  return pruner.finish();
}

namespace {

// A decoder checkpoint as the layer-by-layer pruner reads it: `load` reads the model with a per-layer hook
// (load_hf_decoder of a directory or of an HfDir), `stored` names every tensor with its dtype and shape as
// stored (dtype "" for a 2:4 one), `encode` tokenizes the calibration text.
struct DecoderSource {
  std::function<DecoderModel(const DecoderLoadOptions&)> load;
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> stored;
  std::function<std::vector<int32_t>(const std::string&)> encode;
};

Gemm& gemm_of(DecoderLayer& l, int which) {
  return which == 0 ? l.qkv : which == 1 ? l.o : which == 2 ? l.gate_up : l.down;
}

// "model.layers.N." -> N, or -1.
int64_t layer_of(const std::string& name) {
  static const std::regex re(R"(^model\.layers\.([0-9]+)\.)");
  std::smatch m;
  return std::regex_search(name, m, re) ? std::stoll(m[1].str()) : -1;
}

// Calibrates and prunes the decoder layer by layer as src.load reads it: each layer's Linear weights
// (their stored dtype) become a checkpoint of their own, are pruned (2:4 ones Compressed) and handed to
// `emit` with the layer's index, and the layer is dropped; only one layer is ever in fp32.
PruneModelReport prune_decoder(const DecoderSource& src, const PruneModelOptions& o,
                               const std::function<void(int64_t, Checkpoint&&)>& emit) {
  Checkpoint none;
  Pruner pruner(none, o, kDecoderLinears);
  PruneModelReport& report = pruner.report();
  // Before reading the model: which stored weights the targets match (the units of work, the last layer
  // with one) and whether calibration text is there.
  int64_t expected = 0, last_layer = -1;
  for (const auto& [name, st] : src.stored) {
    if (st.first.empty() || st.second.size() != 2 || !name.ends_with(".weight") || !pruner.targeted(name))
      continue;
    const int64_t l = layer_of(name);
    if (l < 0) continue;
    ++expected;
    last_layer = std::max(last_layer, l);
  }
  if (expected == 0) throw Error("no weight matched --targets '" + pruner.targets() + "'");
  if (pruner.calibrated() && o.calibration.empty() && o.calibration_ids.empty())
    throw Error(std::string(prune_method_name(o.method)) + " needs calibration text");

  DecoderConfig c;
  std::vector<std::vector<float>> hidden;  // per calibration sequence [hidden, n], feature-major
  int64_t capacity = 1, units = 0;
  DecoderOptions dopt;
  dopt.threads = o.threads;
  dopt.mode = Mode::kDense;
  dopt.sliding_ring = false;  // run_layers takes a whole sequence at once
  // Layer l as a decoder of its own, dense (its pruned weights dense again), running `fn` (calibration, or
  // carrying the hidden states on): the layer is lent to it, not copied, and given back.
  auto run_layer = [&](DecoderLayer& layer, int64_t l, const std::function<void(Decoder&)>& fn) {
    DecoderModel one;
    one.config = c;
    one.config.layers = 1;
    if (!c.sliding.empty()) one.config.sliding = {c.sliding[static_cast<size_t>(l)]};
    one.layers.push_back(std::move(layer));
    {
      Decoder d(one, dopt);
      fn(d);
    }
    layer = std::move(one.layers[0]);
  };
  // The calibration: the texts joined by newlines and tokenized as one, cut into sequences of
  // sequence_tokens (or the sequences given); each sequence's embeddings, the first layer's input.
  auto start = [&](const DecoderModel& m) {
    c = m.config;
    std::vector<std::vector<int32_t>> sequences;
    if (pruner.calibrated()) sequences = o.calibration_ids;
    if (pruner.calibrated() && sequences.empty()) {
      if (o.sequence_tokens < 2) throw Error("calibration sequences must hold at least 2 tokens");
      std::string text;
      for (const std::string& line : o.calibration) text += line + "\n";
      const std::vector<int32_t> ids = src.encode(text);
      for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(o.sequence_tokens))
        sequences.emplace_back(
            ids.begin() + static_cast<int64_t>(i),
            ids.begin() + static_cast<int64_t>(std::min(ids.size(), i + o.sequence_tokens)));
    }
    for (const std::vector<int32_t>& ids : sequences) {
      const int64_t n = static_cast<int64_t>(ids.size());
      if (n == 0) continue;
      if (n > c.max_positions)
        throw Error("a calibration sequence of " + std::to_string(n) + " tokens exceeds the model's " +
                    std::to_string(c.max_positions) + " positions");
      std::vector<float> h(static_cast<size_t>(c.hidden * n)), row(static_cast<size_t>(c.hidden));
      for (int64_t j = 0; j < n; ++j) {
        if (ids[j] < 0 || ids[j] >= c.vocab)
          throw Error("calibration token id " + std::to_string(ids[j]) + " outside the vocabulary");
        m.embedding(ids[j], row.data());
        for (int64_t r = 0; r < c.hidden; ++r) h[static_cast<size_t>(r * n + j)] = row[r] * c.embed_scale;
      }
      hidden.push_back(std::move(h));
      capacity = std::max(capacity, n);
      report.calibration_tokens += n;
    }
    report.calibration_sequences = static_cast<int64_t>(hidden.size());
    if (pruner.calibrated() && hidden.empty()) throw Error("the calibration text has no tokens");
    dopt.max_context = capacity;
    // Every layer up to the last one with targets runs the sequences once for its statistics, and each but
    // that last one once more to carry them on.
    units = (pruner.calibrated() ? (2 * last_layer + 1) * static_cast<int64_t>(hidden.size()) : 0) + expected;
  };

  std::vector<float> x, xt;
  DecoderLoadOptions lo;
  lo.on_layer = [&](DecoderModel& m, DecoderLayer& L, int64_t l) {
    if (l == 0) {
      start(m);
      m.release_tables();  // not needed again (8B: 4.2 GB of fp32)
    }
    // The layer's Linear weights (and biases) as stored: what the pruner reads and writes.
    Checkpoint ck;
    for (int which = 0; which < 4; ++which) {
      const Gemm& g = gemm_of(L, which);
      if (g.pruned) continue;  // stored 2:4: select() reports it
      int64_t row0 = 0;
      for (const std::string& s : g.sources) {
        const auto& [dtype, shape] = src.stored.at(s);
        const int64_t rows = shape.at(0);
        const auto at = g.dense.begin() + row0 * g.k;
        const DType kept = kept_dtype(dtype);
        if (pruner.fast_placeholder(s, kept, g.k))  // pruned from g's rows: no dense copy
          ck.tensors.push_back({s, StTensor{st_dtype_name(kept), {rows, g.k}, {}}, {}});
        else
          ck.tensors.push_back({s, to_st(Tensor::from_float({at, at + rows * g.k}, {rows, g.k}, kept)), {}});
        if (!g.bias.empty()) {
          const std::string b = bias_of(s);
          const auto bat = g.bias.begin() + row0;
          ck.tensors.push_back(
              {b,
               to_st(Tensor::from_float({bat, bat + rows}, {rows}, kept_dtype(src.stored.at(b).first))),
               {}});
        }
        row0 += rows;
      }
    }
    pruner.use(ck);
    const size_t first = report.weights.size();
    std::array<std::vector<std::string>, 4> targets;
    bool any = false;
    for (int which = 0; which < 4; ++which) {
      const Gemm& g = gemm_of(L, which);
      if (g.pruned) {
        for (const std::string& s : g.sources)
          if (pruner.targeted(s)) report.skipped.push_back(s + ": already 2:4");
        continue;
      }
      targets[which] = pruner.select(g);
      any = any || !targets[which].empty();
    }
    std::map<int, Stats> stats;
    if (pruner.calibrated() && any) {
      const auto t0 = Clock::now();
      for (int which = 0; which < 4; ++which)
        if (!targets[which].empty()) stats.emplace(which, Stats(o.method, gemm_of(L, which).k));
      double stat_s = 0;
      run_layer(L, l, [&](Decoder& d) {
        for (const std::vector<float>& h : hidden) {
          x = h;
          d.run_layers(x.data(), static_cast<int64_t>(h.size()) / c.hidden,
                       [&](int64_t, int which, const float* in, int64_t k, int64_t n) {
                         const auto it = stats.find(which);
                         if (it == stats.end()) return;
                         const auto s0 = Clock::now();
                         it->second.add(in, k, n, xt);
                         stat_s += seconds_since(s0);
                       });
          pruner.step(units);
        }
      });
      report.statistics_s += stat_s;
      report.forward_s += seconds_since(t0) - stat_s;
    } else if (pruner.calibrated() && l <= last_layer) {
      for (size_t i = 0; i < hidden.size(); ++i) pruner.step(units);  // nothing to calibrate here
    }
    for (int which = 0; which < 4; ++which) {
      if (targets[which].empty()) continue;
      // The producers: V's rows for the attention output (within heads; the query heads sharing a V head
      // share its permutation), gate's and up's rows for the FFN output; Q, K, V and gate/up read the
      // residual stream.
      Producer p;
      p.reason = kResidual;
      if (which == 1 && L.qkv.sources.size() == 3 && !L.qkv.pruned) {
        p.rows_of = {L.qkv.sources[2]};
        p.head_dim = c.head_dim;
        p.group = c.heads / c.kv_heads;
      } else if (which == 3 && L.gate_up.sources.size() == 2 && !L.gate_up.pruned) {
        p.rows_of = L.gate_up.sources;
      } else if ((which == 1 && L.qkv.pruned) || (which == 3 && L.gate_up.pruned)) {
        p.reason = "its producer is stored 2:4 already: not permuted";
      } else if (which == 1 || which == 3) {  // Phi-3: the producer's rows share a tensor with others
        p.reason = "its producer is stored fused with other rows (qkv_proj / gate_up_proj): not permuted";
      }
      if (pruner.fast())
        pruner.prune_magnitude_rows(gemm_of(L, which), targets[which], units);
      else
        pruner.prune(gemm_of(L, which), targets[which], stats.count(which) ? &stats.at(which) : nullptr, p,
                     units);
    }
    if (pruner.calibrated() && l < last_layer) {
      // The layer as pruned (and permuted) carries the hidden states to the next.
      const auto t0 = Clock::now();
      for (int which = 0; which < 4; ++which) {
        Gemm& g = gemm_of(L, which);
        if (g.pruned) continue;
        std::vector<float> w, bias;  // the weights and biases as pruned and permuted
        for (const std::string& s : g.sources) {
          const std::vector<float> v = pruner.tensors().get(s);
          w.insert(w.end(), v.begin(), v.end());
          if (!g.bias.empty()) {
            const std::vector<float> b = pruner.tensors().get(bias_of(s));
            bias.insert(bias.end(), b.begin(), b.end());
          }
        }
        g.dense = std::move(w);
        g.bias = std::move(bias);
      }
      run_layer(L, l, [&](Decoder& d) {
        for (std::vector<float>& h : hidden) {
          d.run_layers(h.data(), static_cast<int64_t>(h.size()) / c.hidden, {});
          pruner.step(units);
        }
      });
      report.forward_s += seconds_since(t0);
    }
    pruner.compress_pruned(first);
    L = DecoderLayer{};
    emit(l, std::move(ck));
  };
  src.load(lo);
  pruner.check_any();
  return std::move(report);
}

}  // namespace

PruneModelReport prune_hf_decoder(HfDir& dir, const PruneModelOptions& o) {
  DecoderSource src;
  for (const CheckpointTensor& t : dir.weights.tensors)
    src.stored[t.name] = t.sparse ? std::make_pair(std::string(), t.sparse->shape)
                                  : std::make_pair(t.dense.dtype, t.dense.shape);
  src.encode = [&](const std::string& text) { return text::ByteBpe::from_dir(dir.dir).encode(text); };
  src.load = [&](const DecoderLoadOptions& lo) { return load_hf_decoder(dir, lo); };
  std::map<std::string, CheckpointTensor*> by_name;
  for (CheckpointTensor& t : dir.weights.tensors) by_name[t.name] = &t;
  // Each layer's weights as pruned replace the stored ones once the model is read (the loader reads a
  // copy of the checkpoint).
  std::vector<Checkpoint> layers;
  PruneModelReport r =
      prune_decoder(src, o, [&](int64_t, Checkpoint&& ck) { layers.push_back(std::move(ck)); });
  for (Checkpoint& ck : layers)
    for (CheckpointTensor& t : ck.tensors) *by_name.at(t.name) = std::move(t);
  return r;
}

// int8 values keep their scales only in the sparse24 layout: refused before any work.
void check_layout(CheckpointFormat to, const PruneModelOptions& o) {
  if (o.int8 && to != CheckpointFormat::kSparse24)
    throw Error(std::string("int8 2:4 weights are written only in the sparse24 layout, not ") +
                checkpoint_format_name(to));
}

PruneModelReport prune_hf_decoder(const std::string& dir, const std::string& out_dir, CheckpointFormat to,
                                  const PruneModelOptions& o,
                                  const std::map<std::string, std::string>& files) {
  check_layout(to, o);
  const MappedHfDir in = map_hf_dir(dir);
  DecoderSource src;
  for (const MappedHfDir::Tensor& t : in.tensors)
    src.stored[t.t.name] = t.t.sparse ? std::make_pair(std::string(), t.t.sparse->shape)
                                      : std::make_pair(t.t.dense.dtype, t.t.dense.shape);
  src.encode = [&](const std::string& text) { return text::ByteBpe::from_dir(dir).encode(text); };
  src.load = [&](const DecoderLoadOptions& lo) { return load_hf_decoder(dir, lo); };
  HfDirWriter out(in.dir, in.shards, in.config_json, to, out_dir, files);
  std::vector<int64_t> layer;  // per stored tensor, its layer (-1: none), parsed once
  for (const MappedHfDir::Tensor& t : in.tensors) layer.push_back(layer_of(t.t.name));
  std::set<std::string> written;
  // A stored tensor as it is (dense bytes copied out of the mapping, whose pages are then dropped; a 2:4 one
  // as decoded).
  auto stored = [&](const MappedHfDir::Tensor& t) {
    written.insert(t.t.name);
    CheckpointTensor c{t.t.name, t.t.sparse ? StTensor{} : t.t.dense.copy(), t.t.sparse};
    if (!t.t.sparse) t.file->release(t.t.dense.bytes);
    return c;
  };
  // One shard per layer: its Linears as pruned, and the rest of its tensors (norms, 2:4 Linears) as stored.
  PruneModelReport r = prune_decoder(src, o, [&](int64_t l, Checkpoint&& ck) {
    ck.metadata = in.metadata;
    for (const CheckpointTensor& t : ck.tensors) written.insert(t.name);
    for (size_t i = 0; i < in.tensors.size(); ++i)
      if (layer[i] == l && !written.count(in.tensors[i].t.name)) ck.tensors.push_back(stored(in.tensors[i]));
    out.add(ck);
  });
  // The embeddings, the final norm and the head as stored, in shards of up to 1 GiB but one tensor each
  // (8B: the embeddings and the head a shard each, never both copied at once).
  Checkpoint rest;
  size_t bytes = 0;
  const auto flush = [&] {
    if (rest.tensors.empty()) return;
    rest.metadata = in.metadata;
    out.add(rest);
    rest.tensors.clear();
    bytes = 0;
  };
  for (const MappedHfDir::Tensor& t : in.tensors)
    if (!written.count(t.t.name)) {
      const size_t b = t.t.sparse ? t.t.sparse->values.size() : t.t.dense.bytes.size();
      if (bytes + b > (size_t{1} << 30)) flush();
      rest.tensors.push_back(stored(t));
      bytes += b;
    }
  flush();
  out.finish();
  return r;
}

PruneModelReport prune_gguf_decoder(const std::string& path, const std::string& out_dir, CheckpointFormat to,
                                    const PruneModelOptions& o) {
  check_layout(to, o);
  const GgufCheckpoint in(path);
  // What each tensor is written as: F32, F16 and BF16 as they are, a quantized one (its values dequantized)
  // in bf16, as Hugging Face checkpoints hold weights.
  auto dtype_of = [](uint32_t type) {
    const auto t = static_cast<GgmlType>(type);
    return t == GgmlType::kF32 ? "F32" : t == GgmlType::kF16 ? "F16" : "BF16";
  };
  DecoderSource src;
  for (const auto& [name, st] : in.tensors()) {
    std::string d = dtype_of(st.type);
    // int8: a quantized layer weight pruned and rounded from its fp32 values (what --prune --int8 reads).
    if (o.int8 && static_cast<GgmlType>(st.type) != GgmlType::kBF16 && d == "BF16" && layer_of(name) >= 0)
      d = "F32";
    src.stored[name] = {d, st.shape};
  }
  src.encode = [&](const std::string& text) { return in.encode(text); };
  const auto first = in.tensors().find("model.layers.0.self_attn.q_proj.weight");
  const std::string kept = first == in.tensors().end() ? "F32" : dtype_of(first->second.type);
  HfDirWriter out("", {},
                  in.config_json(kept == "F32"   ? "float32"
                                 : kept == "F16" ? "float16"
                                                 : "bfloat16"),
                  to, out_dir, in.files());
  // A tensor the loader handed over (fp32, transformers' names) in its written type, the fp32 copy dropped.
  auto written = [&](const std::string& name, StTensor&& f) {
    const std::string d = src.stored.at(name).first;
    CheckpointTensor t{name, std::move(f), {}};
    if (d != "F32") {
      const auto* v = reinterpret_cast<const float*>(t.dense.bytes.data());
      const size_t n = t.dense.bytes.size() / sizeof(float);
      std::vector<uint8_t> b(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = d == "F16" ? float_to_half(v[i]) : float_to_bf16(v[i]);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
      t.dense.dtype = d;
      t.dense.bytes = std::move(b);
    }
    return t;
  };
  // The layers' tensors as the loader reads them: the Linears are the pruner's (it reads them from the
  // layer; dropped here), the rest (norms) wait for the layer's shard.
  std::vector<std::pair<std::string, StTensor>> read, layer_rest;
  src.load = [&](const DecoderLoadOptions& lo) {
    DecoderLoadOptions wrapped = lo;
    wrapped.on_layer = [&](DecoderModel& m, DecoderLayer& L, int64_t l) {
      std::set<std::string> linears;
      for (int which = 0; which < 4; ++which)
        for (const std::string& s : gemm_of(L, which).sources) linears.insert(s), linears.insert(bias_of(s));
      for (auto& t : read)
        if (!linears.count(t.first)) layer_rest.push_back(std::move(t));
      read.clear();
      lo.on_layer(m, L, l);
    };
    return in.load(wrapped, read, /*tables=*/false);
  };
  PruneModelReport r = prune_decoder(src, o, [&](int64_t, Checkpoint&& ck) {
    for (auto& [name, t] : layer_rest) ck.tensors.push_back(written(name, std::move(t)));
    layer_rest.clear();
    out.add(ck);
  });
  // The embeddings, final norm and head read again at the end, a shard each (8B: never two 2 GB tables at
  // once, none held through the layers).
  for (const auto& [name, st] : in.tensors())
    if (layer_of(name) < 0) {
      Checkpoint one;
      one.tensors.push_back(written(name, in.tensor(name)));
      out.add(one);
    }
  out.finish();
  return r;
}

PruneModelReport prune_model(const std::string& model, const std::string& out_dir, CheckpointFormat to,
                             const PruneModelOptions& o) {
  if (std::filesystem::exists(out_dir)) throw Error(out_dir + ": already exists (give a new directory)");
  check_layout(to, o);
  if (is_gguf_file(model)) return prune_gguf_decoder(model, out_dir, to, o);
  if (is_hf_decoder(model)) return prune_hf_decoder(model, out_dir, to, o);
  HfDir d = read_hf_dir(model);
  PruneModelReport r = prune_hf_encoder(d, o);
  write_hf_dir(d, d.weights, to, out_dir);
  return r;
}

}  // namespace sparse24::engine
