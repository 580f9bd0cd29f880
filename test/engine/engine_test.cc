// The engine against plain references: every op, a small CNN export (pruned and dense convs, folded and
// unfolded BatchNorm, pooling, flatten, linear) against a direct NCHW forward pass, a small BERT against a
// scalar interpreter of its ops, plans, and hostile model files.
#include "sparse24/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../src/engine/builder.h"
#include "../../src/engine/fingerprint.h"
#include "../../src/engine/gemm.h"
#include "../../src/engine/ops.h"
#include "common/cli.h"
#include "common/seed.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/reference.h"

namespace sparse24::engine {
namespace {

using sparse24::testing::random_floats;
using sparse24::testing::rng;
using sparse24::testing::TempDirTest;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 1.0f;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * scale) << what << " at " << i;
}

// ---- Ops ---------------------------------------------------------------------------------------------

void naive_attention(const std::vector<float>& qkv, int64_t hidden, int64_t heads, int64_t batch, int64_t seq,
                     std::vector<float>& ctx) {
  const int64_t d = hidden / heads, ld = batch * seq;
  ctx.assign(hidden * ld, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> s(seq);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < seq; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < d; ++c)
            acc += double(qkv[(h * d + c) * ld + b * seq + i]) * qkv[(hidden + h * d + c) * ld + b * seq + j];
          s[j] = acc / std::sqrt(double(d));
          mx = std::max(mx, s[j]);
        }
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < seq; ++j)
            acc += s[j] / sum * qkv[(2 * hidden + h * d + c) * ld + b * seq + j];
          ctx[(h * d + c) * ld + b * seq + i] = static_cast<float>(acc);
        }
      }
}

// The fingerprint's word hash fed a piece at a time (what a mapped tensor's hash does, dropping pages as it
// goes) is the hash of the whole, for lengths around the 32-byte step and pieces of every multiple of 32.
TEST(Fingerprint, WordHashInPiecesEqualsTheWhole) {
  SPARSE24_SEED_TRACE();
  auto g = rng(62);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> b(1000);
  for (uint8_t& x : b) x = static_cast<uint8_t>(byte(g));
  for (size_t n :
       {size_t{0}, size_t{7}, size_t{31}, size_t{32}, size_t{33}, size_t{95}, size_t{96}, size_t{1000}})
    for (size_t piece : {size_t{32}, size_t{64}, size_t{96}}) {
      engine::FnvWords f(12345);
      size_t i = 0;
      for (; n - i > piece; i += piece) f.add(b.data() + i, piece);
      EXPECT_EQ(f.finish(b.data() + i, n - i), engine::fnv1a_words(12345, b.data(), n)) << n << " " << piece;
    }
  EXPECT_NE(engine::fnv1a_words(1, b.data(), 64), engine::fnv1a_words(1, b.data(), 63));
}

// One GEMM layer on the dense path against gemm_reference, at every N from 1 to 20: dnnl_sgemm
// (N = 1 and past 16), kernels::gemm_small (N = 2..16, gemm.cc), each with and without a bias, for every
// epilogue, on one and two threads, N changing between calls on one layer.
// concat_rows (a Linear's stored parts joined: Q, K, V; gate, up): 2:4 parts of any type, scaled int8
// included, give the matrix of their rows stacked, their biases in order; parts of different types or
// scale groups are refused.
TEST(EngineOps, ConcatRowsStacksTheParts) {
  SPARSE24_SEED_TRACE();
  auto g = rng(41);
  const int64_t k = 70;
  std::vector<Gemm> parts(3);
  for (size_t i = 0; i < parts.size(); ++i) {
    Gemm& p = parts[i];
    p.m = 5 + static_cast<int64_t>(i) * 3;
    p.k = k;
    p.pruned = true;
    const std::vector<float> w = random_floats(g, static_cast<size_t>(p.m * k));
    p.sparse = compress(Tensor::from_float(w, {p.m, k}), true);
    p.bias = random_floats(g, static_cast<size_t>(p.m));
    p.sources = {"part" + std::to_string(i)};
  }
  for (int type = 0; type < 3; ++type) {  // fp32, bf16, int8 with scales per 32 positions
    SCOPED_TRACE(type);
    std::vector<Gemm> ps;
    std::vector<const Gemm*> ptrs;
    std::vector<float> want_w, want_b;  // the parts' dense rows and biases, stacked
    for (const Gemm& p : parts) {
      Gemm q = p;
      if (type == 1) q.sparse = to_bf16(std::move(q.sparse));
      if (type == 2) q.sparse = quantize_int8(q.sparse, 32);
      const std::vector<float> d = decompress(q.sparse).to_float();
      want_w.insert(want_w.end(), d.begin(), d.end());
      want_b.insert(want_b.end(), q.bias.begin(), q.bias.end());
      ps.push_back(std::move(q));
    }
    for (const Gemm& p : ps) ptrs.push_back(&p);
    const Gemm j = concat_rows("qkv", ptrs);
    EXPECT_EQ(j.m, 5 + 8 + 11);
    EXPECT_NO_THROW(validate(j.sparse));
    EXPECT_EQ(decompress(j.sparse).to_float(), want_w);
    EXPECT_EQ(j.bias, want_b);
    EXPECT_EQ(j.sources, (std::vector<std::string>{"part0", "part1", "part2"}));
  }
  Gemm other = parts[1];
  other.sparse = quantize_int8(other.sparse, 64);
  Gemm scaled = parts[0];
  scaled.sparse = quantize_int8(scaled.sparse, 32);
  EXPECT_THROW(concat_rows("qkv", {&scaled, &other}), Error);
  EXPECT_THROW(concat_rows("qkv", {&parts[0], &other}), Error);
}

TEST(EngineOps, DenseGemmMatchesNaiveAtEveryN) {
  SPARSE24_SEED_TRACE();
  auto g = rng(7);
  for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 20}, {64, 48}})
    for (bool with_bias : {false, true})
      for (Epilogue ep : {Epilogue::kNone, Epilogue::kRelu, Epilogue::kGelu}) {
        Gemm gm;
        gm.name = "g";
        gm.m = m;
        gm.k = k;
        gm.dense = random_floats(g, m * k, -1, 1);
        if (with_bias) gm.bias = random_floats(g, m, -1, 1);
        gm.epilogue = ep;
        const detail::GemmExec e = detail::GemmExec::dense(gm, 20);
        for (int threads : {1, 2})
          for (int64_t n = 1; n <= 20; ++n) {
            const std::vector<float> x = random_floats(g, k * n, -1, 1);
            std::vector<float> want(m * n), y(m * n, std::nanf(""));
            gemm_reference(gm.dense.data(), m, k, x.data(), n, n, want.data(), n,
                           with_bias ? gm.bias.data() : nullptr, ep);
            e.run(x.data(), y.data(), n, threads);
            const std::string what =
                "m " + std::to_string(m) + " n " + std::to_string(n) + " bias " + std::to_string(with_bias) +
                " epilogue " + std::to_string(static_cast<int>(ep)) + " threads " + std::to_string(threads);
            expect_close(y, want, 1e-5f, what.c_str());
          }
      }
}

TEST(EngineOps, AttentionMatchesNaive) {
  SPARSE24_SEED_TRACE();
  auto g = rng(1);
  for (auto [hidden, heads, batch, seq] :
       std::vector<std::array<int64_t, 4>>{{8, 1, 1, 1}, {12, 3, 2, 5}, {64, 4, 1, 17}, {32, 2, 3, 33}}) {
    const std::vector<float> qkv = random_floats(g, 3 * hidden * batch * seq, -2, 2);
    std::vector<float> want, got(hidden * batch * seq), scratch(2 * seq * seq);
    naive_attention(qkv, hidden, heads, batch, seq, want);
    for (int threads : {1, 2}) {
      detail::attention(qkv.data(), hidden, heads, batch, seq, got.data(), scratch.data(), threads);
      expect_close(got, want, 1e-5f, "attention");
    }
  }
}

TEST(EngineOps, SoftmaxAndLayerNormMatchNaive) {
  SPARSE24_SEED_TRACE();
  auto g = rng(2);
  for (int64_t cols : {1, 3, 8, 9, 16, 33, 130}) {
    std::vector<float> p = random_floats(g, 3 * cols, -30, 30), want(p.size());
    for (int64_t r = 0; r < 3; ++r) {
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, double(p[r * cols + j]));
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(p[r * cols + j] - mx);
      for (int64_t j = 0; j < cols; ++j)
        want[r * cols + j] = static_cast<float>(std::exp(p[r * cols + j] - mx) / sum);
    }
    detail::softmax_rows(p.data(), 3, cols);
    expect_close(p, want, 2e-6f, "softmax");
  }
  {
    // exp itself, at every fraction of x log2 e: the ratio to the row's maximum cancels the normalisation,
    // leaving exp's error plus float's rounding of x log2 e (6e-8 |x|). A degree-6 polynomial on [0, 1)
    // instead of [-1/2, 1/2] is 8e-6 off near the top of its range and fails here on every run.
    std::vector<float> p(256);
    for (size_t j = 0; j < p.size(); ++j) p[j] = -0.039f * static_cast<float>(j);
    const std::vector<float> x = p;
    detail::softmax_rows(p.data(), 1, static_cast<int64_t>(p.size()));
    for (size_t j = 0; j < p.size(); ++j) {
      const double want = std::exp(double(x[j])), tol = (6e-7 + 1e-7 * std::fabs(x[j])) * want;
      ASSERT_NEAR(double(p[j]) / p[0], want, tol) << "softmax's exp at x = " << x[j];
    }
  }
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {4, 3}, {7, 17}, {64, 33}}) {
    const std::vector<float> x = random_floats(g, rows * cols, -3, 3), res = random_floats(g, rows * cols),
                             gamma = random_floats(g, rows), beta = random_floats(g, rows);
    std::vector<float> want(rows * cols), got(rows * cols);
    for (int64_t j = 0; j < cols; ++j) {
      double mean = 0, var = 0;
      for (int64_t r = 0; r < rows; ++r) mean += x[r * cols + j] + res[r * cols + j];
      mean /= rows;
      for (int64_t r = 0; r < rows; ++r) var += std::pow(x[r * cols + j] + res[r * cols + j] - mean, 2);
      var /= rows;
      for (int64_t r = 0; r < rows; ++r)
        want[r * cols + j] = static_cast<float>(
            (x[r * cols + j] + res[r * cols + j] - mean) / std::sqrt(var + 1e-5) * gamma[r] + beta[r]);
    }
    detail::layer_norm(x.data(), res.data(), rows, cols, gamma.data(), beta.data(), 1e-5f, got.data());
    expect_close(got, want, 1e-4f, "layer_norm");
  }
}

TEST(EngineOps, MaxPoolFlattenIm2col) {
  SPARSE24_SEED_TRACE();
  auto g = rng(3);
  const int64_t c = 3, batch = 2, h = 7, w = 5, k = 2;
  const std::vector<float> x = random_floats(g, c * batch * h * w);
  std::vector<float> y(c * batch * (h / k) * (w / k));
  detail::maxpool(x.data(), c, batch, h, w, k, y.data());
  for (int64_t p = 0; p < c * batch; ++p)
    for (int64_t oy = 0; oy < h / k; ++oy)
      for (int64_t ox = 0; ox < w / k; ++ox) {
        float m = -1e30f;
        for (int64_t a = 0; a < k; ++a)
          for (int64_t b = 0; b < k; ++b) m = std::max(m, x[p * h * w + (oy * k + a) * w + ox * k + b]);
        ASSERT_EQ(y[(p * (h / k) + oy) * (w / k) + ox], m);
      }
  std::vector<float> f(x.size());
  detail::flatten(x.data(), c, batch, h * w, f.data());
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < h * w; ++i)
        ASSERT_EQ(f[(ci * h * w + i) * batch + b], x[(ci * batch + b) * h * w + i]);
  for (auto [kk, s, pad] : std::vector<std::array<int64_t, 3>>{
           {3, 2, 1}, {3, 1, 1}, {3, 1, 0}, {5, 1, 2}, {1, 1, 0}, {2, 3, 1}}) {
    const int64_t oh = (h + 2 * pad - kk) / s + 1, ow = (w + 2 * pad - kk) / s + 1;
    std::vector<float> col(kk * kk * c * batch * oh * ow);
    detail::im2col(x.data(), c, batch, h, w, kk, s, pad, oh, ow, col.data());
    for (int64_t ky = 0; ky < kk; ++ky)
      for (int64_t kx = 0; kx < kk; ++kx)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t oy = 0; oy < oh; ++oy)
              for (int64_t ox = 0; ox < ow; ++ox) {
                const int64_t iy = oy * s + ky - pad, ix = ox * s + kx - pad;
                const float want =
                    (iy < 0 || iy >= h || ix < 0 || ix >= w) ? 0.0f : x[((ci * batch + b) * h + iy) * w + ix];
                ASSERT_EQ(col[((ky * kk + kx) * c + ci) * batch * oh * ow + (b * oh + oy) * ow + ox], want);
              }
  }
}

// ---- A small CNN export against a direct NCHW forward pass -------------------------------------------

struct Export {
  nlohmann::json config;
  SafeTensors st;
  std::map<std::string, std::vector<float>> dense;  // every parameter in PyTorch layout (pruned ones pruned)
};

Export make_cnn(uint64_t salt) {
  auto g = rng(salt);
  Export e;
  nlohmann::json layers = nlohmann::json::array();
  nlohmann::json pruned = nlohmann::json::object();
  auto param = [&](const std::string& name, std::vector<int64_t> shape, bool prune, float lo = -0.5f,
                   float hi = 0.5f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v = random_floats(g, n, lo, hi);
    if (prune) {
      const Compressed c = compress(Tensor::from_float(v, shape), /*prune=*/true);
      e.st.add(name + ".values", StTensor{"F32", {c.rows, c.values_per_row()}, c.values});
      e.st.add(name + ".metadata", StTensor{"U8", {c.rows, c.meta_bytes_per_row()}, c.metadata});
      pruned[name] = {{"shape", shape}, {"pattern", "2:4"}, {"dtype", "float32"}};
      v = decompress(c).to_float();
    } else {
      e.st.add(name, to_st(Tensor::from_float(v, shape)));
    }
    e.dense[name] = v;
  };
  auto conv = [&](const std::string& name, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p,
                  bool prune) {
    layers.push_back({{"type", "conv2d"},
                      {"name", name},
                      {"in", in},
                      {"out", out},
                      {"kernel", k},
                      {"stride", s},
                      {"padding", p}});
    param(name + ".weight", {out, in, k, k}, prune);
    param(name + ".bias", {out}, false);
  };
  auto bn = [&](const std::string& name, int64_t f) {
    layers.push_back({{"type", "batchnorm2d"}, {"name", name}, {"features", f}});
    param(name + ".weight", {f}, false, 0.5f, 1.5f);
    param(name + ".bias", {f}, false);
    param(name + ".running_mean", {f}, false);
    param(name + ".running_var", {f}, false, 0.2f, 2.0f);
  };
  auto linear = [&](const std::string& name, int64_t in, int64_t out, bool prune) {
    layers.push_back({{"type", "linear"}, {"name", name}, {"in", in}, {"out", out}});
    param(name + ".weight", {out, in}, prune);
    param(name + ".bias", {out}, false);
  };
  conv("conv1", 4, 8, 3, 1, 1, true);
  bn("bn1", 8);
  layers.push_back({{"type", "relu"}});
  layers.push_back({{"type", "maxpool2d"}, {"kernel", 2}});
  bn("bn2", 8);  // after a pool: not folded, an affine op
  conv("conv2", 8, 12, 3, 2, 1, true);
  layers.push_back({{"type", "relu"}});
  conv("conv3", 12, 6, 1, 1, 0, false);
  layers.push_back({{"type", "flatten"}});
  layers.push_back({{"type", "dropout"}, {"p", 0.3}});
  linear("fc1", 6 * 2 * 2, 16, true);
  layers.push_back({{"type", "relu"}});
  linear("fc2", 16, 5, false);
  e.config = {{"format", "sparse24-model"},
              {"version", 1},
              {"model", "tiny-cnn"},
              {"input_shape", {4, 8, 8}},
              {"classes", 5},
              {"normalize", {{"mean", 0.5}, {"std", 0.25}}},
              {"layers", layers},
              {"weights", "model.safetensors"},
              {"pruned", pruned}};
  e.st.metadata = {{"format", "sparse24-model"}, {"config", "model.json"}};
  return e;
}

void write_export(const Export& e, const std::string& dir) {
  write_safetensors(dir + "/model.safetensors", e.st);
  write_file_atomic(dir + "/model.json", e.config.dump(2));
}

// x: [C, H, W] one sample.
struct Img {
  int64_t c, h, w;
  std::vector<float> v;
};
Img ref_conv(const Img& x, const std::vector<float>& wt, const std::vector<float>& b, int64_t out, int64_t k,
             int64_t s, int64_t p) {
  Img y{out, (x.h + 2 * p - k) / s + 1, (x.w + 2 * p - k) / s + 1, {}};
  y.v.assign(out * y.h * y.w, 0.0f);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t oy = 0; oy < y.h; ++oy)
      for (int64_t ox = 0; ox < y.w; ++ox) {
        double acc = b[o];
        for (int64_t c = 0; c < x.c; ++c)
          for (int64_t ky = 0; ky < k; ++ky)
            for (int64_t kx = 0; kx < k; ++kx) {
              const int64_t iy = oy * s + ky - p, ix = ox * s + kx - p;
              if (iy >= 0 && iy < x.h && ix >= 0 && ix < x.w)
                acc += double(wt[((o * x.c + c) * k + ky) * k + kx]) * x.v[(c * x.h + iy) * x.w + ix];
            }
        y.v[(o * y.h + oy) * y.w + ox] = static_cast<float>(acc);
      }
  return y;
}
void ref_bn(Img& x, const Export& e, const std::string& n) {
  for (int64_t c = 0; c < x.c; ++c)
    for (int64_t i = 0; i < x.h * x.w; ++i) {
      float& v = x.v[c * x.h * x.w + i];
      v = (v - e.dense.at(n + ".running_mean")[c]) / std::sqrt(e.dense.at(n + ".running_var")[c] + 1e-5f) *
              e.dense.at(n + ".weight")[c] +
          e.dense.at(n + ".bias")[c];
    }
}
void ref_relu(std::vector<float>& v) {
  for (float& x : v) x = std::max(x, 0.0f);
}
std::vector<float> ref_linear(const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& b) {
  std::vector<float> y(b.size());
  for (size_t o = 0; o < b.size(); ++o) {
    double acc = b[o];
    for (size_t i = 0; i < x.size(); ++i) acc += double(w[o * x.size() + i]) * x[i];
    y[o] = static_cast<float>(acc);
  }
  return y;
}
std::vector<float> ref_cnn(const Export& e, const float* sample) {
  const auto& d = e.dense;
  Img x{4, 8, 8, std::vector<float>(sample, sample + 4 * 8 * 8)};
  x = ref_conv(x, d.at("conv1.weight"), d.at("conv1.bias"), 8, 3, 1, 1);
  ref_bn(x, e, "bn1");
  ref_relu(x.v);
  Img p{x.c, x.h / 2, x.w / 2, std::vector<float>(x.c * (x.h / 2) * (x.w / 2))};
  for (int64_t c = 0; c < x.c; ++c)
    for (int64_t oy = 0; oy < p.h; ++oy)
      for (int64_t ox = 0; ox < p.w; ++ox) {
        float m = -1e30f;
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) m = std::max(m, x.v[(c * x.h + oy * 2 + a) * x.w + ox * 2 + b]);
        p.v[(c * p.h + oy) * p.w + ox] = m;
      }
  ref_bn(p, e, "bn2");
  x = ref_conv(p, d.at("conv2.weight"), d.at("conv2.bias"), 12, 3, 2, 1);
  ref_relu(x.v);
  x = ref_conv(x, d.at("conv3.weight"), d.at("conv3.bias"), 6, 1, 1, 0);
  std::vector<float> f = ref_linear(x.v, d.at("fc1.weight"), d.at("fc1.bias"));
  ref_relu(f);
  return ref_linear(f, d.at("fc2.weight"), d.at("fc2.bias"));
}

class EngineModel : public TempDirTest {};

TEST_F(EngineModel, CnnExportMatchesDirectForwardInEveryMode) {
  SPARSE24_SEED_TRACE();
  const Export e = make_cnn(10);
  write_export(e, dir_.string());
  const Model m = load_model(dir_.string());
  ASSERT_EQ(m.gemms.size(), 5u);
  EXPECT_TRUE(m.gemms[0].pruned);   // conv1
  EXPECT_FALSE(m.gemms[2].pruned);  // conv3
  auto g = rng(11);
  const int64_t batch = 3;
  const std::vector<float> x = random_floats(g, batch * m.input_size(), -2, 2);
  std::vector<float> want;
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<float> y = ref_cnn(e, &x[b * m.input_size()]);
    want.insert(want.end(), y.begin(), y.end());
  }
  const Plan plan = build_plan(m, batch, 1, 1);
  for (Mode mode : {Mode::kDense, Mode::kSparse, Mode::kPlan})
    for (int threads : {1, 2}) {
      Engine eng(m, batch, threads, mode, &plan);
      std::vector<float> y(batch * m.output_size());
      eng.run(x.data(), y.data());
      expect_close(y, want, 1e-4f, "cnn");
    }
  // Sparse mode runs exactly the pruned layers from packed weights. (Fewer bytes than the dense engine is
  // checked on a real encoder in hf_encoder_test: these layers, 16 x 24 the largest, are smaller than the
  // memory-bound layout's padding of rows to 8 and K to 64.)
  std::vector<bool> pruned;
  for (const auto& gm : m.gemms) pruned.push_back(gm.pruned);
  EXPECT_EQ(Engine(m, batch, 1, Mode::kSparse).sparse_layers(), pruned);
}

TEST_F(EngineModel, PlanRoundTripsAndIsReusedOnlyWhenItMatches) {
  write_export(make_cnn(20), dir_.string());
  const Model m = load_model(dir_.string());
  bool built = false;
  const Plan p = load_or_build_plan(m, dir_.string(), 2, 1, &built);
  EXPECT_TRUE(built);
  ASSERT_TRUE(std::filesystem::exists(path("plan.json")));
  ASSERT_EQ(p.layers.size(), m.gemms.size());
  for (const LayerPlan& l : p.layers) {
    EXPECT_GT(l.dense_ms, 0);
    EXPECT_EQ(l.pruned, l.sparse_ms > 0);
    EXPECT_TRUE(!l.sparse || l.pruned);
  }
  const Plan again = load_or_build_plan(m, dir_.string(), 2, 1, &built);
  EXPECT_FALSE(built);
  EXPECT_EQ(again.to_json(), p.to_json());
  EXPECT_FALSE(p.matches(m, 3, 1));  // another batch
  EXPECT_FALSE(p.matches(m, 2, 2));  // another thread count
  load_or_build_plan(m, dir_.string(), 3, 1, &built);
  EXPECT_TRUE(built);
  // A plan for other weights does not match.
  write_export(make_cnn(21), dir_.string());
  EXPECT_FALSE(Plan::from_json(p.to_json(), "p").matches(load_model(dir_.string()), 2, 1));
  EXPECT_THROW(Plan::from_json("{\"format\": \"sparse24-plan\"}", "p"), Error);
  EXPECT_THROW(Plan::from_json("not json", "p"), Error);
}

// ---- Hostile model files -----------------------------------------------------------------------------

std::string load_error(const std::string& dir) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(EngineModel, BadTensorsAreRefusedNamingTheTensor) {
  const Export good = make_cnn(30);
  auto with = [&](auto edit) {
    Export e = good;
    edit(e);
    write_export(e, dir_.string());
    return load_error(dir_.string());
  };
  auto replace = [](Export& e, const std::string& name, StTensor t) {
    for (auto& [n, v] : e.st.tensors)
      if (n == name) v = std::move(t);
  };
  auto drop = [](Export& e, const std::string& name) {
    std::erase_if(e.st.tensors, [&](const auto& p) { return p.first == name; });
  };
  EXPECT_EQ(with([](Export&) {}), "");
  EXPECT_NE(with([&](Export& e) { drop(e, "fc1.bias"); }).find("'fc1.bias'"), std::string::npos);
  EXPECT_NE(with([&](Export& e) { drop(e, "conv1.weight.metadata"); }).find("'conv1.weight.metadata'"),
            std::string::npos);
  EXPECT_NE(with([&](Export& e) { drop(e, "bn2.running_var"); }).find("'bn2.running_var'"),
            std::string::npos);
  EXPECT_NE(with([&](Export& e) {
              replace(e, "fc2.weight", to_st(Tensor::zeros(DType::kF32, {5, 15})));
            }).find("'fc2.weight'"),
            std::string::npos);
  EXPECT_NE(with([&](Export& e) {
              replace(e, "fc2.bias", to_st(Tensor::zeros(DType::kF16, {5})));
            }).find("'fc2.bias'"),
            std::string::npos);
  EXPECT_NE(with([&](Export& e) {
              replace(e, "conv2.weight.values", to_st(Tensor::zeros(DType::kF32, {108, 3})));
            }).find("'conv2.weight.values'"),
            std::string::npos);
  EXPECT_NE(with([&](Export& e) {
              for (auto& [n, v] : e.st.tensors)
                if (n == "fc1.weight.metadata") v.bytes[0] = 0xFF;  // invalid 2:4 code
            }).find("'fc1.weight'"),
            std::string::npos);
  EXPECT_NE(
      with([&](Export& e) { e.st.add("extra", to_st(Tensor::zeros(DType::kF32, {1}))); }).find("'extra'"),
      std::string::npos);
  EXPECT_NE(with([&](Export& e) {
              std::vector<float> nan(5, NAN);
              replace(e, "fc2.bias", to_st(Tensor::from_float(nan, {5})));
            }).find("'fc2.bias'"),
            std::string::npos);
  // Architecture errors.
  EXPECT_NE(with([](Export& e) { e.config["layers"][10]["in"] = 23; }).find("fc1"), std::string::npos);
  EXPECT_NE(with([](Export& e) {
              e.config["pruned"]["fc1.weight"]["shape"] = {1, 2};
            }).find("fc1.weight"),
            std::string::npos);
  EXPECT_NE(with([](Export& e) { e.config["classes"] = 6; }), "");
  EXPECT_NE(with([](Export& e) { e.config["layers"][0]["type"] = "conv3d"; }).find("conv3d"),
            std::string::npos);
  EXPECT_NE(with([](Export& e) { e.config["weights"] = "../x"; }), "");
  // The envelope (io/model_dir.h, shared with the training library's reloader).
  EXPECT_NE(with([](Export& e) { e.config["weights"] = 7; }).find("weights must be a file name"),
            std::string::npos);
  EXPECT_NE(with([](Export& e) { e.config["format"] = 3; }).find("format is not sparse24-model"),
            std::string::npos);
  EXPECT_NE(with([](Export& e) { e.config["pruned"] = "all"; }).find("pruned must be an object"),
            std::string::npos);
  EXPECT_NE(with([](Export& e) {
              e.config["pruned"]["fc1.weight"]["dtype"] = "bfloat16";
            }).find("pruned entry for 'fc1.weight'"),
            std::string::npos);
}

TEST_F(EngineModel, TruncatedAndCorruptedFilesNeverCrash) {
  SPARSE24_SEED_TRACE();
  write_export(make_cnn(40), dir_.string());
  const std::vector<uint8_t> st = read_file(path("model.safetensors"));
  const std::vector<uint8_t> js = read_file(path("model.json"));
  for (size_t cut : {size_t{0}, size_t{7}, size_t{8}, size_t{100}, st.size() / 2, st.size() - 1}) {
    write_file_atomic(path("model.safetensors"), std::vector<uint8_t>(st.begin(), st.begin() + cut));
    EXPECT_NE(load_error(dir_.string()), "") << "cut at " << cut;
  }
  for (size_t cut : {size_t{0}, js.size() / 3, js.size() - 2}) {
    write_file_atomic(path("model.safetensors"), st);
    write_file_atomic(path("model.json"), std::vector<uint8_t>(js.begin(), js.begin() + cut));
    EXPECT_NE(load_error(dir_.string()), "") << "json cut at " << cut;
  }
  write_file_atomic(path("model.json"), js);
  auto g = rng(41);
  for (int i = 0; i < 200; ++i) {  // random byte flips anywhere: an Error or a model, never a crash
    std::vector<uint8_t> bad = st;
    for (int f = 0; f < 3; ++f) bad[g() % bad.size()] ^= static_cast<uint8_t>(1 + g() % 255);
    write_file_atomic(path("model.safetensors"), bad);
    (void)load_error(dir_.string());
  }
}

// ---- BERT ----------------------------------------------------------------------------------------------

// A scalar interpreter of a model's ops (decompressed weights, double accumulation).
std::vector<float> interpret(const Model& m, int64_t batch, const std::vector<float>& input) {
  std::vector<std::vector<float>> t(m.tensors.size());
  const TensorShape& s0 = m.tensors[0];
  const int64_t p0 = s0.h * s0.w;
  t[0].resize(input.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < s0.rows; ++c)
      for (int64_t i = 0; i < p0; ++i) t[0][(c * batch + b) * p0 + i] = input[(b * s0.rows + c) * p0 + i];
  for (const Op& op : m.ops) {
    const TensorShape& x = m.tensors[op.in];
    const int64_t cols = batch * x.h * x.w;
    std::vector<float>& y = t[op.out];
    y.assign(m.tensors[op.out].rows * batch * m.tensors[op.out].h * m.tensors[op.out].w, 0.0f);
    if (op.kind == OpKind::kGemm) {
      const Gemm& g = m.gemms[op.gemm];
      const std::vector<float> w = g.pruned ? decompress(g.sparse).to_float() : g.dense;
      for (int64_t r = 0; r < g.m; ++r)
        for (int64_t j = 0; j < cols; ++j) {
          double acc = g.bias.empty() ? 0 : g.bias[r];
          for (int64_t k = 0; k < g.k; ++k) acc += double(w[r * g.k + k]) * t[op.in][k * cols + j];
          y[r * cols + j] = apply_epilogue(static_cast<float>(acc), g.epilogue);
        }
    } else if (op.kind == OpKind::kAttention) {
      naive_attention(t[op.in], x.rows / 3, op.heads, batch, x.h * x.w, y);
    } else if (op.kind == OpKind::kLayerNorm) {
      for (int64_t j = 0; j < cols; ++j) {
        double mean = 0, var = 0;
        auto v = [&](int64_t r) {
          return double(t[op.in][r * cols + j]) + (op.in2 >= 0 ? t[op.in2][r * cols + j] : 0.0);
        };
        for (int64_t r = 0; r < x.rows; ++r) mean += v(r);
        mean /= x.rows;
        for (int64_t r = 0; r < x.rows; ++r) var += (v(r) - mean) * (v(r) - mean);
        var /= x.rows;
        for (int64_t r = 0; r < x.rows; ++r)
          y[r * cols + j] =
              static_cast<float>((v(r) - mean) / std::sqrt(var + op.eps) * op.scale[r] + op.shift[r]);
      }
    } else {
      ADD_FAILURE() << "interpret: op kind " << op_kind_name(op.kind) << " not covered";
    }
  }
  const TensorShape& so = m.tensors[m.output];
  const int64_t po = so.h * so.w;
  std::vector<float> out(batch * so.rows * po);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < so.rows; ++c)
      for (int64_t i = 0; i < po; ++i)
        out[(b * so.rows + c) * po + i] = t[m.output][(c * batch + b) * po + i];
  return out;
}

TEST(EngineBert, SmallEncoderMatchesScalarInterpreter) {
  SPARSE24_SEED_TRACE();
  BertOptions o;
  o.layers = 2;
  o.hidden = 32;
  o.heads = 4;
  o.ffn = 64;
  o.seq = 9;
  o.seed = 5;
  const Model m = bert_model(o);
  EXPECT_EQ(m.gemms.size(), 8u);
  auto g = rng(50);
  const int64_t batch = 2;
  const std::vector<float> x = random_floats(g, batch * m.input_size(), -1, 1);
  const std::vector<float> want = interpret(m, batch, x);
  for (Mode mode : {Mode::kDense, Mode::kSparse})
    for (int threads : {1, 2}) {
      Engine e(m, batch, threads, mode);
      std::vector<float> y(want.size());
      e.run(x.data(), y.data());
      expect_close(y, want, 2e-4f, "bert");
    }
  // Deterministic: the same seed builds the same weights.
  EXPECT_EQ(bert_model(o).gemms[3].sparse.values, m.gemms[3].sparse.values);
  EXPECT_THROW(bert_model(BertOptions{1, 30, 4, 64, 8, 1}), Error);  // 30 % 4 heads
}

// ---- The CLI ------------------------------------------------------------------------------------------

class EngineCli : public TempDirTest {};

TEST_F(EngineCli, RunProfileAndBenchBert) {
  using sparse24::testing::run_cli;
  SPARSE24_SEED_TRACE();
  write_export(make_cnn(60), dir_.string());
  const Model m = load_model(dir_.string());
  auto g = rng(61);
  const std::vector<float> x = random_floats(g, 5 * m.input_size(), -2, 2);
  write_npy(path("x.npy"), Tensor::from_float(x, {5, 4, 8, 8}));
  auto r = run_cli("run " + dir_.string() + " --input " + path("x.npy") + " --output " + path("y.npy") +
                   " --batch 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("plan: built"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(path("plan.json")));
  const Tensor y = read_npy(path("y.npy"));
  ASSERT_EQ(y.shape, (std::vector<int64_t>{5, 5}));
  std::vector<float> want;
  for (int64_t b = 0; b < 5; ++b) {
    const std::vector<float> v = ref_cnn(make_cnn(60), &x[b * m.input_size()]);
    want.insert(want.end(), v.begin(), v.end());
  }
  expect_close(y.to_float(), want, 1e-4f, "cli run");
  r = run_cli("run " + dir_.string() + " --input " + path("x.npy") + " --batch 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("plan: loaded"), std::string::npos) << r.out;

  r = run_cli("profile " + dir_.string() + " --batch 2 --reps 1");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s : {"conv1", "conv2", "fc1", "end to end", "dense (not pruned)"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;

  // Bad inputs: one error line, non-zero exit.
  write_npy(path("bad.npy"), Tensor::from_float(std::vector<float>(10), {10}));
  r = run_cli("run " + dir_.string() + " --input " + path("bad.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out.rfind("sparse24: error: ", 0), 0u) << r.out;
  Export e = make_cnn(60);
  std::erase_if(e.st.tensors, [](const auto& p) { return p.first == "conv2.bias"; });
  write_export(e, dir_.string());
  r = run_cli("run " + dir_.string() + " --input " + path("x.npy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("'conv2.bias'"), std::string::npos) << r.out;

  r = run_cli("bench-bert --layers 1 --seq 8 --reps 1 --json " + path("b.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<uint8_t> raw = read_file(path("b.json"));
  const nlohmann::json j = nlohmann::json::parse(raw.begin(), raw.end());
  for (const char* k : {"seq", "batch", "threads", "dense_ms", "sparse_ms", "speedup", "weight_bytes_dense",
                        "weight_bytes_sparse"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["seq"], 8);
  EXPECT_GT(j["dense_ms"].get<double>(), 0);
  EXPECT_LT(j["weight_bytes_sparse"].get<double>(), j["weight_bytes_dense"].get<double>());
  EXPECT_EQ(run_cli("bench-bert --threads 3").status, 1);
}

}  // namespace
}  // namespace sparse24::engine
