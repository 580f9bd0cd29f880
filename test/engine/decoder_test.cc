// The decoder (decoder.h): each op against a double-precision scalar reference over edge sizes, the whole
// forward pass of a tiny random Llama against the reference forward pass (tiny_decoder.h), prefill +
// step-by-step decoding against full recomputation, 2:4 sparse against the same pruned weights dense. The
// loaders: decoder_load_test.cc; pruning a decoder: decoder_prune_test.cc.
#include "sparse24/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "../common/seed.h"
#include "engine/gguf_names.h"
#include "kernels/gemv.h"
#include "sparse24/compressed.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/prune.h"
#include "sparse24/spmm.h"
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

// rope_freqs.weight as llama.cpp's converter computes it from rope_scaling "llama3" (its loop, in double).
std::vector<float> converter_rope_factors(double theta, int dim, double factor, double low, double high,
                                          double original) {
  std::vector<float> out;
  for (int i = 0; i < dim; i += 2) {
    const double wavelen = 2 * M_PI * std::pow(theta, static_cast<double>(i) / dim);
    if (wavelen < original / high)
      out.push_back(1.0f);
    else if (wavelen > original / low)
      out.push_back(static_cast<float>(factor));
    else {
      const double smooth = (original / wavelen - low) / (high - low);
      out.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

TEST(DecoderOps, RopeFromLlamaCppFactors) {
  struct Case {
    double theta;
    int dim;
    double factor, low, high, original;
  };
  // Llama 3.1 8B, Llama 3.2 1B, few frequencies in between (one, none), a short original context.
  for (const Case& k :
       {Case{5e5, 128, 8, 1, 4, 8192}, Case{5e5, 64, 32, 1, 4, 8192}, Case{1e4, 16, 4, 1, 4, 64},
        Case{1e4, 8, 4, 1, 1.5, 64}, Case{1e6, 8, 2, 2, 3, 100}, Case{5e5, 16, 16, 1, 4, 16}}) {
    SCOPED_TRACE("theta " + std::to_string(k.theta) + " dim " + std::to_string(k.dim) + " factor " +
                 std::to_string(k.factor));
    const std::vector<float> f = converter_rope_factors(k.theta, k.dim, k.factor, k.low, k.high, k.original);
    const RopeConfig r = detail::rope_from_factors(k.theta, k.dim, f, "m.gguf");
    EXPECT_EQ(r.type, "llama3");
    EXPECT_DOUBLE_EQ(r.factor, static_cast<float>(k.factor));
    RopeConfig plain_config;
    plain_config.theta = k.theta;
    const std::vector<float> plain = detail::rope_inv_freq(plain_config, k.dim),
                             got = detail::rope_inv_freq(r, k.dim);
    for (int i = 0; i < k.dim / 2; ++i) EXPECT_NEAR(got[i], plain[i] / f[i], 1e-4 * got[i]) << i;
    if (k.original == 8192) {  // the parameters themselves where the original context is Llama 3's
      EXPECT_NEAR(r.low_freq_factor, k.low, 1e-3);
      EXPECT_NEAR(r.high_freq_factor, k.high, 1e-3);
    }
  }
  const std::vector<float> ones(8, 1.0f);
  EXPECT_EQ(detail::rope_from_factors(1e4, 16, ones, "m").type, "default");
  std::vector<float> bad = converter_rope_factors(5e5, 128, 8, 1, 4, 8192);
  bad[20] = 3.0f;  // not on the smooth curve
  EXPECT_THROW(detail::rope_from_factors(5e5, 128, bad, "m"), Error);
  bad = converter_rope_factors(5e5, 128, 8, 1, 4, 8192);
  std::reverse(bad.begin(), bad.end());  // the factor on the short wavelengths
  EXPECT_THROW(detail::rope_from_factors(5e5, 128, bad, "m"), Error);
  for (float v : {0.5f, std::nanf(""), INFINITY}) {
    bad = converter_rope_factors(5e5, 128, 8, 1, 4, 8192);
    bad[3] = v;
    EXPECT_THROW(detail::rope_from_factors(5e5, 128, bad, "m"), Error) << v;
  }
  EXPECT_THROW(detail::rope_from_factors(5e5, 128, ones, "m"), Error);  // 8 factors for 64 frequencies
  EXPECT_THROW(detail::rope_from_factors(5e5, 16, std::vector<float>(8, 4.0f), "m"), Error);  // all scaled
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
            // What fp32 scores may be off by, per query head and position: the sum of |scale q_c k_c| over
            // the largest of its keys, times FLT_EPSILON. A score off by e moves the output by at most e
            // times the spread of the values (<= 4 here).
            std::vector<double> score_error(hs.q * n);
            {
              const double sc = scale != 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(d));
              for (int64_t h = 0; h < hs.q; ++h)
                for (int64_t i = 0; i < n; ++i) {
                  const int64_t kg = hs.q + h / (hs.q / hs.kv);
                  double top = 0;
                  for (int64_t t = window > 0 ? std::max<int64_t>(0, i + 1 - window) : 0; t <= i; ++t) {
                    double sum = 0;
                    for (int64_t c = 0; c < d; ++c)
                      sum +=
                          std::abs(static_cast<double>(qkv[(h * d + c) * n + i]) * qkv[(kg * d + c) * n + t]);
                    top = std::max(top, sum);
                  }
                  score_error[h * n + i] = FLT_EPSILON * sc * top;
                }
            }
            // Half the windowed cases keep their cache as a ring (the window and the longest chunk below).
            const int64_t ring = window > 0 && window + 40 <= cap && g() % 2 ? window + 40 : 0;
            detail::KvCache kv(hs.kv, cap, d, half, ring);
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
                  // fp32 scores: up to |scale q.k| ~ 30 here, their rounding moves a weight by ~1e-5 of it
                  // (seeds 16017929824980414311: 1.06e-5 off at 0.157; 17131710621526976718: 1.06e-5 off
                  // at 0.00275, d = 80), hence a part of 4 score errors times the values' spread.
                  ASSERT_NEAR(
                      out[r * len + j], ref[r * n + pos + j],
                      1e-6 + 1e-5 * std::abs(ref[r * n + pos + j]) + 16 * score_error[r / d * n + pos + j])
                      << hs.q << "/" << hs.kv << " d=" << d << " n=" << n << " pos=" << pos
                      << " half=" << half << " window=" << window << " ring=" << ring << " scale=" << scale
                      << " cap=" << softcap;
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

// A Linear pruned as its rows are read (detail::prune_as_read, what the loaders run with --prune) holds the
// weights compress_pruned_f32 (then quantize_int8 or to_bf16) makes of the whole fp32 matrix: its parts
// stacked (fp32 and bf16 rows), a part's rows put back from llama.cpp's RoPE order as unpermute_rope_rows
// does; one block per part or blocks of 8 rows, on one thread or two; a non-finite value names its tensor.
TEST(DecoderModel, PruneAsReadMatchesPruningTheMatrix) {
  SPARSE24_SEED_TRACE();
  auto g = rng(31);
  for (int64_t cols : {12, 8192}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t heads = 2, d = 10, rows_a = heads * d, rows_b = 13;
    const std::vector<float> a = random_floats(g, static_cast<size_t>(rows_a * cols), -1.f, 1.f);
    std::vector<float> b = random_floats(g, static_cast<size_t>(rows_b * cols), -1.f, 1.f);
    std::vector<uint16_t> b16(b.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = bf16_to_float(b16[i] = float_to_bf16(b[i]));
    std::vector<float> whole(static_cast<size_t>((rows_a + rows_b) * cols));
    detail::unpermute_rope_rows(a.data(), heads, d, cols, whole.data());
    std::copy(b.begin(), b.end(), whole.begin() + rows_a * cols);
    detail::RowSource pa, pb;
    pa.stored.data = reinterpret_cast<const uint8_t*>(a.data());
    pa.stored.rows = rows_a;
    pa.stored.cols = pb.stored.cols = cols;
    pa.rope_heads = heads;
    pa.rope_dim = d;
    pa.what = "a";
    pb.stored.data = reinterpret_cast<const uint8_t*>(b16.data());
    pb.stored.type = DType::kBF16;
    pb.stored.rows = rows_b;
    pb.what = "b";
    const Compressed f32 = compress_pruned_f32(whole.data(), rows_a + rows_b, cols);
    for (int threads : {1, 2})
      for (int kind = 0; kind < 3; ++kind) {
        DecoderLoadOptions o;
        o.prune = true;
        o.threads = threads;
        o.int8 = kind == 1;
        o.bf16 = kind == 2;
        const Compressed c = detail::prune_as_read({pa, pb}, cols, o);
        const Compressed want = kind == 1   ? quantize_int8(f32, detail::kInt8ScaleGroup)
                                : kind == 2 ? to_bf16(f32)
                                            : f32;
        EXPECT_EQ(c.dtype, want.dtype);
        EXPECT_EQ(c.shape, want.shape);
        EXPECT_EQ(c.values, want.values) << "threads " << threads << " kind " << kind;
        EXPECT_EQ(c.metadata, want.metadata) << "threads " << threads << " kind " << kind;
        EXPECT_EQ(c.scales, want.scales) << "threads " << threads << " kind " << kind;
      }
    b16[static_cast<size_t>(rows_b * cols - 2)] = 0x7F80;  // +inf in the last block
    for (int threads : {1, 2}) {
      DecoderLoadOptions o;
      o.prune = true;
      o.threads = threads;
      try {
        detail::prune_as_read({pa, pb}, cols, o);
        ADD_FAILURE() << "an infinity was pruned";
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "b holds a non-finite value");
      }
    }
  }
}

// Pruning with several threads (a Linear per thread) gives the model pruning with one gives, bit for bit; a
// NaN in a weight is the same one-line error from either.
TEST(DecoderModel, PruneMagnitudeThreadsAgree) {
  SPARSE24_SEED_TRACE();
  auto g = rng(7);
  const Tiny t;
  const DecoderModel m = tiny_model(g, t);
  DecoderModel one = m, two = m;
  one.prune_magnitude(1);
  two.prune_magnitude(2);
  EXPECT_EQ(one.fingerprint, two.fingerprint);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const DecoderLayer &a = one.layers[l], &b = two.layers[l];
    for (auto G : {&DecoderLayer::qkv, &DecoderLayer::o, &DecoderLayer::gate_up, &DecoderLayer::down}) {
      ASSERT_TRUE((a.*G).pruned && (b.*G).pruned);
      EXPECT_TRUE((a.*G).dense.empty());
      EXPECT_EQ((a.*G).sparse.values, (b.*G).sparse.values) << "layer " << l;
      EXPECT_EQ((a.*G).sparse.metadata, (b.*G).sparse.metadata) << "layer " << l;
    }
  }
  DecoderModel bad = m;
  bad.layers.back().down.dense[3] = std::nanf("");
  for (int threads : {1, 2}) {
    DecoderModel b = bad;
    EXPECT_THROW(b.prune_magnitude(threads), Error) << threads;
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
  // Within 5% of the logits' range (as the Python tests bound them): the rounding of the weights moves
  // the small logits by as much as the large ones (0.06 on a logit of 0.08, seed 1066524809364221511).
  float range = 0;
  for (float v : a) range = std::max(range, std::fabs(v));
  for (int64_t v = 0; v < t.vocab; ++v) {
    EXPECT_NEAR(b[v], a[v], 0.05f * range) << v;
    EXPECT_NEAR(c[v], a[v], 0.05f * range) << v;
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
// int8 weights: the 2:4 Linears, the head and the embedding rows (the tied head's table; an untied model's
// own table quantized the same way) as int8 with a scale per 64 of a row, against the reference forward pass
// on those weights dequantized.
TEST(Decoder, Int8WeightsMatchReferenceOnTheQuantizedWeights) {
  SPARSE24_SEED_TRACE();
  auto g = rng(12);
  const Tiny t;
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    DecoderModel m = tiny_model(g, t);
    if (!tied) {
      m.config.tied = false;
      m.head = random_gemm(g, "lm_head", t.vocab, t.hidden);
    }
    m.prune_magnitude();
    DecoderModel q = m;  // what the int8 Linears hold
    for (DecoderLayer& L : q.layers)
      for (Gemm* G : {&L.qkv, &L.o, &L.gate_up, &L.down}) G->sparse = quantize_int8(G->sparse, 64);
    // A [vocab, hidden] table as the decoder holds it, dequantized.
    const auto dequantized = [&](const std::vector<float>& w) {
      const int64_t groups = (t.hidden + kernels::kGemvI8Group - 1) / kernels::kGemvI8Group;
      std::vector<int8_t> hq(w.size());
      std::vector<float> hs(static_cast<size_t>(t.vocab * groups)), out(w.size());
      kernels::quantize_gemv_i8(w.data(), t.vocab, t.hidden, hq.data(), hs.data());
      for (int64_t r = 0; r < t.vocab; ++r)
        for (int64_t c = 0; c < t.hidden; ++c)
          out[r * t.hidden + c] = hq[r * t.hidden + c] * hs[r * groups + c / kernels::kGemvI8Group];
      return out;
    };
    q.embed = dequantized(m.embed);
    if (!tied) q.head.dense = dequantized(m.head.dense);
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
    // A Decoder that takes the model (and frees its fp32 embeddings and untied head) runs the same.
    DecoderModel taken = m;
    Decoder owner(std::move(taken), o);
    std::vector<float> again(ids.size() * t.vocab);
    owner.forward(ids.data(), 10, again.data(), true);
    EXPECT_EQ(again, all);
  }
  DecoderOptions both;
  both.int8_weights = both.bf16_weights = true;
  EXPECT_THROW(Decoder(tiny_model(g, t), both), Error);
}

// bf16 activations (DecoderOptions::bf16_activations) with int8 and bf16 weights: where
// bf16_activations_supported() the 2:4 Linears round their inputs to bf16, so the logits move (the option
// takes effect) but stay within the rounding's reach (2% of the largest logit) of the fp32-activation run, in
// one pass and one token at a time; elsewhere the option changes nothing.
TEST(Decoder, Bf16ActivationsMoveTheLogitsALittle) {
  SPARSE24_SEED_TRACE();
  auto g = rng(13);
  const Tiny t;
  DecoderModel m = tiny_model(g, t);
  m.prune_magnitude();
  const std::vector<int32_t> ids = random_ids(g, 10, t.vocab);
  for (bool int8 : {true, false}) {
    SCOPED_TRACE(int8 ? "int8 weights" : "bf16 weights");
    DecoderOptions o;
    o.int8_weights = int8;
    o.bf16_weights = !int8;
    o.max_context = 32;
    DecoderOptions x = o;
    x.bf16_activations = true;
    Decoder d32(m, o), d16(m, x);
    std::vector<float> a(ids.size() * t.vocab), b(a.size());
    d32.forward(ids.data(), 10, a.data(), true);
    d16.forward(ids.data(), 10, b.data(), true);
    double moved = 0, span = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      moved = std::max(moved, static_cast<double>(std::fabs(a[i] - b[i])));
      span = std::max(span, static_cast<double>(std::fabs(a[i])));
    }
    std::printf("%s: bf16 activations move the logits by at most %.3g (largest |logit| %.3g)\n",
                int8 ? "int8" : "bf16", moved, span);
    if (!bf16_activations_supported()) {
      EXPECT_EQ(a, b);
      continue;
    }
    EXPECT_GT(moved, 1e-6) << "the option did not take effect";
    EXPECT_LT(moved, 2e-2 * span);
    // One token at a time (other kernels, N = 1): within the same reach of the fp32-activation logits. Not
    // within fp32 rounding of the one pass: the activations entering a Linear differ in their last bits
    // between the two (attention sums in another order), which can move one to the next bf16 value.
    d16.reset();
    std::vector<float> last(t.vocab);
    for (int64_t p = 0; p < 10; ++p) d16.forward(&ids[p], 1, last.data());
    for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(last[v], a[9 * t.vocab + v], 2e-2 * span) << v;
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

// Sliding layers whose caches are rings (the window and a 512-token call): a 600-token prompt (two pieces,
// the ring wrapping) and tokens one at a time after it, as the reference computes them, in fewer cache bytes
// than without rings. Gemma 3 (sliding and full layers) with a 3-position window and with a 300-position one
// (its keys split in spans on 2 threads), fp32 and half caches.
TEST(Decoder, SlidingRingCachesMatchReference) {
  SPARSE24_SEED_TRACE();
  auto g = rng(36);
  for (int64_t window : {3, 300}) {
    Tiny t;
    t.gemma = 3;
    t.window = window;
    t.layers = 3;
    DecoderModel m = tiny_model(g, t);
    m.config.max_positions = 4096;
    const std::vector<int32_t> ids = random_ids(g, 604, t.vocab);
    const std::vector<double> ref = ref_forward(m, ids);
    for (bool half : {false, true})
      for (int threads : {1, 2}) {
        DecoderOptions o;
        o.max_context = 4096;
        o.kv_half = half;
        o.threads = threads;
        Decoder dec(m, o);
        const double tol = half ? 0.02 : 2e-4;
        std::vector<float> all(600 * t.vocab), last(t.vocab);
        dec.forward(ids.data(), 600, all.data(), true);
        for (size_t i = 0; i < all.size(); ++i)
          ASSERT_NEAR(all[i], ref[i], tol) << "logit " << i << " w" << window;
        for (int64_t j = 600; j < 604; ++j) {
          dec.forward(&ids[j], 1, last.data());
          for (int64_t v = 0; v < t.vocab; ++v) ASSERT_NEAR(last[v], ref[j * t.vocab + v], tol) << j;
        }
        // Rewound past what the rings hold (the kept tokens run again), and by a little.
        for (int64_t back : {590, 30}) {
          dec.rewind(back);
          dec.forward(&ids[back], 10, all.data(), true);
          for (int64_t i = 0; i < 10 * t.vocab; ++i)
            ASSERT_NEAR(all[i], ref[back * t.vocab + i], tol) << back;
        }
        o.sliding_ring = false;
        const Decoder whole(m, o);
        // Two of the three layers slide: each holds 2 (window + 512) rows instead of 4096.
        EXPECT_EQ(dec.cache_bytes() * 4096, whole.cache_bytes() * (4096 + 4 * (window + 512)) / 3);
      }
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

}  // namespace
}  // namespace sparse24::engine
