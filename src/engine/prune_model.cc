// One-shot pruning of a Hugging Face encoder with calibration through the engine (prune_model.h).
#include "sparse24/prune_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <regex>

#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "text/wordpiece.h"

namespace sparse24::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What produces a GEMM's input, and so can absorb a permutation of its channels.
struct Producer {
  enum Kind { kNone, kGemm, kAttentionV } kind = kNone;
  int gemm = -1;       // kGemm: that GEMM; kAttentionV: the QKV GEMM
  int64_t heads = 0;   // kAttentionV
  std::string reason;  // kNone: why not
};

// The model's graph: which op writes each tensor, how many ops read it.
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
  p.reason = "its input is read by other layers too (the residual stream): nothing can absorb a permutation";
  if (in < 0 || writer[in] < 0 || readers[in] != 1) return p;
  const Op& w = m.ops[writer[in]];
  if (w.kind == OpKind::kGemm) {
    if (m.gemms[w.gemm].sources.size() != 1) {
      p.reason = "its producer is a fused GEMM";
      return p;
    }
    p.kind = Producer::kGemm;
    p.gemm = w.gemm;
    return p;
  }
  if (w.kind == OpKind::kAttention && writer[w.in] >= 0 && readers[w.in] == 1 &&
      m.ops[writer[w.in]].kind == OpKind::kGemm && m.gemms[m.ops[writer[w.in]].gemm].sources.size() == 3) {
    p.kind = Producer::kAttentionV;
    p.gemm = m.ops[writer[w.in]].gemm;
    p.heads = w.heads;
    return p;
  }
  p.reason = "its producer cannot absorb a permutation";
  return p;
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
  void set(const std::string& name, const std::vector<float>& v) {
    CheckpointTensor& t = *by_name_.at(name);
    const std::vector<int64_t> s = shape(name);
    t.sparse.reset();
    t.dense = to_st(Tensor::from_float(v, s));
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
  std::vector<float> norms() const {
    if (hessian) return hessian->column_norms();
    std::vector<float> n(sumsq.size());
    for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<float>(std::sqrt(sumsq[i]));
    return n;
  }
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
  if (o.threads < 1) throw Error("threads must be at least 1");
  if (o.tokens_per_call < 1) throw Error("tokens per call must be at least 1");
  std::regex re;
  try {
    re = std::regex(o.targets, std::regex::ECMAScript);
  } catch (const std::regex_error&) {
    throw Error("--targets '" + o.targets + "' is not a valid regular expression");
  }
  PruneModelReport report;
  TextModelInfo info;
  const Model first = load_hf_encoder(dir, &info);
  const int64_t ng = static_cast<int64_t>(first.gemms.size());

  // The weights to prune, per GEMM (sources matching the targets), and each GEMM's block ("layer3").
  Tensors tensors(dir.weights);
  std::vector<std::vector<std::string>> targets(static_cast<size_t>(ng));
  std::map<std::string, std::vector<int>> blocks;
  std::vector<std::string> block_order;
  int64_t total = 0;
  for (int g = 0; g < ng; ++g) {
    const Gemm& gemm = first.gemms[g];
    for (const std::string& s : gemm.sources) {
      if (!std::regex_search(s, re)) continue;
      const CheckpointTensor* t = tensors.find(s);
      if (t == nullptr) continue;
      if (t->sparse) {
        report.skipped.push_back(s + ": already 2:4");
      } else if (gemm.k % 4 != 0) {
        report.skipped.push_back(s + ": columns not a multiple of 4");
      } else {
        targets[g].push_back(s);
        ++total;
      }
    }
    if (targets[g].empty()) continue;
    const std::string block = gemm.name.substr(0, gemm.name.find('.'));
    if (!blocks.count(block)) block_order.push_back(block);
    blocks[block].push_back(g);
  }
  if (total == 0) throw Error("no weight matched --targets '" + o.targets + "'");

  // Calibration: the texts tokenized once, packed into calls of at most tokens_per_call tokens.
  std::vector<TokenBatch> calls;
  const bool calibrated = o.method != PruneMethod::kMagnitude;
  if (calibrated) {
    if (o.calibration.empty() && o.calibration_ids.empty())
      throw Error(std::string(prune_method_name(o.method)) + " needs calibration text");
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

  // Progress: one unit per calibration call of each block and per weight pruned.
  const int64_t units = static_cast<int64_t>(blocks.size() * calls.size()) + total;
  int64_t done = 0;
  for (size_t bi = 0; bi < block_order.size(); ++bi) {
    const std::vector<int>& block = blocks[block_order[bi]];
    // Statistics of the block's GEMM inputs on the model pruned so far.
    std::map<int, Stats> stats;
    if (calibrated) {
      auto t0 = Clock::now();
      const Model m = load_hf_encoder(dir);
      Engine e(m, capacity, o.threads, Mode::kDense);
      for (int g : block) {
        if (o.method == PruneMethod::kSparseGpt)
          stats[g].hessian.emplace(m.gemms[g].k);
        else
          stats[g].sumsq.assign(static_cast<size_t>(m.gemms[g].k), 0.0);
      }
      report.forward_s += seconds_since(t0);
      const int last = block.back();
      std::vector<float> xt;
      for (size_t c = 0; c < calls.size(); ++c) {
        double stat_s = 0;
        t0 = Clock::now();
        e.run_tokens_observed(calls[c], [&](int g, const float* x, int64_t k, int64_t n) {
          const auto it = stats.find(g);
          if (it != stats.end()) {
            const auto s0 = Clock::now();
            if (it->second.hessian) {
              xt.resize(static_cast<size_t>(k * n));  // [tokens, k]
              for (int64_t r = 0; r < k; ++r)
                for (int64_t j = 0; j < n; ++j) xt[static_cast<size_t>(j * k + r)] = x[r * n + j];
              it->second.hessian->add(xt.data(), n);
            } else {
              for (int64_t r = 0; r < k; ++r) {
                double s = 0;
                for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[r * n + j]) * x[r * n + j];
                it->second.sumsq[static_cast<size_t>(r)] += s;
              }
            }
            stat_s += seconds_since(s0);
          }
          return g != last;
        });
        report.statistics_s += stat_s;
        report.forward_s += seconds_since(t0) - stat_s;
        if (o.progress) o.progress(++done, units);
      }
    }

    for (int g : block) {
      const Gemm& gemm = first.gemms[g];
      const int64_t k = gemm.k;
      // The targets' rows, one matrix.
      std::vector<float> w;
      std::vector<int64_t> rows_of;
      for (const std::string& s : targets[g]) {
        const std::vector<float> v = tensors.get(s);
        w.insert(w.end(), v.begin(), v.end());
        rows_of.push_back(static_cast<int64_t>(v.size()) / k);
      }
      const int64_t rows = static_cast<int64_t>(w.size()) / k;
      std::vector<float> norms;
      if (calibrated) norms = stats[g].norms();

      PrunedWeight rec;
      std::vector<int64_t> perm;
      if (o.permute) {
        const auto t0 = Clock::now();
        const Producer p = find_producer(first, g);
        const int64_t head_dim = p.kind == Producer::kAttentionV ? k / p.heads : k;
        if (p.kind == Producer::kNone) {
          rec.permutation = "unpermuted: " + p.reason;
        } else if (head_dim % 4 != 0) {
          rec.permutation = "unpermuted: head size not a multiple of 4";
        } else {
          // The method's importance: |W| (magnitude), |W_ij| * ||X_j|| (Wanda, SparseGPT); searched per
          // head when the channels may not leave their head.
          perm.resize(static_cast<size_t>(k));
          std::vector<float> score(static_cast<size_t>(rows * head_dim));
          PermutationOptions po;
          po.max_seconds = o.permute_seconds;
          for (int64_t c0 = 0; c0 < k; c0 += head_dim) {
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < head_dim; ++c)
                score[static_cast<size_t>(r * head_dim + c)] =
                    std::fabs(w[static_cast<size_t>(r * k + c0 + c)]) *
                    (norms.empty() ? 1.f : norms[static_cast<size_t>(c0 + c)]);
            const PermutationResult pr = search_permutation(score.data(), rows, head_dim, po);
            rec.kept_identity += pr.kept_identity;
            rec.kept_permuted += pr.kept_permuted;
            for (int64_t c = 0; c < head_dim; ++c) perm[static_cast<size_t>(c0 + c)] = c0 + pr.perm[c];
          }
          // The GEMM's columns (every source, targeted or not), its statistics and its producer's rows.
          permute_columns(w.data(), rows, k, perm);
          rec.perm = perm;
          for (const std::string& s : gemm.sources)
            if (std::find(targets[g].begin(), targets[g].end(), s) == targets[g].end()) {
              std::vector<float> v = tensors.get(s);
              permute_columns(v.data(), static_cast<int64_t>(v.size()) / k, k, perm);
              tensors.set(s, v);
            }
          if (!norms.empty()) {
            const std::vector<float> old = norms;
            for (int64_t c = 0; c < k; ++c) norms[static_cast<size_t>(c)] = old[static_cast<size_t>(perm[c])];
          }
          if (stats.count(g) && stats[g].hessian) stats[g].hessian = stats[g].hessian->permuted(perm);
          const Gemm& prod = first.gemms[p.gemm];
          if (p.kind == Producer::kGemm) {
            permute_rows_of(tensors, prod.sources[0], 0, perm);
            rec.permutation = "with " + prod.sources[0];
          } else {
            permute_rows_of(tensors, prod.sources[2], 0, perm);
            rec.permutation = "with " + prod.sources[2] + " (within heads)";
          }
        }
        report.permute_s += seconds_since(t0);
      }

      const auto t1 = Clock::now();
      switch (o.method) {
        case PruneMethod::kMagnitude:
          apply_mask(w.data(), magnitude_mask(w.data(), rows, k));
          break;
        case PruneMethod::kWanda:
          apply_mask(w.data(), wanda_mask(w.data(), rows, k, norms));
          break;
        case PruneMethod::kSparseGpt:
          sparsegpt_prune(w.data(), rows, k, *stats[g].hessian, o.sparsegpt);
          break;
      }
      report.prune_s += seconds_since(t1);
      int64_t r0 = 0;
      for (size_t i = 0; i < targets[g].size(); ++i) {
        const auto begin = w.begin() + r0 * k;
        tensors.set(targets[g][i], std::vector<float>(begin, begin + rows_of[i] * k));
        r0 += rows_of[i];
        PrunedWeight pw = rec;
        pw.name = targets[g][i];
        report.weights.push_back(pw);
        if (o.progress) o.progress(++done, units);
      }
    }
  }
  // Every pruned weight as 2:4 (a permuted producer pruned earlier is still 2:4: its rows only moved).
  for (const PrunedWeight& pw : report.weights) {
    CheckpointTensor& t = *tensors.find(pw.name);
    t.sparse = compress(from_st(t.dense, pw.name));
    t.dense = StTensor{};
  }
  return report;
}

}  // namespace sparse24::engine
