// A tiny random Llama (or Gemma 3) for the decoder tests (decoder_test.cc, decoder_prune_test.cc): the
// model, a double-precision reference forward pass written from transformers' modeling_llama.py and
// modeling_gemma3.py (with a hook that sees each Linear's input), and a fixture that writes the model as a
// Hugging Face directory.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../common/seed.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24::engine {

using sparse24::testing::random_floats;
using sparse24::testing::rng;
using json = nlohmann::json;

// ---- references (double, token-major, straight from the definitions) ----------------------------------

inline std::vector<double> ref_rms(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

// rotate_half over the first d dims: x' = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1); cos
// and sin times `scale` (longrope's attention factor).
inline void ref_rope(double* v, int64_t d, int64_t pos, const std::vector<float>& inv, double scale = 1) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = static_cast<double>(pos) * inv[i], c = std::cos(a) * scale, s = std::sin(a) * scale;
    const double x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

// Naive causal GQA over all tokens at once (feature-major qkv [(heads + 2 kvh) * d, n]); scale 0: 1/sqrt(d);
// window > 0: each token sees the last `window` positions; softcap > 0: scores = cap tanh(scores / cap).
inline std::vector<double> ref_attention(const std::vector<float>& qkv, int64_t heads, int64_t kvh, int64_t d,
                                         int64_t n, double scale = 0, int64_t window = 0,
                                         double softcap = 0) {
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto at = [&](int64_t row, int64_t j) { return static_cast<double>(qkv[row * n + j]); };
  std::vector<double> out(heads * d * n);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = h / (heads / kvh), t0 = window > 0 ? std::max<int64_t>(0, i + 1 - window) : 0;
      std::vector<double> s(i + 1 - t0);
      double mx = -1e300, sum = 0;
      for (int64_t t = t0; t <= i; ++t) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += at(h * d + c, i) * at(heads * d + g * d + c, t);
        s[t - t0] = dot * scale;
        if (softcap > 0) s[t - t0] = std::tanh(s[t - t0] / softcap) * softcap;
        mx = std::max(mx, s[t - t0]);
      }
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t t = t0; t <= i; ++t) acc += s[t - t0] * at((heads + kvh) * d + g * d + c, t);
        out[(h * d + c) * n + i] = acc / sum;
      }
    }
  return out;
}

// ---- a tiny random Llama --------------------------------------------------------------------------------

struct Tiny {
  int64_t vocab = 37, hidden = 24, layers = 2, heads = 6, kv = 2, d = 4, ffn = 40;
  bool biases = false;   // every GEMM has a bias (Llama's attention_bias and mlp_bias)
  bool qk_norm = false;  // Qwen3's per-head Q/K RMSNorm
  // 2 or 3: Gemma 2 or 3 (sandwich norms, GELU, scales, a logit soft cap, sliding layers; Gemma 2's scores
  // soft-capped, Gemma 3's Q/K norms and the sliding layers' own RoPE).
  int gemma = 0;
  int64_t window = 0;  // > 0: a sliding window (Gemma: layers 0, 2, ...; else every layer)
  bool fused = false;  // written as Phi-3 writes it: qkv_proj and gate_up_proj tensors
};

inline Gemm random_gemm(std::mt19937_64& g, const std::string& name, int64_t m, int64_t k) {
  Gemm r;
  r.name = name;
  r.m = m;
  r.k = k;
  r.dense = random_floats(g, m * k, -0.3f, 0.3f);
  return r;
}

inline DecoderModel tiny_model(std::mt19937_64& g, const Tiny& t) {
  DecoderModel m;
  DecoderConfig& c = m.config;
  c.model_type = "llama";
  c.vocab = t.vocab;
  c.hidden = t.hidden;
  c.layers = t.layers;
  c.heads = t.heads;
  c.kv_heads = t.kv;
  c.head_dim = t.d;
  c.ffn = t.ffn;
  c.max_positions = 64;
  c.eps = 1e-5f;
  c.rope.theta = 100000;
  c.qk_norm = t.qk_norm || t.gemma == 3;
  c.sliding_window = t.window;
  if (t.gemma != 0) {
    c.model_type = t.gemma == 2 ? "gemma2" : "gemma3_text";
    c.gelu = c.sandwich_norms = true;
    c.embed_scale = std::sqrt(static_cast<float>(t.hidden));
    c.attn_scale = 0.25f;  // query_pre_attn_scalar 16
    c.final_softcap = 3.0f;
    for (int64_t l = 0; l < t.layers; ++l) c.sliding.push_back(l % 2 == 0);
    if (t.gemma == 2) c.attn_softcap = 1.5f;  // small enough to bend these scores
    c.sliding_rope = t.gemma == 3 && t.window > 0;
    c.rope_sliding.theta = 50;
  }
  m.embed = random_floats(g, t.vocab * t.hidden);
  m.norm = random_floats(g, t.hidden, 0.5f, 1.5f);
  for (int64_t l = 0; l < t.layers; ++l) {
    DecoderLayer L;
    L.attn_norm = random_floats(g, t.hidden, 0.5f, 1.5f);
    L.ffn_norm = random_floats(g, t.hidden, 0.5f, 1.5f);
    L.qkv = random_gemm(g, "qkv", (t.heads + 2 * t.kv) * t.d, t.hidden);
    L.o = random_gemm(g, "o", t.hidden, t.heads * t.d);
    L.gate_up = random_gemm(g, "gate_up", 2 * t.ffn, t.hidden);
    L.down = random_gemm(g, "down", t.hidden, t.ffn);
    if (t.biases)
      for (Gemm* gm : {&L.qkv, &L.o, &L.gate_up, &L.down}) gm->bias = random_floats(g, gm->m, -0.5f, 0.5f);
    if (c.qk_norm) {
      L.q_norm = random_floats(g, t.d, 0.5f, 1.5f);
      L.k_norm = random_floats(g, t.d, 0.5f, 1.5f);
    }
    if (c.sandwich_norms) {
      L.attn_out_norm = random_floats(g, t.hidden, 0.5f, 1.5f);
      L.ffn_out_norm = random_floats(g, t.hidden, 0.5f, 1.5f);
    }
    m.layers.push_back(std::move(L));
  }
  return m;
}

inline std::vector<float> weights_of(const Gemm& g) {
  return g.pruned ? decompress(g.sparse).to_float() : g.dense;
}

// Shown each Linear's input (layer, 0 QKV / 1 O / 2 gate-up / 3 down, one token's input).
using RefHook = std::function<void(int64_t layer, int which, const std::vector<double>& x)>;

// The whole forward pass in double, token-major, every token's logits.
inline std::vector<double> ref_forward(const DecoderModel& m, const std::vector<int32_t>& ids,
                                       const RefHook& hook = {}) {
  const DecoderConfig& c = m.config;
  const int64_t n = static_cast<int64_t>(ids.size()), H = c.hidden, d = c.head_dim;
  // RoPE over the first rd dims of a head; longrope's long factors for a sequence longer than its original
  // context (transformers picks them by the sequence's length).
  const int64_t rd = c.rotary_dim > 0 ? c.rotary_dim : d;
  const bool long_rope = c.rope.type == "longrope" && n > c.rope.original_max_positions;
  const std::vector<float> inv = detail::rope_inv_freq(c.rope, rd, long_rope);
  const std::vector<float> inv_sliding = detail::rope_inv_freq(c.rope_sliding, rd);
  std::vector<std::vector<double>> h(n, std::vector<double>(H));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < H; ++r) h[j][r] = m.embed[ids[j] * H + r] * static_cast<double>(c.embed_scale);
  int64_t layer = 0;
  auto matvec = [&](const Gemm& g, const std::vector<double>& x) {
    if (hook)
      hook(layer,
           &g == &m.layers[layer].qkv       ? 0
           : &g == &m.layers[layer].o       ? 1
           : &g == &m.layers[layer].gate_up ? 2
                                            : 3,
           x);
    const std::vector<float> w = weights_of(g);
    std::vector<double> y(g.m, 0.0);
    for (int64_t r = 0; r < g.m; ++r) {
      for (int64_t k = 0; k < g.k; ++k) y[r] += w[r * g.k + k] * x[k];
      if (!g.bias.empty()) y[r] += g.bias[r];
    }
    return y;
  };
  for (const DecoderLayer& L : m.layers) {
    const bool sliding = c.sliding_window > 0 && (c.sliding.empty() || c.sliding[layer]);
    const int64_t rows = (c.heads + 2 * c.kv_heads) * d;
    std::vector<float> qkv(rows * n);  // feature-major, for ref_attention
    for (int64_t j = 0; j < n; ++j) {
      std::vector<double> y = matvec(L.qkv, ref_rms(h[j], L.attn_norm, c.eps));
      for (int64_t hd = 0; hd < c.heads + c.kv_heads; ++hd) {
        if (c.qk_norm) {  // Qwen3: RMSNorm over the head, then RoPE
          const std::vector<double> head(y.begin() + hd * d, y.begin() + (hd + 1) * d);
          const std::vector<double> normed = ref_rms(head, hd < c.heads ? L.q_norm : L.k_norm, c.eps);
          std::copy(normed.begin(), normed.end(), y.begin() + hd * d);
        }
        if (sliding && c.sliding_rope)
          ref_rope(y.data() + hd * d, rd, j, inv_sliding);
        else
          ref_rope(y.data() + hd * d, rd, j, inv, c.rope.attention_factor);
      }
      for (int64_t r = 0; r < rows; ++r) qkv[r * n + j] = static_cast<float>(y[r]);
    }
    const std::vector<double> ctx = ref_attention(qkv, c.heads, c.kv_heads, d, n, c.attn_scale,
                                                  sliding ? c.sliding_window : 0, c.attn_softcap);
    for (int64_t j = 0; j < n; ++j) {
      std::vector<double> a(c.heads * d);
      for (int64_t r = 0; r < c.heads * d; ++r) a[r] = ctx[r * n + j];
      std::vector<double> o = matvec(L.o, a);
      if (c.sandwich_norms) o = ref_rms(o, L.attn_out_norm, c.eps);
      for (int64_t r = 0; r < H; ++r) h[j][r] += o[r];
      const std::vector<double> gu = matvec(L.gate_up, ref_rms(h[j], L.ffn_norm, c.eps));
      std::vector<double> act(c.ffn);
      for (int64_t i = 0; i < c.ffn; ++i) {
        const double x = gu[i];
        const double gate = c.gelu
                                ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                                : x / (1 + std::exp(-x));
        act[i] = gate * gu[c.ffn + i];
      }
      std::vector<double> dn = matvec(L.down, act);
      if (c.sandwich_norms) dn = ref_rms(dn, L.ffn_out_norm, c.eps);
      for (int64_t r = 0; r < H; ++r) h[j][r] += dn[r];
    }
    ++layer;
  }
  std::vector<double> logits(n * c.vocab, 0.0);
  const std::vector<float> head = c.tied ? m.embed : weights_of(m.head);
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<double> x = ref_rms(h[j], m.norm, c.eps);
    for (int64_t v = 0; v < c.vocab; ++v)
      for (int64_t r = 0; r < H; ++r) logits[j * c.vocab + v] += head[v * H + r] * x[r];
  }
  if (c.final_softcap > 0)
    for (double& v : logits) v = std::tanh(v / c.final_softcap) * c.final_softcap;
  return logits;
}

inline std::vector<int32_t> random_ids(std::mt19937_64& g, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(g() % static_cast<uint64_t>(vocab));
  return ids;
}

// The decoder's logits at every position of `ids` against the reference's (2e-4).
inline void expect_logits_match(const DecoderModel& m, const std::vector<int32_t>& ids,
                                const std::vector<double>& ref, const DecoderOptions& o = {}) {
  Decoder dec(m, o);
  std::vector<float> all(ids.size() * static_cast<size_t>(m.config.vocab));
  dec.forward(ids.data(), static_cast<int64_t>(ids.size()), all.data(), true);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], ref[i], 2e-4) << "logit " << i;
}

// ---- the loader ------------------------------------------------------------------------------------------

class HfDecoderDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sparse24_decoder_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  json config() const {
    return {{"model_type", "llama"},
            {"vocab_size", t_.vocab},
            {"hidden_size", t_.hidden},
            {"num_hidden_layers", t_.layers},
            {"num_attention_heads", t_.heads},
            {"num_key_value_heads", t_.kv},
            {"head_dim", t_.d},
            {"intermediate_size", t_.ffn},
            {"rms_norm_eps", 1e-5},
            {"max_position_embeddings", 64},
            {"tie_word_embeddings", true},
            {"rope_parameters", {{"rope_theta", 100000.0}, {"rope_type", "default"}}}};
  }
  // Gemma's config.json for t_ (gemma and window set) in transformers 5's form: tied by default, layer types
  // (and Gemma 3's per-layer-type RoPE) as tiny_model makes them.
  json gemma_config() const {
    json c = config();
    c.erase("tie_word_embeddings");
    c["model_type"] = t_.gemma == 2 ? "gemma2" : "gemma3_text";
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["query_pre_attn_scalar"] = 16;
    c["final_logit_softcapping"] = 3.0;
    c["attn_logit_softcapping"] = t_.gemma == 2 ? json(1.5) : json(nullptr);
    c["sliding_window"] = t_.window;
    c["layer_types"] = json::array();
    for (int64_t l = 0; l < t_.layers; ++l)
      c["layer_types"].push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
    if (t_.gemma == 3)
      c["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 100000.0}}},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 50.0}}}};
    return c;
  }
  // Writes the model's weights under transformers' names (Q, K, V and gate, up split again).
  void write(const DecoderModel& m, const json& cfg, bool drop_one = false, bool extra = false) {
    SafeTensors st;
    auto add = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
      st.add(name, to_st(Tensor::from_float(v, shape)));
    };
    // Gemma stores its RMSNorm weights as w - 1.
    auto norm = [&](const std::string& name, std::vector<float> v) {
      if (t_.gemma != 0)
        for (float& x : v) x -= 1.0f;
      const auto size = static_cast<int64_t>(v.size());
      add(name, v, {size});
    };
    add("model.embed_tokens.weight", m.embed, {t_.vocab, t_.hidden});
    if (!drop_one) norm("model.norm.weight", m.norm);
    if (extra) add("model.unexpected.weight", m.norm, {t_.hidden});
    for (int64_t l = 0; l < t_.layers; ++l) {
      const DecoderLayer& L = m.layers[l];
      const std::string p = "model.layers." + std::to_string(l) + ".";
      norm(p + "input_layernorm.weight", L.attn_norm);
      if (t_.gemma != 0) {
        norm(p + "post_attention_layernorm.weight", L.attn_out_norm);
        norm(p + "pre_feedforward_layernorm.weight", L.ffn_norm);
        norm(p + "post_feedforward_layernorm.weight", L.ffn_out_norm);
      } else {
        norm(p + "post_attention_layernorm.weight", L.ffn_norm);
      }
      const std::vector<float> qkv = weights_of(L.qkv), gu = weights_of(L.gate_up);
      const int64_t H = t_.hidden, q = t_.heads * t_.d, kv = t_.kv * t_.d;
      auto rows = [&](const std::vector<float>& w, int64_t from, int64_t count) {
        return std::vector<float>(w.begin() + from * H, w.begin() + (from + count) * H);
      };
      if (t_.fused) {
        add(p + "self_attn.qkv_proj.weight", qkv, {q + 2 * kv, H});
        add(p + "mlp.gate_up_proj.weight", gu, {2 * t_.ffn, H});
      } else {
        add(p + "self_attn.q_proj.weight", rows(qkv, 0, q), {q, H});
        add(p + "self_attn.k_proj.weight", rows(qkv, q, kv), {kv, H});
        add(p + "self_attn.v_proj.weight", rows(qkv, q + kv, kv), {kv, H});
        add(p + "mlp.gate_proj.weight", rows(gu, 0, t_.ffn), {t_.ffn, H});
        add(p + "mlp.up_proj.weight", rows(gu, t_.ffn, t_.ffn), {t_.ffn, H});
      }
      add(p + "self_attn.o_proj.weight", weights_of(L.o), {H, q});
      add(p + "mlp.down_proj.weight", weights_of(L.down), {H, t_.ffn});
      if (!L.q_norm.empty()) {
        norm(p + "self_attn.q_norm.weight", L.q_norm);
        norm(p + "self_attn.k_norm.weight", L.k_norm);
      }
      // Biases as far as the architecture has them (Qwen2: Q, K and V only).
      auto bias = [&](const std::string& name, const Gemm& g, int64_t from, int64_t count) {
        if (!g.bias.empty())
          add(p + name + ".bias", {g.bias.begin() + from, g.bias.begin() + from + count}, {count});
      };
      bias("self_attn.q_proj", L.qkv, 0, q);
      bias("self_attn.k_proj", L.qkv, q, kv);
      bias("self_attn.v_proj", L.qkv, q + kv, kv);
      bias("self_attn.o_proj", L.o, 0, H);
      bias("mlp.gate_proj", L.gate_up, 0, t_.ffn);
      bias("mlp.up_proj", L.gate_up, t_.ffn, t_.ffn);
      bias("mlp.down_proj", L.down, 0, H);
    }
    write_safetensors((dir_ / "model.safetensors").string(), st);
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
  }
  std::string load_error() {
    try {
      load_hf_decoder(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
  Tiny t_;
};

}  // namespace sparse24::engine
