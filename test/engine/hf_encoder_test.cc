// Hugging Face encoders in the engine: tiny BERT and MPNet checkpoints written here (config.json,
// safetensors, sentence-transformers modules) against a scalar forward pass written from transformers'
// definitions; ragged batches against one sequence at a time; 2:4 checkpoints (sparse24 and sparse-24-bitmask
// layouts, one file or shards) in every mode; the plan's whole-model check; hostile directories.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../src/engine/ops.h"
#include "common/cli.h"
#include "common/seed.h"
#include "sparse24/checkpoint.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"

namespace sparse24::engine {
namespace {

using json = nlohmann::json;
using sparse24::testing::random_floats;
using sparse24::testing::rng;
using sparse24::testing::TempDirTest;

struct Tiny {
  std::string type = "bert";
  int64_t vocab = 40, hidden = 16, heads = 2, layers = 2, ffn = 32, max_pos = 24, buckets = 32;
  int64_t offset() const { return type == "mpnet" ? 2 : 0; }
};

json config_of(const Tiny& t) {
  json c = {{"model_type", t.type},
            {"vocab_size", t.vocab},
            {"hidden_size", t.hidden},
            {"num_attention_heads", t.heads},
            {"num_hidden_layers", t.layers},
            {"intermediate_size", t.ffn},
            {"max_position_embeddings", t.max_pos},
            {"hidden_act", "gelu"}};
  if (t.type == "bert") {
    c["type_vocab_size"] = 2;
    c["layer_norm_eps"] = 1e-12;
  } else {
    c["layer_norm_eps"] = 1e-5;
    c["pad_token_id"] = 1;
    c["relative_attention_num_buckets"] = t.buckets;
  }
  return c;
}

StTensor st(const std::vector<float>& v, std::vector<int64_t> shape) {
  return to_st(Tensor::from_float(v, std::move(shape)));
}

// The tensors a transformers BertModel / MPNetModel state dict holds, random (plus a pooler, which the
// encoder must ignore).
SafeTensors weights_of(const Tiny& t, std::mt19937_64& g) {
  SafeTensors s;
  const bool bert = t.type == "bert";
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    s.add(name, st(random_floats(g, n, lo, hi), shape));
  };
  auto linear = [&](const std::string& p, int64_t out, int64_t in) {
    const float a = 1.5f / std::sqrt(static_cast<float>(in));
    add(p + ".weight", {out, in}, -a, a);
    add(p + ".bias", {out}, -0.1f, 0.1f);
  };
  auto norm = [&](const std::string& p) {
    add(p + ".weight", {t.hidden}, 0.8f, 1.2f);
    add(p + ".bias", {t.hidden}, -0.1f, 0.1f);
  };
  add("embeddings.word_embeddings.weight", {t.vocab, t.hidden}, -1, 1);
  add("embeddings.position_embeddings.weight", {t.max_pos, t.hidden}, -0.5f, 0.5f);
  if (bert) add("embeddings.token_type_embeddings.weight", {2, t.hidden}, -0.5f, 0.5f);
  norm("embeddings.LayerNorm");
  if (!bert) add("encoder.relative_attention_bias.weight", {t.buckets, t.heads}, -1, 1);
  for (int64_t l = 0; l < t.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* q : bert ? std::vector<const char*>{"query", "key", "value"}
                              : std::vector<const char*>{"q", "k", "v", "o"})
      linear(p + (bert ? "attention.self." : "attention.attn.") + q, t.hidden, t.hidden);
    if (bert) linear(p + "attention.output.dense", t.hidden, t.hidden);
    norm(p + (bert ? "attention.output.LayerNorm" : "attention.LayerNorm"));
    linear(p + "intermediate.dense", t.ffn, t.hidden);
    linear(p + "output.dense", t.hidden, t.ffn);
    norm(p + "output.LayerNorm");
  }
  linear("pooler.dense", t.hidden, t.hidden);
  return s;
}

void write_json(const std::filesystem::path& p, const json& j) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << j.dump(2);
}

// A sentence-transformers directory: the model, mean or CLS pooling, optional Normalize.
void write_model(const std::filesystem::path& dir, const Tiny& t, const SafeTensors& w, bool cls,
                 bool normalize) {
  write_json(dir / "config.json", config_of(t));
  write_safetensors((dir / "model.safetensors").string(), w);
  json modules = json::array(
      {{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
       {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}}});
  if (normalize)
    modules.push_back({{"idx", 2},
                       {"name", "2"},
                       {"path", "2_Normalize"},
                       {"type", "sentence_transformers.models.Normalize"}});
  write_json(dir / "modules.json", modules);
  write_json(dir / "1_Pooling" / "config.json", {{"word_embedding_dimension", t.hidden},
                                                 {"pooling_mode_cls_token", cls},
                                                 {"pooling_mode_mean_tokens", !cls}});
}

// ---- The scalar reference, from transformers' definitions (double accumulation) -------------------------

using Mat = std::vector<std::vector<double>>;  // [tokens][features]

std::vector<float> get(const SafeTensors& w, const std::string& name) {
  return from_st(w.at(name), name).to_float();
}

Mat linear(const SafeTensors& w, const std::string& p, const Mat& x) {
  const std::vector<float> W = get(w, p + ".weight"), b = get(w, p + ".bias");
  const size_t out = b.size(), in = x[0].size();
  Mat y(x.size(), std::vector<double>(out));
  for (size_t t = 0; t < x.size(); ++t)
    for (size_t o = 0; o < out; ++o) {
      double s = b[o];
      for (size_t i = 0; i < in; ++i) s += static_cast<double>(W[o * in + i]) * x[t][i];
      y[t][o] = s;
    }
  return y;
}

Mat layer_norm(const SafeTensors& w, const std::string& p, Mat x, const Mat* residual, double eps) {
  const std::vector<float> g = get(w, p + ".weight"), b = get(w, p + ".bias");
  for (size_t t = 0; t < x.size(); ++t) {
    if (residual)
      for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += (*residual)[t][i];
    double mean = 0, var = 0;
    for (double v : x[t]) mean += v;
    mean /= x[t].size();
    for (double v : x[t]) var += (v - mean) * (v - mean);
    var /= x[t].size();
    for (size_t i = 0; i < x[t].size(); ++i) x[t][i] = (x[t][i] - mean) / std::sqrt(var + eps) * g[i] + b[i];
  }
  return x;
}

// transformers' MPNet relative_position_bucket (num_buckets, max_distance 128), in double.
int64_t bucket_reference(int64_t rel, int64_t buckets) {
  int64_t n = -rel, ret = 0;
  const int64_t half = buckets / 2, max_exact = half / 2;
  if (n < 0) ret += half;
  n = std::abs(n);
  if (n < max_exact) return ret + n;
  const int64_t large = max_exact + static_cast<int64_t>(std::log(static_cast<double>(n) / max_exact) /
                                                         std::log(128.0 / max_exact) * (half - max_exact));
  return ret + std::min(large, half - 1);
}

std::vector<float> reference_embedding(const Tiny& t, const SafeTensors& w, const std::vector<int32_t>& ids,
                                       bool cls, bool normalize) {
  const bool bert = t.type == "bert";
  const double eps = bert ? 1e-12 : 1e-5;
  const std::vector<float> word = get(w, "embeddings.word_embeddings.weight"),
                           pos = get(w, "embeddings.position_embeddings.weight");
  const size_t n = ids.size(), H = t.hidden, d = H / t.heads;
  Mat x(n, std::vector<double>(H));
  for (size_t i = 0; i < n; ++i)
    for (size_t r = 0; r < H; ++r) {
      x[i][r] = word[ids[i] * H + r] + pos[(i + t.offset()) * H + r];
      if (bert) x[i][r] += get(w, "embeddings.token_type_embeddings.weight")[r];
    }
  x = layer_norm(w, "embeddings.LayerNorm", x, nullptr, eps);
  for (int64_t l = 0; l < t.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    const std::string a = p + (bert ? "attention.self." : "attention.attn.");
    const Mat q = linear(w, a + (bert ? "query" : "q"), x), k = linear(w, a + (bert ? "key" : "k"), x),
              v = linear(w, a + (bert ? "value" : "v"), x);
    Mat ctx(n, std::vector<double>(H, 0.0));
    for (int64_t h = 0; h < t.heads; ++h)
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> s(n);
        double mx = -1e300, sum = 0;
        for (size_t j = 0; j < n; ++j) {
          double dot = 0;
          for (size_t c = 0; c < d; ++c) dot += q[i][h * d + c] * k[j][h * d + c];
          s[j] = dot / std::sqrt(static_cast<double>(d));
          if (!bert)
            s[j] += get(w, "encoder.relative_attention_bias.weight")
                [bucket_reference(static_cast<int64_t>(j) - static_cast<int64_t>(i), t.buckets) * t.heads +
                 h];
          mx = std::max(mx, s[j]);
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j < n; ++j)
          for (size_t c = 0; c < d; ++c) ctx[i][h * d + c] += s[j] / sum * v[j][h * d + c];
      }
    const Mat ao = linear(w, p + (bert ? "attention.output.dense" : "attention.attn.o"), ctx);
    const Mat h1 =
        layer_norm(w, p + (bert ? "attention.output.LayerNorm" : "attention.LayerNorm"), ao, &x, eps);
    Mat f = linear(w, p + "intermediate.dense", h1);
    for (auto& row : f)
      for (double& e : row) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
    x = layer_norm(w, p + "output.LayerNorm", linear(w, p + "output.dense", f), &h1, eps);
  }
  std::vector<double> e(H, 0.0);
  for (size_t i = 0; i < (cls ? 1 : n); ++i)
    for (size_t r = 0; r < H; ++r) e[r] += x[i][r] / (cls ? 1.0 : static_cast<double>(n));
  double norm = 0;
  for (double v : e) norm += v * v;
  norm = normalize ? std::max(std::sqrt(norm), 1e-12) : 1.0;
  std::vector<float> out(H);
  for (size_t r = 0; r < H; ++r) out[r] = static_cast<float>(e[r] / norm);
  return out;
}

std::vector<std::vector<int32_t>> random_sequences(std::mt19937_64& g, const Tiny& t, int count,
                                                   int64_t max_len) {
  std::vector<std::vector<int32_t>> seqs;
  for (int s = 0; s < count; ++s) {
    std::vector<int32_t> ids(1 + g() % max_len);
    for (int32_t& id : ids) id = static_cast<int32_t>(g() % t.vocab);
    seqs.push_back(ids);
  }
  return seqs;
}

std::vector<float> run(Engine& e, const std::vector<std::vector<int32_t>>& seqs) {
  TokenBatch b;
  for (const auto& s : seqs) b.add(s);
  std::vector<float> out(seqs.size() * e.output_rows());
  e.run_tokens(b, out.data());
  return out;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

class HfEncoder : public TempDirTest {};

TEST(HfEncoderOps, RelativeBucketsMatchTransformers) {
  // The boundaries where float32 rounding could move a bucket are at n = 8 * 2^(k/2) for 32 buckets; the
  // reference (double) and the engine (float32, as PyTorch) agree on every distance a sequence can have.
  for (int64_t rel = -600; rel <= 600; ++rel)
    ASSERT_EQ(detail::relative_bucket(rel, 32, 128), bucket_reference(rel, 32)) << "rel " << rel;
}

TEST_F(HfEncoder, TinyBertAndMpnetMatchTheScalarReference) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"})
    for (bool cls : {false, true}) {
      Tiny t;
      t.type = type;
      const SafeTensors w = weights_of(t, g);
      const std::filesystem::path dir = dir_ / (std::string(type) + (cls ? "-cls" : "-mean"));
      write_model(dir, t, w, cls, /*normalize=*/!cls);
      TextModelInfo info;
      const Model m = load_hf_encoder(dir.string(), &info);
      EXPECT_EQ(info.model_type, type);
      EXPECT_EQ(info.pool, cls ? PoolMode::kCls : PoolMode::kMean);
      EXPECT_EQ(m.max_sequence, t.max_pos - t.offset());
      const auto seqs = random_sequences(g, t, 5, m.max_sequence);
      std::vector<float> want;
      for (const auto& s : seqs) {
        const std::vector<float> e = reference_embedding(t, w, s, cls, !cls);
        want.insert(want.end(), e.begin(), e.end());
      }
      for (int threads : {1, 2}) {
        Engine e(m, 5 * m.max_sequence, threads, Mode::kDense);
        expect_near_all(run(e, seqs), want, 2e-5f, std::string(type) + " ragged batch");
        // One at a time gives the same (no padding leaks between sequences).
        for (size_t i = 0; i < seqs.size(); ++i) {
          const std::vector<float> one = run(e, {seqs[i]});
          for (int64_t r = 0; r < t.hidden; ++r) ASSERT_NEAR(one[r], want[i * t.hidden + r], 2e-5f);
        }
      }
    }
}

TEST_F(HfEncoder, PrunedCheckpointsRunSparseInEveryLayoutAndMode) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"}) {
    Tiny t;
    t.type = type;
    const std::filesystem::path dense_dir = dir_ / (std::string(type) + "-dense");
    write_model(dense_dir, t, weights_of(t, g), false, true);
    HfDir d = read_hf_dir(dense_dir.string());
    SparsifyOptions so;
    so.prune = true;
    so.targets = R"(encoder\.layer\.[0-9]+\.)";
    so.rank2_only = true;
    const SparsifyReport r = sparsify(d.weights, so);
    EXPECT_EQ(static_cast<int64_t>(r.pruned.size()), t.layers * 6);
    // The reference runs on the pruned weights with their zeros stored.
    Checkpoint zeros = d.weights;
    densify(zeros);
    SafeTensors zw = encode_checkpoint(zeros, CheckpointFormat::kDense);
    const auto seqs = random_sequences(g, t, 4, t.max_pos - t.offset());
    std::vector<float> want;
    for (const auto& s : seqs) {
      const std::vector<float> e = reference_embedding(t, zw, s, false, true);
      want.insert(want.end(), e.begin(), e.end());
    }
    for (CheckpointFormat f : {CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24}) {
      const std::string out = (dir_ / (std::string(type) + "-" + checkpoint_format_name(f))).string();
      write_hf_dir(d, d.weights, f, out);
      EXPECT_TRUE(std::filesystem::exists(out + "/1_Pooling/config.json"));  // the rest is carried along
      const Model m = load_hf_encoder(out);
      int pruned = 0;
      for (const Gemm& gm : m.gemms) pruned += gm.pruned;
      EXPECT_EQ(pruned, t.layers * 4);  // qkv (fused), attention output, ffn1, ffn2
      const Plan plan = build_plan(m, 64, 1, 1);
      EXPECT_TRUE(plan.whole == "layers" || plan.whole == "dense" || plan.whole == "sparse");
      EXPECT_GT(plan.dense_ms, 0.0);
      for (Mode mode : {Mode::kDense, Mode::kSparse, Mode::kPlan}) {
        Engine e(m, 4 * m.max_sequence, 1, mode, &plan);
        expect_near_all(run(e, seqs), want, 2e-5f, std::string(type) + " " + checkpoint_format_name(f));
      }
      EXPECT_LT(Engine(m, 64, 1, Mode::kSparse).weight_bytes(),
                Engine(m, 64, 1, Mode::kDense).weight_bytes());
    }
  }
}

TEST_F(HfEncoder, ShardedCheckpointsLoadLikeOneFile) {
  auto g = rng();
  Tiny t;
  const SafeTensors w = weights_of(t, g);
  write_model(dir_ / "one", t, w, false, true);
  // Two shards and an index.
  SafeTensors a, b;
  json map = json::object();
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    (i % 2 ? a : b).add(w.tensors[i].first, w.tensors[i].second);
    map[w.tensors[i].first] = i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_model(dir_ / "sharded", t, w, false, true);
  std::filesystem::remove(dir_ / "sharded" / "model.safetensors");
  write_safetensors((dir_ / "sharded" / "model-00001-of-00002.safetensors").string(), a);
  write_safetensors((dir_ / "sharded" / "model-00002-of-00002.safetensors").string(), b);
  write_json(dir_ / "sharded" / "model.safetensors.index.json",
             {{"metadata", json::object()}, {"weight_map", map}});
  const Model one = load_hf_encoder(path("one")), sharded = load_hf_encoder(path("sharded"));
  const auto seqs = random_sequences(g, t, 3, one.max_sequence);
  Engine e1(one, 64, 1, Mode::kDense), e2(sharded, 64, 1, Mode::kDense);
  EXPECT_EQ(run(e1, seqs), run(e2, seqs));
}

// Every hostile directory is an Error whose one-line message names the problem.
void expect_error(const std::string& dir, const std::string& needle) {
  try {
    load_hf_encoder(dir);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(HfEncoder, HostileDirectoriesGiveOneLineErrors) {
  auto g = rng();
  Tiny t;
  const SafeTensors w = weights_of(t, g);
  const std::filesystem::path d = dir_ / "m";
  auto with_config = [&](const std::function<void(json&)>& edit) {
    std::filesystem::remove_all(d);
    write_model(d, t, w, false, true);
    json c = config_of(t);
    edit(c);
    write_json(d / "config.json", c);
  };
  with_config([](json& c) { c["hidden_size"] = "sixteen"; });
  expect_error(d.string(), "'hidden_size' is not an integer");
  with_config([](json& c) { c["num_hidden_layers"] = 1000000; });
  expect_error(d.string(), "'num_hidden_layers' is 1000000");
  with_config([](json& c) { c.erase("vocab_size"); });
  expect_error(d.string(), "missing 'vocab_size'");
  with_config([](json& c) { c["model_type"] = "gpt2"; });
  expect_error(d.string(), "model_type 'gpt2' is not supported");
  with_config([](json& c) { c["hidden_act"] = "relu"; });
  expect_error(d.string(), "hidden_act 'relu'");
  with_config([](json& c) { c["num_attention_heads"] = 3; });
  expect_error(d.string(), "not a multiple of num_attention_heads");
  with_config([](json& c) { c["hidden_size"] = 32; });  // the tensors are 16 wide
  expect_error(d.string(), "embeddings.word_embeddings.weight");
  with_config([](json&) {});
  std::ofstream(d / "config.json") << "[1, 2]";
  expect_error(d.string(), "not a JSON object");

  // Shards: an index pointing outside the directory, a truncated shard, a missing shard.
  with_config([](json&) {});
  write_json(d / "model.safetensors.index.json", {{"weight_map", {{"x", "../escape.safetensors"}}}});
  expect_error(d.string(), "not a file name in the directory");
  std::filesystem::remove(d / "model.safetensors.index.json");
  {
    const std::vector<uint8_t> bytes = read_file((d / "model.safetensors").string());
    std::ofstream f(d / "model.safetensors", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() / 2));
  }
  expect_error(d.string(), "model.safetensors");
  std::filesystem::remove(d / "model.safetensors");
  std::ofstream(d / "pytorch_model.bin") << "pickle";
  expect_error(d.string(), "pytorch_model.bin");

  // sentence-transformers modules.
  with_config([](json&) {});
  write_json(d / "1_Pooling" / "config.json", {{"pooling_mode_max_tokens", true}});
  expect_error(d.string(), "pooling_mode_max_tokens");
  with_config([](json&) {});
  write_json(d / "modules.json",
             json::array({{{"type", "sentence_transformers.models.Dense"}, {"path", "2_Dense"}}}));
  expect_error(d.string(), "sentence_transformers.models.Dense");
  with_config([](json&) {});
  write_json(d / "modules.json",
             json::array({{{"type", "sentence_transformers.models.Pooling"}, {"path", "../x"}}}));
  expect_error(d.string(), "leaves the directory");
}

TEST_F(HfEncoder, TokenBatchesAreChecked) {
  auto g = rng();
  Tiny t;
  write_model(dir_ / "m", t, weights_of(t, g), false, true);
  const Model m = load_hf_encoder(path("m"));
  Engine e(m, 30, 1, Mode::kDense);
  std::vector<float> out(64 * t.hidden);
  TokenBatch b;
  b.add({1, 2, static_cast<int32_t>(t.vocab)});
  EXPECT_THROW(e.run_tokens(b, out.data()), Error);  // id outside the vocabulary
  TokenBatch empty;
  EXPECT_THROW(e.run_tokens(empty, out.data()), Error);
  TokenBatch long_seq;
  long_seq.add(std::vector<int32_t>(m.max_sequence + 1, 3));
  EXPECT_THROW(e.run_tokens(long_seq, out.data()), Error);
  TokenBatch too_many;
  for (int i = 0; i < 4; ++i) too_many.add(std::vector<int32_t>(10, 3));
  EXPECT_THROW(e.run_tokens(too_many, out.data()), Error);  // 40 tokens > 30
}

}  // namespace
}  // namespace sparse24::engine
