// One-shot pruning of a Hugging Face encoder with calibration through the engine (prune_model.h), and
// prune_model, which picks the encoder or decoder path (decoders: prune_decoder.cc).
#include "sparse24/prune_model.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "pruner.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "text/wordpiece.h"

namespace sparse24::engine {

using namespace pruning;

namespace {

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
