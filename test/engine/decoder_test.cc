// The decoder (decoder.h): each op against a double-precision scalar reference over edge sizes, the whole
// forward pass of a tiny random Llama against a reference forward pass written here from transformers'
// modeling_llama.py, prefill + step-by-step decoding against full recomputation, 2:4 sparse against the
// same pruned weights dense, and the loader's errors on bad directories.
#include "sparse24/decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/seed.h"
#include "sparse24/compressed.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"
#include "sparse24/prune_model.h"

namespace sparse24::engine {
namespace {

using sparse24::testing::random_floats;
using sparse24::testing::rng;
using json = nlohmann::json;

// ---- references (double, token-major, straight from the definitions) ----------------------------------

std::vector<double> ref_rms(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

// rotate_half: x' = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
void ref_rope(double* v, int64_t d, int64_t pos, const std::vector<float>& inv) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = static_cast<double>(pos) * inv[i], c = std::cos(a), s = std::sin(a);
    const double x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

TEST(DecoderOps, RmsNormMatchesReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(1);
  for (int64_t rows : {1, 3, 7, 16, 64, 65, 576})
    for (int64_t n : {1, 2, 5, 17}) {
      const std::vector<float> x = random_floats(g, rows * n, -3, 3), w = random_floats(g, rows, 0.5f, 2);
      std::vector<float> y(x.size());
      detail::rms_norm(x.data(), rows, n, w.data(), 1e-5f, y.data());
      for (int64_t j = 0; j < n; ++j) {
        std::vector<double> col(rows);
        for (int64_t r = 0; r < rows; ++r) col[r] = x[r * n + j];
        const std::vector<double> ref = ref_rms(col, w, 1e-5);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(y[r * n + j], ref[r], 1e-5 * (1 + std::abs(ref[r]))) << rows << "x" << n;
      }
    }
}

TEST(DecoderOps, SwigluMatchesReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(2);
  for (int64_t ffn : {1, 3, 8, 33})
    for (int64_t n : {1, 4, 9}) {
      const std::vector<float> gu = random_floats(g, 2 * ffn * n, -8, 8);
      std::vector<float> y(ffn * n);
      detail::swiglu(gu.data(), ffn, n, y.data());
      for (int64_t i = 0; i < ffn * n; ++i) {
        const double a = gu[i], b = gu[ffn * n + i], ref = a / (1 + std::exp(-a)) * b;
        ASSERT_NEAR(y[i], ref, 1e-5 * (1 + std::abs(ref)));
      }
    }
}

TEST(DecoderOps, RopeMatchesReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(3);
  for (const char* type : {"default", "llama3"})
    for (int64_t d : {2, 8, 64})
      for (int64_t n : {1, 3, 7}) {
        RopeConfig rc;
        rc.theta = 100000;
        rc.type = type;
        rc.factor = 8;
        rc.original_max_positions = 64;
        const int64_t heads = 3, pos0 = 5;
        const std::vector<float> inv = detail::rope_inv_freq(rc, d);
        const std::vector<float> table = detail::rope_table(inv, pos0 + n);
        std::vector<float> x = random_floats(g, heads * d * n);
        const std::vector<float> x0 = x;
        detail::rope(x.data(), heads, d, n, pos0, table.data());
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t j = 0; j < n; ++j) {
            std::vector<double> v(d);
            for (int64_t c = 0; c < d; ++c) v[c] = x0[(h * d + c) * n + j];
            ref_rope(v.data(), d, pos0 + j, inv);
            for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(x[(h * d + c) * n + j], v[c], 2e-6) << type << d;
          }
      }
}

TEST(DecoderOps, RopeFrequencies) {
  RopeConfig rc;
  rc.theta = 10000;
  const std::vector<float> inv = detail::rope_inv_freq(rc, 8);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 8), 1e-7);
  // llama3: the highest frequency (shortest wavelength) is kept, the lowest divided by the factor.
  rc.type = "llama3";
  rc.factor = 8;
  rc.original_max_positions = 8192;
  const std::vector<float> scaled = detail::rope_inv_freq(rc, 128);
  const std::vector<float> plain = detail::rope_inv_freq(RopeConfig{10000, "default"}, 128);
  EXPECT_FLOAT_EQ(scaled[0], plain[0]);
  EXPECT_NEAR(scaled[63], plain[63] / 8, 1e-12);
  rc.type = "yarn";
  EXPECT_THROW(detail::rope_inv_freq(rc, 8), Error);
}

// Naive causal GQA over all tokens at once (token-major q [n][heads][d], k, v [n][kv][d]).
std::vector<double> ref_attention(const std::vector<float>& qkv, int64_t heads, int64_t kvh, int64_t d,
                                  int64_t n) {
  auto at = [&](int64_t row, int64_t j) { return static_cast<double>(qkv[row * n + j]); };
  std::vector<double> out(heads * d * n);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = h / (heads / kvh);
      std::vector<double> s(i + 1);
      double mx = -1e300, sum = 0;
      for (int64_t t = 0; t <= i; ++t) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += at(h * d + c, i) * at(heads * d + g * d + c, t);
        s[t] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[t]);
      }
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t t = 0; t <= i; ++t) acc += s[t] * at((heads + kvh) * d + g * d + c, t);
        out[(h * d + c) * n + i] = acc / sum;
      }
    }
  return out;
}

TEST(DecoderOps, CachedAttentionMatchesReferenceInAnyChunks) {
  SPARSE24_SEED_TRACE();
  auto g = rng(4);
  struct Heads {
    int64_t q, kv;
  };
  for (Heads hs : {Heads{1, 1}, Heads{4, 2}, Heads{9, 3}, Heads{4, 4}})
    for (int64_t d : {2, 8, 64})
      for (int64_t n : {1, 5, 17})
        for (int threads : {1, 2}) {
          const int64_t rows = (hs.q + 2 * hs.kv) * d, cap = n + 3;
          const std::vector<float> qkv = random_floats(g, rows * n, -2, 2);
          const std::vector<double> ref = ref_attention(qkv, hs.q, hs.kv, d, n);
          std::vector<float> kc(hs.kv * cap * d), vc(kc.size()), scratch(threads * cap);
          // Chunks of random sizes: a prefill, then pieces, then single tokens.
          int64_t pos = 0;
          while (pos < n) {
            const int64_t len = std::min<int64_t>(n - pos, 1 + static_cast<int64_t>(g() % 4));
            std::vector<float> part(rows * len), out(hs.q * d * len);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < len; ++j) part[r * len + j] = qkv[r * n + pos + j];
            detail::attention_cached(part.data(), hs.q, hs.kv, d, len, pos, cap, kc.data(), vc.data(),
                                     out.data(), scratch.data(), threads);
            for (int64_t r = 0; r < hs.q * d; ++r)
              for (int64_t j = 0; j < len; ++j)
                ASSERT_NEAR(out[r * len + j], ref[r * n + pos + j], 1e-5)
                    << hs.q << "/" << hs.kv << " d=" << d << " n=" << n << " pos=" << pos;
            pos += len;
          }
          std::vector<float> out(hs.q * d);
          EXPECT_THROW(detail::attention_cached(qkv.data(), hs.q, hs.kv, d, 4, cap - 3, cap, kc.data(),
                                                vc.data(), out.data(), scratch.data(), 1),
                       Error);
        }
}

TEST(DecoderSample, GreedyAndNucleus) {
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f};
  uint64_t st = 7;
  EXPECT_EQ(sample_token(logits.data(), 4, 0.0f, 1.0f, st), 1);
  // top_p small: only the most likely token survives.
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits.data(), 4, 1.0f, 0.01f, st), 1);
  int seen3 = 0;
  for (int i = 0; i < 200; ++i) seen3 += sample_token(logits.data(), 4, 1.0f, 1.0f, st) == 3;
  EXPECT_GT(seen3, 40);
}

// ---- a tiny random Llama --------------------------------------------------------------------------------

struct Tiny {
  int64_t vocab = 37, hidden = 24, layers = 2, heads = 6, kv = 2, d = 4, ffn = 40;
};

Gemm random_gemm(std::mt19937_64& g, const std::string& name, int64_t m, int64_t k) {
  Gemm r;
  r.name = name;
  r.m = m;
  r.k = k;
  r.dense = random_floats(g, m * k, -0.3f, 0.3f);
  return r;
}

DecoderModel tiny_model(std::mt19937_64& g, const Tiny& t) {
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
    m.layers.push_back(std::move(L));
  }
  return m;
}

std::vector<float> weights_of(const Gemm& g) { return g.pruned ? decompress(g.sparse).to_float() : g.dense; }

// Shown each Linear's input (layer, 0 QKV / 1 O / 2 gate-up / 3 down, one token's input).
using RefHook = std::function<void(int64_t layer, int which, const std::vector<double>& x)>;

// The whole forward pass in double, token-major, every token's logits.
std::vector<double> ref_forward(const DecoderModel& m, const std::vector<int32_t>& ids,
                                const RefHook& hook = {}) {
  const DecoderConfig& c = m.config;
  const int64_t n = static_cast<int64_t>(ids.size()), H = c.hidden, d = c.head_dim;
  const std::vector<float> inv = detail::rope_inv_freq(c.rope, d);
  std::vector<std::vector<double>> h(n, std::vector<double>(H));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < H; ++r) h[j][r] = m.embed[ids[j] * H + r];
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
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t k = 0; k < g.k; ++k) y[r] += w[r * g.k + k] * x[k];
    return y;
  };
  for (const DecoderLayer& L : m.layers) {
    const int64_t rows = (c.heads + 2 * c.kv_heads) * d;
    std::vector<float> qkv(rows * n);  // feature-major, for ref_attention
    for (int64_t j = 0; j < n; ++j) {
      std::vector<double> y = matvec(L.qkv, ref_rms(h[j], L.attn_norm, c.eps));
      for (int64_t hd = 0; hd < c.heads + c.kv_heads; ++hd) ref_rope(y.data() + hd * d, d, j, inv);
      for (int64_t r = 0; r < rows; ++r) qkv[r * n + j] = static_cast<float>(y[r]);
    }
    const std::vector<double> ctx = ref_attention(qkv, c.heads, c.kv_heads, d, n);
    for (int64_t j = 0; j < n; ++j) {
      std::vector<double> a(c.heads * d);
      for (int64_t r = 0; r < c.heads * d; ++r) a[r] = ctx[r * n + j];
      const std::vector<double> o = matvec(L.o, a);
      for (int64_t r = 0; r < H; ++r) h[j][r] += o[r];
      const std::vector<double> gu = matvec(L.gate_up, ref_rms(h[j], L.ffn_norm, c.eps));
      std::vector<double> act(c.ffn);
      for (int64_t i = 0; i < c.ffn; ++i) act[i] = gu[i] / (1 + std::exp(-gu[i])) * gu[c.ffn + i];
      const std::vector<double> dn = matvec(L.down, act);
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
  return logits;
}

std::vector<int32_t> random_ids(std::mt19937_64& g, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(g() % static_cast<uint64_t>(vocab));
  return ids;
}

TEST(Decoder, ForwardMatchesReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(5);
  const Tiny t;
  DecoderModel m = tiny_model(g, t);
  for (bool pruned : {false, true}) {
    if (pruned) m.prune_magnitude();
    for (Mode mode : {Mode::kDense, Mode::kSparse})
      for (int threads : {1, 2}) {
        DecoderOptions o;
        o.mode = mode;
        o.threads = threads;
        o.max_context = 32;
        Decoder dec(m, o);
        EXPECT_EQ(dec.sparse_linears(), pruned && mode == Mode::kSparse ? 4 * t.layers : 0);
        const std::vector<int32_t> ids = random_ids(g, 11, t.vocab);
        const std::vector<double> ref = ref_forward(m, ids);
        std::vector<float> all(ids.size() * t.vocab);
        dec.forward(ids.data(), static_cast<int64_t>(ids.size()), all.data(), /*all=*/true);
        for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], ref[i], 2e-4) << "logit " << i;
      }
  }
}

// bf16 weights (the 2:4 Linears and the output head, tied or not): on weights that bf16 holds exactly, the
// same logits as the reference.
TEST(Decoder, Bf16WeightsMatchReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(10);
  const Tiny t;
  for (bool tied : {true, false}) {
    DecoderModel m = tiny_model(g, t);
    auto round = [](std::vector<float>& v) {
      for (float& x : v) x = bf16_to_float(float_to_bf16(x));
    };
    round(m.embed);
    for (DecoderLayer& L : m.layers)
      for (Gemm* G : {&L.qkv, &L.o, &L.gate_up, &L.down}) round(G->dense);
    if (!tied) {
      m.config.tied = false;
      m.head = random_gemm(g, "lm_head", t.vocab, t.hidden);
      round(m.head.dense);
    }
    m.prune_magnitude();
    DecoderOptions o;
    o.bf16_weights = true;
    o.max_context = 32;
    DecoderOptions f32 = o;
    f32.bf16_weights = false;
    Decoder dec(m, o), dec32(m, f32);  // (dec32: fp32 weights, for the byte count)
    EXPECT_EQ(dec.sparse_linears(), 4 * t.layers);
    // The head's bytes halve (the linears' values too).
    EXPECT_LT(dec.weight_bytes(), dec32.weight_bytes() * 3 / 4);
    const std::vector<int32_t> ids = random_ids(g, 10, t.vocab);
    const std::vector<double> ref = ref_forward(m, ids);
    std::vector<float> all(ids.size() * t.vocab);
    dec.forward(ids.data(), 10, all.data(), true);
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_NEAR(all[i], ref[i], 2e-4) << (tied ? "tied " : "untied ") << i;
    // One token at a time (the GEMV path) gives the same last logits.
    dec.reset();
    std::vector<float> last(t.vocab);
    for (int64_t p = 0; p < 10; ++p) dec.forward(&ids[p], 1, last.data());
    for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(last[v], ref[9 * t.vocab + v], 2e-4);
  }
}

TEST(Decoder, IncrementalDecodingEqualsFullRecomputation) {
  SPARSE24_SEED_TRACE();
  auto g = rng(6);
  const Tiny t;
  DecoderModel m = tiny_model(g, t);
  m.prune_magnitude();
  for (Mode mode : {Mode::kDense, Mode::kSparse}) {
    DecoderOptions o;
    o.mode = mode;
    o.max_context = 40;
    Decoder inc(m, o), full(m, o);
    const std::vector<int32_t> ids = random_ids(g, 20, t.vocab);
    std::vector<float> step(t.vocab), whole(ids.size() * t.vocab);
    full.forward(ids.data(), static_cast<int64_t>(ids.size()), whole.data(), true);
    inc.forward(ids.data(), 7, step.data());  // prefill 7, then one at a time
    for (int64_t p = 6; p < static_cast<int64_t>(ids.size()); ++p) {
      if (p > 6) inc.forward(&ids[p], 1, step.data());
      for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(step[v], whole[p * t.vocab + v], 1e-4) << p;
    }
    EXPECT_EQ(inc.position(), 20);
    inc.reset();
    inc.forward(ids.data(), 20, step.data());
    for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(step[v], whole[19 * t.vocab + v], 1e-4);
    EXPECT_THROW(inc.forward(ids.data(), 21, step.data()), Error);  // 20 + 21 > 40
    const int32_t bad = static_cast<int32_t>(t.vocab);
    inc.reset();
    EXPECT_THROW(inc.forward(&bad, 1, step.data()), Error);
  }
}

// Perplexity: whole windows only, every token but a window's first scored from the reference's logits.
TEST(Decoder, PerplexityMatchesReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(9);
  const Tiny t;
  DecoderModel m = tiny_model(g, t);
  m.prune_magnitude();
  const std::vector<int32_t> ids = random_ids(g, 27, t.vocab);
  const int64_t ctx = 8;
  double nll = 0;
  for (int64_t w = 0; w < 3; ++w) {  // 27 tokens: 3 windows of 8, the last 3 tokens left out
    const std::vector<int32_t> win(ids.begin() + w * ctx, ids.begin() + (w + 1) * ctx);
    const std::vector<double> ref = ref_forward(m, win);
    for (int64_t j = 0; j + 1 < ctx; ++j) {
      double mx = -1e300, sum = 0;
      for (int64_t v = 0; v < t.vocab; ++v) mx = std::max(mx, ref[j * t.vocab + v]);
      for (int64_t v = 0; v < t.vocab; ++v) sum += std::exp(ref[j * t.vocab + v] - mx);
      nll += std::log(sum) + mx - ref[j * t.vocab + win[j + 1]];
    }
  }
  DecoderOptions o;
  o.max_context = 16;
  Decoder dec(m, o);
  int64_t calls = 0;
  const Perplexity p = perplexity(dec, ids, ctx, [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 3);
    EXPECT_EQ(done, ++calls);
  });
  EXPECT_EQ(p.windows, 3);
  EXPECT_EQ(p.scored, 21);
  EXPECT_NEAR(p.mean_nll, nll / 21, 1e-5);
  EXPECT_NEAR(p.perplexity, std::exp(nll / 21), 1e-4 * p.perplexity);
  EXPECT_EQ(dec.position(), 0);
  EXPECT_THROW(perplexity(dec, std::vector<int32_t>(ids.begin(), ids.begin() + 7), ctx), Error);  // no window
  EXPECT_THROW(perplexity(dec, ids, 17), Error);  // longer than the context
  EXPECT_THROW(perplexity(dec, ids, 1), Error);
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
  // Writes the model's weights under transformers' names (Q, K, V and gate, up split again).
  void write(const DecoderModel& m, const json& cfg, bool drop_one = false, bool extra = false) {
    SafeTensors st;
    auto add = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
      st.add(name, to_st(Tensor::from_float(v, shape)));
    };
    add("model.embed_tokens.weight", m.embed, {t_.vocab, t_.hidden});
    if (!drop_one) add("model.norm.weight", m.norm, {t_.hidden});
    if (extra) add("model.unexpected.weight", m.norm, {t_.hidden});
    for (int64_t l = 0; l < t_.layers; ++l) {
      const DecoderLayer& L = m.layers[l];
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", L.attn_norm, {t_.hidden});
      add(p + "post_attention_layernorm.weight", L.ffn_norm, {t_.hidden});
      const std::vector<float> qkv = weights_of(L.qkv), gu = weights_of(L.gate_up);
      const int64_t H = t_.hidden, q = t_.heads * t_.d, kv = t_.kv * t_.d;
      auto rows = [&](const std::vector<float>& w, int64_t from, int64_t count) {
        return std::vector<float>(w.begin() + from * H, w.begin() + (from + count) * H);
      };
      add(p + "self_attn.q_proj.weight", rows(qkv, 0, q), {q, H});
      add(p + "self_attn.k_proj.weight", rows(qkv, q, kv), {kv, H});
      add(p + "self_attn.v_proj.weight", rows(qkv, q + kv, kv), {kv, H});
      add(p + "self_attn.o_proj.weight", weights_of(L.o), {H, q});
      add(p + "mlp.gate_proj.weight", rows(gu, 0, t_.ffn), {t_.ffn, H});
      add(p + "mlp.up_proj.weight", rows(gu, t_.ffn, t_.ffn), {t_.ffn, H});
      add(p + "mlp.down_proj.weight", weights_of(L.down), {H, t_.ffn});
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

TEST_F(HfDecoderDir, LoadsWhatItWrote) {
  SPARSE24_SEED_TRACE();
  auto g = rng(7);
  const DecoderModel m = tiny_model(g, t_);
  write(m, config());
  EXPECT_TRUE(is_hf_decoder(dir_.string()));
  const DecoderModel back = load_hf_decoder(dir_.string());
  EXPECT_EQ(back.config.kv_heads, t_.kv);
  EXPECT_EQ(back.config.rope.theta, 100000.0);
  const std::vector<int32_t> ids = random_ids(g, 9, t_.vocab);
  const std::vector<double> ref = ref_forward(m, ids);
  Decoder dec(back, {});
  std::vector<float> all(ids.size() * t_.vocab);
  dec.forward(ids.data(), 9, all.data(), true);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], ref[i], 2e-4);
}

TEST_F(HfDecoderDir, OneLineErrors) {
  auto g = rng(8);
  const DecoderModel m = tiny_model(g, t_);
  json c = config();
  c["model_type"] = "gpt2";
  write(m, c);
  EXPECT_NE(load_error().find("model_type 'gpt2'"), std::string::npos) << load_error();
  EXPECT_FALSE(is_hf_decoder(dir_.string()));
  c = config();
  c["rope_parameters"]["rope_type"] = "yarn";
  write(m, c);
  EXPECT_NE(load_error().find("rope type 'yarn'"), std::string::npos) << load_error();
  c = config();
  c["num_key_value_heads"] = 4;
  write(m, c);
  EXPECT_NE(load_error().find("num_key_value_heads"), std::string::npos) << load_error();
  c = config();
  c["hidden_act"] = "gelu";
  write(m, c);
  EXPECT_NE(load_error().find("hidden_act"), std::string::npos) << load_error();
  write(m, config(), /*drop_one=*/true);
  EXPECT_NE(load_error().find("missing tensor 'model.norm.weight'"), std::string::npos) << load_error();
  write(m, config(), false, /*extra=*/true);
  EXPECT_NE(load_error().find("'model.unexpected.weight' is not used"), std::string::npos) << load_error();
  c = config();
  c["hidden_size"] = 25;
  write(m, c);
  EXPECT_NE(load_error().find("model.embed_tokens.weight"), std::string::npos) << load_error();
  for (const std::string& e : {load_error()}) EXPECT_EQ(e.find('\n'), std::string::npos);
}

// ---- one-shot pruning of a decoder (prune_model.h) -------------------------------------------------------

class PruneDecoder : public HfDecoderDir {
 protected:
  // The checkpoint's weight of `g` (a DecoderLayer GEMM) as the loader joins it, from a pruned directory.
  static std::vector<float> joined(const DecoderModel& m, int64_t l, int which) {
    const DecoderLayer& L = m.layers[l];
    return weights_of(which == 0 ? L.qkv : which == 1 ? L.o : which == 2 ? L.gate_up : L.down);
  }
  static Gemm& gemm(DecoderModel& m, int64_t l, int which) {
    DecoderLayer& L = m.layers[l];
    return which == 0 ? L.qkv : which == 1 ? L.o : which == 2 ? L.gate_up : L.down;
  }
  std::vector<std::vector<int32_t>> sequences(std::mt19937_64& g, int count) {
    std::vector<std::vector<int32_t>> s;
    for (int i = 0; i < count; ++i) s.push_back(random_ids(g, 5 + i * 3, t_.vocab));
    return s;
  }
};

// Wanda, layer by layer: each layer's Linears see the inputs the earlier layers, already pruned, give them.
// The direct computation: the double reference collects the inputs on the weights pruned so far, Wanda
// prunes that layer, and on to the next.
TEST_F(PruneDecoder, WandaCalibratesLayerByLayerOnThePrunedModel) {
  SPARSE24_SEED_TRACE();
  auto g = rng(11);
  t_.layers = 3;
  DecoderModel m = tiny_model(g, t_);
  write(m, config());
  const auto seqs = sequences(g, 5);
  HfDir d = read_hf_dir(dir_.string());
  PruneModelOptions o;
  o.method = PruneMethod::kWanda;
  o.calibration_ids = seqs;
  const PruneModelReport r = prune_hf_decoder(d, o);
  EXPECT_EQ(r.weights.size(), static_cast<size_t>(7 * t_.layers));
  EXPECT_EQ(r.calibration_sequences, 5);
  const DecoderModel got = load_hf_decoder(d);
  for (int64_t l = 0; l < t_.layers; ++l) {
    std::map<int, std::vector<double>> sumsq;
    for (const auto& s : seqs)
      ref_forward(m, s, [&](int64_t layer, int which, const std::vector<double>& x) {
        if (layer != l) return;
        auto& v = sumsq[which];
        v.resize(x.size(), 0.0);
        for (size_t c = 0; c < x.size(); ++c) v[c] += x[c] * x[c];
      });
    for (int which = 0; which < 4; ++which) {
      Gemm& G = gemm(m, l, which);
      std::vector<float> norms(static_cast<size_t>(G.k));
      for (int64_t c = 0; c < G.k; ++c) norms[c] = static_cast<float>(std::sqrt(sumsq.at(which)[c]));
      const std::vector<float> before = G.dense;
      apply_mask(G.dense.data(), wanda_mask(G.dense.data(), G.m, G.k, norms));
      const std::vector<float> w = joined(got, l, which);
      int decided = 0;
      for (int64_t row = 0; row < G.m; ++row)
        for (int64_t c0 = 0; c0 < G.k; c0 += 4) {
          std::vector<double> score;
          for (int64_t c = c0; c < c0 + 4; ++c) score.push_back(std::fabs(before[row * G.k + c]) * norms[c]);
          std::sort(score.begin(), score.end());
          if (score[2] - score[1] < 1e-4 * score[2]) continue;  // a near tie: float and double may differ
          ++decided;
          for (int64_t c = c0; c < c0 + 4; ++c)
            ASSERT_EQ(w[row * G.k + c], G.dense[row * G.k + c]) << "layer " << l << " linear " << which;
        }
      EXPECT_GT(decided, G.m * G.k / 4 * 9 / 10);
    }
  }
}

// Permutations: the O Linear's columns with V's rows (within heads, one permutation per V head for the
// query heads that share it), down's columns with gate's and up's rows. Undone, the weights are the
// originals pruned; the permuted model computes what the undone one does.
TEST_F(PruneDecoder, PermutationsKeepTheFunction) {
  SPARSE24_SEED_TRACE();
  auto g = rng(12);
  t_.hidden = 32;
  t_.heads = 4;
  t_.kv = 2;
  t_.d = 8;
  t_.ffn = 48;
  const DecoderModel m = tiny_model(g, t_);
  write(m, config());
  HfDir d = read_hf_dir(dir_.string());
  PruneModelOptions o;
  o.method = PruneMethod::kWanda;
  o.permute = true;
  o.permute_seconds = 0.2;
  o.calibration_ids = sequences(g, 4);
  const PruneModelReport r = prune_hf_decoder(d, o);
  DecoderModel u = load_hf_decoder(d);  // becomes the undone model
  const DecoderModel pruned = load_hf_decoder(d);
  const int64_t H = t_.hidden, d_ = t_.d, group = t_.heads / t_.kv, q = t_.heads * d_, kv = t_.kv * d_;
  int permuted = 0;
  for (const PrunedWeight& pw : r.weights) {
    const bool o_proj = pw.name.find("o_proj") != std::string::npos,
               down = pw.name.find("down_proj") != std::string::npos;
    ASSERT_EQ(!pw.perm.empty(), o_proj || down) << pw.name << ": " << pw.permutation;
    if (pw.perm.empty()) continue;
    ++permuted;
    EXPECT_GE(pw.kept_permuted, pw.kept_identity - 1e-9) << pw.name;
    const int64_t l = std::stoll(pw.name.substr(std::string("model.layers.").size()));
    const int64_t k = static_cast<int64_t>(pw.perm.size());
    std::vector<int64_t> inverse(k);
    for (int64_t c = 0; c < k; ++c) inverse[pw.perm[c]] = c;
    DecoderLayer& L = u.layers[l];
    if (o_proj) {
      EXPECT_NE(pw.permutation.find("v_proj"), std::string::npos) << pw.permutation;
      // Within heads, and the same inside each group of query heads.
      for (int64_t c = 0; c < k; ++c) {
        ASSERT_EQ(pw.perm[c] / d_, c / d_) << "left its head";
        ASSERT_EQ(pw.perm[c] % d_, pw.perm[(c / (d_ * group)) * d_ * group + c % d_] % d_) << "group differs";
      }
      std::vector<float> ow = weights_of(L.o);
      permute_columns(ow.data(), H, k, inverse);
      L.o.dense = ow;
      L.o.pruned = false;
      // V's rows: kv head v took the permutation of its query heads.
      std::vector<float> qkv = weights_of(L.qkv);
      std::vector<int64_t> vinv(kv);
      for (int64_t v = 0; v < t_.kv; ++v)
        for (int64_t c = 0; c < d_; ++c)
          vinv[v * d_ + c] = inverse[v * group * d_ + c] - v * group * d_ + v * d_;
      permute_rows(qkv.data() + (q + kv) * H, kv, H, vinv);
      L.qkv.dense = qkv;
      L.qkv.pruned = false;
    } else {
      EXPECT_NE(pw.permutation.find("gate_proj"), std::string::npos) << pw.permutation;
      EXPECT_NE(pw.permutation.find("up_proj"), std::string::npos) << pw.permutation;
      std::vector<float> dw = weights_of(L.down), gu = weights_of(L.gate_up);
      permute_columns(dw.data(), H, k, inverse);
      permute_rows(gu.data(), k, H, inverse);
      permute_rows(gu.data() + k * H, k, H, inverse);
      L.down.dense = dw;
      L.down.pruned = false;
      L.gate_up.dense = gu;
      L.gate_up.pruned = false;
    }
  }
  EXPECT_EQ(permuted, 2 * t_.layers);
  // Undone, every kept weight is an original one at its original place.
  for (int64_t l = 0; l < t_.layers; ++l)
    for (int which = 0; which < 4; ++which) {
      const std::vector<float> orig = joined(m, l, which), undone = joined(u, l, which);
      for (size_t i = 0; i < orig.size(); ++i)
        if (undone[i] != 0) {
          ASSERT_EQ(undone[i], orig[i]) << "layer " << l << " linear " << which;
        }
    }
  const std::vector<int32_t> ids = random_ids(g, 12, t_.vocab);
  const std::vector<double> want = ref_forward(u, ids);
  for (Mode mode : {Mode::kDense, Mode::kSparse}) {
    DecoderOptions dopt;
    dopt.mode = mode;
    Decoder dec(pruned, dopt);
    EXPECT_EQ(dec.sparse_linears(), mode == Mode::kSparse ? 4 * t_.layers : 0);
    std::vector<float> all(ids.size() * t_.vocab);
    dec.forward(ids.data(), 12, all.data(), true);
    for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], want[i], 2e-4) << "logit " << i;
  }
}

// SparseGPT minimizes each Linear's output error on its calibration inputs: below magnitude's on the
// first layer, whose inputs both methods see alike.
TEST_F(PruneDecoder, SparseGptBeatsMagnitudeOnItsObjective) {
  SPARSE24_SEED_TRACE();
  auto g = rng(13);
  const DecoderModel m = tiny_model(g, t_);
  write(m, config());
  const auto seqs = sequences(g, 6);
  HfDir sg = read_hf_dir(dir_.string());
  HfDir mag = sg;
  PruneModelOptions o;
  o.method = PruneMethod::kSparseGpt;
  o.calibration_ids = seqs;
  prune_hf_decoder(sg, o);
  o.method = PruneMethod::kMagnitude;
  prune_hf_decoder(mag, o);
  const DecoderModel a = load_hf_decoder(sg), b = load_hf_decoder(mag);
  std::map<int, std::vector<std::vector<double>>> inputs;
  for (const auto& s : seqs)
    ref_forward(m, s, [&](int64_t layer, int which, const std::vector<double>& x) {
      if (layer == 0) inputs[which].push_back(x);
    });
  for (int which = 0; which < 4; ++which) {
    const std::vector<float> W = joined(m, 0, which), A = joined(a, 0, which), B = joined(b, 0, which);
    const size_t in = inputs.at(which)[0].size(), out = W.size() / in;
    double ea = 0, eb = 0;
    for (const auto& x : inputs.at(which))
      for (size_t r = 0; r < out; ++r) {
        double da = 0, db = 0;
        for (size_t c = 0; c < in; ++c) {
          da += (static_cast<double>(W[r * in + c]) - A[r * in + c]) * x[c];
          db += (static_cast<double>(W[r * in + c]) - B[r * in + c]) * x[c];
        }
        ea += da * da;
        eb += db * db;
      }
    EXPECT_LT(ea, eb) << "linear " << which;
  }
}

TEST_F(PruneDecoder, BadRequestsAreErrors) {
  auto g = rng(14);
  write(tiny_model(g, t_), config());
  HfDir d = read_hf_dir(dir_.string());
  auto error_of = [&](const PruneModelOptions& o) -> std::string {
    HfDir copy = d;
    try {
      prune_hf_decoder(copy, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  PruneModelOptions o;
  o.method = PruneMethod::kSparseGpt;
  EXPECT_NE(error_of(o).find("calibration"), std::string::npos) << error_of(o);
  o.calibration_ids = {random_ids(g, 65, t_.vocab)};  // longer than max_position_embeddings (64)
  EXPECT_NE(error_of(o).find("64 positions"), std::string::npos) << error_of(o);
  o.calibration_ids = {{0, 1, static_cast<int32_t>(t_.vocab)}};
  EXPECT_NE(error_of(o).find("outside the vocabulary"), std::string::npos) << error_of(o);
  o.method = PruneMethod::kMagnitude;
  o.targets = "nothing-like-this";
  EXPECT_NE(error_of(o).find("no weight matched"), std::string::npos) << error_of(o);
  // Pruned once, nothing is left to prune.
  o.targets = "";
  prune_hf_decoder(d, o);
  EXPECT_NE(error_of(o).find("no weight matched"), std::string::npos) << error_of(o);
}

// ---- GGUF -----------------------------------------------------------------------------------------------

// The tiny model as llama.cpp writes it: its tensor names, F32, Q's and K's rows in its RoPE order.
struct GgufWriter {
  std::vector<std::vector<uint8_t>> storage;
  Gguf g;
  void add(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
    storage.emplace_back(v.size() * sizeof(float));
    std::memcpy(storage.back().data(), v.data(), storage.back().size());
    GgufTensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.type = static_cast<uint32_t>(GgmlType::kF32);
    t.bytes = storage.back();
    g.tensors.push_back(t);
  }
};

// transformers' rotate_half rows -> llama.cpp's: file row 2i + s of a head is row s * d/2 + i.
std::vector<float> permute_for_gguf(const std::vector<float>& w, int64_t heads, int64_t d, int64_t cols) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t c = 0; c < cols; ++c)
          out[(h * d + 2 * i + s) * cols + c] = w[(h * d + s * d / 2 + i) * cols + c];
  return out;
}

Gguf tiny_gguf(const DecoderModel& m, const Tiny& t, GgufWriter& w, bool untied = false) {
  w.g.metadata = {{"general.architecture", GgufValue::of_string("llama")},
                  {"llama.block_count", GgufValue::of_int(GgufType::kU32, t.layers)},
                  {"llama.context_length", GgufValue::of_int(GgufType::kU32, 64)},
                  {"llama.embedding_length", GgufValue::of_int(GgufType::kU32, t.hidden)},
                  {"llama.feed_forward_length", GgufValue::of_int(GgufType::kU32, t.ffn)},
                  {"llama.attention.head_count", GgufValue::of_int(GgufType::kU32, t.heads)},
                  {"llama.attention.head_count_kv", GgufValue::of_int(GgufType::kU32, t.kv)},
                  {"llama.attention.key_length", GgufValue::of_int(GgufType::kU32, t.d)},
                  {"llama.rope.dimension_count", GgufValue::of_int(GgufType::kU32, t.d)},
                  {"llama.rope.freq_base", GgufValue::of_float(GgufType::kF32, 100000.0)},
                  {"llama.attention.layer_norm_rms_epsilon", GgufValue::of_float(GgufType::kF32, 1e-5)}};
  const int64_t H = t.hidden, q = t.heads * t.d, kv = t.kv * t.d;
  w.add("token_embd.weight", m.embed, {t.vocab, H});
  w.add("output_norm.weight", m.norm, {H});
  if (untied) w.add("output.weight", m.embed, {t.vocab, H});
  for (int64_t l = 0; l < t.layers; ++l) {
    const DecoderLayer& L = m.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    const std::vector<float> qkv = weights_of(L.qkv), gu = weights_of(L.gate_up);
    auto rows = [&](const std::vector<float>& v, int64_t from, int64_t count) {
      return std::vector<float>(v.begin() + from * H, v.begin() + (from + count) * H);
    };
    w.add(p + "attn_norm.weight", L.attn_norm, {H});
    w.add(p + "ffn_norm.weight", L.ffn_norm, {H});
    w.add(p + "attn_q.weight", permute_for_gguf(rows(qkv, 0, q), t.heads, t.d, H), {q, H});
    w.add(p + "attn_k.weight", permute_for_gguf(rows(qkv, q, kv), t.kv, t.d, H), {kv, H});
    w.add(p + "attn_v.weight", rows(qkv, q + kv, kv), {kv, H});
    w.add(p + "attn_output.weight", weights_of(L.o), {H, q});
    w.add(p + "ffn_gate.weight", rows(gu, 0, t.ffn), {t.ffn, H});
    w.add(p + "ffn_up.weight", rows(gu, t.ffn, t.ffn), {t.ffn, H});
    w.add(p + "ffn_down.weight", weights_of(L.down), {H, t.ffn});
  }
  return w.g;
}

TEST(GgufDecoder, LoadsWhatLlamaCppWrites) {
  SPARSE24_SEED_TRACE();
  auto g = rng(21);
  const Tiny t;
  const DecoderModel m = tiny_model(g, t);
  const std::vector<int32_t> ids = random_ids(g, 9, t.vocab);
  const std::vector<double> ref = ref_forward(m, ids);
  for (bool untied : {false, true}) {
    GgufWriter w;
    const Gguf file = tiny_gguf(m, t, w, untied);
    // Through the bytes, as from a file.
    const std::vector<uint8_t> bytes = encode_gguf(file);
    const DecoderModel back =
        load_gguf_decoder(parse_gguf(bytes.data(), bytes.size(), "tiny.gguf"), "tiny.gguf");
    EXPECT_EQ(back.config.tied, !untied);
    EXPECT_EQ(back.config.kv_heads, t.kv);
    EXPECT_EQ(back.config.rope.theta, 100000.0);
    EXPECT_EQ(weights_of(back.layers[1].qkv), weights_of(m.layers[1].qkv));  // the RoPE order undone
    Decoder dec(back, {});
    std::vector<float> all(ids.size() * t.vocab);
    dec.forward(ids.data(), 9, all.data(), true);
    for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], ref[i], 2e-4);
  }
}

TEST(GgufDecoder, OneLineErrors) {
  auto g = rng(22);
  const Tiny t;
  const DecoderModel m = tiny_model(g, t);
  auto error_of = [&](const std::function<void(Gguf&)>& edit) -> std::string {
    GgufWriter w;
    Gguf f = tiny_gguf(m, t, w);
    edit(f);
    try {
      load_gguf_decoder(f, "tiny.gguf");
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.what();
    }
    return "";
  };
  auto set = [](Gguf& f, const std::string& key, GgufValue v) {
    for (auto& [k, old] : f.metadata)
      if (k == key) {
        old = std::move(v);
        return;
      }
    f.metadata.emplace_back(key, std::move(v));
  };
  std::string e = error_of([&](Gguf& f) { set(f, "general.architecture", GgufValue::of_string("gpt2")); });
  EXPECT_NE(e.find("architecture 'gpt2'"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { set(f, "llama.rope.scaling.type", GgufValue::of_string("yarn")); });
  EXPECT_NE(e.find("rope scaling 'yarn'"), std::string::npos) << e;
  e = error_of(
      [&](Gguf& f) { set(f, "llama.attention.head_count_kv", GgufValue::of_int(GgufType::kU32, 4)); });
  EXPECT_NE(e.find("num_key_value_heads"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { set(f, "llama.block_count", GgufValue::of_string("two")); });
  EXPECT_NE(e.find("llama.block_count"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { set(f, "llama.rope.dimension_count", GgufValue::of_int(GgufType::kU32, 2)); });
  EXPECT_NE(e.find("part of a head"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors.erase(f.tensors.begin() + 1); });
  EXPECT_NE(e.find("missing tensor 'output_norm.weight'"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors.push_back(f.tensors[1]), f.tensors.back().name = "blk.9.extra"; });
  EXPECT_NE(e.find("'blk.9.extra' is not used"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors[1].shape = {t.hidden / 2, 2}; });
  EXPECT_NE(e.find("'output_norm.weight' has shape [12, 2], expected [24]"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors[0].type = static_cast<uint32_t>(GgmlType::kQ5_K); });
  EXPECT_NE(e.find("Q5_K"), std::string::npos) << e;
  EXPECT_NE(e.find("token_embd.weight"), std::string::npos) << e;
  std::vector<uint8_t> nan(t.hidden * sizeof(float), 0xff);
  e = error_of([&](Gguf& f) { f.tensors[1].bytes = nan; });
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
}

}  // namespace
}  // namespace sparse24::engine
