// sparse24 embed, bench-model: real text encoders (Hugging Face / sentence-transformers
// directories) in the engine (include/sparse24/engine.h, include/sparse24/hf_dir.h).
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "sparse24/embed_eval.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "sparse24/prune_model.h"
#include "sparse24/spmm.h"

namespace sparse24::cli {
namespace {

namespace fs = std::filesystem;

void cmd_embed(const std::string& dir, const std::vector<std::string>& text, const std::string& input,
               const std::string& output, int64_t batch, int threads, const std::string& mode,
               const EncoderPrecisionFlags& precision) {
  if (text.empty() == input.empty()) throw Error("give --text S ... or --input FILE (one text per line)");
  const std::vector<std::string> texts = input.empty() ? text : read_lines(input);
  if (texts.empty()) throw Error(input + ": no lines");
  engine::TextEncoder::Options o;
  precision.apply(o);
  o.threads = threads;
  o.batch = batch;
  o.mode = engine::parse_mode(mode);
  o.verbose = true;
  engine::TextEncoder enc = engine::TextEncoder::load(dir, o);
  const int64_t dim = enc.dim();
  std::vector<float> out(texts.size() * static_cast<size_t>(dim));
  Progress bar("embedded", static_cast<int64_t>(texts.size()));
  const auto t0 = Clock::now();
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); i += static_cast<size_t>(batch)) {
    const size_t end = std::min(texts.size(), i + static_cast<size_t>(batch));
    std::vector<std::vector<int32_t>> ids;
    for (size_t j = i; j < end; ++j) {
      ids.push_back(enc.tokenize(texts[j]));
      tokens += static_cast<int64_t>(ids.back().size());
    }
    const std::vector<float> e = enc.embed_ids(ids);
    std::copy(e.begin(), e.end(), out.begin() + static_cast<int64_t>(i) * dim);
    if (texts.size() > 64) bar.update(static_cast<int64_t>(end));
  }
  const double ms = ms_since(t0);
  if (output.empty()) {
    for (size_t i = 0; i < texts.size(); ++i) {
      std::printf("[");
      for (int64_t j = 0; j < dim; ++j) std::printf(j ? ", %.7g" : "%.7g", out[i * dim + j]);
      std::printf("]\n");
    }
  } else {
    write_npy(output, Tensor::from_float(out, {static_cast<int64_t>(texts.size()), dim}));
  }
  std::fprintf(
      stderr, "%zu texts, %lld tokens, %lld-dim embeddings in %.1f ms (%.0f texts/s, %s kernels)%s%s\n",
      texts.size(), static_cast<long long>(tokens), static_cast<long long>(dim), ms,
      texts.size() / (ms / 1000), isa_name(active_isa()), output.empty() ? "" : ": ", output.c_str());
}

// ---- bench-model ---------------------------------------------------------------------------------------

struct BenchModelOptions {
  std::string model, json_out, python, peers = "pytorch,onnxruntime,openvino";
  int64_t seq = 128, batch = 1;
  int threads = 1, reps = 20;
  bool no_peers = false, profile = false;
};

// Where a forward pass's time goes: the best of `reps` per op, summed by kind (GEMMs dense and sparse apart).
void print_profile(const char* label, engine::TextEncoder& e, const std::vector<std::vector<int32_t>>& ids) {
  engine::TokenBatch tb;
  for (const auto& row : ids) tb.add(row);
  std::map<std::string, double> by_kind;
  double total = 0;
  for (const engine::OpTime& t : e.engine().profile_tokens(tb, 5)) {
    by_kind[t.kind == "gemm" ? (t.sparse ? "gemm (2:4)" : "gemm (dense)") : t.kind] += t.ms;
    total += t.ms;
  }
  std::printf("  %s, per op kind (sum of per-op bests %.2f ms):", label, total);
  for (const auto& [k, ms] : by_kind) std::printf(" %s %.2f (%.0f%%)", k.c_str(), ms, 100 * ms / total);
  std::printf("\n");
}

// Best-of-reps latency of each engine, interleaved.
std::vector<double> latencies(std::vector<engine::TextEncoder*> es,
                              const std::vector<std::vector<int32_t>>& ids, int reps) {
  std::vector<double> best(es.size(), 1e300);
  for (auto* e : es) e->embed_ids(ids);  // warm up
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < es.size(); ++i) {
      const auto t0 = Clock::now();
      es[i]->embed_ids(ids);
      best[i] = std::min(best[i], ms_since(t0));
    }
  return best;
}

void cmd_bench_model(const BenchModelOptions& o) {
  if (o.seq < 2 || o.batch < 1 || o.threads < 1 || o.reps < 1)
    throw Error("bad --seq, --batch, --threads or --reps");
  std::fprintf(stderr, "loading %s (dense) and pruning a 2:4 copy by magnitude\n", o.model.c_str());
  engine::TextModelInfo info, pinfo;
  engine::TextEncoder::Options eo;
  eo.threads = o.threads;
  eo.batch = o.batch;
  eo.mode = engine::Mode::kDense;
  const engine::Model dense_model = engine::load_hf_encoder(o.model, &info);
  if (o.seq > dense_model.max_sequence) throw Error("--seq is longer than the model's positions");
  info.max_tokens = dense_model.max_sequence;
  engine::TextEncoder dense = engine::TextEncoder::from_model(dense_model, info, o.model, "", eo);
  // The 2:4 copy written as `sparse24 prune-model` writes it and loaded from there, as a user runs it (its
  // word embeddings then stay in the file, as the dense model's do); the directory goes once it is loaded
  // (the mapping outlives the name).
  engine::Model sparse_model;
  {
    HfDir pruned = read_hf_dir(o.model);
    SparsifyOptions so;
    so.prune = true;
    so.targets = engine::kEncoderLinears;
    so.rank2_only = true;
    sparsify(pruned.weights, so);
    const fs::path tmp = fs::temp_directory_path() / ("sparse24-bench-2to4-" + std::to_string(::getpid()));
    try {
      write_hf_dir(pruned, pruned.weights, CheckpointFormat::kSparse24, tmp.string());
      sparse_model = engine::load_hf_encoder(tmp.string(), &pinfo);
    } catch (...) {
      fs::remove_all(tmp);
      throw;
    }
    fs::remove_all(tmp);
  }
  pinfo.max_tokens = sparse_model.max_sequence;
  eo.mode = engine::Mode::kSparse;
  // The rows: dense, the 2:4 copy as pruned (fp32), and its values bf16 and int8, with fp32 activations and
  // with bf16 or int8 ones where they take effect (bf16_activations_supported(),
  // int8_activations_supported(); engine::set_sparse_precision).
  using engine::SparseActivations, engine::SparseValues;
  struct Row {
    std::string key, label;
    SparseValues values;
    SparseActivations act;
  };
  std::vector<Row> rows = {
      {"sparse24_dense", "sparse24 dense", SparseValues::kF32, SparseActivations::kF32},
      {"sparse24_2to4", "sparse24 2:4", SparseValues::kF32, SparseActivations::kF32},
      {"sparse24_2to4_bf16", "sparse24 2:4 bf16", SparseValues::kBf16, SparseActivations::kF32},
      {"sparse24_2to4_int8", "sparse24 2:4 int8", SparseValues::kInt8, SparseActivations::kF32}};
  if (bf16_activations_supported()) {
    rows.push_back({"sparse24_2to4_bf16_xbf16", "sparse24 2:4 bf16 x bf16", SparseValues::kBf16,
                    SparseActivations::kBf16});
    rows.push_back({"sparse24_2to4_int8_xbf16", "sparse24 2:4 int8 x bf16", SparseValues::kInt8,
                    SparseActivations::kBf16});
  }
  if (int8_activations_supported())
    rows.push_back({"sparse24_2to4_int8_xi8", "sparse24 2:4 int8 x int8", SparseValues::kInt8,
                    SparseActivations::kInt8});
  std::vector<engine::TextEncoder> encs;
  encs.push_back(std::move(dense));
  for (size_t i = 1; i < rows.size(); ++i) {
    engine::Model m = sparse_model;
    engine::set_sparse_precision(m, rows[i].values, rows[i].act);
    encs.push_back(engine::TextEncoder::from_model(std::move(m), pinfo, o.model, "", eo));
  }
  std::vector<engine::TextEncoder*> all;
  for (auto& e : encs) all.push_back(&e);

  // The same ids for every runtime: [CLS]-like first token kept from the tokenizer, the rest random.
  std::vector<std::vector<int32_t>> ids(o.batch, std::vector<int32_t>(o.seq));
  const std::vector<int32_t> special = encs[0].tokenize("");
  uint32_t seed = 2024;
  for (auto& row : ids) {
    for (int32_t& v : row) {
      seed = seed * 1664525u + 1013904223u;
      v = 1000 + static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(dense_model.vocab - 1000));
    }
    row.front() = special.front();
    row.back() = special.back();
  }

  std::vector<double> ms = latencies(all, ids, o.reps);
  const std::vector<float> dense_out = encs[0].embed_ids(ids);
  // How far each narrower 2:4 row's embeddings move from the fp32 2:4 row's (the smallest cosine).
  const std::vector<float> fp32_out = encs[1].embed_ids(ids);
  std::vector<double> min_cosine(rows.size(), 1.0);
  const int64_t dim = encs[1].dim();
  for (size_t i = 2; i < rows.size(); ++i) {
    const std::vector<double> c = engine::row_cosines(encs[i].embed_ids(ids), fp32_out, o.batch, dim);
    min_cosine[i] = *std::min_element(c.begin(), c.end());
  }
  std::vector<size_t> bytes, stored;
  for (auto& e : encs) {
    bytes.push_back(e.engine().weight_bytes());
    stored.push_back(e.engine().stored_bytes());
  }
  const size_t dense_bytes = bytes[0];

  nlohmann::json peers = nlohmann::json::object();
  double best_peer = 1e300;
  std::string best_name;
  if (!o.no_peers) {
    const fs::path tmp = fs::temp_directory_path() / ("sparse24-bench-" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    std::vector<int64_t> flat;
    for (const auto& row : ids) flat.insert(flat.end(), row.begin(), row.end());
    // ids as int64 .npy (written by hand: the library's npy writer holds float32/16 and int8)
    {
      std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (" + std::to_string(o.batch) +
                           ", " + std::to_string(o.seq) + "), }";
      while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
      header.push_back('\n');
      std::string file("\x93NUMPY\x01\x00", 8);
      file.push_back(static_cast<char>(header.size() & 0xFF));
      file.push_back(static_cast<char>(header.size() >> 8));
      file += header;
      file.append(reinterpret_cast<const char*>(flat.data()), flat.size() * sizeof(int64_t));
      write_file_atomic((tmp / "ids.npy").string(), file);
    }
    const std::string python = o.python.empty() ? default_python() : o.python;
    const std::string cmd = "'" + python + "' '" + source_dir() + "/bench/peers/bench_peers.py' '" + o.model +
                            "' --seq " + std::to_string(o.seq) + " --batch " + std::to_string(o.batch) +
                            " --threads " + std::to_string(o.threads) + " --reps " + std::to_string(o.reps) +
                            " --ids '" + (tmp / "ids.npy").string() + "' --json '" +
                            (tmp / "peers.json").string() + "' --emit-embeddings '" +
                            (tmp / "torch.npy").string() + "' --peers " + o.peers;
    std::fprintf(stderr, "peers: %s\n", cmd.c_str());
    std::fflush(nullptr);
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      fs::remove_all(tmp);
      throw Error("the peer benchmark failed (exit " + std::to_string(WEXITSTATUS(rc)) + "): " + cmd);
    }
    const std::vector<uint8_t> pj = read_file((tmp / "peers.json").string());
    const nlohmann::json j = nlohmann::json::parse(pj.begin(), pj.end());
    peers = j.at("peers");
    const std::vector<float> ref = read_npy((tmp / "torch.npy").string()).to_float();
    fs::remove_all(tmp);
    double diff = 0;
    if (ref.size() != dense_out.size()) throw Error("the peer's embeddings have another shape");
    for (size_t i = 0; i < ref.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(ref[i] - dense_out[i])));
    std::fprintf(stderr, "sparse24 dense against PyTorch on these ids: max abs difference %.2e\n", diff);
    if (diff > 1e-3)
      throw Error("sparse24 dense disagrees with PyTorch (max abs difference " + std::to_string(diff) + ")");
    // Our engines once more after the peers ran (the machine may have been busier before): best of both.
    const std::vector<double> again = latencies(all, ids, o.reps);
    for (size_t i = 0; i < ms.size(); ++i) ms[i] = std::min(ms[i], again[i]);
    for (const auto& [name, v] : peers.items())
      if (v.at("ms").get<double>() < best_peer) {
        best_peer = v.at("ms").get<double>();
        best_name = name;
      }
  }

  nlohmann::json runtimes = nlohmann::json::object();
  for (size_t i = 0; i < rows.size(); ++i) {
    runtimes[rows[i].key] = {{"ms", ms[i]}, {"weight_bytes", bytes[i]}, {"stored_bytes", stored[i]}};
    if (i >= 2) runtimes[rows[i].key]["min_cosine_vs_2to4_fp32"] = min_cosine[i];
    if (!best_name.empty()) runtimes[rows[i].key]["vs_best_peer"] = best_peer / ms[i];
  }
  nlohmann::json out = {{"model", dense_model.name},
                        {"model_dir", o.model},
                        {"seq", o.seq},
                        {"batch", o.batch},
                        {"threads", o.threads},
                        {"isa", isa_name(active_isa())},
                        {"runtimes", runtimes},
                        {"peers", peers},
                        {"sparse_vs_dense", ms[0] / ms[1]},
                        {"weight_bytes_ratio", static_cast<double>(bytes[1]) / dense_bytes}};
  if (!best_name.empty()) {
    out["best_peer"] = best_name;
    out["speedup_vs_best_peer"] = best_peer / ms[1];
    out["dense_vs_best_peer"] = best_peer / ms[0];
  }
  std::printf("%s, seq %lld, batch %lld, %d thread(s), %s kernels\n", o.model.c_str(),
              static_cast<long long>(o.seq), static_cast<long long>(o.batch), o.threads,
              isa_name(active_isa()));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::printf("  %-24s %9.3f ms  (weights %.1f MB", rows[i].label.c_str(), ms[i], bytes[i] / 1e6);
    if (i > 0) std::printf(", %.3f of dense", static_cast<double>(bytes[i]) / dense_bytes);
    if (stored[i] > 0) std::printf("; %.1f MB of tables left in the file", stored[i] / 1e6);
    if (i >= 2) std::printf("; embeddings' cosine to 2:4 fp32 >= %.6f", min_cosine[i]);
    std::printf(")");
    if (!best_name.empty()) std::printf("  %.2fx the fastest peer", best_peer / ms[i]);
    std::printf("\n");
  }
  for (const auto& [name, v] : peers.items())
    std::printf("  %-24s %9.3f ms\n", name.c_str(), v.at("ms").get<double>());
  if (!best_name.empty())
    std::printf("2:4 vs the fastest peer (%s): %.2fx; dense vs it: %.2fx\n", best_name.c_str(),
                best_peer / ms[1], best_peer / ms[0]);
  if (o.profile)
    for (size_t i = 0; i < rows.size(); ++i) print_profile(rows[i].label.c_str(), encs[i], ids);
  if (!o.json_out.empty()) write_file_atomic(o.json_out, out.dump(2) + "\n");
}

}  // namespace

void register_embed(CLI::App& app) {
  struct Opts {
    std::string model, input, output, mode = "plan";
    std::vector<std::string> text;
    int64_t batch = 8;
    int threads = 1;
    EncoderPrecisionFlags precision;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Sentence embeddings from a Hugging Face / sentence-transformers encoder (BERT, MPNet)");
  cmd->add_option("model", o->model, "model directory (config.json, model.safetensors, tokenizer)")
      ->required();
  add_texts_option(cmd, "--text", o->text, "texts to embed");
  cmd->add_option("--input", o->input, "file with one text per line");
  cmd->add_option("-o,--output", o->output, "embeddings .npy [texts, dim] (default: JSON lines on stdout)");
  cmd->add_option("--batch", o->batch, "texts per engine call")->check(CLI::Range(1, 4096));
  cmd->add_option("--threads", o->threads, "threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--mode", o->mode, "plan (per layer, timed), dense, or sparse (every 2:4 layer)")
      ->check(CLI::IsMember({"plan", "dense", "sparse"}));
  o->precision.add_to(cmd);
  cmd->callback([o] {
    cmd_embed(o->model, o->text, o->input, o->output, o->batch, o->threads, o->mode, o->precision);
  });
}

void register_bench_model(CLI::App& app) {
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-model",
      "Time a Hugging Face encoder in sparse24 (dense, and a magnitude-pruned 2:4 copy with fp32, bf16 and "
      "int8 values) against PyTorch, ONNX Runtime and OpenVINO on the same ids");
  cmd->add_option("model", o->model, "model directory")->required();
  cmd->add_option("--seq", o->seq, "tokens per sequence");
  cmd->add_option("--batch", o->batch, "sequences");
  cmd->add_option("--threads", o->threads, "threads for every runtime")->check(CLI::Range(1, 1024));
  cmd->add_option("--reps", o->reps, "timed repetitions (best of)");
  cmd->add_option("--json", o->json_out, "write the results as JSON");
  cmd->add_option("--python", o->python, "the Python that runs the peers (default: the project's .venv)");
  cmd->add_option("--peers", o->peers, "comma-separated peers to run");
  cmd->add_flag("--no-peers", o->no_peers, "time sparse24 only");
  cmd->add_flag("--profile", o->profile, "also print where sparse24's time goes, per op kind");
  cmd->callback([o] { cmd_bench_model(*o); });
}

}  // namespace sparse24::cli
