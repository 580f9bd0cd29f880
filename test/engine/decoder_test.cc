// The decoder (decoder.h): each op against a double-precision scalar reference over edge sizes, the whole
// forward pass of a tiny random Llama against the reference forward pass (tiny_decoder.h), prefill +
// step-by-step decoding against full recomputation, 2:4 sparse against the same pruned weights dense, the
// loaders (Hugging Face directory, GGUF) and their errors. Pruning a decoder: decoder_prune_test.cc.
#include "sparse24/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/seed.h"
#include "kernels/gemv.h"
#include "sparse24/compressed.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"
#include "sparse24/prune_model.h"
#include "text/bpe.h"
#include "tiny_decoder.h"

namespace sparse24::engine {
namespace {

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
  // Every head dim rotated, or its first rd only (partial_rotary_factor; the rest left as it is).
  for (const char* type : {"default", "llama3"})
    for (int64_t d : {2, 8, 64})
      for (int64_t rd : {d, d / 2 + d / 2 % 2})
        for (int64_t n : {1, 3, 7}) {
          RopeConfig rc;
          rc.theta = 100000;
          rc.type = type;
          rc.factor = 8;
          rc.original_max_positions = 64;
          const int64_t heads = 3, pos0 = 5;
          const std::vector<float> inv = detail::rope_inv_freq(rc, rd);
          const std::vector<float> table = detail::rope_table(inv, pos0 + n);
          std::vector<float> x = random_floats(g, heads * d * n);
          const std::vector<float> x0 = x;
          detail::rope(x.data(), heads, d, n, pos0, table.data(), rd);
          for (int64_t h = 0; h < heads; ++h)
            for (int64_t j = 0; j < n; ++j) {
              std::vector<double> v(d);
              for (int64_t c = 0; c < d; ++c) v[c] = x0[(h * d + c) * n + j];
              ref_rope(v.data(), rd, pos0 + j, inv);
              for (int64_t c = 0; c < d; ++c)
                ASSERT_NEAR(x[(h * d + c) * n + j], v[c], 2e-6) << type << " d=" << d << " rd=" << rd;
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
  RopeConfig base;
  base.theta = 10000;
  const std::vector<float> plain = detail::rope_inv_freq(base, 128);
  EXPECT_FLOAT_EQ(scaled[0], plain[0]);
  EXPECT_NEAR(scaled[63], plain[63] / 8, 1e-12);
  rc.type = "linear";  // Gemma 3's larger models: every frequency divided by the factor
  const std::vector<float> linear = detail::rope_inv_freq(rc, 128);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(linear[i], plain[i] / 8);
  // longrope (Phi-3): each frequency divided by its own factor, the short or the long ones.
  rc.type = "longrope";
  for (int i = 0; i < 3; ++i) {
    rc.short_factor.push_back(1.0 + i);
    rc.long_factor.push_back(10.0 + i);
  }
  const std::vector<float> shorter = detail::rope_inv_freq(rc, 6),
                           longer = detail::rope_inv_freq(rc, 6, true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(shorter[i], std::pow(10000.0, -2.0 * i / 6) / (1.0 + i), 1e-6);
    EXPECT_NEAR(longer[i], std::pow(10000.0, -2.0 * i / 6) / (10.0 + i), 1e-7);
  }
  EXPECT_THROW(detail::rope_inv_freq(rc, 8), Error);                      // 3 factors for 4 frequencies
  const std::vector<float> table = detail::rope_table(shorter, 5, 1.5f);  // cos and sin scaled
  EXPECT_NEAR(table[(4 * 3 + 1) * 2], 1.5 * std::cos(4.0 * shorter[1]), 1e-6);
  EXPECT_NEAR(table[(4 * 3 + 1) * 2 + 1], 1.5 * std::sin(4.0 * shorter[1]), 1e-6);
  rc.type = "yarn";
  EXPECT_THROW(detail::rope_inv_freq(rc, 8), Error);
}

TEST(DecoderOps, CachedAttentionMatchesReferenceInAnyChunks) {
  SPARSE24_SEED_TRACE();
  auto g = rng(4);
  struct Heads {
    int64_t q, kv;
  };
  for (Heads hs : {Heads{1, 1}, Heads{4, 2}, Heads{9, 3}, Heads{4, 4}, Heads{12, 2}})
    for (int64_t d : {2, 8, 64, 80})
      for (int64_t n : {1, 5, 17, 75, 300})
        for (int threads : {1, 2})
          for (bool half : {false, true}) {
            const int64_t rows = (hs.q + 2 * hs.kv) * d, cap = n + 3;
            std::vector<float> qkv = random_floats(g, rows * n, -2, 2);
            if (half)  // a half cache holds K and V rounded: the reference sees the same values
              for (int64_t r = hs.q * d; r < rows; ++r)
                for (int64_t j = 0; j < n; ++j) qkv[r * n + j] = half_to_float(float_to_half(qkv[r * n + j]));
            // A sliding window (none, 1, 7, or 260: past 256 positions split into spans) and a scale.
            const int64_t window = std::array<int64_t, 4>{0, 1, 7, 260}[g() % 4];
            const float scale = g() % 2 ? 0.0f : 0.37f, softcap = g() % 2 ? 0.0f : 0.9f;
            const std::vector<double> ref = ref_attention(qkv, hs.q, hs.kv, d, n, scale, window, softcap);
            detail::KvCache kv(hs.kv, cap, d, half);
            std::vector<float> scratch(detail::attention_scratch(threads, hs.q, hs.kv, d, cap, half));
            // Chunks of random sizes: pieces of 1-4 tokens (one position at a time; on 2 threads past 256
            // positions with the keys split in spans) and of 8-40 (blocks of queries as GEMMs, across a block
            // edge), at any cache position.
            int64_t pos = 0;
            while (pos < n) {
              const int64_t want =
                  g() % 2 ? 1 + static_cast<int64_t>(g() % 4) : 8 + static_cast<int64_t>(g() % 33);
              const int64_t len = std::min<int64_t>(n - pos, want);
              std::vector<float> part(rows * len), out(hs.q * d * len);
              for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < len; ++j) part[r * len + j] = qkv[r * n + pos + j];
              detail::attention_cached(part.data(), hs.q, len, pos, kv, out.data(), scratch.data(), threads,
                                       {scale, window, softcap});
              for (int64_t r = 0; r < hs.q * d; ++r)
                for (int64_t j = 0; j < len; ++j)
                  ASSERT_NEAR(out[r * len + j], ref[r * n + pos + j], 1e-5)
                      << hs.q << "/" << hs.kv << " d=" << d << " n=" << n << " pos=" << pos
                      << " half=" << half << " window=" << window << " scale=" << scale << " cap=" << softcap;
              pos += len;
            }
            std::vector<float> out(hs.q * d * 4);
            EXPECT_THROW(
                detail::attention_cached(qkv.data(), hs.q, 4, cap - 3, kv, out.data(), scratch.data(), 1),
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

// Biases on every Linear (Llama's attention_bias and mlp_bias; Qwen2's subset) and Qwen3's per-head Q/K
// RMSNorm, dense and 2:4 (fp32, bf16 and int8 kernels carry the bias), in one pass and token by token.
TEST(Decoder, BiasesAndQkNormMatchReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(31);
  Tiny t;
  t.biases = true;
  t.qk_norm = true;
  DecoderModel m = tiny_model(g, t);
  const std::vector<int32_t> ids = random_ids(g, 13, t.vocab);
  for (bool pruned : {false, true}) {
    if (pruned) m.prune_magnitude();
    const std::vector<double> ref = ref_forward(m, ids);
    for (Mode mode : {Mode::kDense, Mode::kSparse})
      for (int threads : {1, 2}) {
        DecoderOptions o;
        o.mode = mode;
        o.threads = threads;
        o.max_context = 32;
        expect_logits_match(m, ids, ref, o);
        // Three tokens, then one at a time against the cache: each step's logits are the reference's.
        Decoder dec(m, o);
        std::vector<float> last(t.vocab);
        dec.forward(ids.data(), 3, last.data());
        for (size_t j = 3; j < ids.size(); ++j) {
          dec.forward(&ids[j], 1, last.data());
          for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(last[v], ref[j * t.vocab + v], 2e-4) << j;
        }
      }
  }
  // bf16 / int8 sparse kernels add the bias too: their logits follow the fp32 ones closely.
  DecoderOptions f32, b16, i8;
  b16.bf16_weights = true;
  i8.int8_weights = true;
  std::vector<float> a(t.vocab), b(t.vocab), c(t.vocab);
  Decoder(m, f32).forward(ids.data(), 1, a.data());
  Decoder(m, b16).forward(ids.data(), 1, b.data());
  Decoder(m, i8).forward(ids.data(), 1, c.data());
  for (int64_t v = 0; v < t.vocab; ++v) {
    EXPECT_NEAR(b[v], a[v], 0.05f + 0.02f * std::fabs(a[v])) << v;
    EXPECT_NEAR(c[v], a[v], 0.05f + 0.02f * std::fabs(a[v])) << v;
  }
}

// Gemma 2's and 3's forward passes (sliding layers of 3 positions beside full ones, with their own RoPE in
// Gemma 3; sandwich norms, GELU, the embedding and score scales, the logit soft cap; Gemma 3's Q/K norms,
// Gemma 2's soft-capped scores), dense and 2:4, in one pass (the GEMM path) and token by token past the
// window (the one-position path), fp32 and half KV caches.
class DecoderGemma : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Gemma2And3, DecoderGemma, ::testing::Values(2, 3));
TEST_P(DecoderGemma, MatchesReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(34);
  Tiny t;
  t.gemma = GetParam();
  t.window = 3;
  t.layers = 3;
  DecoderModel m = tiny_model(g, t);
  const std::vector<int32_t> ids = random_ids(g, 13, t.vocab);
  for (bool pruned : {false, true}) {
    if (pruned) m.prune_magnitude();
    const std::vector<double> ref = ref_forward(m, ids);
    for (bool half : {false, true})
      for (int threads : {1, 2}) {
        DecoderOptions o;
        o.mode = pruned ? Mode::kSparse : Mode::kDense;
        o.threads = threads;
        o.max_context = 32;
        o.kv_half = half;
        const double tol = half ? 0.02 : 2e-4;  // a half cache rounds K and V
        Decoder dec(m, o);
        std::vector<float> all(ids.size() * t.vocab), last(t.vocab);
        dec.forward(ids.data(), static_cast<int64_t>(ids.size()), all.data(), true);
        for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], ref[i], tol) << "logit " << i;
        dec.reset();
        dec.forward(ids.data(), 2, last.data());
        for (size_t j = 2; j < ids.size(); ++j) {
          dec.forward(&ids[j], 1, last.data());
          for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(last[v], ref[j * t.vocab + v], tol) << j;
        }
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

// int8 weights: the 2:4 Linears quantized (quantize_int8, an fp32 scale per 64 positions) and the output head
// too (kernels::quantize_gemv_i8, a scale per 64 of a row): the logits of the reference run on those same
// quantized weights, and not the fp32 ones.
TEST(Decoder, Int8WeightsMatchReferenceOnTheQuantizedWeights) {
  SPARSE24_SEED_TRACE();
  auto g = rng(12);
  const Tiny t;
  DecoderModel m = tiny_model(g, t);
  m.prune_magnitude();
  DecoderModel q = m;  // what the int8 Linears hold
  for (DecoderLayer& L : q.layers)
    for (Gemm* G : {&L.qkv, &L.o, &L.gate_up, &L.down}) G->sparse = quantize_int8(G->sparse, 64);
  // The tied head as the decoder holds it: an untied int8 copy of the table (lookups stay fp32).
  const int64_t groups = (t.hidden + kernels::kGemvI8Group - 1) / kernels::kGemvI8Group;
  std::vector<int8_t> hq(m.embed.size());
  std::vector<float> hs(static_cast<size_t>(t.vocab * groups));
  kernels::quantize_gemv_i8(m.embed.data(), t.vocab, t.hidden, hq.data(), hs.data());
  q.config.tied = false;
  q.head = random_gemm(g, "lm_head", t.vocab, t.hidden);
  for (int64_t r = 0; r < t.vocab; ++r)
    for (int64_t c = 0; c < t.hidden; ++c)
      q.head.dense[r * t.hidden + c] = hq[r * t.hidden + c] * hs[r * groups + c / kernels::kGemvI8Group];
  DecoderOptions o;
  o.int8_weights = true;
  o.max_context = 32;
  DecoderOptions b = o;
  b.int8_weights = false;
  b.bf16_weights = true;
  Decoder dec(m, o), dec16(m, b);
  EXPECT_EQ(dec.sparse_linears(), 4 * t.layers);
  EXPECT_LT(dec.weight_bytes(), dec16.weight_bytes());  // 2:4 values and the head in 1 byte instead of 2
  const std::vector<int32_t> ids = random_ids(g, 10, t.vocab);
  const std::vector<double> ref = ref_forward(q, ids), ref32 = ref_forward(m, ids);
  std::vector<float> all(ids.size() * t.vocab);
  dec.forward(ids.data(), 10, all.data(), true);
  double moved = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_NEAR(all[i], ref[i], 2e-4) << i;
    moved = std::max(moved, std::fabs(ref[i] - ref32[i]));
  }
  EXPECT_GT(moved, 1e-3) << "the quantization did not move the logits: the test cannot tell int8 from fp32";
  dec.reset();  // one token at a time (the memory-bound kernels)
  std::vector<float> last(t.vocab);
  for (int64_t p = 0; p < 10; ++p) dec.forward(&ids[p], 1, last.data());
  for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(last[v], ref[9 * t.vocab + v], 2e-4);
  DecoderOptions both = o;
  both.bf16_weights = true;
  EXPECT_THROW(Decoder(m, both), Error);
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
    // Rewound to 12 of 20 and given other tokens: as if only the first 12 had been given before them.
    inc.reset();
    inc.forward(ids.data(), 20, step.data());
    inc.rewind(12);
    EXPECT_EQ(inc.position(), 12);
    std::vector<int32_t> other(ids.begin(), ids.begin() + 12);
    for (int32_t id : random_ids(g, 5, t.vocab)) other.push_back(id);
    inc.forward(other.data() + 12, 5, step.data());
    std::vector<float> fresh(t.vocab);
    full.reset();
    full.forward(other.data(), 17, fresh.data());
    for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(step[v], fresh[v], 1e-4);
    EXPECT_EQ(inc.reuse_prefix(other.data(), 17), 16);  // all it holds but the last (its logits are needed)
    EXPECT_EQ(inc.position(), 16);
    int64_t shared = 12;  // ids and other share their first 12 (more if a random token repeats ids')
    while (shared < 16 && other[shared] == ids[shared]) ++shared;
    EXPECT_EQ(inc.reuse_prefix(ids.data(), 20), shared);
    EXPECT_THROW(inc.rewind(18), Error);
    EXPECT_THROW(inc.rewind(-1), Error);
  }
}

// Phi-3's longrope over part of each head (Phi-4-mini's partial_rotary_factor): the short factors while the
// sequence holds at most original_max_positions tokens, the long ones for all of it beyond (transformers
// picks them by the sequence's length), cos and sin scaled. In one pass, and token by token across the switch
// (the cache's keys rotated again) and back (rewound below it).
TEST(Decoder, LongRopeOverPartOfEachHead) {
  SPARSE24_SEED_TRACE();
  auto g = rng(35);
  Tiny t;
  t.d = 8;
  DecoderModel m = tiny_model(g, t);
  DecoderConfig& c = m.config;
  c.rotary_dim = 6;  // 3 frequencies per head, 2 dims left as they are
  c.rope.type = "longrope";
  c.rope.short_factor = {1.0, 1.5, 2.0};
  c.rope.long_factor = {4.0, 9.0, 20.0};
  c.rope.original_max_positions = 7;
  c.rope.attention_factor = 1.2;
  const std::vector<int32_t> ids = random_ids(g, 13, t.vocab);
  auto expect_last = [&](const std::vector<float>& got, int64_t len) {
    const std::vector<double> ref = ref_forward(m, std::vector<int32_t>(ids.begin(), ids.begin() + len));
    for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(got[v], ref[(len - 1) * t.vocab + v], 2e-4) << len;
  };
  for (int threads : {1, 2}) {
    DecoderOptions o;
    o.max_context = 32;
    o.threads = threads;
    Decoder dec(m, o);
    std::vector<float> last(t.vocab);
    for (int64_t len : {5, 7, 8, 13}) {
      dec.reset();
      dec.forward(ids.data(), len, last.data());
      expect_last(last, len);
    }
    dec.reset();
    dec.forward(ids.data(), 3, last.data());
    for (int64_t j = 3; j < 13; ++j) {
      dec.forward(&ids[j], 1, last.data());
      expect_last(last, j + 1);
    }
    dec.rewind(5);
    dec.forward(&ids[5], 1, last.data());
    expect_last(last, 6);
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
  expect_logits_match(back, ids, ref);
}

// Each architecture's directory (transformers' names and config fields) loads to the model written: Qwen2
// (Q, K, V biases), Qwen3 (per-head Q/K norms), Mistral (a sliding window of 4 positions over 9 tokens),
// Llama with attention_bias and mlp_bias, Phi-3 (Q, K, V in one tensor and gate, up in another; a window).
TEST_F(HfDecoderDir, ArchitecturesLoadWhatTheyWrote) {
  SPARSE24_SEED_TRACE();
  auto g = rng(32);
  for (const std::string type : {"qwen2", "qwen3", "mistral", "llama", "phi3"}) {
    t_.biases = type == "qwen2" || type == "llama";
    t_.qk_norm = type == "qwen3";
    t_.window = type == "mistral" || type == "phi3" ? 4 : 0;
    t_.fused = type == "phi3";
    DecoderModel m = tiny_model(g, t_);
    json c = config();
    c["model_type"] = type;
    if (type == "qwen2")  // Qwen2: Q, K and V only
      for (DecoderLayer& L : m.layers)
        for (Gemm* gm : {&L.o, &L.gate_up, &L.down}) gm->bias.clear();
    if (type == "llama") c["attention_bias"] = c["mlp_bias"] = true;
    if (type == "mistral" || type == "phi3") c["sliding_window"] = 4;
    if (type == "qwen2") c["sliding_window"] = 8;  // not used without use_sliding_window
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    write(m, c);
    EXPECT_TRUE(is_hf_decoder(dir_.string())) << type;
    const DecoderModel back = load_hf_decoder(dir_.string());
    EXPECT_EQ(back.config.model_type, type);
    EXPECT_EQ(back.config.qk_norm, type == "qwen3");
    EXPECT_EQ(back.config.sliding_window, t_.window) << type;
    EXPECT_EQ(Decoder(back, {}).capacity(), 64) << type;  // a window does not cap the context
    const std::vector<int32_t> ids = random_ids(g, 9, t_.vocab);
    SCOPED_TRACE(type);
    expect_logits_match(back, ids, ref_forward(m, ids));
    if (type == "qwen2") {  // its biases are not optional, nor are Qwen3's norms
      std::filesystem::remove(dir_ / "model.safetensors");
      for (DecoderLayer& L : m.layers) L.qkv.bias.clear();
      write(m, c);
      EXPECT_NE(load_error().find("missing tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos)
          << load_error();
    }
  }
  t_ = Tiny();
}

// Gemma 2 and 3 (Gemma2ForCausalLM's and Gemma3ForCausalLM's names and config fields; norms stored as
// w - 1): the config in transformers 5's form (layer_types, Gemma 3's per-layer-type rope_parameters) and in
// the Hub's older one (Gemma 3's sliding_window_pattern, rope_theta and rope_local_base_freq; Gemma 2's
// every other layer sliding) load to the model written; transformers' defaults for absent fields; refusals.
TEST_F(HfDecoderDir, GemmaLoadsWhatItWrote) {
  SPARSE24_SEED_TRACE();
  auto g = rng(33);
  for (int version : {2, 3}) {
    SCOPED_TRACE(version);
    t_ = Tiny();
    t_.gemma = version;
    t_.window = 3;
    const DecoderModel m = tiny_model(g, t_);
    const json now = gemma_config();
    json old = now;
    old.erase("layer_types");
    if (version == 3) {
      old.erase("rope_parameters");
      old["sliding_window_pattern"] = 2;
      old["rope_theta"] = 100000.0;
      old["rope_local_base_freq"] = 50.0;
      old["rope_scaling"] = nullptr;
    }
    const std::vector<int32_t> ids = random_ids(g, 11, t_.vocab);
    const std::vector<double> ref = ref_forward(m, ids);
    for (const json& cfg : {now, old}) {
      std::filesystem::remove_all(dir_);
      std::filesystem::create_directories(dir_);
      write(m, cfg);
      const DecoderModel back = load_hf_decoder(dir_.string());
      EXPECT_TRUE(back.config.tied && back.config.gelu && back.config.sandwich_norms);
      EXPECT_EQ(back.config.sliding_rope, version == 3);
      EXPECT_EQ(back.config.qk_norm, version == 3);
      EXPECT_EQ(back.config.sliding, (std::vector<bool>{true, false}));
      EXPECT_EQ(back.config.attn_scale, 0.25f);
      EXPECT_EQ(back.config.final_softcap, 3.0f);
      EXPECT_EQ(back.config.attn_softcap, version == 2 ? 1.5f : 0.0f);
      if (version == 3) {
        EXPECT_EQ(back.config.rope_sliding.theta, 50.0);
      }
      expect_logits_match(back, ids, ref);
    }
    // Absent fields take transformers' defaults: a window of 4096, Gemma 2's soft caps 50 and 30.
    json bare = now;
    for (const char* field :
         {"sliding_window", "layer_types", "attn_logit_softcapping", "final_logit_softcapping"})
      bare.erase(field);
    std::filesystem::remove(dir_ / "config.json");
    std::ofstream(dir_ / "config.json") << bare.dump();
    const DecoderConfig c = load_hf_decoder(dir_.string()).config;
    EXPECT_EQ(c.sliding_window, 4096);
    EXPECT_EQ(c.attn_softcap, version == 2 ? 50.0f : 0.0f);
    EXPECT_EQ(c.final_softcap, version == 2 ? 30.0f : 0.0f);
    auto refused = [&](const std::function<void(json&)>& change, const std::string& phrase) {
      json cfg = now;
      change(cfg);
      std::filesystem::remove(dir_ / "config.json");
      std::ofstream(dir_ / "config.json") << cfg.dump();
      EXPECT_NE(load_error().find(phrase), std::string::npos) << load_error();
    };
    refused([](json& j) { j["attn_logit_softcapping"] = -1.0; }, "attn_logit_softcapping");
    refused([](json& j) { j["hidden_activation"] = "gelu"; }, "hidden_activation 'gelu' is not supported");
    refused([](json& j) { j["layer_types"] = {"full_attention"}; }, "'layer_types' is not a list");
    refused([](json& j) { j["layer_types"][0] = "chunked_attention"; }, "a layer type is not");
    refused([](json& j) { j["use_bidirectional_attention"] = true; }, "use_bidirectional_attention");
  }
  t_ = Tiny();
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
  c = config();
  c["rope_parameters"]["partial_rotary_factor"] = 0.75;  // 3 of head_dim 4
  write(m, c);
  EXPECT_NE(load_error().find("partial_rotary_factor gives 3 rotated dims"), std::string::npos)
      << load_error();
  c["rope_parameters"]["partial_rotary_factor"] = 1.0;
  c["rope_parameters"]["rope_type"] = "longrope";  // the 128k Phi-3s
  write(m, c);
  EXPECT_NE(load_error().find("longrope's 'short_factor' is not a list"), std::string::npos) << load_error();
  c["rope_parameters"]["short_factor"] = {1.0, 2.0, 3.0};
  c["rope_parameters"]["long_factor"] = {1.0, 2.0, 3.0};
  write(m, c);
  EXPECT_NE(load_error().find("original_max_position_embeddings"), std::string::npos) << load_error();
  c["original_max_position_embeddings"] = 16;
  write(m, c);
  EXPECT_NE(load_error().find("must have 2 values"), std::string::npos) << load_error();
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

// arch: "llama" (Q's and K's rows in llama.cpp's RoPE order), "qwen2", "qwen3", "gemma2" or "gemma3" (NEOX
// RoPE: as they are).
Gguf tiny_gguf(const DecoderModel& m, const Tiny& t, GgufWriter& w, bool untied = false,
               const std::string& arch = "llama") {
  const std::string a = arch + ".";
  w.g.metadata = {{"general.architecture", GgufValue::of_string(arch)},
                  {a + "block_count", GgufValue::of_int(GgufType::kU32, t.layers)},
                  {a + "context_length", GgufValue::of_int(GgufType::kU32, 64)},
                  {a + "embedding_length", GgufValue::of_int(GgufType::kU32, t.hidden)},
                  {a + "feed_forward_length", GgufValue::of_int(GgufType::kU32, t.ffn)},
                  {a + "attention.head_count", GgufValue::of_int(GgufType::kU32, t.heads)},
                  {a + "attention.head_count_kv", GgufValue::of_int(GgufType::kU32, t.kv)},
                  {a + "attention.key_length", GgufValue::of_int(GgufType::kU32, t.d)},
                  {a + "rope.dimension_count", GgufValue::of_int(GgufType::kU32, t.d)},
                  {a + "rope.freq_base", GgufValue::of_float(GgufType::kF32, 100000.0)},
                  {a + "attention.layer_norm_rms_epsilon", GgufValue::of_float(GgufType::kF32, 1e-5)}};
  // llama.cpp's Gemma keys (its norms are stored as 1 + w, which m holds; Gemma 2's layers slide in turn).
  if (t.gemma != 0) {
    w.g.metadata.push_back({a + "attention.sliding_window", GgufValue::of_int(GgufType::kU32, t.window)});
    w.g.metadata.push_back(
        {a + "final_logit_softcapping", GgufValue::of_float(GgufType::kF32, m.config.final_softcap)});
  }
  if (t.gemma == 2)
    w.g.metadata.push_back(
        {a + "attn_logit_softcapping", GgufValue::of_float(GgufType::kF32, m.config.attn_softcap)});
  if (t.gemma == 3) {
    std::vector<int64_t> sliding;
    for (bool s : m.config.sliding) sliding.push_back(s);
    w.g.metadata.push_back(
        {a + "attention.sliding_window_pattern", GgufValue::of_ints(GgufType::kBool, sliding)});
    w.g.metadata.push_back(
        {a + "rope.freq_base_swa", GgufValue::of_float(GgufType::kF32, m.config.rope_sliding.theta)});
  }
  const bool permute = arch == "llama";
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
    if (t.gemma != 0) {
      w.add(p + "post_attention_norm.weight", L.attn_out_norm, {H});
      w.add(p + "post_ffw_norm.weight", L.ffn_out_norm, {H});
    }
    auto rope_rows = [&](const std::vector<float>& v, int64_t heads, int64_t cols) {
      return permute ? permute_for_gguf(v, heads, t.d, cols) : v;
    };
    w.add(p + "attn_q.weight", rope_rows(rows(qkv, 0, q), t.heads, H), {q, H});
    w.add(p + "attn_k.weight", rope_rows(rows(qkv, q, kv), t.kv, H), {kv, H});
    w.add(p + "attn_v.weight", rows(qkv, q + kv, kv), {kv, H});
    w.add(p + "attn_output.weight", weights_of(L.o), {H, q});
    w.add(p + "ffn_gate.weight", rows(gu, 0, t.ffn), {t.ffn, H});
    w.add(p + "ffn_up.weight", rows(gu, t.ffn, t.ffn), {t.ffn, H});
    w.add(p + "ffn_down.weight", weights_of(L.down), {H, t.ffn});
    if (!L.q_norm.empty()) {
      w.add(p + "attn_q_norm.weight", L.q_norm, {t.d});
      w.add(p + "attn_k_norm.weight", L.k_norm, {t.d});
    }
    auto bias = [&](const std::string& name, const Gemm& gm, int64_t from, int64_t count, int64_t heads) {
      if (gm.bias.empty()) return;
      const std::vector<float> b(gm.bias.begin() + from, gm.bias.begin() + from + count);
      w.add(p + name + ".bias", heads > 0 ? rope_rows(b, heads, 1) : b, {count});
    };
    bias("attn_q", L.qkv, 0, q, t.heads);
    bias("attn_k", L.qkv, q, kv, t.kv);
    bias("attn_v", L.qkv, q + kv, kv, 0);
    bias("attn_output", L.o, 0, H, 0);
    bias("ffn_gate", L.gate_up, 0, t.ffn, 0);
    bias("ffn_up", L.gate_up, t.ffn, t.ffn, 0);
    bias("ffn_down", L.down, 0, H, 0);
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
    expect_logits_match(back, ids, ref);
  }
}

// A tokenizer in the GGUF metadata: byte-level BPE over single letters with one merge, a CONTROL token that
// the post-processor puts first.
void add_tiny_tokenizer(Gguf& f, int64_t vocab) {
  std::vector<std::string> tokens = {"<|s|>"};
  std::vector<int64_t> types = {3};
  for (int64_t i = 1; i + 1 < vocab; ++i) {
    tokens.push_back(std::string(1, static_cast<char>('A' + i - 1)));
    types.push_back(1);
  }
  tokens.push_back("AB");
  types.push_back(1);
  f.metadata.emplace_back("tokenizer.ggml.model", GgufValue::of_string("gpt2"));
  f.metadata.emplace_back("tokenizer.ggml.pre", GgufValue::of_string("smollm"));
  f.metadata.emplace_back("tokenizer.ggml.tokens", GgufValue::of_strings(tokens));
  f.metadata.emplace_back("tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, types));
  f.metadata.emplace_back("tokenizer.ggml.merges", GgufValue::of_strings({"A B"}));
  f.metadata.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::of_int(GgufType::kU32, 0));
  f.metadata.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::of_int(GgufType::kU32, 1));
  f.metadata.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::of_int(GgufType::kBool, 1));
}

// `convert MODEL.gguf DIR` and prune-model on a GGUF: the directory loads to the same model (logits) and its
// tokenizer.json to the same tokenizer (ids, specials); an existing output is refused.
TEST_F(HfDecoderDir, GgufConvertsToAHuggingFaceDirectory) {
  SPARSE24_SEED_TRACE();
  auto g = rng(23);
  const DecoderModel m = tiny_model(g, t_);
  const std::vector<int32_t> ids = random_ids(g, 9, t_.vocab);
  const std::vector<double> ref = ref_forward(m, ids);
  for (bool untied : {false, true}) {
    GgufWriter w;
    Gguf file = tiny_gguf(m, t_, w, untied);
    add_tiny_tokenizer(file, t_.vocab);
    const std::string gguf = (dir_ / "tiny.gguf").string(),
                      out = (dir_ / (untied ? "untied" : "tied")).string();
    write_file_atomic(gguf, encode_gguf(file));
    gguf_to_hf_dir(gguf, out);
    const DecoderModel back = load_hf_decoder(out);
    EXPECT_EQ(back.config.tied, !untied);
    EXPECT_EQ(weights_of(back.layers[1].qkv), weights_of(m.layers[1].qkv));
    expect_logits_match(back, ids, ref);
    const text::ByteBpe want = text::ByteBpe::from_gguf(file, "tiny.gguf"),
                        got = text::ByteBpe::from_dir(out);
    for (const char* s : {"ABBA", "<|s|>AB CAB 12", "A\nB\tAAB", ""})
      EXPECT_EQ(got.encode(s), want.encode(s)) << s;
    EXPECT_EQ(got.encode("AB").front(), 0);  // the post-processor's BOS
    EXPECT_EQ(got.bos_id(), 0);
    EXPECT_EQ(got.eos_id(), 1);
    EXPECT_EQ(got.vocab_size(), want.vocab_size());
    try {
      gguf_to_hf_dir(gguf, out);
      ADD_FAILURE() << "an existing directory was overwritten";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
    }
  }
}

// Qwen2 (Q, K, V biases) and Qwen3 (Q/K norms) as llama.cpp writes them (their RoPE rows as they are): the
// model, and the Hugging Face directory gguf_to_hf_dir makes of the file.
TEST_F(HfDecoderDir, GgufQwenAndGemmaFilesLoadAndConvert) {
  SPARSE24_SEED_TRACE();
  auto g = rng(33);
  for (const std::string arch : {"qwen2", "qwen3", "gemma2", "gemma3"}) {
    Tiny t;
    t.biases = arch == "qwen2";
    t.qk_norm = arch == "qwen3";
    t.gemma = arch == "gemma2" ? 2 : arch == "gemma3" ? 3 : 0;
    t.window = t.gemma != 0 ? 3 : 0;
    t.layers = t.gemma != 0 ? 3 : t.layers;
    DecoderModel m = tiny_model(g, t);
    // llama.cpp scales Gemma's scores by 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim but in the
    // 27Bs).
    if (t.gemma != 0) m.config.attn_scale = 1.0f / std::sqrt(static_cast<float>(t.d));
    for (DecoderLayer& L : m.layers)
      for (Gemm* gm : {&L.o, &L.gate_up, &L.down}) gm->bias.clear();
    GgufWriter w;
    Gguf file = tiny_gguf(m, t, w, false, arch);
    const std::vector<int32_t> ids = random_ids(g, 9, t.vocab);
    const std::vector<double> ref = ref_forward(m, ids);
    SCOPED_TRACE(arch);
    const DecoderModel back = load_gguf_decoder(file, "tiny.gguf");
    const std::string type = arch == "gemma3" ? "gemma3_text" : arch;
    EXPECT_EQ(back.config.model_type, type);
    expect_logits_match(back, ids, ref);
    add_tiny_tokenizer(file, t.vocab);
    const std::string gguf = (dir_ / (arch + ".gguf")).string(), out = (dir_ / arch).string();
    write_file_atomic(gguf, encode_gguf(file));
    gguf_to_hf_dir(gguf, out);
    const json config = json::parse(std::ifstream(out + "/config.json"));
    EXPECT_EQ(config["model_type"], type);
    EXPECT_EQ(config["architectures"][0], arch == "qwen2"    ? "Qwen2ForCausalLM"
                                          : arch == "qwen3"  ? "Qwen3ForCausalLM"
                                          : arch == "gemma2" ? "Gemma2ForCausalLM"
                                                             : "Gemma3ForCausalLM");
    expect_logits_match(load_hf_decoder(out), ids, ref);  // Gemma's norms written back as w - 1
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
  // A Gemma 3 file's layer count is bounded before its sliding-layer list is built (a fuzzer's input once
  // asked for 2^40 entries).
  Tiny gt;
  gt.gemma = 3;
  gt.window = 3;
  const DecoderModel gm = tiny_model(g, gt);
  GgufWriter gw;
  Gguf gf = tiny_gguf(gm, gt, gw, false, "gemma3");
  set(gf, "gemma3.block_count", GgufValue::of_int(GgufType::kU64, int64_t{1} << 40));
  set(gf, "gemma3.attention.sliding_window_pattern", GgufValue::of_int(GgufType::kU32, 6));
  try {
    load_gguf_decoder(gf, "tiny.gguf");
    ADD_FAILURE() << "a 2^40-layer Gemma 3 file loaded";
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("num_hidden_layers"), std::string::npos) << x.what();
  }
  std::vector<uint8_t> nan(t.hidden * sizeof(float), 0xff);
  e = error_of([&](Gguf& f) { f.tensors[1].bytes = nan; });
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
}

}  // namespace
}  // namespace sparse24::engine
