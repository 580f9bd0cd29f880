// sparse24 embed, bench-model, bench-embed: real text encoders (Hugging Face / sentence-transformers
// directories) in the engine (include/sparse24/engine.h, include/sparse24/hf_dir.h).
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
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

// ---- bench-model, bench-embed --------------------------------------------------------------------------

// A temporary directory, removed with what is in it when this goes out of scope (on an error too).
struct TempDir {
  explicit TempDir(const std::string& prefix)
      : path(fs::temp_directory_path() / (prefix + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  fs::path path;
};

// The engines bench-model and bench-embed time: the model dense, and a magnitude-pruned 2:4 copy with its
// values fp32, bf16 and int8, with fp32 activations and with bf16 or int8 ones where they take effect
// (bf16_activations_supported(), int8_activations_supported(); engine::set_sparse_precision).
struct BenchRows {
  struct Row {
    std::string key, label;
    engine::SparseValues values;
    engine::SparseActivations act;
  };
  std::vector<Row> rows;
  std::vector<engine::TextEncoder> encs;  // one per row
  std::string name;                       // the model's
  int64_t vocab = 0, max_sequence = 0;
};

// `all_positions`: the engines take ids up to the model's positions (bench-model's --seq), not only up to
// the length its tokenizer truncates texts to (sentence-transformers' max_seq_length).
BenchRows load_bench_rows(const std::string& model, engine::TextEncoder::Options eo, bool all_positions) {
  std::fprintf(stderr, "loading %s (dense) and pruning a 2:4 copy by magnitude\n", model.c_str());
  using engine::SparseActivations, engine::SparseValues;
  BenchRows b;
  b.rows = {{"sparse24_dense", "sparse24 dense", SparseValues::kF32, SparseActivations::kF32},
            {"sparse24_2to4", "sparse24 2:4", SparseValues::kF32, SparseActivations::kF32},
            {"sparse24_2to4_bf16", "sparse24 2:4 bf16", SparseValues::kBf16, SparseActivations::kF32},
            {"sparse24_2to4_int8", "sparse24 2:4 int8", SparseValues::kInt8, SparseActivations::kF32}};
  if (bf16_activations_supported()) {
    b.rows.push_back({"sparse24_2to4_bf16_xbf16", "sparse24 2:4 bf16 x bf16", SparseValues::kBf16,
                      SparseActivations::kBf16});
    b.rows.push_back({"sparse24_2to4_int8_xbf16", "sparse24 2:4 int8 x bf16", SparseValues::kInt8,
                      SparseActivations::kBf16});
  }
  if (int8_activations_supported())
    b.rows.push_back({"sparse24_2to4_int8_xi8", "sparse24 2:4 int8 x int8", SparseValues::kInt8,
                      SparseActivations::kInt8});
  engine::TextModelInfo info, pinfo;
  engine::Model dense_model = engine::load_hf_encoder(model, &info);
  b.name = dense_model.name;
  b.vocab = dense_model.vocab;
  b.max_sequence = dense_model.max_sequence;
  if (all_positions) info.max_tokens = dense_model.max_sequence;
  eo.mode = engine::Mode::kDense;
  b.encs.push_back(engine::TextEncoder::from_model(std::move(dense_model), info, model, "", eo));
  // The 2:4 copy written as `sparse24 prune-model` writes it and loaded from there, as a user runs it (its
  // word embeddings then stay in the file, as the dense model's do); the directory goes once it is loaded
  // (the mapping outlives the name).
  engine::Model sparse_model;
  {
    HfDir pruned = read_hf_dir(model);
    SparsifyOptions so;
    so.prune = true;
    so.targets = engine::kEncoderLinears;
    so.rank2_only = true;
    sparsify(pruned.weights, so);
    const TempDir tmp("sparse24-bench-2to4-");
    write_hf_dir(pruned, pruned.weights, CheckpointFormat::kSparse24, tmp / "model");
    sparse_model = engine::load_hf_encoder(tmp / "model", &pinfo);
  }
  if (all_positions) pinfo.max_tokens = sparse_model.max_sequence;
  eo.mode = engine::Mode::kSparse;
  for (size_t i = 1; i < b.rows.size(); ++i) {
    engine::Model m = sparse_model;
    engine::set_sparse_precision(m, b.rows[i].values, b.rows[i].act);
    b.encs.push_back(engine::TextEncoder::from_model(std::move(m), pinfo, model, "", eo));
  }
  return b;
}

// The best of `reps` times (ms) of run(i) for each of n engines, interleaved, after one warm-up round.
std::vector<double> best_times(size_t n, int reps, const std::function<void(size_t)>& run) {
  std::vector<double> best(n, 1e300);
  for (size_t i = 0; i < n; ++i) run(i);
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      run(i);
      best[i] = std::min(best[i], ms_since(t0));
    }
  return best;
}

// How far each narrower 2:4 row's embeddings (rows 2...) move from the fp32 2:4 row's: the smallest cosine.
std::vector<double> min_cosines_to_fp32(const std::vector<std::vector<float>>& outs, int64_t n, int64_t dim) {
  std::vector<double> min_cosine(outs.size(), 1.0);
  for (size_t i = 2; i < outs.size(); ++i) {
    const std::vector<double> c = engine::row_cosines(outs[i], outs[1], n, dim);
    min_cosine[i] = *std::min_element(c.begin(), c.end());
  }
  return min_cosine;
}

// Runs bench/peers/SCRIPT ARGS with the project's Python (or `python`); the JSON it wrote to `json_path`.
nlohmann::json run_peer_script(const std::string& python, const std::string& script, const std::string& args,
                               const std::string& json_path) {
  run_or_throw(quote(python.empty() ? default_python() : python) + " " +
                   quote(source_dir() + "/bench/peers/" + script) + " " + args,
               "the peer benchmark");
  const std::vector<uint8_t> pj = read_file(json_path);
  return nlohmann::json::parse(pj.begin(), pj.end());
}

// The largest absolute difference between our dense embeddings and the reference runtime's (`ref_npy`); an
// Error above 1e-3.
void check_dense_against(const std::vector<float>& ours, const std::string& ref_npy, const char* ref_name) {
  const std::vector<float> ref = read_npy(ref_npy).to_float();
  if (ref.size() != ours.size()) throw Error(std::string(ref_name) + "'s embeddings have another shape");
  double diff = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(ref[i] - ours[i])));
  std::fprintf(stderr, "sparse24 dense against %s: max abs difference %.2e\n", ref_name, diff);
  if (diff > 1e-3)
    throw Error("sparse24 dense disagrees with " + std::string(ref_name) + " (max abs difference " +
                std::to_string(diff) + ")");
}

// The peer with the smallest `key` (a time), or {"", inf} when none ran.
std::pair<std::string, double> fastest_peer(const nlohmann::json& peers, const char* key) {
  std::pair<std::string, double> best{"", 1e300};
  for (const auto& [name, v] : peers.items())
    if (v.contains(key) && v.at(key).get<double>() < best.second) best = {name, v.at(key).get<double>()};
  return best;
}

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

void cmd_bench_model(const BenchModelOptions& o) {
  if (o.seq < 2 || o.batch < 1 || o.threads < 1 || o.reps < 1)
    throw Error("bad --seq, --batch, --threads or --reps");
  engine::TextEncoder::Options eo;
  eo.threads = o.threads;
  eo.batch = o.batch;
  BenchRows b = load_bench_rows(o.model, eo, true);
  if (o.seq > b.max_sequence) throw Error("--seq is longer than the model's positions");
  const std::vector<BenchRows::Row>& rows = b.rows;
  std::vector<engine::TextEncoder>& encs = b.encs;

  // The same ids for every runtime: [CLS]-like first token kept from the tokenizer, the rest random.
  std::vector<std::vector<int32_t>> ids(o.batch, std::vector<int32_t>(o.seq));
  const std::vector<int32_t> special = encs[0].tokenize("");
  uint32_t seed = 2024;
  for (auto& row : ids) {
    for (int32_t& v : row) {
      seed = seed * 1664525u + 1013904223u;
      v = 1000 + static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(b.vocab - 1000));
    }
    row.front() = special.front();
    row.back() = special.back();
  }

  const auto run = [&](size_t i) { encs[i].embed_ids(ids); };
  std::vector<double> ms = best_times(encs.size(), o.reps, run);
  std::vector<std::vector<float>> outs;
  for (auto& e : encs) outs.push_back(e.embed_ids(ids));
  const std::vector<double> min_cosine = min_cosines_to_fp32(outs, o.batch, encs[1].dim());
  std::vector<size_t> bytes, stored;
  for (auto& e : encs) {
    bytes.push_back(e.engine().weight_bytes());
    stored.push_back(e.engine().stored_bytes());
  }
  const size_t dense_bytes = bytes[0];

  nlohmann::json peers = nlohmann::json::object();
  if (!o.no_peers) {
    const TempDir tmp("sparse24-bench-");
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
      write_file_atomic(tmp / "ids.npy", file);
    }
    peers = run_peer_script(o.python, "bench_peers.py",
                            quote(o.model) + " --seq " + std::to_string(o.seq) + " --batch " +
                                std::to_string(o.batch) + " --threads " + std::to_string(o.threads) +
                                " --reps " + std::to_string(o.reps) + " --ids " + quote(tmp / "ids.npy") +
                                " --json " + quote(tmp / "peers.json") + " --emit-embeddings " +
                                quote(tmp / "torch.npy") + " --peers " + quote(o.peers),
                            tmp / "peers.json")
                .at("peers");
    check_dense_against(outs[0], tmp / "torch.npy", "PyTorch on these ids");
    // Our engines once more after the peers ran (the machine may have been busier before): best of both.
    const std::vector<double> again = best_times(encs.size(), o.reps, run);
    for (size_t i = 0; i < ms.size(); ++i) ms[i] = std::min(ms[i], again[i]);
  }
  const auto [best_name, best_peer] = fastest_peer(peers, "ms");

  nlohmann::json runtimes = nlohmann::json::object();
  for (size_t i = 0; i < rows.size(); ++i) {
    runtimes[rows[i].key] = {{"ms", ms[i]}, {"weight_bytes", bytes[i]}, {"stored_bytes", stored[i]}};
    if (i >= 2) runtimes[rows[i].key]["min_cosine_vs_2to4_fp32"] = min_cosine[i];
    if (!best_name.empty()) runtimes[rows[i].key]["vs_best_peer"] = best_peer / ms[i];
  }
  nlohmann::json out = {{"model", b.name},
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
    if (v.contains("ms")) std::printf("  %-24s %9.3f ms\n", name.c_str(), v.at("ms").get<double>());
  if (!best_name.empty())
    std::printf("2:4 vs the fastest peer (%s): %.2fx; dense vs it: %.2fx\n", best_name.c_str(),
                best_peer / ms[1], best_peer / ms[0]);
  if (o.profile)
    for (size_t i = 0; i < rows.size(); ++i) print_profile(rows[i].label.c_str(), encs[i], ids);
  if (!o.json_out.empty()) write_file_atomic(o.json_out, out.dump(2) + "\n");
}

struct BenchEmbedOptions {
  std::string model, input, json_out, python, peers = "sentence-transformers,onnxruntime,openvino";
  int64_t max_lines = 1000, batch = 32;
  int threads = 1, reps = 3;
  bool no_peers = false, profile = false;
};

// A corpus embedded end to end (tokenizer, engine, pooling) by each engine and by the peers as a user runs
// them (bench/peers/bench_embed_peers.py: sentence-transformers' encode, and ONNX Runtime and OpenVINO with
// its tokenizer and length-sorted padded batches); texts per second.
void cmd_bench_embed(const BenchEmbedOptions& o) {
  if (o.batch < 1 || o.threads < 1 || o.reps < 1 || o.max_lines < 0)
    throw Error("bad --batch, --threads, --reps or --max-lines");
  const std::vector<std::string> texts = spread_lines(read_lines(o.input), o.max_lines);
  if (texts.empty()) throw Error(o.input + ": no lines");
  std::string texts_json;
  try {
    texts_json = nlohmann::json(texts).dump();
  } catch (const nlohmann::json::exception&) {
    throw Error(o.input + ": a line is not UTF-8");
  }
  engine::TextEncoder::Options eo;
  eo.threads = o.threads;
  eo.batch = o.batch;
  BenchRows b = load_bench_rows(o.model, eo, false);
  std::vector<engine::TextEncoder>& encs = b.encs;
  int64_t tokens = 0;
  for (const std::string& t : texts) tokens += static_cast<int64_t>(encs[0].tokenize(t).size());
  const auto n = static_cast<int64_t>(texts.size());

  const auto run = [&](size_t i) { encs[i].embed(texts); };
  std::vector<double> ms = best_times(encs.size(), o.reps, run);
  std::vector<std::vector<float>> outs;
  for (auto& e : encs) outs.push_back(e.embed(texts));
  const std::vector<double> min_cosine = min_cosines_to_fp32(outs, n, encs[1].dim());

  nlohmann::json peers = nlohmann::json::object();
  int64_t peer_tokens = tokens;
  if (!o.no_peers) {
    const TempDir tmp("sparse24-bench-embed-");
    write_file_atomic(tmp / "texts.json", texts_json);
    const nlohmann::json j =
        run_peer_script(o.python, "bench_embed_peers.py",
                        quote(o.model) + " --texts " + quote(tmp / "texts.json") + " --batch " +
                            std::to_string(o.batch) + " --threads " + std::to_string(o.threads) + " --reps " +
                            std::to_string(o.reps) + " --json " + quote(tmp / "peers.json") +
                            " --emit-embeddings " + quote(tmp / "st.npy") + " --peers " + quote(o.peers),
                        tmp / "peers.json");
    peers = j.at("peers");
    peer_tokens = j.at("tokens").get<int64_t>();
    check_dense_against(outs[0], tmp / "st.npy", "sentence-transformers' encode");
    const std::vector<double> again = best_times(encs.size(), o.reps, run);
    for (size_t i = 0; i < ms.size(); ++i) ms[i] = std::min(ms[i], again[i]);
  }
  const auto [best_name, best_s] = fastest_peer(peers, "s");
  const double best_peer = best_s * 1e3;

  nlohmann::json runtimes = nlohmann::json::object();
  for (size_t i = 0; i < b.rows.size(); ++i) {
    runtimes[b.rows[i].key] = {{"s", ms[i] / 1e3}, {"texts_per_s", n / (ms[i] / 1e3)}};
    if (i >= 2) runtimes[b.rows[i].key]["min_cosine_vs_2to4_fp32"] = min_cosine[i];
    if (!best_name.empty()) runtimes[b.rows[i].key]["vs_best_peer"] = best_peer / ms[i];
  }
  nlohmann::json out = {{"model_dir", o.model},
                        {"input", o.input},
                        {"texts", n},
                        {"tokens", tokens},
                        {"peer_tokens", peer_tokens},
                        {"batch", o.batch},
                        {"threads", o.threads},
                        {"isa", isa_name(active_isa())},
                        {"runtimes", runtimes},
                        {"peers", peers}};
  if (!best_name.empty()) {
    out["best_peer"] = best_name;
    out["speedup_vs_best_peer"] = best_peer / ms[1];
    out["dense_vs_best_peer"] = best_peer / ms[0];
  }
  std::printf("%s on %lld texts of %s (%lld tokens), batch %lld, %d thread(s), %s kernels\n", o.model.c_str(),
              static_cast<long long>(n), o.input.c_str(), static_cast<long long>(tokens),
              static_cast<long long>(o.batch), o.threads, isa_name(active_isa()));
  if (peer_tokens != tokens)
    std::printf("  (the peers' tokenizer made %lld tokens of these texts)\n",
                static_cast<long long>(peer_tokens));
  const auto line = [&](const std::string& label, double s) {
    std::printf("  %-24s %8.3f s  %8.1f texts/s  %8.0f tokens/s", label.c_str(), s, n / s, tokens / s);
  };
  for (size_t i = 0; i < b.rows.size(); ++i) {
    line(b.rows[i].label, ms[i] / 1e3);
    if (!best_name.empty()) std::printf("  %.2fx the fastest peer", best_peer / ms[i]);
    if (i >= 2) std::printf("  (cosine to 2:4 fp32 >= %.6f)", min_cosine[i]);
    std::printf("\n");
  }
  for (const auto& [name, v] : peers.items())
    if (v.contains("s")) {
      line(name, v.at("s").get<double>());
      std::printf("\n");
    }
  if (!best_name.empty())
    std::printf("2:4 vs the fastest peer (%s): %.2fx; dense vs it: %.2fx\n", best_name.c_str(),
                best_peer / ms[1], best_peer / ms[0]);
  if (o.profile) {  // the first batch of texts, as the engines run it
    std::vector<std::vector<int32_t>> ids;
    for (size_t i = 0; i < std::min(texts.size(), static_cast<size_t>(o.batch)); ++i)
      ids.push_back(encs[0].tokenize(texts[i]));
    for (size_t i = 0; i < b.rows.size(); ++i) print_profile(b.rows[i].label.c_str(), encs[i], ids);
  }
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

void register_bench_embed(CLI::App& app) {
  auto o = std::make_shared<BenchEmbedOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-embed",
      "Texts per second embedding a text file end to end (tokenizer, encoder, pooling) in sparse24 "
      "(dense and a magnitude-pruned 2:4 copy) against sentence-transformers' encode, ONNX Runtime and "
      "OpenVINO");
  cmd->add_option("model", o->model, "model directory")->required();
  cmd->add_option("--input", o->input, "file with one text per line")->required();
  cmd->add_option("--max-lines", o->max_lines, "at most this many lines, spread over the file (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch", o->batch, "texts per engine call (and per peer batch)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--threads", o->threads, "threads for every runtime")->check(CLI::Range(1, 1024));
  cmd->add_option("--reps", o->reps, "timed passes over the texts (best of)")->check(CLI::Range(1, 1000));
  cmd->add_option("--json", o->json_out, "write the results as JSON");
  cmd->add_option("--python", o->python, "the Python that runs the peers (default: the project's .venv)");
  cmd->add_option("--peers", o->peers, "comma-separated peers to run (sentence-transformers is required)");
  cmd->add_flag("--no-peers", o->no_peers, "time sparse24 only");
  cmd->add_flag("--profile", o->profile,
                "also print where sparse24's time goes on the first batch, per op kind");
  cmd->callback([o] { cmd_bench_embed(*o); });
}

}  // namespace sparse24::cli
