// One-shot pruning of a decoder (prune_model.h: prune_hf_decoder, prune_gguf_decoder), layer by layer as the
// loader reads it, calibrated through the engine's Decoder; the shared machinery is pruner.h.
#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "kernels/convert.h"
#include "kernels/lanes_stored.h"
#include "pruner.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "text/bpe.h"

namespace sparse24::engine {

using namespace pruning;

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

// With o.int8, the embeddings and an untied head (a [vocab, hidden] matrix) are written as the int8 tables a
// decoder loaded with int8 weights makes of them (detail::narrowed_table: a scale per kernels::kGemvI8Group
// of a row, each block of rows checked finite), which it then reads as they are.
bool as_int8_table(const std::string& name, const std::vector<int64_t>& shape, const PruneModelOptions& o) {
  return o.int8 && (name == "model.embed_tokens.weight" || name == "lm_head.weight") && shape.size() == 2 &&
         shape[1] > 0;
}
CheckpointTensor int8_table_tensor(const std::string& name, const std::vector<int64_t>& shape,
                                   WeightTable&& w) {
  const auto* q = reinterpret_cast<const uint8_t*>(w.i8.data());
  CheckpointTensor t{name, StTensor{"I8", shape, std::vector<uint8_t>(q, q + w.i8.size())}, {}};
  t.scale_group = kernels::kGemvI8Group;
  t.scales = std::move(w.scales);
  return t;
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
    // A GEMM whose targets all take the magnitude path from its rows (Pruner::prune_magnitude_rows, with
    // columns select() accepts) gets placeholders for them.
    Checkpoint ck;
    std::array<bool, 4> from_rows{};
    for (int which = 0; which < 4; ++which) {
      const Gemm& g = gemm_of(L, which);
      if (g.pruned) continue;  // stored 2:4: select() reports it
      from_rows[which] = g.k % 4 == 0;
      for (const std::string& s : g.sources)
        if (pruner.targeted(s) && !pruner.takes_rows(kept_dtype(src.stored.at(s).first)))
          from_rows[which] = false;
      int64_t row0 = 0;
      for (const std::string& s : g.sources) {
        const auto& [dtype, shape] = src.stored.at(s);
        const int64_t rows = shape.at(0);
        const auto at = g.dense.begin() + row0 * g.k;
        const DType kept = kept_dtype(dtype);
        if (from_rows[which] && pruner.targeted(s))  // pruned from g's rows: no dense copy
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
      if (from_rows[which])
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
    for (CheckpointTensor& t : ck.tensors)  // in the kernels' layout: a Decoder runs them where they are
      if (t.sparse && kernels::lanes_stores(*t.sparse)) t.lanes_kb = kernels::kStoredLanesKb;
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
  // as decoded), or the embeddings and head as int8 tables (as_int8_table).
  auto stored = [&](const MappedHfDir::Tensor& t) {
    written.insert(t.t.name);
    const std::string& dt = t.t.dense.dtype;
    if (!t.t.is_sparse() && as_int8_table(t.t.name, t.t.dense.shape, o) &&
        (dt == "F32" || dt == "F16" || dt == "BF16")) {
      detail::RowSource rows;
      rows.stored.type = dtype_from_st(dt);
      rows.stored.rows = t.t.dense.shape[0];
      rows.stored.cols = t.t.dense.shape[1];
      rows.stored.data = t.t.dense.bytes.data();
      rows.what = "tensor '" + t.t.name + "'";
      CheckpointTensor c =
          int8_table_tensor(t.t.name, t.t.dense.shape, detail::narrowed_table(rows, true, o.threads));
      t.file->release(t.t.dense.bytes);
      return c;
    }
    CheckpointTensor c = CheckpointTensorView(t.t).copy();
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
      one.tensors.push_back(as_int8_table(name, st.shape, o)
                                ? int8_table_tensor(name, st.shape, in.int8_table(name, o.threads))
                                : written(name, in.tensor(name)));
      out.add(one);
    }
  out.finish();
  return r;
}

}  // namespace sparse24::engine
