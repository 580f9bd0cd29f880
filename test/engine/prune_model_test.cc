// One-shot pruning of whole encoders (prune_model.h) and the embedding agreement metrics (embed_eval.h):
// the sequential calibration against a direct computation with the scalar reference forward pass, the
// permutations against the function they must preserve, SparseGPT against magnitude on its own objective,
// and the metrics against hand-computed values.
#include "sparse24/prune_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "common/cli.h"
#include "common/prune_objective.h"
#include "common/seed.h"
#include "sparse24/embed_eval.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"
#include "tiny_encoder.h"

namespace sparse24::engine {
namespace {

using sparse24::testing::rng;
using sparse24::testing::TempDirTest;

// ---- Metrics ----------------------------------------------------------------------------------------

TEST(EmbedEval, SpearmanMatchesHandComputedRanks) {
  // y's ranks with a tie: 1, 2, 3.5, 5, 3.5; rho = 8 / sqrt(10 * 9.5).
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}), 8 / std::sqrt(95.0), 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3}, {30, 20, 10}), -1.0, 1e-12);
  EXPECT_EQ(spearman({1, 1, 1}, {1, 2, 3}), 0.0);
  EXPECT_THROW(spearman({1}, {1}), Error);
  EXPECT_THROW(spearman({1, 2}, {1, 2, 3}), Error);
}

std::vector<float> circle(const std::vector<double>& degrees, float scale) {
  std::vector<float> e;
  for (double d : degrees) {
    e.push_back(static_cast<float>(scale * std::cos(d * M_PI / 180)));
    e.push_back(static_cast<float>(scale * std::sin(d * M_PI / 180)));
  }
  return e;
}

TEST(EmbedEval, AgreementMatchesHandComputedValues) {
  // Reference at 0, 10, 25, 100 degrees: nearest neighbours 1, 0, 1, 2. The model moves text 2 to 95
  // degrees: neighbours 1, 0, 3, 2, so 3 of 4 agree; cosines 1, 1, cos 70, 1. Scale does not matter.
  const auto ref = circle({0, 10, 25, 100}, 1), model = circle({0, 10, 95, 100}, 3);
  const EmbeddingAgreement a = compare_embeddings(model, ref, 4, 2, /*k=*/1);
  EXPECT_NEAR(a.recall_at_k, 0.75, 1e-12);
  EXPECT_NEAR(a.mean_cosine, (3 + std::cos(70 * M_PI / 180)) / 4, 1e-6);
  EXPECT_NEAR(a.min_cosine, std::cos(70 * M_PI / 180), 1e-6);
  EXPECT_EQ(a.pairs, 6);
  // The pairwise cosines by hand: the two rankings of the 6 pairs.
  std::vector<double> x, y;
  const double r[4] = {0, 10, 25, 100}, m[4] = {0, 10, 95, 100};
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) {
      x.push_back(std::cos((m[j] - m[i]) * M_PI / 180));
      y.push_back(std::cos((r[j] - r[i]) * M_PI / 180));
    }
  EXPECT_NEAR(a.spearman, spearman(x, y), 1e-9);
  EXPECT_LT(a.spearman, 1.0);

  const EmbeddingAgreement same = compare_embeddings(ref, ref, 4, 2, 1);
  EXPECT_NEAR(same.mean_cosine, 1, 1e-6);
  EXPECT_NEAR(same.spearman, 1, 1e-12);
  EXPECT_EQ(same.recall_at_k, 1);
  // Sampled pairs: the requested number.
  auto g = rng();
  const std::vector<float> big = testing::random_floats(g, 60 * 8, -1, 1);
  EXPECT_EQ(compare_embeddings(big, big, 60, 8, 10, 500).pairs, 500);

  EXPECT_THROW(compare_embeddings(ref, ref, 4, 2, 10), Error);  // fewer than k + 1 texts
  std::vector<float> zero = ref;
  zero[0] = zero[1] = 0;
  EXPECT_THROW(compare_embeddings(zero, ref, 4, 2, 1), Error);
}

// ---- Whole-model pruning --------------------------------------------------------------------------------

class PruneModel : public TempDirTest {
 protected:
  // A tiny encoder directory and its weights.
  SafeTensors make(const Tiny& t, const std::string& name, std::mt19937_64& g) {
    SafeTensors w = weights_of(t, g);
    write_model(dir_ / name, t, w, false, true);
    return w;
  }
};

std::vector<float> weight(const HfDir& d, const std::string& name) {
  const CheckpointTensor* t = d.weights.find(name);
  if (t == nullptr) throw Error("no " + name);
  return t->sparse ? decompress(*t->sparse).to_float() : from_st(t->dense, name).to_float();
}

void set(SafeTensors& w, const std::string& name, const std::vector<float>& v) {
  for (auto& [n, t] : w.tensors)
    if (n == name) t = to_st(Tensor::from_float(v, t.shape));
}

std::vector<std::string> linears(const Tiny& t, int64_t l) {
  const std::string p = "encoder.layer." + std::to_string(l) + ".";
  if (t.type == "bert")
    return {p + "attention.self.query",   p + "attention.self.key", p + "attention.self.value",
            p + "attention.output.dense", p + "intermediate.dense", p + "output.dense"};
  return {p + "attention.attn.q", p + "attention.attn.k",   p + "attention.attn.v",
          p + "attention.attn.o", p + "intermediate.dense", p + "output.dense"};
}

TEST_F(PruneModel, WandaCalibratesBlockByBlockOnThePrunedModel) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"}) {
    Tiny t;
    t.type = type;
    t.layers = 3;
    SafeTensors w = make(t, type, g);
    const auto seqs = random_sequences(g, t, 8, 20);
    HfDir d = read_hf_dir((dir_ / type).string());
    PruneModelOptions o;
    o.method = PruneMethod::kWanda;
    o.calibration_ids = seqs;
    o.tokens_per_call = 50;  // several engine calls
    const PruneModelReport r = prune_hf_encoder(d, o);
    EXPECT_EQ(r.weights.size(), static_cast<size_t>(6 * t.layers));
    EXPECT_EQ(r.calibration_sequences, 8);

    // The direct computation: the scalar reference collects each block's Linear inputs on the weights pruned
    // so far, Wanda prunes the block, and on to the next.
    for (int64_t l = 0; l < t.layers; ++l) {
      std::map<std::string, std::vector<double>> sumsq;
      linear_hook = [&](const std::string& p, const Mat& x) {
        auto& s = sumsq[p];
        s.resize(x[0].size(), 0.0);
        for (const auto& row : x)
          for (size_t c = 0; c < row.size(); ++c) s[c] += row[c] * row[c];
      };
      for (const auto& s : seqs) reference_embedding(t, w, s, false, true);
      linear_hook = nullptr;
      for (const std::string& p : linears(t, l)) {
        std::vector<float> W = get(w, p + ".weight");
        const int64_t in = static_cast<int64_t>(sumsq.at(p).size()),
                      out = static_cast<int64_t>(W.size()) / in;
        std::vector<float> norms(in);
        for (int64_t c = 0; c < in; ++c) norms[c] = static_cast<float>(std::sqrt(sumsq.at(p)[c]));
        const std::vector<float> before = W;
        apply_mask(W.data(), wanda_mask(W.data(), out, in, norms));
        set(w, p + ".weight", W);
        // The engine's masks agree wherever the decision is not a near tie (the engine sums in float, the
        // reference in double); the kept values are the original ones.
        const std::vector<float> got = weight(d, p + ".weight");
        int decided = 0;
        for (int64_t row = 0; row < out; ++row)
          for (int64_t c0 = 0; c0 < in; c0 += 4) {
            std::vector<double> score;
            for (int64_t c = c0; c < c0 + 4; ++c) score.push_back(std::fabs(before[row * in + c]) * norms[c]);
            std::sort(score.begin(), score.end());
            if (score[2] - score[1] < 1e-4 * score[2]) continue;
            ++decided;
            for (int64_t c = c0; c < c0 + 4; ++c)
              ASSERT_EQ(got[row * in + c], W[row * in + c])
                  << type << " " << p << " row " << row << " col " << c;
          }
        EXPECT_GT(decided, out * in / 4 * 9 / 10) << p;
      }
    }
  }
}

// The permuted, pruned model computes what the same pruned weights compute in the original channel order:
// every permutation was applied to the Linear's columns and its producer's rows (and bias) alike.
TEST_F(PruneModel, PermutationsKeepTheFunction) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"}) {
    Tiny t;
    t.type = type;
    t.hidden = 32;
    t.heads = 2;
    t.ffn = 64;
    const SafeTensors w = make(t, type, g);
    HfDir d = read_hf_dir((dir_ / type).string());
    PruneModelOptions o;
    o.method = PruneMethod::kMagnitude;
    o.permute = true;
    o.permute_seconds = 0.2;
    const PruneModelReport r = prune_hf_encoder(d, o);
    // The pruned model as written, and the same weights with every permutation undone.
    SafeTensors u = w;
    for (const auto& [name, st] : w.tensors) set(u, name, weight(d, name));
    int permuted = 0;
    for (const PrunedWeight& pw : r.weights) {
      const bool ffn2 = pw.name.find("output.dense.weight") != std::string::npos &&
                        pw.name.find("attention") == std::string::npos;
      const bool attn_out = pw.name.find("attention.output.dense") != std::string::npos ||
                            pw.name.find("attention.attn.o") != std::string::npos;
      ASSERT_EQ(!pw.perm.empty(), ffn2 || attn_out) << pw.name << ": " << pw.permutation;
      if (pw.perm.empty()) continue;
      ++permuted;
      EXPECT_GE(pw.kept_permuted, pw.kept_identity - 1e-9) << pw.name;
      const std::string producer = pw.permutation.substr(5, pw.permutation.find(".weight") + 7 - 5);
      const int64_t k = static_cast<int64_t>(pw.perm.size());
      if (attn_out) {
        for (int64_t c = 0; c < k; ++c) {
          ASSERT_EQ(pw.perm[c] / (k / t.heads), c / (k / t.heads)) << "left its head";
        }
      }
      std::vector<int64_t> inverse(k);
      for (int64_t c = 0; c < k; ++c) inverse[pw.perm[c]] = c;
      std::vector<float> c_w = get(u, pw.name), p_w = get(u, producer);
      const std::string bias = producer.substr(0, producer.size() - 7) + ".bias";
      std::vector<float> p_b = get(u, bias);
      permute_columns(c_w.data(), static_cast<int64_t>(c_w.size()) / k, k, inverse);
      permute_rows(p_w.data(), k, static_cast<int64_t>(p_w.size()) / k, inverse);
      const std::vector<float> old_b = p_b;
      for (int64_t c = 0; c < k; ++c) p_b[c] = old_b[inverse[c]];
      set(u, pw.name, c_w);
      set(u, producer, p_w);
      set(u, bias, p_b);
    }
    EXPECT_EQ(permuted, 2 * t.layers);
    // Undone, the producers are the original weights pruned by plain magnitude (their own input is not
    // permuted) and the permuted Linears keep only original values.
    for (int64_t l = 0; l < t.layers; ++l)
      for (const std::string& p : linears(t, l)) {
        std::vector<float> orig = get(w, p + ".weight");
        const std::vector<float> undone = get(u, p + ".weight");
        const bool permuted_layer =
            p.find("output.dense") != std::string::npos || p.find("attn.o") != std::string::npos;
        if (!permuted_layer) {
          // Q, K, V and the FFN input: [out, hidden]
          apply_mask(orig.data(),
                     magnitude_mask(orig.data(), static_cast<int64_t>(orig.size()) / t.hidden, t.hidden));
          EXPECT_EQ(undone, orig) << p;
        } else {
          for (size_t i = 0; i < orig.size(); ++i) {
            if (undone[i] != 0) {
              ASSERT_EQ(undone[i], orig[i]) << p;
            }
          }
        }
      }
    const Model m = load_hf_encoder(d);
    Engine e(m, 64, 1, Mode::kSparse);
    const auto seqs = random_sequences(g, t, 4, 16);
    std::vector<float> want;
    for (const auto& s : seqs) {
      const std::vector<float> v = reference_embedding(t, u, s, false, true);
      want.insert(want.end(), v.begin(), v.end());
    }
    expect_near_all(run(e, seqs), want, 3e-5f, std::string(type) + " permuted");
  }
}

// SparseGPT minimizes the layer's output error on its calibration inputs: below magnitude's on the first
// block (whose inputs both methods see alike).
TEST_F(PruneModel, SparseGptBeatsMagnitudeOnItsObjective) {
  auto g = rng();
  Tiny t;
  t.hidden = 32;
  t.ffn = 64;
  const SafeTensors w = make(t, "bert", g);
  const auto seqs = random_sequences(g, t, 8, 20);
  HfDir sg = read_hf_dir((dir_ / "bert").string());
  HfDir mag = sg;
  PruneModelOptions o;
  o.method = PruneMethod::kSparseGpt;
  o.calibration_ids = seqs;
  prune_hf_encoder(sg, o);
  o.method = PruneMethod::kMagnitude;
  prune_hf_encoder(mag, o);
  std::map<std::string, Mat> inputs;
  linear_hook = [&](const std::string& p, const Mat& x) {
    auto& m = inputs[p];
    m.insert(m.end(), x.begin(), x.end());
  };
  for (const auto& s : seqs) reference_embedding(t, w, s, false, true);
  linear_hook = nullptr;
  for (const std::string& p : linears(t, 0)) {
    const std::vector<float> W = get(w, p + ".weight");
    EXPECT_LT(testing::output_error(W, weight(sg, p + ".weight"), inputs.at(p)),
              testing::output_error(W, weight(mag, p + ".weight"), inputs.at(p)))
        << p;
  }
}

// int8: the pruned encoder's values saved as int8 with scales, what set_sparse_precision(kInt8) rounds the
// fp32-pruned one to at load: the saved encoder embeds as that one does, to the bit; the bitmask layout is
// refused before anything is written.
TEST_F(PruneModel, Int8ValuesRunAsInt8PrecisionRounds) {
  SPARSE24_SEED_TRACE();
  auto g = rng();
  const Tiny t;
  make(t, "bert", g);
  const std::string src = (dir_ / "bert").string(), i8 = (dir_ / "i8").string(),
                    f32 = (dir_ / "f32").string();
  PruneModelOptions o;
  o.int8 = true;
  prune_model(src, i8, CheckpointFormat::kSparse24, o);
  prune_model(src, f32, CheckpointFormat::kSparse24, {});
  const HfDir d = read_hf_dir(i8);
  for (int64_t l = 0; l < t.layers; ++l)
    for (const std::string& p : linears(t, l)) {
      const CheckpointTensor* w = d.weights.find(p + ".weight");
      ASSERT_TRUE(w != nullptr && w->sparse) << p;
      EXPECT_EQ(w->sparse->dtype, DType::kI8) << p;
      EXPECT_GT(w->sparse->scale_group, 0) << p;
    }
  Model a = load_hf_encoder(i8), b = load_hf_encoder(f32);
  set_sparse_precision(b, SparseValues::kInt8, SparseActivations::kF32);
  Engine ea(a, 64, 1, Mode::kSparse), eb(b, 64, 1, Mode::kSparse);
  const auto seqs = random_sequences(g, t, 3, 12);
  EXPECT_EQ(run(ea, seqs), run(eb, seqs));
  EXPECT_THROW(prune_model(src, (dir_ / "bm").string(), CheckpointFormat::kBitmask24, o), Error);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "bm"));
}

TEST_F(PruneModel, BadRequestsAreErrors) {
  auto g = rng();
  make(Tiny{}, "bert", g);
  HfDir d = read_hf_dir((dir_ / "bert").string());
  PruneModelOptions o;
  o.method = PruneMethod::kWanda;
  EXPECT_THROW(
      {
        try {
          prune_hf_encoder(d, o);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("calibration"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  o.method = PruneMethod::kMagnitude;
  o.targets = "nothing-like-this";
  EXPECT_THROW(prune_hf_encoder(d, o), Error);
  o.targets = "(";
  EXPECT_THROW(prune_hf_encoder(d, o), Error);
  EXPECT_THROW(parse_prune_method("obs"), Error);
  // A directory pruned already: its weights are reported as skipped, and nothing is left to prune.
  o.targets = kEncoderLinears;
  prune_hf_encoder(d, o);
  EXPECT_THROW(prune_hf_encoder(d, o), Error);
}

}  // namespace
}  // namespace sparse24::engine
