// The decoder at batch 1 (decoder.h): buffers, the KV cache and the forward pass.
#include "sparse24/decoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <dnnl.hpp>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "kernels/gemv.h"
#include "kernels/lanes_stored.h"
#include "sparse24/compressed.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/spmm.h"

namespace sparse24::engine {
namespace {

// The ggml type number of a table left in a file (its DType's, for a safetensors file's).
uint32_t stored_ggml_type(const StoredRows& t) {
  if (t.ggml_type != StoredRows::kNoGgml) return static_cast<uint32_t>(t.ggml_type);
  switch (t.type) {
    case DType::kF32:
      return static_cast<uint32_t>(GgmlType::kF32);
    case DType::kF16:
      return static_cast<uint32_t>(GgmlType::kF16);
    case DType::kBF16:
      return static_cast<uint32_t>(GgmlType::kBF16);
    default:
      return UINT32_MAX;  // (no such ggml type)
  }
}

// A call's tokens run in pieces of at most this many when a sliding layer's cache is a ring (and when
// longrope's switch runs the held tokens again).
constexpr int64_t kChunk = 512;

// One Linear, Y[m, n] = W X (X [k, n], feature-major): the 2:4 kernel on packed weights (the memory-bound
// layout only: decoding runs at n = 1, and that is what its bytes are counted for) or dense weights (one
// token: gemv_f32; more: oneDNN's sgemm).
struct Linear {
  int64_t m = 0, k = 0;
  // 2:4: one packed matrix, or the parts a checkpoint stores in the kernels' layout, run where they are
  // (Gemm::lanes: Q, K and V as three calls, each rows apart in Y).
  std::vector<PackedMatrix> packed;
  std::vector<float> decompressed;  // a 2:4 Linear run dense: its weights expanded
  const float* w = nullptr;         // dense weights: the model's (read in place) or `decompressed`
  std::vector<float> bias;          // empty or m floats

  Linear(const Linear&) = delete;  // w may point into decompressed: moved, never copied
  Linear(Linear&&) = default;
  Linear(const Gemm& g, bool sparse, const DecoderOptions& d, bool both = false)
      : m(g.m), k(g.k), bias(g.bias) {
    if (!bias.empty() && static_cast<int64_t>(bias.size()) != m)
      throw Error("layer '" + g.name + "': bias size mismatch");
    if (sparse && g.pruned && !g.lanes.empty()) {
      PackOptions o;
      o.bf16_activations = d.bf16_activations;
      o.int8_activations = d.int8_activations;
      o.layouts = PackLayouts::kSmallN;
      for (const Gemm::StoredLanes& p : g.lanes) {
        if ((d.int8_weights && p.dtype != DType::kI8) || (d.bf16_weights && p.dtype == DType::kF32))
          throw Error("layer '" + g.name + "': left in its file as " + dtype_name(p.dtype) +
                      " values, it cannot run as the weights asked for (load it with that rounding)");
        const kernels::ValueType t = kernels::lanes_value_type(p.dtype);
        packed.push_back(kernels::packed_from_lanes(kernels::lanes_over(p.bytes, p.rows, k, p.kb, t, p.owner),
                                                    p.rows, k, o));
      }
      return;
    }
    if (sparse && g.pruned) {
      // Values already int8 (DecoderLoadOptions::int8, an int8 checkpoint) run as they are, bf16 ones (a
      // bf16 checkpoint) as bf16 weights unless int8 ones are asked for.
      const bool i8 = g.sparse.dtype == DType::kI8;
      PackOptions o;
      o.bf16_weights = d.bf16_weights && !i8;
      o.bf16_activations = d.bf16_activations;
      o.int8_activations = d.int8_activations;
      o.layouts = both ? PackLayouts::kBoth : PackLayouts::kSmallN;
      // (Not one conditional expression: its lvalue arm would copy the Linear's values.)
      if (d.int8_weights && !i8)
        packed.push_back(pack(quantize_int8(g.sparse, detail::kInt8ScaleGroup), o));
      else
        packed.push_back(pack(g.sparse, o));
      return;
    }
    if (!g.lanes.empty())
      throw Error("layer '" + g.name + "': left in the kernels' layout, it runs only sparse");
    if (g.pruned) decompressed = decompress(g.sparse).to_float();
    const std::vector<float>& dense = g.pruned ? decompressed : g.dense;
    if (static_cast<int64_t>(dense.size()) != m * k)
      throw Error("layer '" + g.name + "': weight size mismatch");
    w = dense.data();
  }
  void run(const float* x, float* y, int64_t n, int threads) const {
    int64_t row = 0;
    for (const PackedMatrix& p : packed) {
      spmm(p, x, n, n, y + row * n, n, bias.empty() ? nullptr : bias.data() + row, Epilogue::kNone, threads);
      row += p.rows();
    }
    if (!packed.empty()) return;
    // One token: eight long row streams at once, as the head (oneDNN's sgemm streamed the decoder's short
    // rows at ~13 GB/s on one Zen 3 core, docs/performance.md); a few (a chat turn, a short prompt): the
    // small-N GEMM, bias included (as the encoder's dense layers, docs/design.md).
    if (n >= 2 && n <= kernels::kGemmSmallMaxN) {
      kernels::gemm_small(w, m, k, x, n, y, bias.empty() ? nullptr : bias.data(), Epilogue::kNone, threads);
      return;
    }
    if (n == 1)
      kernels::gemv_f32(w, m, k, x, y, threads);
    else
      dnnl_sgemm('N', 'N', m, n, k, 1.0f, w, k, x, n, 0.0f, y, n);
    if (!bias.empty())
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) y[r * n + j] += bias[r];
  }
  size_t bytes() const {
    size_t b = 0;
    for (const PackedMatrix& p : packed) b += p.bytes();
    return packed.empty() ? static_cast<size_t>(m * k) * sizeof(float) : b;
  }
};

struct LayerExec {
  const DecoderLayer* src = nullptr;
  Linear qkv, o, gate_up, down;
  detail::KvCache kv;
  int64_t window = 0;  // > 0: a sliding layer's window
};

// Packs the 2:4 Linears a loader hands over (Gemms moved out of each layer as it is read, in order) on a
// thread of its own while the loader goes on; finish() packs what is left on the calling thread too.
class Packer {
 public:
  explicit Packer(const DecoderOptions& o) : o_(o), worker_([this] { drain(); }) {}
  Packer(const Packer&) = delete;
  Packer& operator=(const Packer&) = delete;
  ~Packer() {  // (a loader's error: what was not started is dropped)
    {
      const std::lock_guard<std::mutex> lock(mu_);
      done_ = cancel_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  // Hands a Linear over; where the loader is this far ahead of the packing, it packs one itself first (the
  // 2:4 values waiting are then at most kAhead Linears', not half a model's).
  void add(size_t index, Gemm&& g) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back({index, std::move(g), std::nullopt, nullptr});
    }
    cv_.notify_one();
    while (run_one(kAhead)) {
    }
  }
  // The Linears by index (count of them; those never added empty), once all are packed; the first one's
  // error (in the order added) rethrown.
  std::vector<std::optional<Linear>> finish(size_t count) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    drain();
    worker_.join();
    std::vector<std::optional<Linear>> out(count);
    for (Job& j : jobs_) {
      if (j.error) std::rethrow_exception(j.error);
      if (j.index >= count) throw Error("internal: a packed Linear past the model's layers");
      if (j.out) out[j.index].emplace(std::move(*j.out));
    }
    return out;
  }

 private:
  struct Job {
    size_t index;
    Gemm g;
    std::optional<Linear> out;
    std::exception_ptr error;
  };
  void drain() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return next_ < jobs_.size() || done_; });
        if (cancel_ || next_ == jobs_.size()) return;
      }
      run_one(0);
    }
  }
  // Packs the next Linear waiting if more than `ahead` are; whether it did.
  bool run_one(size_t ahead) {
    Job* j = nullptr;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (cancel_ || jobs_.size() - next_ <= ahead) return false;
      j = &jobs_[next_++];  // (a deque's elements stay where they are as it grows)
    }
    try {
      j->out.emplace(j->g, true, o_, o_.prefill_layout);
    } catch (...) {
      j->error = std::current_exception();
    }
    j->g = Gemm{};  // its 2:4 values, once packed
    return true;
  }
  static constexpr size_t kAhead = 4;  // a layer's Linears
  const DecoderOptions o_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  size_t next_ = 0;
  bool done_ = false, cancel_ = false;
  std::thread worker_;  // (last: it starts once the rest is made)
};

}  // namespace

struct Decoder::Impl {
  std::unique_ptr<DecoderModel> owned;  // the model, when the Decoder took it
  // Linears packed as the model was read (the loading constructor's), by index 4 layer + which; the rest
  // are packed by build().
  std::vector<std::optional<Linear>> packed;
  DecoderConfig c;
  int threads = 1;
  int64_t capacity = 0, pos = 0;
  std::vector<int32_t> ids;                   // the tokens in the KV cache (pos of them)
  const std::vector<float>* embed = nullptr;  // the model's table (tied head too); the model outlives us
  std::vector<float> norm;
  std::optional<Linear> head;  // untied, fp32
  // bf16 / int8 weights: the head (tied or not) as a [vocab, hidden] table in that type; an untied model's
  // embeddings converted the same way. Tokens then look up their embeddings in `embed_rows` (the tied head's
  // table or the embeddings'), and a Decoder that took its model frees the fp32 table (Llama 3.1 8B's
  // 2.1 GB).
  WeightTable head_table, embed_table;
  const WeightTable* embed_rows = nullptr;
  StoredRows embed_stored;    // or the rows are left in the checkpoint's file
  StoredRows head_stored;     // the head run there, as stored (a tied model's: embed_stored)
  std::vector<float> column;  // one token's final-norm output (the bf16 / int8 head's input) or embedding
  std::vector<LayerExec> layers;
  // RoPE tables: the sliding layers' own if they have one; longrope's long-factor table, used while the
  // sequence is longer than rope.original_max_positions (`long_rope`: what the cache's keys were rotated by).
  std::vector<float> cos_sin, cos_sin_sliding, cos_sin_long;
  bool long_rope = false;
  bool rings = false;  // some sliding layer's cache is a ring: calls run kChunk tokens at a time
  int sparse = 0;
  // Activations for up to `cols` tokens per call (grown on demand).
  int64_t cols = 0;
  std::vector<float> h, x, qkv, ctx, tmp, gu, act, scratch, last;

  // The tokens in `ids` again from position 0, kChunk at a time (the cache rebuilt).
  void rerun() {
    const std::vector<int32_t> held = std::move(ids);
    ids.clear();
    pos = 0;
    for (size_t at = 0; at < held.size(); at += kChunk)
      append(held.data() + at, std::min<int64_t>(kChunk, static_cast<int64_t>(held.size() - at)));
  }

  // The logits of the last append's n tokens (all of them, or the last one) from h.
  void head_logits(int64_t n, bool all, float* logits);

  // The n tokens' embeddings through every layer into h, their K and V appended to the cache.
  void append(const int32_t* tokens, int64_t n) {
    reserve(n);
    const int64_t H = c.hidden;
    for (int64_t j = 0; j < n; ++j) {  // embeddings, feature-major
      const float* row = column.data();
      if (!embed_stored.empty())
        embed_stored.row(tokens[j], column.data());
      else if (embed_rows != nullptr)
        detail::table_row(*embed_rows, tokens[j], H, column.data());
      else
        row = embed->data() + static_cast<int64_t>(tokens[j]) * H;
      for (int64_t r = 0; r < H; ++r) h[r * n + j] = row[r] * c.embed_scale;
    }
    layers_forward(h.data(), n, nullptr);
    pos += n;
    ids.insert(ids.end(), tokens, tokens + n);
  }

  void reserve(int64_t n) {
    if (n <= cols) return;
    cols = n;
    const int64_t qkv_rows = (c.heads + 2 * c.kv_heads) * c.head_dim;
    h.resize(c.hidden * n);
    x.resize(c.hidden * n);
    tmp.resize(c.hidden * n);
    qkv.resize(qkv_rows * n);
    ctx.resize(c.heads * c.head_dim * n);
    gu.resize(2 * c.ffn * n);
    act.resize(c.ffn * n);
  }

  // Every layer over hs [hidden, n] (feature-major, in place) for the n tokens at positions pos ..
  // pos + n - 1, their K and V appended to the cache; `observe` (if any) sees each Linear's input.
  void layers_forward(float* hs, int64_t n, const LinearObserver* observe) {
    const int64_t H = c.hidden;
    for (size_t l = 0; l < layers.size(); ++l) {
      LayerExec& L = layers[l];
      auto run = [&](const Linear& lin, int which, const float* in, float* out) {
        if (observe != nullptr) (*observe)(static_cast<int64_t>(l), which, in, lin.k, n);
        lin.run(in, out, n, threads);
      };
      detail::rms_norm(hs, H, n, L.src->attn_norm.data(), c.eps, x.data());
      run(L.qkv, 0, x.data(), qkv.data());
      if (c.qk_norm)  // each head of Q, then of K, RMS-normalized over its head_dim rows
        for (int64_t hd = 0; hd < c.heads + c.kv_heads; ++hd) {
          float* rows = qkv.data() + hd * c.head_dim * n;
          const float* w = (hd < c.heads ? L.src->q_norm : L.src->k_norm).data();
          detail::rms_norm(rows, c.head_dim, n, w, c.eps, rows);
        }
      const float* table = L.window > 0 && c.sliding_rope ? cos_sin_sliding.data()
                           : long_rope                    ? cos_sin_long.data()
                                                          : cos_sin.data();
      detail::rope(qkv.data(), c.heads + c.kv_heads, c.head_dim, n, pos, table, c.rotary_dim);  // Q and K
      detail::attention_cached(qkv.data(), c.heads, n, pos, L.kv, ctx.data(), scratch.data(), threads,
                               {c.attn_scale, L.window, c.attn_softcap});
      run(L.o, 1, ctx.data(), tmp.data());
      if (c.sandwich_norms)
        detail::rms_norm(tmp.data(), H, n, L.src->attn_out_norm.data(), c.eps, tmp.data());
      for (int64_t i = 0; i < H * n; ++i) hs[i] += tmp[i];
      detail::rms_norm(hs, H, n, L.src->ffn_norm.data(), c.eps, x.data());
      run(L.gate_up, 2, x.data(), gu.data());
      detail::swiglu(gu.data(), c.ffn, n, act.data(), c.gelu);
      run(L.down, 3, act.data(), tmp.data());
      if (c.sandwich_norms) detail::rms_norm(tmp.data(), H, n, L.src->ffn_out_norm.data(), c.eps, tmp.data());
      for (int64_t i = 0; i < H * n; ++i) hs[i] += tmp[i];
    }
  }
};

Decoder::Decoder(const DecoderModel& m, const DecoderOptions& o) : impl_(std::make_unique<Impl>()) {
  build(m, o, nullptr);
}

Decoder::Decoder(DecoderModel&& m, const DecoderOptions& o) : impl_(std::make_unique<Impl>()) {
  impl_->owned = std::make_unique<DecoderModel>(std::move(m));  // (the vectors' buffers move, not copied)
  build(*impl_->owned, o, impl_->owned.get());
}

Decoder::Decoder(const std::string& path, const DecoderLoadOptions& load, const DecoderOptions& o)
    : impl_(std::make_unique<Impl>()) {
  DecoderLoadOptions l = load;
  // 2:4 Linears stored in the kernels' layout run where they are, unless they run dense, the compute-bound
  // layout is asked for too, or the weights are asked for in a narrower type than the load's.
  l.in_place = o.mode != Mode::kDense && !o.prefill_layout && active_isa() != Isa::kRef &&
               (!o.int8_weights || load.int8) && (!o.bf16_weights || load.bf16 || load.int8);
  if (o.threads < 2 || o.mode == Mode::kDense) {  // nothing to pack beside the reading
    impl_->owned = std::make_unique<DecoderModel>(load_decoder(path, l));
    build(*impl_->owned, o, impl_->owned.get());
    return;
  }
  Packer packer(o);
  l.on_layer = [&](DecoderModel& so_far, DecoderLayer& layer, int64_t index) {
    if (load.on_layer) load.on_layer(so_far, layer, index);
    size_t i = 4 * static_cast<size_t>(index);
    for (Gemm* g : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      if (g->pruned) packer.add(i, std::move(*g));  // (the layer keeps an empty Gemm)
      ++i;
    }
  };
  impl_->owned = std::make_unique<DecoderModel>(load_decoder(path, l));
  impl_->packed = packer.finish(4 * impl_->owned->layers.size());
  build(*impl_->owned, o, impl_->owned.get());
}

// The constructors' work on m; with `owned` (m itself, the Decoder's), each layer's packed Linears' 2:4
// values are released as soon as they are packed and a bf16 / int8 head's weights once converted: the
// weights are never in memory twice.
void Decoder::build(const DecoderModel& m, const DecoderOptions& o, DecoderModel* owned) {
  Impl& s = *impl_;
  s.c = m.config;
  if (o.threads < 1 || o.threads > 1024) throw Error("threads must be at least 1");
  if (o.max_context < 1) throw Error("the context must hold at least one token");
  s.threads = o.threads;
  s.capacity = std::min(o.max_context, s.c.max_positions);
  if (s.c.layers != static_cast<int64_t>(m.layers.size()) ||
      (!s.c.sliding.empty() && s.c.sliding.size() != m.layers.size()))
    throw Error("decoder: the config's layer count does not match the model's layers");
  s.embed = &m.embed;
  s.norm = m.norm;
  if (o.bf16_weights && o.int8_weights)
    throw Error("decoder: bf16_weights and int8_weights exclude each other");
  const bool sparse = o.mode != Mode::kDense;
  const int64_t table_size = s.c.vocab * s.c.hidden,
                scales_size = s.c.vocab * ((s.c.hidden + kernels::kGemvI8Group - 1) / kernels::kGemvI8Group);
  // Embeddings left in the checkpoint's file: tokens read their rows there.
  const bool stored = !m.embed_stored.empty();
  if (stored) {
    if (m.embed_stored.rows != s.c.vocab || m.embed_stored.cols != s.c.hidden)
      throw Error("decoder: the embeddings left in the file are not a vocab x hidden table");
    s.embed_stored = m.embed_stored;
  }
  // A head left there (a tied model's: the embeddings) runs there as stored, unless the options ask for a
  // table it is wider or slower than (detail::head_runs_stored): then it becomes that table (a tied model's
  // embedding rows too).
  const StoredRows& head_stored = s.c.tied ? m.embed_stored : m.head_stored;
  if (!head_stored.empty()) {
    const uint32_t type = stored_ggml_type(head_stored);
    if (!stored || head_stored.rows != s.c.vocab || head_stored.cols != s.c.hidden ||
        kernels::ggml_row_bytes(type, s.c.hidden) != static_cast<int64_t>(head_stored.row_bytes()))
      throw Error("decoder: the head left in the file is not a vocab x hidden table of a type it runs (" +
                  ggml_type_name(type) + "), with the embeddings left there too");
    if (detail::head_runs_stored(type, o.int8_weights, o.bf16_weights)) {
      s.head_stored = head_stored;
    } else {
      s.head_table = detail::narrowed_table(head_stored, o.int8_weights, o.threads);
      if (s.c.tied) {
        s.embed_stored = StoredRows{};
        s.embed_rows = &s.head_table;
      }
    }
  } else if (!m.embed_table.empty() || (stored && !m.head_table.empty())) {
    // as stored (bf16) or quantized as read (int8): held as they are
    const auto fits = [&](const WeightTable& t) {
      return t.i8_size() == 0 ? static_cast<int64_t>(t.bf16.size()) == table_size && t.scales_size() == 0
                              : static_cast<int64_t>(t.i8_size()) == table_size && t.bf16.empty() &&
                                    static_cast<int64_t>(t.scales_size()) == scales_size;
    };
    for (const WeightTable* t :
         {stored ? &m.head_table : &m.embed_table, s.c.tied ? &m.embed_table : &m.head_table})
      if (!fits(*t))
        throw Error("decoder: the embedding or head table is not vocab x hidden bf16, or int8 with scales");
    const auto take = [&](const WeightTable& t, WeightTable* own) -> WeightTable {
      if (o.int8_weights && t.i8_size() == 0) return detail::int8_table(t, s.c.vocab, s.c.hidden);
      if (own != nullptr) return std::move(*own);  // a Decoder that took its model takes its tables
      return t;
    };
    if (s.c.tied) {
      s.head_table = take(m.embed_table, owned != nullptr ? &owned->embed_table : nullptr);
    } else {
      s.head_table = take(m.head_table, owned != nullptr ? &owned->head_table : nullptr);
      if (!stored) s.embed_table = take(m.embed_table, owned != nullptr ? &owned->embed_table : nullptr);
    }
    if (owned != nullptr) owned->release_tables();
  } else if (o.bf16_weights || o.int8_weights) {
    std::vector<float> expanded;  // a 2:4 head's weights
    if (!s.c.tied && m.head.pruned) expanded = decompress(m.head.sparse).to_float();
    const std::vector<float>& w = s.c.tied ? m.embed : m.head.pruned ? expanded : m.head.dense;
    if (static_cast<int64_t>(w.size()) != table_size ||
        (!stored && static_cast<int64_t>(m.embed.size()) != table_size))
      throw Error("decoder: the head or the embedding table is not vocab x hidden floats");
    // A [vocab, hidden] table as the head holds it: int8 with a scale per 64 of a row, or bf16.
    const auto convert = [&](const std::vector<float>& t) {
      return o.int8_weights ? detail::int8_table(t, s.c.vocab, s.c.hidden) : detail::bf16_table(t);
    };
    s.head_table = convert(w);
    if (owned != nullptr && !s.c.tied) owned->head = Gemm{};
    if (!s.c.tied && !stored) s.embed_table = convert(m.embed);
    if (owned != nullptr) std::vector<float>().swap(owned->embed);
  }
  if (!s.head_table.empty()) {
    if (!stored) s.embed_rows = s.c.tied ? &s.head_table : &s.embed_table;
  } else if (!s.c.tied && head_stored.empty()) {
    s.head.emplace(m.head, false, o);
  }
  s.column.resize(static_cast<size_t>(s.c.hidden));
  // The layers' Linears, packed on the decoder's threads (with the reading, what a load spends its time on);
  // each one's 2:4 values released as soon as packed, so the weights are not held twice.
  std::vector<std::optional<Linear>> linears(4 * m.layers.size());
  {
    const auto gemm_of = [](auto& l, size_t i) {
      return std::array{&l.qkv, &l.o, &l.gate_up, &l.down}[i % 4];
    };
    std::vector<std::exception_ptr> errors(linears.size());
    if (!s.packed.empty()) {  // (the loading constructor's: each layer's Gemms it packed are left empty)
      if (s.packed.size() != linears.size()) throw Error("internal: packed Linears for other layers");
      linears = std::move(s.packed);
      s.packed.clear();
    }
#pragma omp parallel for num_threads(o.threads) schedule(dynamic, 1) if (o.threads > 1)
    for (size_t i = 0; i < linears.size(); ++i) {
      if (linears[i]) continue;
      try {
        linears[i].emplace(*gemm_of(m.layers[i / 4], i), sparse, o, o.prefill_layout);
        if (owned != nullptr && !linears[i]->packed.empty())
          gemm_of(owned->layers[i / 4], i)->sparse = Compressed{};
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
    for (const std::exception_ptr& e : errors)  // the first Linear's error, whichever thread met it
      if (e) std::rethrow_exception(e);
  }
  for (const DecoderLayer& l : m.layers) {
    const auto d = static_cast<size_t>(s.c.head_dim), hidden = static_cast<size_t>(s.c.hidden);
    if (s.c.qk_norm && (l.q_norm.size() != d || l.k_norm.size() != d))
      throw Error("decoder: a layer's q_norm / k_norm is not head_dim floats");
    if (l.attn_norm.size() != hidden || l.ffn_norm.size() != hidden ||
        (s.c.sandwich_norms && (l.attn_out_norm.size() != hidden || l.ffn_out_norm.size() != hidden)))
      throw Error("decoder: a layer's norms are not hidden floats");
    const size_t at = s.layers.size();
    const int64_t window =
        s.c.sliding_window > 0 && (s.c.sliding.empty() || s.c.sliding[at]) ? s.c.sliding_window : 0;
    // A ring of the window and one call's tokens, where it holds fewer rows (each position twice) than the
    // capacity does.
    const int64_t ring =
        o.sliding_ring && window > 0 && 2 * (window + kChunk) < s.capacity ? window + kChunk : 0;
    s.rings |= ring > 0;
    std::optional<Linear>* lin = &linears[4 * at];
    s.layers.push_back({&l, std::move(*lin[0]), std::move(*lin[1]), std::move(*lin[2]), std::move(*lin[3]),
                        detail::KvCache(s.c.kv_heads, s.capacity, s.c.head_dim, o.kv_half, ring)});
    LayerExec& e = s.layers.back();
    e.window = window;
    for (const Linear* x : {&e.qkv, &e.o, &e.gate_up, &e.down}) s.sparse += x->packed.empty() ? 0 : 1;
  }
  const int64_t rd = s.c.rotary_dim > 0 ? s.c.rotary_dim : s.c.head_dim;
  if (rd % 2 != 0 || rd > s.c.head_dim) throw Error("decoder: rotary_dim must be even and at most head_dim");
  const auto af = static_cast<float>(s.c.rope.attention_factor);
  s.cos_sin = detail::rope_table(detail::rope_inv_freq(s.c.rope, rd), s.capacity, af);
  if (s.c.rope.type == "longrope")
    s.cos_sin_long = detail::rope_table(detail::rope_inv_freq(s.c.rope, rd, true), s.capacity, af);
  if (s.c.sliding_rope)
    s.cos_sin_sliding = detail::rope_table(detail::rope_inv_freq(s.c.rope_sliding, rd), s.capacity);
  s.scratch.resize(static_cast<size_t>(
      detail::attention_scratch(o.threads, s.c.heads, s.c.kv_heads, s.c.head_dim, s.capacity, o.kv_half)));
  s.last.resize(s.c.hidden);
}

Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

void Decoder::reset() {
  impl_->pos = 0;
  impl_->ids.clear();
}

void Decoder::rewind(int64_t pos) {
  Impl& s = *impl_;
  if (pos < 0 || pos > s.pos)
    throw Error("decoder: rewind to " + std::to_string(pos) + " of " + std::to_string(s.pos) + " tokens");
  s.ids.resize(static_cast<size_t>(pos));
  // A ring cache holds the last window + kChunk positions: further back than kChunk, the keys before pos
  // that the next tokens attend to are gone, and the tokens kept run again.
  if (s.rings && s.pos - pos > kChunk) {
    set_threads(s.threads);
    s.rerun();
    return;
  }
  s.pos = pos;
}

int64_t Decoder::reuse_prefix(const int32_t* ids, int64_t n) {
  const std::vector<int32_t>& held = impl_->ids;
  int64_t k = 0;
  while (k < n - 1 && k < static_cast<int64_t>(held.size()) && held[k] == ids[k]) ++k;
  rewind(k);
  return k;
}

void Decoder::run_layers(float* h, int64_t n, const LinearObserver& observe) {
  Impl& s = *impl_;
  if (n < 1 || n > s.capacity)
    throw Error("decoder: " + std::to_string(n) + " tokens for a context of " + std::to_string(s.capacity));
  set_threads(s.threads);
  s.reserve(n);
  s.pos = 0;
  s.ids.clear();
  s.long_rope = !s.cos_sin_long.empty() && n > s.c.rope.original_max_positions;
  s.layers_forward(h, n, observe ? &observe : nullptr);
  s.pos = 0;
}
int64_t Decoder::position() const { return impl_->pos; }
int64_t Decoder::capacity() const { return impl_->capacity; }
const DecoderConfig& Decoder::config() const { return impl_->c; }
int Decoder::sparse_linears() const { return impl_->sparse; }

size_t Decoder::stored_bytes() const {
  const Impl& s = *impl_;
  return s.embed_stored.bytes() + (s.c.tied ? 0 : s.head_stored.bytes());
}

size_t Decoder::cache_bytes() const {
  size_t b = 0;
  for (const LayerExec& e : impl_->layers) b += e.kv.bytes();
  return b;
}

size_t Decoder::weight_bytes() const {
  const Impl& s = *impl_;
  size_t b = s.norm.size() * sizeof(float);
  if (!s.head_stored.empty())  // (a decoded token reads one row of the embeddings)
    b += s.head_stored.bytes();
  else if (!s.head_table.empty())
    b += s.head_table.bytes();
  else
    b += s.embed->size() * sizeof(float) + (s.head ? s.head->bytes() : 0);
  for (const LayerExec& e : s.layers)
    b += e.qkv.bytes() + e.o.bytes() + e.gate_up.bytes() + e.down.bytes() +
         (e.src->attn_norm.size() + e.src->ffn_norm.size() + e.src->attn_out_norm.size() +
          e.src->ffn_out_norm.size() + e.src->q_norm.size() + e.src->k_norm.size()) *
             sizeof(float);
  return b;
}

void Decoder::forward(const int32_t* ids, int64_t n, float* logits, bool all) {
  Impl& s = *impl_;
  const DecoderConfig& c = s.c;
  if (n < 1) throw Error("decoder: no tokens");
  if (s.pos + n > s.capacity)
    throw Error("decoder: the context holds " + std::to_string(s.capacity) + " tokens, " +
                std::to_string(s.pos + n) + " asked for");
  for (int64_t j = 0; j < n; ++j)
    if (ids[j] < 0 || ids[j] >= c.vocab)
      throw Error("decoder: token id " + std::to_string(ids[j]) + " outside the vocabulary of " +
                  std::to_string(c.vocab));
  set_threads(s.threads);
  // longrope: a sequence longer than original_max_positions is rotated with the long factors throughout,
  // as transformers rotates it (Phi-3's generate() recomputes its cache when the sequence grows past that);
  // when the cache holds keys rotated the other way, the tokens it holds are run again first.
  if (!s.cos_sin_long.empty() && (s.pos + n > c.rope.original_max_positions) != s.long_rope) {
    s.long_rope = !s.long_rope;
    s.rerun();
  }
  // A ring cache holds one call's kChunk tokens beyond the window: longer calls run in pieces.
  const int64_t step = s.rings ? kChunk : n;
  for (int64_t at = 0; at < n; at += step) {
    const int64_t len = std::min(step, n - at);
    s.append(ids + at, len);
    if (all || at + len == n) s.head_logits(len, all, logits + (all ? at * c.vocab : 0));
  }
}

void Decoder::Impl::head_logits(int64_t n, bool all, float* logits) {
  const int64_t H = c.hidden;
  // The head over the final norm of every new token, or of the last one only.
  const int64_t m = all ? n : 1;
  const float* in = h.data();
  if (!all) {
    for (int64_t r = 0; r < H; ++r) last[r] = h[r * n + n - 1];
    in = last.data();
  }
  detail::rms_norm(in, H, m, norm.data(), c.eps, x.data());
  // Many tokens (a perplexity window, a prompt's logits) and a head not held in fp32: its rows widened a
  // block at a time, each block one sgemm over all the tokens (a GEMV per token read the whole head per
  // token: Llama 3.2 1B's Q6_K head made a perplexity window of 256 tokens 2.8x slower), 64 rows per task.
  const auto widened_head = [&](const auto& rows_to_floats) {
    constexpr int64_t kRows = 2048, kTask = 64;  // (blocks of 256 rows: 0.78x this speed there)
    std::vector<float> block(static_cast<size_t>(std::min(kRows, c.vocab) * H));
    for (int64_t v0 = 0; v0 < c.vocab; v0 += kRows) {
      const int64_t rows = std::min(kRows, c.vocab - v0);
#pragma omp parallel for num_threads(threads) if (threads > 1)
      for (int64_t i = 0; i < rows; i += kTask)
        rows_to_floats(v0 + i, std::min(kTask, rows - i), block.data() + i * H);
      // logits[:, v0 .. v0 + rows) = x^T [m, H] block^T [H, rows]
      dnnl_sgemm('T', 'T', m, rows, H, 1.0f, x.data(), m, block.data(), H, 0.0f, logits + v0, c.vocab);
    }
  };
  auto run_head = [&] {
    if (m >= 8 && !head_stored.empty())
      return widened_head([&](int64_t v, int64_t rows, float* out) {
        kernels::ggml_rows_to_floats(stored_ggml_type(head_stored),
                                     head_stored.data + static_cast<size_t>(v) * head_stored.row_bytes(),
                                     rows, H, out);
      });
    if (m >= 8 && !head_table.empty())
      return widened_head([&](int64_t v, int64_t rows, float* out) {
        for (int64_t i = 0; i < rows; ++i) detail::table_row(head_table, v + i, H, out + i * H);
      });
    // A few tokens: a GEMV per token (its column of x) over the head as stored or its table.
    const auto per_token = [&](const auto& gemv) {
      for (int64_t j = 0; j < m; ++j) {
        for (int64_t r = 0; r < H; ++r) column[r] = x[r * m + j];
        gemv(column.data(), logits + j * c.vocab);
      }
    };
    if (!head_stored.empty())
      return per_token([&](const float* col, float* y) {
        kernels::gemv_ggml(stored_ggml_type(head_stored), head_stored.data, c.vocab, H, col, y, threads);
      });
    if (!head_table.empty())
      return per_token([&](const float* col, float* y) {
        const WeightTable& t = head_table;
        if (t.i8_size() == 0)
          kernels::gemv_bf16(t.bf16.data(), c.vocab, H, col, y, threads);
        else
          kernels::gemv_i8(t.i8_data(), t.scales_data(), c.vocab, H, col, y, threads);
      });
    if (head) {
      std::vector<float> y(static_cast<size_t>(c.vocab * m));
      head->run(x.data(), y.data(), m, threads);
      for (int64_t v = 0; v < c.vocab; ++v)
        for (int64_t j = 0; j < m; ++j) logits[j * c.vocab + v] = y[v * m + j];
      return;
    }
    // One token: the tied head as a GEMV over the embedding table, eight long row streams at once (25 GB/s
    // on one Zen 3 core where oneDNN's sgemm streamed these 2.3 KB rows at 14-15; gemv_avx2.cc).
    if (m == 1) return kernels::gemv_f32(embed->data(), c.vocab, H, x.data(), logits, threads);
    // logits [m, vocab] = x^T [m, H] embed^T [H, vocab].
    dnnl_sgemm('T', 'T', m, c.vocab, H, 1.0f, x.data(), m, embed->data(), H, 0.0f, logits, c.vocab);
  };
  run_head();
  if (c.final_softcap > 0.0f)  // Gemma's soft cap, as transformers computes it
    for (int64_t i = 0; i < m * c.vocab; ++i)
      logits[i] = std::tanh(logits[i] / c.final_softcap) * c.final_softcap;
}

Perplexity perplexity(Decoder& d, const std::vector<int32_t>& ids, int64_t ctx,
                      const std::function<void(int64_t, int64_t)>& progress) {
  if (ctx < 2) throw Error("perplexity: a window must hold at least 2 tokens");
  if (ctx > d.capacity())
    throw Error("perplexity: a window of " + std::to_string(ctx) +
                " tokens exceeds the decoder's context of " + std::to_string(d.capacity()));
  Perplexity p;
  p.windows = static_cast<int64_t>(ids.size()) / ctx;
  if (p.windows == 0)
    throw Error(std::to_string(ids.size()) + " tokens, fewer than one window of " + std::to_string(ctx));
  const int64_t V = d.config().vocab;
  std::vector<float> logits(static_cast<size_t>(ctx * V));
  double nll = 0;
  for (int64_t w = 0; w < p.windows; ++w) {
    d.reset();
    d.forward(ids.data() + w * ctx, ctx, logits.data(), true);
    for (int64_t j = 0; j + 1 < ctx; ++j) {
      const float* row = logits.data() + j * V;
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      nll += std::log(sum) + mx - row[ids[w * ctx + j + 1]];
      ++p.scored;
    }
    if (progress) progress(w + 1, p.windows);
  }
  d.reset();
  p.mean_nll = nll / static_cast<double>(p.scored);
  p.perplexity = std::exp(p.mean_nll);
  return p;
}

int32_t sample_token(const float* logits, int64_t vocab, float temperature, float top_p, uint64_t& state) {
  if (vocab < 1) throw Error("sample: empty vocabulary");
  if (!(temperature > 0.0f)) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<size_t>(vocab));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i)
    sum += (p[i] = std::exp((static_cast<double>(logits[order[i]]) - logits[order[0]]) / temperature));
  // The nucleus: the most likely tokens until their mass reaches top_p (at least one).
  int64_t keep = 0;
  double mass = 0;
  const double limit = std::clamp(static_cast<double>(top_p), 0.0, 1.0) * sum;
  while (keep < vocab && (keep == 0 || mass < limit)) mass += p[keep++];
  state += 0x9e3779b97f4a7c15ull;  // splitmix64
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53 * mass;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i)
    if ((acc += p[i]) > u) return order[i];
  return order[keep - 1];
}

}  // namespace sparse24::engine
