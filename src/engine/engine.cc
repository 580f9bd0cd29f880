// The engine: buffers, execution, profiling, and the plan (per-layer sparse/dense choice by timing).
#include "sparse24/engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "gemm.h"
#include "ops.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/spmm.h"

namespace sparse24::engine {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// 64-byte aligned float buffer.
struct Buffer {
  std::unique_ptr<float[], void (*)(float*)> p{nullptr, [](float* q) { std::free(q); }};
  size_t size = 0;
  explicit Buffer(size_t n) : size(n) {
    const size_t bytes = ((std::max<size_t>(n, 1) * sizeof(float) + 63) / 64) * 64;
    p.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
    std::fill(p.get(), p.get() + n, 0.0f);
  }
  float* data() const { return p.get(); }
};

// Columns of a tensor at the plan's batch (a token model's batch is its tokens per call).
int64_t cols_of(const TensorShape& t, int64_t batch) { return t.tokens ? batch : batch * t.h * t.w; }

// A sparse layer must beat dense by this factor to be chosen.
constexpr double kSparseMargin = 1.03;

}  // namespace

Mode parse_mode(const std::string& s) {
  if (s == "plan") return Mode::kPlan;
  if (s == "dense") return Mode::kDense;
  if (s == "sparse") return Mode::kSparse;
  throw Error("unknown mode '" + s + "' (expected plan, dense or sparse)");
}

void set_threads(int threads) { omp_set_num_threads(std::max(threads, 1)); }

void TokenBatch::add(const std::vector<int32_t>& sequence) {
  ids.insert(ids.end(), sequence.begin(), sequence.end());
  offsets.push_back(static_cast<int64_t>(ids.size()));
}

struct Engine::Impl {
  int64_t capacity = 1;  // float models: the batch; token models: the most tokens per call
  int threads = 1;
  bool token_input = false;
  int64_t vocab = 0, max_sequence = 0;
  std::vector<TensorShape> tensors;
  std::vector<Op> ops;  // copies (GEMM weights live in execs)
  std::vector<std::string> gemm_names;
  int output = 0;
  std::vector<detail::GemmExec> execs;  // one per model gemm
  std::vector<Buffer> slots;
  std::vector<int> slot_of;  // tensor -> slot
  std::unique_ptr<Buffer> scratch;
  // The current call: samples (float models) or sequences, and their token spans.
  int64_t batch = 1, tokens = 0;
  const TokenBatch* input = nullptr;
  std::vector<int64_t> spans;  // float models with positions: sample b spans columns [b*seq, (b+1)*seq)

  int64_t cols(int t) const {
    const TensorShape& s = tensors[t];
    return s.tokens ? tokens : batch * s.h * s.w;
  }
  float* ptr(int t) const { return slots[slot_of[t]].data(); }
  const int64_t* offsets(int64_t positions) {
    if (input != nullptr) return input->offsets.data();
    spans.resize(batch + 1);
    for (int64_t b = 0; b <= batch; ++b) spans[b] = b * positions;
    return spans.data();
  }
  void run_op(const Op& op);
  void load_input(const float* input);
  void set_tokens(const TokenBatch& in);
  void store_output(float* output) const;
};

void Engine::Impl::run_op(const Op& op) {
  const TensorShape& x = tensors[op.in];
  const int64_t cols_in = cols(op.in);
  float* in = ptr(op.in);
  float* out = ptr(op.out);
  switch (op.kind) {
    case OpKind::kGemm:
      execs[op.gemm].run(in, out, cols_in, threads);
      break;
    case OpKind::kIm2col: {
      const TensorShape& y = tensors[op.out];
      detail::im2col(in, x.rows, batch, x.h, x.w, op.kernel, op.stride, op.padding, y.h, y.w, out);
      break;
    }
    case OpKind::kMaxPool:
      detail::maxpool(in, x.rows, batch, x.h, x.w, op.kernel, out);
      break;
    case OpKind::kFlatten:
      detail::flatten(in, x.rows, batch, x.h * x.w, out);
      break;
    case OpKind::kRelu:
      detail::relu(in, x.rows * cols_in, out);
      break;
    case OpKind::kAffine:
      detail::affine(in, x.rows, cols_in, op.scale.data(), op.shift.data(), out);
      break;
    case OpKind::kLayerNorm:
      detail::layer_norm(in, op.in2 >= 0 ? ptr(op.in2) : nullptr, x.rows, cols_in, op.scale.data(),
                         op.shift.data(), op.eps, out);
      break;
    case OpKind::kAttention: {
      const int64_t* off = offsets(x.h * x.w);
      detail::attention(in, x.rows / 3, op.heads, off, batch, cols_in,
                        op.bias.buckets > 0 ? &op.bias : nullptr, out, scratch->data(), threads);
      break;
    }
    case OpKind::kEmbed:
      detail::embed(input->ids.data(), input->offsets.data(), batch,
                    op.table.empty() ? nullptr : op.table.data(), op.stored_table, op.positions.data(),
                    op.position_offset, tensors[op.out].rows, out);
      break;
    case OpKind::kPool:
      detail::pool(in, x.rows, cols_in, input->offsets.data(), batch, op.pool, out);
      break;
    case OpKind::kL2Norm:
      detail::l2norm(in, x.rows, cols_in, out);
      break;
  }
}

void Engine::Impl::load_input(const float* in) {
  const TensorShape& t = tensors[0];
  const int64_t p = t.h * t.w;
  float* dst = ptr(0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < t.rows; ++c)
      std::copy(in + (b * t.rows + c) * p, in + (b * t.rows + c + 1) * p, dst + (c * batch + b) * p);
}

void Engine::Impl::set_tokens(const TokenBatch& in) {
  if (!token_input) throw Error("engine: this model takes floats, not tokens");
  const int64_t n = in.tokens(), seqs = in.sequences();
  if (seqs < 1 || in.offsets.front() != 0 || in.offsets.back() != n)
    throw Error("engine: a token batch needs at least one sequence and consistent offsets");
  if (n > capacity)
    throw Error("engine: " + std::to_string(n) + " tokens in one call, the engine holds " +
                std::to_string(capacity));
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t len = in.offsets[s + 1] - in.offsets[s];
    if (len < 1 || len > max_sequence)
      throw Error("engine: sequence " + std::to_string(s) + " has " + std::to_string(len) + " tokens (1 to " +
                  std::to_string(max_sequence) + " allowed)");
  }
  for (int32_t id : in.ids)
    if (id < 0 || id >= vocab)
      throw Error("engine: token id " + std::to_string(id) + " outside the vocabulary of " +
                  std::to_string(vocab));
  input = &in;
  batch = seqs;
  tokens = n;
}

void Engine::Impl::store_output(float* result) const {
  const TensorShape& t = tensors[output];
  const int64_t p = t.tokens ? 1 : t.h * t.w, samples = t.tokens ? tokens : batch;
  const float* src = ptr(output);
  for (int64_t b = 0; b < samples; ++b)
    for (int64_t c = 0; c < t.rows; ++c)
      std::copy(src + (c * samples + b) * p, src + (c * samples + b + 1) * p, result + (b * t.rows + c) * p);
}

namespace {

// The constructors' work; `consumed` (the model itself, or null) loses each layer's weights once packed.
void init_engine(Engine::Impl& s, const Model& model, Model* consumed, int64_t batch, int threads, Mode mode,
                 const Plan* plan) {
  model.check();
  if (batch < 1 || batch > (1 << 20)) throw Error("batch must be at least 1");
  if (threads < 1 || threads > 1024) throw Error("threads must be at least 1");
  if (mode == Mode::kPlan && (plan == nullptr || plan->layers.size() != model.gemms.size()))
    throw Error("engine: a plan for this model is required");
  s.capacity = batch;
  s.threads = threads;
  s.token_input = model.token_input;
  s.vocab = model.vocab;
  s.max_sequence = model.max_sequence;
  s.tensors = model.tensors;
  s.ops = model.ops;
  s.output = model.output;
  // At capacity: every column count is at its largest (a token model's sample tensors have at most one
  // column per token).
  s.batch = batch;
  s.tokens = batch;
  for (size_t i = 0; i < model.gemms.size(); ++i) {
    const Gemm& g = model.gemms[i];
    int64_t n = 0;
    for (const Op& op : model.ops)
      if (op.kind == OpKind::kGemm && op.gemm == static_cast<int>(i)) n = s.cols(op.in);
    s.gemm_names.push_back(g.name);
    const bool sparse =
        g.pruned && (mode == Mode::kSparse || (mode == Mode::kPlan && plan->layers[i].sparse));
    s.execs.push_back(sparse ? detail::GemmExec::sparse(g, n) : detail::GemmExec::dense(g, n));
    if (consumed != nullptr) {
      Gemm& c = consumed->gemms[i];
      c.sparse = Compressed();
      c.dense = std::vector<float>();
    }
  }
  // Buffers: each tensor gets a slot that is free when it is written (a slot is released after the last
  // op that reads its tensor), so activations stay few and warm in cache.
  const int nt = static_cast<int>(s.tensors.size());
  std::vector<int> last_use(nt, -1);
  for (size_t i = 0; i < s.ops.size(); ++i) {
    last_use[s.ops[i].in] = static_cast<int>(i);
    if (s.ops[i].in2 >= 0) last_use[s.ops[i].in2] = static_cast<int>(i);
  }
  last_use[s.output] = static_cast<int>(s.ops.size());
  s.slot_of.assign(nt, -1);
  std::vector<bool> busy;
  auto take = [&](int t) {
    const size_t need = static_cast<size_t>(s.tensors[t].rows * s.cols(t));
    int best = -1;
    for (size_t j = 0; j < s.slots.size(); ++j)
      if (!busy[j] && s.slots[j].size >= need && (best < 0 || s.slots[j].size < s.slots[best].size))
        best = static_cast<int>(j);
    if (best < 0) {
      s.slots.emplace_back(need);
      busy.push_back(false);
      best = static_cast<int>(s.slots.size()) - 1;
    }
    busy[best] = true;
    s.slot_of[t] = best;
  };
  take(0);
  int64_t scratch = 0;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op& op = s.ops[i];
    take(op.out);
    for (int t : {op.in, op.in2})
      if (t >= 0 && last_use[t] == static_cast<int>(i)) busy[s.slot_of[t]] = false;
    if (op.kind == OpKind::kAttention) {
      const int64_t seq =
          s.token_input ? std::min(s.max_sequence, batch) : s.tensors[op.in].h * s.tensors[op.in].w;
      scratch = std::max(scratch, static_cast<int64_t>(threads) * seq * seq);
    }
  }
  s.scratch = std::make_unique<Buffer>(static_cast<size_t>(scratch));
}

}  // namespace

Engine::Engine(const Model& model, int64_t batch, int threads, Mode mode, const Plan* plan)
    : impl_(std::make_unique<Impl>()) {
  init_engine(*impl_, model, nullptr, batch, threads, mode, plan);
}

Engine::Engine(Model&& model, int64_t batch, int threads, Mode mode, const Plan* plan)
    : impl_(std::make_unique<Impl>()) {
  init_engine(*impl_, model, &model, batch, threads, mode, plan);
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

int64_t Engine::batch() const { return impl_->capacity; }

int64_t Engine::output_rows() const { return impl_->tensors[impl_->output].rows; }

void Engine::run(const float* input, float* output) {
  Impl& s = *impl_;
  if (s.token_input) throw Error("engine: this model takes tokens (run_tokens)");
  set_threads(s.threads);
  s.batch = s.capacity;
  s.load_input(input);
  for (const Op& op : s.ops) s.run_op(op);
  s.store_output(output);
}

void Engine::run_tokens(const TokenBatch& input, float* output) {
  Impl& s = *impl_;
  s.set_tokens(input);
  set_threads(s.threads);
  for (const Op& op : s.ops) s.run_op(op);
  s.store_output(output);
  s.input = nullptr;
}

void Engine::run_tokens_observed(const TokenBatch& input, const GemmObserver& observe) {
  Impl& s = *impl_;
  s.set_tokens(input);
  set_threads(s.threads);
  for (const Op& op : s.ops) {
    if (op.kind == OpKind::kGemm && !observe(op.gemm, s.ptr(op.in), s.tensors[op.in].rows, s.cols(op.in)))
      break;
    s.run_op(op);
  }
  s.input = nullptr;
}

void Engine::run_tokens_range(const TokenBatch& input, size_t begin, size_t end, State& state,
                              const GemmObserver& observe) {
  Impl& s = *impl_;
  if (begin > end || end > s.ops.size()) throw Error("engine: op range out of bounds");
  s.set_tokens(input);
  set_threads(s.threads);
  // The tensors live across a boundary: written before it (or the input) and read at or after it.
  auto live_at = [&](size_t at) {
    std::vector<bool> written(s.tensors.size(), false), live(s.tensors.size(), false);
    written[0] = true;
    for (size_t i = 0; i < at; ++i) written[s.ops[i].out] = true;
    for (size_t i = at; i < s.ops.size(); ++i)
      for (int t : {s.ops[i].in, s.ops[i].in2})
        if (t >= 0 && written[t]) live[t] = true;
    if (written[s.output]) live[s.output] = true;
    return live;
  };
  const std::vector<bool> in_live = live_at(begin);
  for (size_t t = 0; t < in_live.size(); ++t) {
    if (!in_live[t] || (t == 0 && begin == 0)) continue;
    const auto it = state.find(static_cast<int>(t));
    const size_t n = static_cast<size_t>(s.tensors[t].rows * s.cols(static_cast<int>(t)));
    if (it == state.end() || it->second.size() != n)
      throw Error("engine: the state lacks tensor " + std::to_string(t) + " for this call");
    std::copy(it->second.begin(), it->second.end(), s.ptr(static_cast<int>(t)));
  }
  for (size_t i = begin; i < end; ++i) {
    const Op& op = s.ops[i];
    if (op.kind == OpKind::kGemm && observe &&
        !observe(op.gemm, s.ptr(op.in), s.tensors[op.in].rows, s.cols(op.in))) {
      s.input = nullptr;
      return;
    }
    s.run_op(op);
  }
  const std::vector<bool> out_live = live_at(end);
  State next;
  for (size_t t = 0; t < out_live.size(); ++t) {
    if (!out_live[t] || (t == 0 && end == 0)) continue;
    const float* p = s.ptr(static_cast<int>(t));
    next[static_cast<int>(t)].assign(p, p + s.tensors[t].rows * s.cols(static_cast<int>(t)));
  }
  state = std::move(next);
  s.input = nullptr;
}

namespace {

std::vector<OpTime> profile_ops(Engine::Impl& s, const std::function<void()>& load, int reps) {
  std::vector<OpTime> times(s.ops.size());
  for (size_t i = 0; i < s.ops.size(); ++i) {
    const Op& op = s.ops[i];
    times[i].kind = op_kind_name(op.kind);
    times[i].name = op.kind == OpKind::kGemm ? s.gemm_names[op.gemm] : times[i].kind;
    times[i].sparse = op.kind == OpKind::kGemm && s.execs[op.gemm].is_sparse();
    times[i].ms = 1e300;
  }
  for (int r = 0; r < std::max(reps, 1); ++r) {
    load();
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const auto t0 = Clock::now();
      s.run_op(s.ops[i]);
      times[i].ms = std::min(times[i].ms, ms_since(t0));
    }
  }
  return times;
}

}  // namespace

std::vector<OpTime> Engine::profile(const float* input, int reps) {
  Impl& s = *impl_;
  if (s.token_input) throw Error("engine: this model takes tokens (profile_tokens)");
  set_threads(s.threads);
  s.batch = s.capacity;
  return profile_ops(
      s, [&] { s.load_input(input); }, reps);
}

std::vector<OpTime> Engine::profile_tokens(const TokenBatch& input, int reps) {
  Impl& s = *impl_;
  s.set_tokens(input);
  set_threads(s.threads);
  auto t = profile_ops(
      s, [] {}, reps);
  s.input = nullptr;
  return t;
}

size_t Engine::weight_bytes() const {
  size_t b = 0;
  for (const auto& e : impl_->execs) b += e.weight_bytes();
  for (const Op& op : impl_->ops)
    b += (op.scale.size() + op.shift.size() + op.table.size() + op.positions.size() + op.bias.table.size()) *
         sizeof(float);
  return b;
}

size_t Engine::stored_bytes() const {
  size_t b = 0;
  for (const Op& op : impl_->ops) b += op.stored_table.bytes();
  return b;
}

std::vector<bool> Engine::sparse_layers() const {
  std::vector<bool> v;
  for (const auto& e : impl_->execs) v.push_back(e.is_sparse());
  return v;
}

// ---- Plan --------------------------------------------------------------------------------------------

std::string Plan::to_json() const {
  nlohmann::json layers_j = nlohmann::json::array();
  for (const LayerPlan& l : layers) {
    nlohmann::json j = {{"name", l.name},
                        {"m", l.m},
                        {"k", l.k},
                        {"n", l.n},
                        {"pruned", l.pruned},
                        {"dense_ms", l.dense_ms},
                        {"choice", l.sparse ? "sparse" : "dense"}};
    if (l.pruned) j["sparse_ms"] = l.sparse_ms;
    layers_j.push_back(j);
  }
  nlohmann::json j = {
      {"format", "sparse24-plan"},
      {"version", 2},
      {"fingerprint", fingerprint},
      {"isa", isa},
      {"batch", batch},
      {"threads", threads},
      {"whole",
       {{"choice", whole}, {"layers_ms", mixed_ms}, {"dense_ms", dense_ms}, {"sparse_ms", sparse_ms}}},
      {"layers", layers_j}};
  return j.dump(2) + "\n";
}

Plan Plan::from_json(const std::string& text, const std::string& what) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(what + ": not a JSON object");
  try {
    if (j.at("format").get<std::string>() != "sparse24-plan")
      throw Error(what + ": format is not sparse24-plan");
    Plan p;
    p.fingerprint = j.at("fingerprint").get<std::string>();
    p.isa = j.at("isa").get<std::string>();
    p.batch = j.at("batch").get<int64_t>();
    p.threads = j.at("threads").get<int>();
    const nlohmann::json& w = j.at("whole");
    p.whole = w.at("choice").get<std::string>();
    if (p.whole != "layers" && p.whole != "dense" && p.whole != "sparse")
      throw Error(what + ": bad whole-model choice '" + p.whole + "'");
    p.mixed_ms = w.at("layers_ms").get<double>();
    p.dense_ms = w.at("dense_ms").get<double>();
    p.sparse_ms = w.at("sparse_ms").get<double>();
    for (const auto& jl : j.at("layers")) {
      LayerPlan l;
      l.name = jl.at("name").get<std::string>();
      l.m = jl.at("m").get<int64_t>();
      l.k = jl.at("k").get<int64_t>();
      l.n = jl.at("n").get<int64_t>();
      l.pruned = jl.at("pruned").get<bool>();
      l.dense_ms = jl.at("dense_ms").get<double>();
      l.sparse_ms = l.pruned ? jl.at("sparse_ms").get<double>() : -1;
      const std::string c = jl.at("choice").get<std::string>();
      if (c != "sparse" && c != "dense")
        throw Error(what + ": layer '" + l.name + "': bad choice '" + c + "'");
      l.sparse = c == "sparse";
      p.layers.push_back(l);
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": bad plan: " + e.what());
  }
}

bool Plan::matches(const Model& m, int64_t b, int t) const {
  if (fingerprint != m.fingerprint || batch != b || threads != t || isa != isa_name(active_isa()) ||
      layers.size() != m.gemms.size())
    return false;
  std::vector<int64_t> n_of(m.gemms.size(), 0);
  for (const Op& op : m.ops)
    if (op.kind == OpKind::kGemm) n_of[op.gemm] = cols_of(m.tensors[op.in], b);
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerPlan& l = layers[i];
    const Gemm& g = m.gemms[i];
    if (l.name != g.name || l.m != g.m || l.k != g.k || l.n != n_of[i] || l.pruned != g.pruned ||
        (l.sparse && !g.pruned))
      return false;
  }
  return true;
}

namespace {

// A random input of `batch` for the whole-model timing: floats in [-1, 1), or for a token model random ids
// in sequences of up to 128 tokens adding up to `batch` tokens.
struct RandomInput {
  std::vector<float> x;
  TokenBatch tokens;
  RandomInput(const Model& m, int64_t batch) {
    uint32_t seed = 777;
    auto next = [&seed] { return seed = seed * 1664525u + 1013904223u; };
    if (!m.token_input) {
      x.resize(static_cast<size_t>(batch * m.input_size()));
      for (float& v : x) v = static_cast<float>(next() >> 8) * 0x1.0p-24f * 2.0f - 1.0f;
      return;
    }
    const int64_t len = std::min<int64_t>(m.max_sequence, 128);
    for (int64_t left = batch; left > 0; left -= len) {
      std::vector<int32_t> seq(std::min(left, len));
      for (int32_t& id : seq) id = static_cast<int32_t>(next() % static_cast<uint32_t>(m.vocab));
      tokens.add(seq);
    }
  }
  void run(Engine& e, std::vector<float>& out) const {
    if (tokens.sequences() > 0)
      e.run_tokens(tokens, out.data());
    else
      e.run(x.data(), out.data());
  }
};

}  // namespace

Plan build_plan(const Model& m, int64_t batch, int threads, int reps) {
  m.check();
  set_threads(threads);
  Plan p;
  p.fingerprint = m.fingerprint;
  p.isa = isa_name(active_isa());
  p.batch = batch;
  p.threads = threads;
  std::vector<int64_t> n_of(m.gemms.size(), 0);
  for (const Op& op : m.ops)
    if (op.kind == OpKind::kGemm) n_of[op.gemm] = cols_of(m.tensors[op.in], batch);
  // Layers of one shape (and epilogue, and pruned or not) run the same kernels: timed once.
  std::map<std::tuple<int64_t, int64_t, int64_t, int, bool>, std::pair<double, double>> timed;
  uint32_t seed = 12345;
  for (size_t i = 0; i < m.gemms.size(); ++i) {
    const Gemm& g = m.gemms[i];
    LayerPlan l;
    l.name = g.name;
    l.m = g.m;
    l.k = g.k;
    l.n = n_of[i];
    l.pruned = g.pruned;
    const auto key = std::make_tuple(g.m, g.k, l.n, static_cast<int>(g.epilogue), g.pruned);
    auto it = timed.find(key);
    if (it == timed.end()) {
      Buffer x(static_cast<size_t>(g.k * l.n)), y(static_cast<size_t>(g.m * l.n));
      for (size_t j = 0; j < x.size; ++j) {
        seed = seed * 1664525u + 1013904223u;
        x.data()[j] = static_cast<float>(seed >> 8) * 0x1.0p-24f * 2.0f - 1.0f;
      }
      const detail::GemmExec dense = detail::GemmExec::dense(g, l.n);
      std::optional<detail::GemmExec> sparse;
      if (g.pruned) sparse = detail::GemmExec::sparse(g, l.n);
      dense.run(x.data(), y.data(), l.n, threads);  // warm up
      if (sparse) sparse->run(x.data(), y.data(), l.n, threads);
      double dms = 1e300, sms = 1e300;
      for (int r = 0; r < std::max(reps, 1); ++r) {  // interleaved, best of reps
        auto t0 = Clock::now();
        dense.run(x.data(), y.data(), l.n, threads);
        dms = std::min(dms, ms_since(t0));
        if (sparse) {
          t0 = Clock::now();
          sparse->run(x.data(), y.data(), l.n, threads);
          sms = std::min(sms, ms_since(t0));
        }
      }
      it = timed.emplace(key, std::make_pair(dms, sparse ? sms : -1.0)).first;
    }
    l.dense_ms = it->second.first;
    l.sparse_ms = it->second.second;
    // Sparse only when clearly faster: near-ties go to dense (the timings are noisy, and the engine's promise
    // is never to be slower than dense).
    l.sparse = g.pruned && l.sparse_ms * kSparseMargin < l.dense_ms;
    p.layers.push_back(l);
  }

  // The whole model: the per-layer choices against all dense and all sparse.
  bool any_sparse = false, any_pruned_dense = false;
  for (const LayerPlan& l : p.layers) {
    any_sparse |= l.sparse;
    any_pruned_dense |= l.pruned && !l.sparse;
  }
  if (!any_sparse && !any_pruned_dense) return p;  // nothing pruned: dense is the only choice
  const RandomInput in(m, batch);
  std::vector<float> out(static_cast<size_t>(batch * m.output_size()));
  struct Whole {
    const char* name;
    std::optional<Engine> e;
    double ms = 1e300;
  };
  std::vector<Whole> wholes;
  wholes.push_back({"dense", std::nullopt});
  wholes.back().e.emplace(m, batch, threads, Mode::kDense);
  {
    wholes.push_back({"sparse", std::nullopt});
    wholes.back().e.emplace(m, batch, threads, Mode::kSparse);
  }
  if (any_sparse && any_pruned_dense) {
    wholes.push_back({"layers", std::nullopt});
    wholes.back().e.emplace(m, batch, threads, Mode::kPlan, &p);
  }
  for (Whole& w : wholes) in.run(*w.e, out);  // warm up
  for (int r = 0; r < std::max(reps, 3); ++r)
    for (Whole& w : wholes) {
      const auto t0 = Clock::now();
      in.run(*w.e, out);
      w.ms = std::min(w.ms, ms_since(t0));
    }
  const Whole* best = &wholes[0];
  for (const Whole& w : wholes) {
    const std::string name = w.name;
    (name == "dense" ? p.dense_ms : name == "sparse" ? p.sparse_ms : p.mixed_ms) = w.ms;
    // Another whole must beat dense by the same margin as a layer.
    if (w.ms * (best == &wholes[0] ? kSparseMargin : 1.0) < best->ms) best = &w;
  }
  if (!any_pruned_dense) p.mixed_ms = p.sparse_ms;  // the per-layer choice was all sparse
  p.whole = best->name;
  if (p.whole == "dense")
    for (LayerPlan& l : p.layers) l.sparse = false;
  else if (p.whole == "sparse")
    for (LayerPlan& l : p.layers) l.sparse = l.pruned;
  if (!any_pruned_dense && p.whole == "sparse") p.whole = "layers";
  return p;
}

Plan load_or_build_plan(const Model& m, const std::string& dir, int64_t batch, int threads, bool* built) {
  const std::string path = dir + "/plan.json";
  if (std::filesystem::exists(path)) {
    try {
      const std::vector<uint8_t> raw = read_file(path);
      Plan p = Plan::from_json(std::string(raw.begin(), raw.end()), path);
      if (p.matches(m, batch, threads)) {
        if (built) *built = false;
        return p;
      }
    } catch (const Error&) {
      // an unreadable or stale plan is rebuilt
    }
  }
  Plan p = build_plan(m, batch, threads);
  try {
    write_file_atomic(path, p.to_json());
  } catch (const Error& e) {
    std::fprintf(stderr, "sparse24: warning: plan not saved: %s\n", e.what());
  }
  if (built) *built = true;
  return p;
}

}  // namespace sparse24::engine
