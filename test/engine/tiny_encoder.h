// A tiny Hugging Face encoder for tests: BERT or MPNet checkpoints written as sentence-transformers
// directories (config.json, safetensors, modules) and a scalar forward pass written from transformers'
// definitions (double accumulation). Used by hf_encoder_test.cc and prune_model_test.cc.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/seed.h"
#include "sparse24/engine.h"
#include "sparse24/io.h"

namespace sparse24::engine {

using json = nlohmann::json;
using sparse24::testing::random_floats;

struct Tiny {
  std::string type = "bert";
  int64_t vocab = 40, hidden = 16, heads = 2, layers = 2, ffn = 32, max_pos = 24, buckets = 32;
  int64_t offset() const { return type == "mpnet" ? 2 : 0; }
};

inline json config_of(const Tiny& t) {
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

inline StTensor st(const std::vector<float>& v, std::vector<int64_t> shape) {
  return to_st(Tensor::from_float(v, std::move(shape)));
}

// The tensors a transformers BertModel / MPNetModel state dict holds, random (plus a pooler, which the
// encoder must ignore).
inline SafeTensors weights_of(const Tiny& t, std::mt19937_64& g) {
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

inline void write_json(const std::filesystem::path& p, const json& j) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << j.dump(2);
}

// A sentence-transformers directory: the model, mean or CLS pooling, optional Normalize.
inline void write_model(const std::filesystem::path& dir, const Tiny& t, const SafeTensors& w, bool cls,
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

inline std::vector<float> get(const SafeTensors& w, const std::string& name) {
  return from_st(w.at(name), name).to_float();
}

// When set, shown every Linear's input (its name prefix, [tokens][in]) as the reference runs.
inline std::function<void(const std::string&, const Mat&)> linear_hook;

inline Mat linear(const SafeTensors& w, const std::string& p, const Mat& x) {
  if (linear_hook) linear_hook(p, x);
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

inline Mat layer_norm(const SafeTensors& w, const std::string& p, Mat x, const Mat* residual, double eps) {
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
inline int64_t bucket_reference(int64_t rel, int64_t buckets) {
  int64_t n = -rel, ret = 0;
  const int64_t half = buckets / 2, max_exact = half / 2;
  if (n < 0) ret += half;
  n = std::abs(n);
  if (n < max_exact) return ret + n;
  const int64_t large = max_exact + static_cast<int64_t>(std::log(static_cast<double>(n) / max_exact) /
                                                         std::log(128.0 / max_exact) * (half - max_exact));
  return ret + std::min(large, half - 1);
}

inline std::vector<float> reference_embedding(const Tiny& t, const SafeTensors& w,
                                              const std::vector<int32_t>& ids, bool cls, bool normalize) {
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

inline std::vector<std::vector<int32_t>> random_sequences(std::mt19937_64& g, const Tiny& t, int count,
                                                          int64_t max_len) {
  std::vector<std::vector<int32_t>> seqs;
  for (int s = 0; s < count; ++s) {
    std::vector<int32_t> ids(1 + g() % max_len);
    for (int32_t& id : ids) id = static_cast<int32_t>(g() % t.vocab);
    seqs.push_back(ids);
  }
  return seqs;
}

inline std::vector<float> run(Engine& e, const std::vector<std::vector<int32_t>>& seqs) {
  TokenBatch b;
  for (const auto& s : seqs) b.add(s);
  std::vector<float> out(seqs.size() * e.output_rows());
  e.run_tokens(b, out.data());
  return out;
}

inline void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

}  // namespace sparse24::engine
