// The pruning machinery both model kinds share (prune_model.cc: encoders, prune_decoder.cc: decoders): the
// checkpoint's tensors read and written by name, the input statistics of the calibrated methods, and the
// Pruner (targets, per-GEMM permutation and pruning, the report and progress). Internal to the engine.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/dtype.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"
#include "sparse24/prune_model.h"

namespace sparse24::engine::pruning {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
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

inline constexpr const char* kResidual =
    "its input is read by other layers too (the residual stream): nothing can absorb a permutation";

// The dtype a pruned or permuted tensor is stored in: its own when half precision (bf16 stays bf16), else
// fp32.
inline DType kept_dtype(const std::string& st_dtype) {
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
    return t.sparse ? decompress(*t.sparse).to_float() : from_st(dequantized(t), name).to_float();
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
    t.scale_group = 0;  // (a scaled int8 one: fp32 now)
    t.scales.clear();
  }

 private:
  std::map<std::string, CheckpointTensor*> by_name_;
};

inline std::string bias_of(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() < suffix.size() ||
      weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return weight.substr(0, weight.size() - suffix.size()) + ".bias";
}

// Rows [row0, row0 + perm.size()) of a [rows, cols] tensor (and the same entries of its bias) permuted.
inline void permute_rows_of(Tensors& t, const std::string& weight, int64_t row0,
                            const std::vector<int64_t>& perm) {
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

  // Magnitude without permutations, each target's tensor a placeholder (its stored type and shape, no
  // bytes): each target's rows of g's fp32 rows (rounded to its stored type, as the general path reads them)
  // pruned straight into its 2:4 tensor a block of rows at a time (prune_rows, what loading with --prune
  // runs; int8 values with options.int8): the values and codes of magnitude_mask and compress, without the
  // dense copies in between, whose fresh pages were most of a decoder's prune-model (a 1B model's took 58 s,
  // 30 of them in the kernel). For a target stored as `kept` where takes_rows says so: pruned_layout holds
  // fp32, bf16 and int8 values (an f16 one takes the general path unless it becomes int8).
  bool takes_rows(DType kept) const {
    return o_.method == PruneMethod::kMagnitude && !o_.permute &&
           (kept == DType::kF32 || kept == DType::kBF16 || o_.int8);
  }
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
        t = CheckpointTensor{t.name, {}, std::move(c)};  // (no dense bytes or scales left)
        PrunedWeight pw;
        pw.name = s;
        report_.weights.push_back(pw);
        step(units_total);
      }
      row0 += rows;
    }
    report_.prune_s += seconds_since(t0);
  }
  // Every weight pruned since the first `first` as 2:4 (a permuted producer pruned earlier is still 2:4: its
  // rows only moved; the fast path's are 2:4 already).
  // With options.int8 their values rounded to int8 (a scale per detail::kInt8ScaleGroup positions).
  void compress_pruned(size_t first = 0) {
    for (size_t i = first; i < report_.weights.size(); ++i) {
      CheckpointTensor& t = *tensors_.find(report_.weights[i].name);
      if (t.sparse) continue;
      Compressed c = compress(from_st(dequantized(t), t.name));
      if (o_.int8) c = quantize_int8(c, detail::kInt8ScaleGroup);
      t = CheckpointTensor{t.name, {}, std::move(c)};
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

// int8 values keep their scales only in the sparse24 layout: refused before any work.
inline void check_layout(CheckpointFormat to, const PruneModelOptions& o) {
  if (o.int8 && to != CheckpointFormat::kSparse24)
    throw Error(std::string("int8 2:4 weights are written only in the sparse24 layout, not ") +
                checkpoint_format_name(to));
}

}  // namespace sparse24::engine::pruning
