// sparse24 run, profile, bench-bert: the inference engine (include/sparse24/engine.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/spmm.h"
#ifdef SPARSE24_HAVE_TRAIN
#include "train/idx.h"
#endif

namespace sparse24::cli {
namespace {

// Runs `e` over n samples (the last chunk zero-padded to the engine's batch); out: n * out_size floats.
std::vector<float> run_all(engine::Engine& e, const engine::Model& m, const float* x, int64_t n) {
  const int64_t b = e.batch(), in = m.input_size(), out = m.output_size();
  std::vector<float> result(static_cast<size_t>(n * out)), chunk_in(b * in), chunk_out(b * out);
  for (int64_t s = 0; s < n; s += b) {
    const int64_t c = std::min(b, n - s);
    std::fill(chunk_in.begin(), chunk_in.end(), 0.0f);
    std::copy(x + s * in, x + (s + c) * in, chunk_in.begin());
    e.run(chunk_in.data(), chunk_out.data());
    std::copy(chunk_out.begin(), chunk_out.begin() + c * out, result.begin() + s * out);
  }
  return result;
}

int64_t argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

struct RunOptions {
  std::string model, input, output, fashion_dir, mode = "plan";
  bool fashion = false;
  int64_t batch = 0;
  int threads = 1;
};

void print_plan(const engine::Plan& p) {
  std::printf("%-24s %18s %10s %10s %8s  %s\n", "layer", "M x K x N", "dense ms", "sparse ms", "speedup",
              "choice");
  for (const engine::LayerPlan& l : p.layers) {
    char shape[64], sp[32] = "-", su[32] = "-";
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", static_cast<long long>(l.m),
                  static_cast<long long>(l.k), static_cast<long long>(l.n));
    if (l.pruned) {
      std::snprintf(sp, sizeof sp, "%.4f", l.sparse_ms);
      std::snprintf(su, sizeof su, "%.2fx", l.dense_ms / l.sparse_ms);
    }
    std::printf("%-24s %18s %10.4f %10s %8s  %s\n", l.name.c_str(), shape, l.dense_ms, sp, su,
                l.sparse ? "sparse" : (l.pruned ? "dense" : "dense (not pruned)"));
  }
}

void cmd_run(const RunOptions& o) {
  const engine::Model m = engine::load_model(o.model);
  std::vector<float> x;
  std::vector<int64_t> labels;
  int64_t n = 0;
  if (o.fashion == !o.input.empty()) throw Error("give exactly one of --input FILE.npy and --fashion-mnist");
  if (!o.input.empty()) {
    const Tensor t = read_npy(o.input);
    if (t.dtype != DType::kF32) throw Error(o.input + ": input must be float32");
    std::vector<int64_t> want{-1};
    want.insert(want.end(), m.input_shape.begin(), m.input_shape.end());
    bool ok = t.shape.size() == want.size() && !t.shape.empty() && t.shape[0] > 0;
    for (size_t i = 1; ok && i < want.size(); ++i) ok = t.shape[i] == want[i];
    if (!ok)
      throw Error(o.input + ": input is " + shape_string(t.shape) + ", the model needs [n, " +
                  shape_string(m.input_shape).substr(1));
    x = t.to_float();
    n = t.shape[0];
  } else {
#ifdef SPARSE24_HAVE_TRAIN
    const train::IdxDataset d = train::read_idx_dataset(o.fashion_dir + "/t10k-images-idx3-ubyte.gz",
                                                        o.fashion_dir + "/t10k-labels-idx1-ubyte.gz");
    if (m.input_size() != d.rows * d.cols) throw Error("the model's input is not a 28x28 image");
    n = d.n;
    x.resize(static_cast<size_t>(n * d.rows * d.cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((d.images[i] / 255.0 - m.mean) / m.std);
    labels.assign(d.labels.begin(), d.labels.end());
#else
    throw Error("--fashion-mnist needs the training build (libtorch) for the IDX reader");
#endif
  }
  const int64_t batch = o.batch > 0 ? o.batch : std::min<int64_t>(n, 64);
  const engine::Mode mode = engine::parse_mode(o.mode);
  engine::Plan plan;
  if (mode == engine::Mode::kPlan) {
    bool built = false;
    plan = engine::load_or_build_plan(m, o.model, batch, o.threads, &built);
    std::printf("plan: %s (%s/plan.json)\n", built ? "built" : "loaded", o.model.c_str());
  }
  engine::Engine e(m, batch, o.threads, mode, mode == engine::Mode::kPlan ? &plan : nullptr);
  const auto t0 = Clock::now();
  const std::vector<float> y = run_all(e, m, x.data(), n);
  const double ms = ms_since(t0);
  const int64_t out = m.output_size();
  std::printf("model %s: %lld samples, batch %lld, %d thread(s), mode %s: %.2f ms (%.4f ms per sample)\n",
              m.name.c_str(), static_cast<long long>(n), static_cast<long long>(batch), o.threads,
              o.mode.c_str(), ms, ms / static_cast<double>(n));
  if (!labels.empty()) {
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) correct += argmax(&y[i * out], out) == labels[i];
    std::printf("accuracy %.2f%% (%lld/%lld)\n",
                100.0 * static_cast<double>(correct) / static_cast<double>(n),
                static_cast<long long>(correct), static_cast<long long>(n));
  } else if (o.output.empty()) {
    for (int64_t i = 0; i < std::min<int64_t>(n, 20); ++i)
      std::printf("sample %lld: class %lld\n", static_cast<long long>(i),
                  static_cast<long long>(argmax(&y[i * out], out)));
  }
  if (!o.output.empty()) {
    write_npy(o.output, Tensor::from_float(y, {n, out}));
    std::printf("wrote %s [%lld, %lld]\n", o.output.c_str(), static_cast<long long>(n),
                static_cast<long long>(out));
  }
}

struct ProfileOptions {
  std::string model;
  int64_t batch = 64;
  int threads = 1;
  int reps = 10;
};

// Best of `reps` for each engine, interleaved.
std::vector<double> latencies(std::vector<engine::Engine*> es, const float* x, float* y, int reps) {
  std::vector<double> best(es.size(), 1e300);
  for (auto* e : es) e->run(x, y);  // warm up
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < es.size(); ++i) {
      const auto t0 = Clock::now();
      es[i]->run(x, y);
      best[i] = std::min(best[i], ms_since(t0));
    }
  return best;
}

void cmd_profile(const ProfileOptions& o) {
  const engine::Model m = engine::load_model(o.model);
  bool built = false;
  const engine::Plan plan = engine::load_or_build_plan(m, o.model, o.batch, o.threads, &built);
  std::printf("model %s, batch %lld, %d thread(s), kernels %s; plan %s (%s/plan.json)\n\n", m.name.c_str(),
              static_cast<long long>(o.batch), o.threads, isa_name(active_isa()), built ? "built" : "loaded",
              o.model.c_str());
  print_plan(plan);
  engine::Engine dense(m, o.batch, o.threads, engine::Mode::kDense);
  engine::Engine sparse(m, o.batch, o.threads, engine::Mode::kSparse);
  engine::Engine planned(m, o.batch, o.threads, engine::Mode::kPlan, &plan);
  std::vector<float> x(static_cast<size_t>(o.batch * m.input_size())),
      y(static_cast<size_t>(o.batch * m.output_size()));
  uint32_t s = 7;
  for (float& v : x) v = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) * 0x1.0p-24f * 2 - 1;
  const std::vector<double> t = latencies({&dense, &sparse, &planned}, x.data(), y.data(), o.reps);
  double other = 0;
  std::printf("\nper op in the planned engine (best of 3):\n");
  for (const engine::OpTime& op : planned.profile(x.data(), 3)) {
    if (op.kind != "gemm") other += op.ms;
    std::printf("  %-24s %-10s %9.4f ms%s\n", op.name.c_str(), op.kind.c_str(), op.ms,
                op.kind != "gemm" ? "" : (op.sparse ? "  sparse" : "  dense"));
  }
  std::printf("\nend to end (best of %d, interleaved):\n", o.reps);
  std::printf("  dense  (oneDNN everywhere)     %9.3f ms  weights %zu bytes\n", t[0], dense.weight_bytes());
  std::printf("  sparse (every pruned layer)    %9.3f ms  weights %zu bytes\n", t[1], sparse.weight_bytes());
  std::printf("  plan   (per-layer choice)      %9.3f ms  weights %zu bytes  speedup over dense %.2fx\n",
              t[2], planned.weight_bytes(), t[0] / t[2]);
  std::printf("  ops outside the GEMMs (plan):  %9.3f ms\n", other);
}

struct BertCliOptions {
  int64_t seq = 128, batch = 1, layers = 12;
  int threads = 1, reps = 5;
  std::string json;
};

void cmd_bench_bert(const BertCliOptions& o) {
  if (o.threads < 1 || o.threads > 2) throw Error("--threads must be 1 or 2");
  if (o.seq < 1 || o.seq > 4096 || o.batch < 1 || o.batch > 256 || o.layers < 1 || o.layers > 48 ||
      o.reps < 1)
    throw Error("--seq, --batch, --layers or --reps out of range");
  engine::BertOptions bo;
  bo.seq = o.seq;
  bo.layers = o.layers;
  std::printf(
      "building BERT-base encoder (%lld layers, hidden 768, 12 heads, FFN 3072), random 2:4 weights...\n",
      static_cast<long long>(o.layers));
  std::fflush(stdout);
  std::optional<engine::Engine> dense_e, sparse_e;
  {
    const engine::Model m = engine::bert_model(bo);  // the compressed model is dropped after the engines
    dense_e.emplace(m, o.batch, o.threads, engine::Mode::kDense);
    sparse_e.emplace(m, o.batch, o.threads, engine::Mode::kSparse);
  }
  engine::Engine& dense = *dense_e;
  engine::Engine& sparse = *sparse_e;
  const int64_t in = 768 * o.seq * o.batch;
  std::vector<float> x(static_cast<size_t>(in)), yd(x.size()), ys(x.size());
  uint32_t s = 11;
  for (float& v : x) v = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) * 0x1.0p-24f * 2 - 1;
  dense.run(x.data(), yd.data());
  sparse.run(x.data(), ys.data());
  double diff = 0, mag = 0;
  for (size_t i = 0; i < yd.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(yd[i] - ys[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(yd[i])));
  }
  if (!(diff <= 1e-3 * std::max(mag, 1.0)))
    throw Error("dense and sparse outputs differ by " + std::to_string(diff) + " (max |y| " +
                std::to_string(mag) + ")");
  const std::vector<double> t = latencies({&dense, &sparse}, x.data(), yd.data(), o.reps);
  double gd = 0, gs = 0, od = 0, os = 0;
  // Per GEMM role across the layers ("layer3.ffn1" -> "ffn1"): dense and sparse ms.
  std::map<std::string, std::pair<double, double>> by_role;
  auto role = [](const std::string& name) { return name.substr(name.find('.') + 1); };
  for (const engine::OpTime& op : dense.profile(x.data(), 2)) {
    (op.kind == "gemm" ? gd : od) += op.ms;
    if (op.kind == "gemm") by_role[role(op.name)].first += op.ms;
  }
  std::map<std::string, double> by_kind;
  for (const engine::OpTime& op : sparse.profile(x.data(), 2)) {
    (op.kind == "gemm" ? gs : os) += op.ms;
    by_kind[op.kind] += op.ms;
    if (op.kind == "gemm") by_role[role(op.name)].second += op.ms;
  }
  const size_t bd = dense.weight_bytes(), bs = sparse.weight_bytes();
  std::printf("seq %lld, batch %lld, %d thread(s), kernels %s; outputs agree (max diff %.2e, max |y| %.2f)\n",
              static_cast<long long>(o.seq), static_cast<long long>(o.batch), o.threads,
              isa_name(active_isa()), diff, mag);
  std::printf("%-8s %12s %12s %12s %16s\n", "path", "latency ms", "gemm ms", "other ms", "weight bytes");
  std::printf("%-8s %12.2f %12.2f %12.2f %16zu\n", "dense", t[0], gd, od, bd);
  std::printf("%-8s %12.2f %12.2f %12.2f %16zu\n", "sparse", t[1], gs, os, bs);
  std::printf(
      "speedup %.3fx, weight bytes %.3f of dense (best of %d, interleaved; the per-op split is a separate "
      "profiled run)\n",
      t[0] / t[1], static_cast<double>(bs) / static_cast<double>(bd), o.reps);
  std::printf("%-10s %12s %12s %8s\n", "gemm", "dense ms", "sparse ms", "speedup");
  for (const auto& [r, t2] : by_role)
    std::printf("%-10s %12.2f %12.2f %7.2fx\n", r.c_str(), t2.first, t2.second, t2.first / t2.second);
  std::printf("sparse path per op kind:");
  for (const auto& [kind, ms] : by_kind) std::printf("  %s %.2f ms", kind.c_str(), ms);
  std::printf("\n");
  if (!o.json.empty()) {
    const nlohmann::json j = {{"seq", o.seq},
                              {"batch", o.batch},
                              {"threads", o.threads},
                              {"layers", o.layers},
                              {"isa", isa_name(active_isa())},
                              {"dense_ms", t[0]},
                              {"sparse_ms", t[1]},
                              {"speedup", t[0] / t[1]},
                              {"dense_gemm_ms", gd},
                              {"sparse_gemm_ms", gs},
                              {"dense_other_ms", od},
                              {"sparse_other_ms", os},
                              {"weight_bytes_dense", bd},
                              {"weight_bytes_sparse", bs},
                              {"weight_ratio", static_cast<double>(bs) / static_cast<double>(bd)},
                              {"max_abs_diff", diff},
                              {"reps", o.reps}};
    write_file_atomic(o.json, j.dump(2) + "\n");
  }
}

}  // namespace

void register_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* c =
      app.add_subcommand("run", "Run an exported model with the engine (per-layer plan in MODEL/plan.json)");
  c->add_option("model", o->model, "Model directory (model.json + model.safetensors)")->required();
  c->add_option("--input", o->input,
                "Input .npy, float32 [n, *input_shape] (normalised, as the network takes it)");
  c->add_option("--output", o->output, "Write the outputs [n, classes] to this .npy");
  c->add_flag("--fashion-mnist", o->fashion, "Run the Fashion-MNIST test set and print the accuracy");
  o->fashion_dir = "/usr/share/datasets/fashion-mnist";
  c->add_option("--data-dir", o->fashion_dir, "Fashion-MNIST directory")->capture_default_str();
  c->add_option("--batch", o->batch, "Samples per engine run (default min(n, 64))");
  c->add_option("--threads", o->threads, "Threads")->capture_default_str()->check(CLI::Range(1, 256));
  c->add_option("--mode", o->mode, "plan, dense or sparse")->capture_default_str();
  c->callback([o] { cmd_run(*o); });
}

void register_profile(CLI::App& app) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* c =
      app.add_subcommand("profile", "Per-layer sparse/dense times, the choice, and end-to-end latency");
  c->add_option("model", o->model, "Model directory")->required();
  c->add_option("--batch", o->batch, "Samples per run")->capture_default_str()->check(CLI::Range(1, 65536));
  c->add_option("--threads", o->threads, "Threads")->capture_default_str()->check(CLI::Range(1, 256));
  c->add_option("--reps", o->reps, "Repetitions (best of)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  c->callback([o] { cmd_profile(*o); });
}

void register_bench_bert(CLI::App& app) {
  auto o = std::make_shared<BertCliOptions>();
  CLI::App* c =
      app.add_subcommand("bench-bert", "BERT-base encoder, random 2:4 weights: dense vs sparse latency");
  c->add_option("--seq", o->seq, "Sequence length")->capture_default_str();
  c->add_option("--batch", o->batch, "Batch")->capture_default_str();
  c->add_option("--threads", o->threads, "Threads (1 or 2)")->capture_default_str();
  c->add_option("--layers", o->layers, "Encoder layers")->capture_default_str();
  c->add_option("--reps", o->reps, "Repetitions (best of)")->capture_default_str();
  c->add_option("--json", o->json, "Write the results as JSON");
  c->callback([o] { cmd_bench_bert(*o); });
}

}  // namespace sparse24::cli
