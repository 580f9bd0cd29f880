// Reading a Hugging Face directory's config.json and tensors for an architecture's loader: typed, bounded
// config fields and the checkpoint's tensors asked for by name (each checked and marked used), shared by the
// encoder (hf_encoder.cc) and decoder (hf_decoder.cc) loaders.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "builder.h"
#include "fingerprint.h"
#include "kernels/convert.h"
#include "kernels/huge_pages.h"
#include "kernels/lanes_stored.h"
#include "sparse24/checkpoint.h"
#include "sparse24/decoder.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "sparse24/tensor.h"

namespace sparse24::engine::detail {

using json = nlohmann::json;

inline json read_json(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  json j = json::parse(b.begin(), b.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a JSON object");
  return j;
}

inline int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Typed, bounded fields of a config; every problem names the file and the key.
struct Fields {
  const json& j;
  std::string what;
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const auto it = j.find(key);
    if (it == j.end()) throw Error(what + ": missing '" + key + "'");
    if (!it->is_number_integer()) throw Error(what + ": '" + key + "' is not an integer");
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi)
      throw Error(what + ": '" + key + "' is " + std::to_string(v) + ", outside " + std::to_string(lo) +
                  ".." + std::to_string(hi));
    return v;
  }
  int64_t integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    return j.contains(key) ? integer(key, lo, hi) : fallback;
  }
  double number(const char* key, double fallback, double lo, double hi) const {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_number()) throw Error(what + ": '" + key + "' is not a number");
    const double v = it->get<double>();
    if (!(v >= lo && v <= hi)) throw Error(what + ": '" + key + "' is out of range");
    return v;
  }
  std::string string(const char* key, const std::string& fallback) const {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_string()) throw Error(what + ": '" + key + "' is not a string");
    return it->get<std::string>();
  }
  bool boolean(const char* key) const {
    const auto it = j.find(key);
    if (it == j.end()) return false;
    if (!it->is_boolean()) throw Error(what + ": '" + key + "' is not true or false");
    return it->get<bool>();
  }
};

// The checkpoint's tensors as the architecture asks for them; every one is checked, marked used and hashed
// into the fingerprint (name and stored bytes, in the order the loader asks for them) the first time.
// Dense tensors are converted from where they are stored: a checkpoint in memory, or a directory's mapped
// files, whose pages are dropped once a tensor is converted (a big checkpoint is not kept resident beside
// what was made of it). A 2:4 weight is moved into the Linear that asks for it, so it is read once.
class Weights {
 public:
  Weights(Checkpoint ck, std::string what) : owned_(std::move(ck)), what_(std::move(what)) {
    for (CheckpointTensor& t : owned_.tensors)
      add(t.name, StTensorView{t.dense.dtype, t.dense.shape, t.dense.bytes}, t.sparse, nullptr, nullptr,
          t.scale_group, {reinterpret_cast<const uint8_t*>(t.scales.data()), t.scales.size() * sizeof(float)},
          t.lanes_kb);
  }
  Weights(MappedHfDir d, std::string what) : mapped_(std::move(d)), what_(std::move(what)) {
    for (MappedHfDir::Tensor& x : mapped_.tensors)
      add(x.t.name, x.t.dense, x.t.sparse, &x.t, x.file, x.t.scale_group, x.t.scales, x.t.lanes_kb);
  }
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;
  // A mapping that outlives the loader (a table left in it) keeps none of its pages: reading a tensor next
  // to one already dropped maps the page cache's whole large folio back (whole folios per fault on recent
  // kernels), so what the loader dropped piece by piece partly comes back.
  ~Weights() {
    for (const std::shared_ptr<MappedSafeTensors>& f : mapped_.files)
      if (!in_place_.count(&f->file)) f->file.release(f->file.bytes());
  }
  // Linears stored in the kernels' layout (prune-model's) and int8 tables (prune-model --int8's) in a mapped
  // file are left there for the Decoder to run in place (Gemm::lanes, WeightTable::i8_in_file;
  // DecoderLoadOptions::in_place) instead of being decoded or copied.
  bool in_place = false;
  // The load's rounding (DecoderLoadOptions::int8, bf16): a layer whose values it changes is decoded instead.
  bool rounds_int8 = false, rounds_bf16 = false;

  bool has(const std::string& name) const { return by_name_.count(name) != 0; }
  std::vector<float> dense(const std::string& name, const std::vector<int64_t>& shape) {
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    dense_into(name, shape, v.data());
    return v;
  }
  // The same into out (a joined GEMM's rows), and whether a tensor is stored dense (absent: true, so that
  // dense_into names it missing).
  void dense_into(const std::string& name, const std::vector<int64_t>& shape, float* out) {
    const Entry& t = take(name);
    if (t.sparse)
      throw Error(what_ + ": tensor '" + name + "' is stored 2:4, the architecture needs it dense");
    if (t.scale_group > 0 && t.dense.shape == shape) {  // int8 with scales (checked finite): dequantized
      const int64_t cols = shape[1];
      if (cols > 0)  // (whole rows at a time)
        in_chunks(t, static_cast<size_t>(cols), shape[0], [&](int64_t r0, int64_t n, const uint8_t* from) {
          dequantize_rows(from, t.scales, r0, n, cols, t.scale_group, out + r0 * cols);
        });
      return;
    }
    const std::string& dt = t.dense.dtype;
    if ((dt != "F32" && dt != "F16" && dt != "BF16") || t.dense.shape != shape)
      throw Error(what_ + ": tensor '" + name + "' is " + dt + " " + shape_string(t.dense.shape) +
                  ", the architecture needs a float " + shape_string(shape));
    const int64_t n = shape_numel(shape);
    const DType type = dtype_from_st(dt);
    in_chunks(t, dtype_size(type), n, [&](int64_t i, int64_t c, const uint8_t* from) {
      kernels::elements_to_floats(type, from, c, out + i);
    });
    finite(name, out, n);
  }
  // A dense table of rows (shape {rows, cols}): left where it is stored when that is a mapped file
  // (StoredRows; its values checked finite a piece at a time, those pages dropped again), else read into
  // fp32 as dense() does. What `values` or `stored` holds, the other is empty.
  struct Table {
    std::vector<float> values;
    StoredRows stored;
  };
  Table table(const std::string& name, const std::vector<int64_t>& shape) {
    if (!stays_in_file(name, shape)) return {dense(name, shape), {}};  // its errors, or a table in memory
    return {{}, stored_rows(name, shape)};
  }
  // Whether rows() can read the tensor a block of rows at a time: a dense float [rows, cols].
  bool reads_rows(const std::string& name, const std::vector<int64_t>& shape) const {
    const auto it = by_name_.find(name);
    const Entry* e = it == by_name_.end() ? nullptr : &entries_[it->second];
    return e != nullptr && !e->is_sparse() && shape.size() == 2 && e->dense.shape == shape &&
           (e->dense.dtype == "F32" || e->dense.dtype == "F16" || e->dense.dtype == "BF16");
  }
  // Its rows where they are stored; rows_read() takes the tensor once they have been.
  RowSource rows(const std::string& name, const std::vector<int64_t>& shape) const {
    if (!reads_rows(name, shape)) throw Error(what_ + ": tensor '" + name + "' cannot be read by rows");
    const Entry& t = entries_[by_name_.at(name)];
    RowSource s;
    s.stored.type = dtype_from_st(t.dense.dtype);
    s.stored.rows = shape[0];
    s.stored.cols = shape[1];
    s.stored.data = t.dense.bytes.data();
    s.what = what_ + ": tensor '" + name + "'";
    return s;
  }
  void rows_read(const std::string& name) { take(name); }
  // The same for a tensor whose stored bytes the caller hashed as it read them: a row_hash() given them a
  // piece at a time, in order (FnvWords' pieces), then finished: the hash take() would have computed.
  FnvWords row_hash(const std::string& name) const {
    return FnvWords(fnv1a(h_, reinterpret_cast<const uint8_t*>(name.data()), name.size()));
  }
  void rows_read(const std::string& name, uint64_t hash) { take(name, &hash); }
  // Whether table() would leave the tensor in its file: one rows() could read, in a mapped file.
  bool stays_in_file(const std::string& name, const std::vector<int64_t>& shape) const {
    const auto it = by_name_.find(name);
    return it != by_name_.end() && entries_[it->second].file != nullptr && reads_rows(name, shape);
  }
  // The rows of a tensor that stays_in_file(), left there (values checked finite a piece at a time, those
  // pages dropped again).
  StoredRows stored_rows(const std::string& name, const std::vector<int64_t>& shape) {
    if (!stays_in_file(name, shape)) throw Error(what_ + ": tensor '" + name + "' cannot stay in its file");
    const Entry& t = take(name);
    StoredRows s;
    s.type = dtype_from_st(t.dense.dtype);
    s.rows = shape[0];
    s.cols = shape[1];
    s.data = t.dense.bytes.data();
    s.owner = t.file;
    in_chunks(t, dtype_size(s.type), s.rows * s.cols, [&](int64_t, int64_t c, const uint8_t* from) {
      if (!kernels::all_finite_elements(s.type, from, c))
        throw Error(what_ + ": tensor '" + name + "' holds a non-finite value");
    });
    return s;
  }
  // A dense bfloat16 tensor's values as stored (dense_dtype "BF16"), checked finite.
  std::vector<uint16_t> bf16(const std::string& name, const std::vector<int64_t>& shape) {
    const Entry& t = take(name);
    if (t.sparse || t.dense.dtype != "BF16" || t.dense.shape != shape)
      throw Error(what_ + ": tensor '" + name + "' is not a bfloat16 " + shape_string(shape));
    std::vector<uint16_t> v;
    kernels::resize_huge(v, static_cast<size_t>(shape_numel(shape)));
    in_chunks(t, sizeof(uint16_t), static_cast<int64_t>(v.size()),
              [&](int64_t i, int64_t c, const uint8_t* from) {
                std::memcpy(v.data() + i, from, static_cast<size_t>(c) * sizeof(uint16_t));
              });
    if (!kernels::all_finite_bf16(v.data(), static_cast<int64_t>(v.size())))
      throw Error(what_ + ": tensor '" + name + "' holds a non-finite value");
    return v;
  }
  // Whether a tensor is an int8 table as the decoder runs one (WeightTable::i8 and scales: a dense I8 [rows,
  // cols] with a scale per kernels::kGemvI8Group of a row, prune-model --int8's embeddings and head), of
  // this shape; int8_table() takes it as it is stored, hashed as it is copied.
  bool is_int8_table(const std::string& name, const std::vector<int64_t>& shape) const {
    const auto it = by_name_.find(name);
    return it != by_name_.end() && entries_[it->second].scale_group == kernels::kGemvI8Group &&
           entries_[it->second].dense.shape == shape;
  }
  WeightTable int8_table(const std::string& name, const std::vector<int64_t>& shape) {
    if (!is_int8_table(name, shape))
      throw Error(what_ + ": tensor '" + name + "' is not an int8 table " + shape_string(shape));
    Entry& t = entries_[by_name_.at(name)];
    if (t.used) throw Error(what_ + ": tensor '" + name + "' is asked for twice");
    t.used = true;
    WeightTable out;
    if (in_place && t.file != nullptr && reinterpret_cast<uintptr_t>(t.scales.data()) % alignof(float) == 0) {
      // left in the file (hashed as take() hashes it; the scales were checked finite by the reader)
      h_ = fnv1a_tensor(h_, name, t.dense.bytes.data(), t.dense.bytes.size());
      h_ = fnv1a_words(h_, t.scales.data(), t.scales.size());
      out.i8_in_file = {reinterpret_cast<const int8_t*>(t.dense.bytes.data()), t.dense.bytes.size()};
      out.scales_in_file = {reinterpret_cast<const float*>(t.scales.data()), t.scales.size() / sizeof(float)};
      out.owner = t.file;
      in_place_.insert(t.file.get());
      return out;
    }
    kernels::reserve_huge(out.i8, t.dense.bytes.size());
    kernels::reserve_huge(out.scales, t.scales.size() / sizeof(float));
    h_ = hash_append(FnvWords(fnv1a(h_, reinterpret_cast<const uint8_t*>(name.data()), name.size())),
                     t.dense.bytes, out.i8);
    h_ = hash_append(FnvWords(h_), t.scales, out.scales);
    if (t.file != nullptr)
      for (std::span<const uint8_t> b : {t.dense.bytes, t.scales}) t.file->release(b);
    return out;
  }
  // A dense tensor's stored type (safetensors' name; "" for a 2:4 or a missing one).
  std::string dense_dtype(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() || entries_[it->second].is_sparse() ? "" : entries_[it->second].dense.dtype;
  }
  bool is_dense(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() || !entries_[it->second].is_sparse();
  }
  // A Linear's weight [out, in], dense or 2:4, and its bias (when `bias`).
  Gemm linear(const std::string& prefix, const std::string& layer, int64_t out, int64_t in,
              bool bias = true) {
    Gemm g;
    g.name = layer;
    g.m = out;
    g.k = in;
    const std::string name = prefix + ".weight";
    g.sources = {name};
    const Entry& t = take(name);
    if (t.sparse) {
      if (t.sparse->shape != std::vector<int64_t>{out, in})
        throw Error(what_ + ": tensor '" + name + "' is 2:4 " + shape_string(t.sparse->shape) +
                    ", the architecture needs " + shape_string({out, in}));
      g.pruned = true;
      // f32 and bf16 values stay as stored (bf16 ones pack as bf16 weights: exact, half the bytes), and so
      // do int8 ones with scales (prune-model --int8: they run as int8 weights, finite by validate).
      g.sparse = std::move(*t.sparse);
      const bool as_stored = runs_as_stored(g.sparse);
      if (!as_stored)
        g.sparse = to_f32(std::move(g.sparse));  // (validated)
      else if (t.deferred == nullptr)            // (a deferred layer was checked as it was copied)
        validate(g.sparse);
      if ((!as_stored || t.deferred == nullptr) && !finite_values(g.sparse, 0))
        throw Error(what_ + ": tensor '" + name + "' holds a non-finite value");
    } else {
      g.dense = dense(name, {out, in});
    }
    if (bias) g.bias = dense(prefix + ".bias", {out});
    return g;
  }
  // A Linear whose rows are several stored weights run as one GEMM (Q, K, V; gate, up: `parts`, each
  // (prefix, rows)), 2:4 or dense, and their biases: each part read as linear() reads it, joined by
  // concat_rows; but 2:4 parts left in their files (a pruned checkpoint's sparse24 layers) whose values run
  // as stored, all of one type, are copied straight into the joined weights (no copy of each), as take()
  // copies one: the same Gemm and fingerprint.
  Gemm linear_rows(const std::string& layer, const std::vector<std::pair<std::string, int64_t>>& parts,
                   int64_t in, bool bias) {
    bool here = in_place;
    for (const auto& [prefix, rows] : parts) {
      const auto it = by_name_.find(prefix + ".weight");
      const Entry* e = it == by_name_.end() ? nullptr : &entries_[it->second];
      const CheckpointTensorView* v = e != nullptr && e->lanes_kb > 0 ? e->deferred : nullptr;
      // (bytes the kernels can read where they are: a file that is not so aligned is decoded and packed)
      here = here && v != nullptr && e->file != nullptr && !e->used &&
             v->lanes_shape == std::vector<int64_t>{rows, in} &&
             reinterpret_cast<uintptr_t>(v->lanes.data()) % 32 == 0 &&
             (v->lanes_dtype == DType::kI8 ||
              (!rounds_int8 && (v->lanes_dtype == DType::kBF16 || !rounds_bf16)));
    }
    if (here) return lanes_linear(layer, parts, in, bias);
    bool joined = parts.size() > 1;
    for (const auto& [prefix, rows] : parts) {
      const auto it = by_name_.find(prefix + ".weight");
      joined = joined && it != by_name_.end() && entries_[it->second].deferred != nullptr &&
               !entries_[it->second].used;
    }
    std::vector<StoredCompressed> stored;
    for (size_t i = 0; joined && i < parts.size(); ++i) {
      const Entry& e = entries_[by_name_.at(parts[i].first + ".weight")];
      joined = e.lanes_kb == 0;  // (a layer in the kernels' layout is decoded by take())
      if (!joined) break;
      stored.push_back(e.deferred->stored_layer());
      const Compressed& h = stored.back().header;
      joined = h.shape == std::vector<int64_t>{parts[i].second, in} && runs_as_stored(h) &&
               h.dtype == stored[0].header.dtype && h.scale_group == stored[0].header.scale_group;
    }
    if (!joined) {
      std::vector<Gemm> gs;
      for (const auto& [prefix, rows] : parts) gs.push_back(linear(prefix, layer, rows, in, bias));
      if (gs.size() == 1) return std::move(gs[0]);
      std::vector<const Gemm*> ptrs;
      for (const Gemm& g : gs) ptrs.push_back(&g);
      return concat_rows(layer, ptrs);
    }
    Gemm g;
    g.name = layer;
    g.k = in;
    g.pruned = true;
    Compressed& c = g.sparse;
    c = stored[0].header;
    c.rows = 0;
    for (const StoredCompressed& s : stored) c.rows += s.header.rows;
    c.shape = {c.rows, in};
    g.m = c.rows;
    reserve(c);
    int64_t row = 0;
    for (size_t i = 0; i < parts.size(); ++i) {  // (taken in linear()'s order: one fingerprint either way)
      const std::string name = parts[i].first + ".weight";
      Entry& t = entries_[by_name_.at(name)];
      t.used = true;
      append_stored(t, stored[i], c, row);
      row += parts[i].second;
      g.sources.push_back(name);
      if (bias) {
        const std::vector<float> b = dense(parts[i].first + ".bias", {parts[i].second});
        g.bias.insert(g.bias.end(), b.begin(), b.end());
      }
    }
    return g;
  }
  // The Linear of `parts` stored in the kernels' layout in mapped files, left there: each part hashed into
  // the fingerprint as take() hashes a layer in that layout (its name, its bytes) and checked, its pages
  // kept.
  Gemm lanes_linear(const std::string& layer, const std::vector<std::pair<std::string, int64_t>>& parts,
                    int64_t in, bool bias) {
    Gemm g;
    g.name = layer;
    g.k = in;
    g.pruned = true;
    for (const auto& [prefix, rows] : parts) {
      const std::string name = prefix + ".weight";
      Entry& t = entries_[by_name_.at(name)];
      t.used = true;
      const CheckpointTensorView& v = *t.deferred;
      h_ = fnv1a_tensor(h_, name, v.lanes.data(), v.lanes.size());
      try {
        kernels::check_lanes(kernels::lanes_over(v.lanes, rows, in, t.lanes_kb,
                                                 kernels::lanes_value_type(v.lanes_dtype), t.file),
                             rows, in);
      } catch (const Error& e) {
        throw Error(what_ + ": tensor '" + name + "': " + e.what());
      }
      in_place_.insert(t.file.get());
      g.lanes.push_back({v.lanes, rows, t.lanes_kb, v.lanes_dtype, t.file});
      g.m += rows;
      g.sources.push_back(name);
      if (bias) {
        const std::vector<float> b = dense(prefix + ".bias", {rows});
        g.bias.insert(g.bias.end(), b.begin(), b.end());
      }
    }
    g.sparse.dtype = g.lanes[0].dtype;  // (the values' type; the matrix itself stays in the file)
    return g;
  }
  // Refuses a tensor nothing used, except those `ignored` accepts (heads the model does not run).
  void check_all_used(const std::function<bool(const std::string&)>& ignored) const {
    for (const Entry& t : entries_)
      if (!t.used && !ignored(t.name))
        throw Error(what_ + ": tensor '" + t.name + "' is not used by the architecture");
  }
  // The config's text and the tensors taken so far.
  std::string fingerprint(const std::string& config) const {
    uint64_t h = fnv1a(kFnvBasis, reinterpret_cast<const uint8_t*>(config.data()), config.size());
    return hex(fnv1a(h, reinterpret_cast<const uint8_t*>(&h_), sizeof(h_)));
  }

 private:
  struct Entry {
    std::string name;
    StTensorView dense;                      // when not 2:4
    Compressed* sparse;                      // a 2:4 weight (decoded); moved out by linear()
    CheckpointTensorView* deferred;          // or one left in the file until taken (decoded into `decoded`)
    std::shared_ptr<const MappedFile> file;  // the mapping dense's bytes are in (null: in memory)
    bool used = false;
    std::optional<Compressed> decoded;
    int64_t scale_group = 0;            // a dense I8 one with scales (CheckpointTensor's): their F32 bytes
    std::span<const uint8_t> scales{};  //   (checked finite by the reader)
    int lanes_kb =
        0;  // a 2:4 one in the kernels' layout (the view's bytes, shape and type; in memory: its K block)
    bool is_sparse() const { return sparse != nullptr || deferred != nullptr; }
  };
  void add(const std::string& name, StTensorView dense, std::optional<Compressed>& sparse,
           CheckpointTensorView* view, std::shared_ptr<const MappedFile> file, int64_t scale_group,
           std::span<const uint8_t> scales, int lanes_kb) {
    by_name_[name] = entries_.size();
    CheckpointTensorView* deferred = view != nullptr && view->decode ? view : nullptr;
    entries_.push_back({name,
                        std::move(dense),
                        sparse ? &*sparse : nullptr,
                        deferred,
                        std::move(file),
                        false,
                        {},
                        scale_group,
                        scales,
                        lanes_kb});
  }
  // A tensor asked for: marked used and hashed the first time; a 2:4 weight only once (linear moves it).
  Entry& take(const std::string& name, const uint64_t* hashed = nullptr) {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw Error(what_ + ": missing tensor '" + name + "'");
    Entry& t = entries_[it->second];
    if (t.used) {
      if (t.is_sparse()) throw Error(what_ + ": tensor '" + name + "' is asked for twice");
      return t;
    }
    t.used = true;
    if (t.deferred != nullptr && t.lanes_kb > 0) {  // the kernels' layout: decoded (checked), pages dropped
      const std::span<const uint8_t> lanes = t.deferred->lanes;
      h_ = fnv1a_tensor(h_, name, lanes.data(), lanes.size());
      t.decoded = t.deferred->decode();
      t.sparse = &*t.decoded;
      if (t.file != nullptr) t.file->release(lanes);
      return t;
    }
    if (t.deferred != nullptr) {  // copied now, hashed and checked as it is, its pages dropped
      const StoredCompressed s = t.deferred->stored_layer();
      t.decoded = s.header;
      reserve(*t.decoded);
      append_stored(t, s, *t.decoded, 0);
      t.sparse = &*t.decoded;
      return t;
    }
    if (t.sparse && t.lanes_kb > 0) {  // (stored in the kernels' layout: hashed as those bytes)
      const kernels::LanesLayout l = kernels::lanes_of(*t.sparse, t.lanes_kb);
      h_ = fnv1a_tensor(h_, name, l.data.data(), l.data.size());
    } else if (t.sparse) {
      const Compressed& c = *t.sparse;
      h_ = fnv1a_tensor(h_, name, c.values.data(), c.values.size());
      h_ = fnv1a_words(h_, c.metadata.data(), c.metadata.size());
      if (!c.scales.empty())  // (int8 values with scales: the same values under other scales differ)
        h_ = fnv1a_words(h_, reinterpret_cast<const uint8_t*>(c.scales.data()),
                         c.scales.size() * sizeof(float));
    } else if (hashed != nullptr) {  // (rows_read's: hashed as they were read)
      h_ = *hashed;
      if (t.file != nullptr) t.file->release(t.dense.bytes);
    } else {  // a piece at a time, dropping a mapped file's pages as it goes
      FnvWords f(fnv1a(h_, reinterpret_cast<const uint8_t*>(name.data()), name.size()));
      const auto n = static_cast<int64_t>(t.dense.bytes.size());
      if (n == 0) h_ = f.finish(t.dense.bytes.data(), 0);
      in_chunks(t, 1, n, [&](int64_t i, int64_t c, const uint8_t* p) {
        if (i + c < n)
          f.add(p, static_cast<size_t>(c));  // whole pieces of 16 MB: multiples of 32 bytes
        else
          h_ = f.finish(p, static_cast<size_t>(c));
      });
      if (t.scale_group > 0) h_ = fnv1a_words(h_, t.scales.data(), t.scales.size());  // (int8_table()'s hash)
    }
    return t;
  }
  // Whether a Linear keeps a 2:4 weight's values as they are: fp32, bf16, or int8 with scales (others are
  // widened to fp32).
  static bool runs_as_stored(const Compressed& c) {
    return c.dtype == DType::kF32 || c.dtype == DType::kBF16 || (c.dtype == DType::kI8 && c.scale_group > 0);
  }
  // Whether c's fp32 or bf16 values from byte `from` on are finite (int8 ones always are; f16 ones are
  // widened to fp32 before they are checked).
  static bool finite_values(const Compressed& c, size_t from) {
    const auto n = static_cast<int64_t>((c.values.size() - from) / dtype_size(c.dtype));
    const uint8_t* p = c.values.data() + from;
    if (c.dtype == DType::kBF16) return kernels::all_finite_bf16(reinterpret_cast<const uint16_t*>(p), n);
    return c.dtype != DType::kF32 || kernels::all_finite(reinterpret_cast<const float*>(p), n);
  }
  // Room in c's arrays for its rows (c.rows; large ones on 2 MB pages), to be appended.
  static void reserve(Compressed& c) {
    kernels::reserve_huge(c.values, static_cast<size_t>(c.rows * c.values_per_row()) * dtype_size(c.dtype));
    kernels::reserve_huge(c.metadata, static_cast<size_t>(c.rows * c.meta_bytes_per_row()));
    kernels::reserve_huge(c.scales, static_cast<size_t>(c.rows * c.scales_per_row()));
  }
  // A 2:4 weight left in its file (t, its tensors s) appended to c from row `row` (c of its dtype, scale
  // group and columns): copied a piece at a time, each piece hashed into the fingerprint as take() hashes an
  // in-memory one (its name and values, its metadata, its scales) and then checked where it was copied to
  // (validate_rows; fp32 and bf16 values finite), and its pages dropped.
  void append_stored(const Entry& t, const StoredCompressed& s, Compressed& c, int64_t row) {
    const size_t values_at = c.values.size();
    h_ = hash_append(FnvWords(fnv1a(h_, reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size())),
                     s.values, c.values);
    h_ = hash_append(FnvWords(h_), s.metadata, c.metadata);
    if (!s.scales.empty()) h_ = hash_append(FnvWords(h_), s.scales, c.scales);
    try {
      validate_rows(c, row, row + s.header.rows);
    } catch (const Error& e) {
      throw Error(what_ + ": tensor '" + t.name + "': " + e.what());
    }
    if (runs_as_stored(c) && !finite_values(c, values_at))
      throw Error(what_ + ": tensor '" + t.name + "' holds a non-finite value");
    if (t.file != nullptr)
      for (std::span<const uint8_t> b : {s.values, s.metadata, s.scales}) t.file->release(b);
  }
  // b appended to `into` (whole elements) a piece at a time, f hashing each piece (FnvWords' pieces:
  // multiples of 32 bytes but the last) as it is copied: the hash of all of b.
  template <class T>
  static uint64_t hash_append(FnvWords f, std::span<const uint8_t> b, std::vector<T>& into) {
    constexpr size_t kPiece = size_t{1} << 18;
    for (size_t i = 0;; i += kPiece) {
      const size_t n = std::min(kPiece, b.size() - i);
      const uint8_t* p = b.data() + i;
      if constexpr (sizeof(T) == 1) {  // (bytes copied in, within the reserved room: no zeros written first)
        into.insert(into.end(), reinterpret_cast<const T*>(p), reinterpret_cast<const T*>(p + n));
      } else {  // (a float may not be aligned in the file)
        const size_t at = into.size();
        into.resize(at + n / sizeof(T));
        if (n > 0) std::memcpy(reinterpret_cast<uint8_t*>(into.data() + at), p, n);
      }
      if (i + n == b.size()) return f.finish(p, n);
      f.add(p, n);
    }
  }
  // fn(first element, count, their bytes) over a dense tensor's n elements a chunk at a time; in a mapped
  // file the pages read so far are dropped after each chunk, so a 2 GB table is never resident whole beside
  // what is made of it.
  template <class Fn>
  static void in_chunks(const Entry& t, size_t element_size, int64_t n, Fn fn) {
    const int64_t step = std::max<int64_t>(1, static_cast<int64_t>((size_t{16} << 20) / element_size));
    for (int64_t i = 0; i < n; i += step) {
      const int64_t c = std::min(step, n - i);
      fn(i, c, t.dense.bytes.data() + static_cast<size_t>(i) * element_size);
      if (t.file != nullptr)
        t.file->release(t.dense.bytes.subspan(static_cast<size_t>(i) * element_size,
                                              static_cast<size_t>(c) * element_size));
    }
    if (t.file != nullptr) t.file->release(t.dense.bytes);  // the pages across chunk boundaries
  }
  void finite(const std::string& name, const float* v, int64_t n) const {
    if (!kernels::all_finite(v, n)) throw Error(what_ + ": tensor '" + name + "' holds a non-finite value");
  }
  Checkpoint owned_;    // the tensors, when held in memory
  MappedHfDir mapped_;  // or the mapped directory they are in
  std::string what_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> by_name_;
  std::set<const MappedFile*> in_place_;  // files Linears or tables run from (their pages kept)
  uint64_t h_ = kFnvBasis;
};

// Where a directory's tensors are read, for errors: its one shard, or the directory.
inline std::string weights_what(const std::string& dir, const std::vector<std::string>& shards) {
  return shards.size() == 1 ? shards[0] : dir;
}

}  // namespace sparse24::engine::detail
