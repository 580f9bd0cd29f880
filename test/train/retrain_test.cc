// sparse24 retrain (issue 15): the libtorch encoder (train/hf_torch.h) against the engine's forward on tiny
// random BERT and MPNet directories, dense and 2:4; masks fixed through distillation steps; the loss falling
// on a tiny case; the command end to end and on hostile or mismatched directories.
#include "train/retrain.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "common/seed.h"
#include "engine/tiny_encoder.h"
#include "sparse24/checkpoint.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "train/distill.h"
#include "train/hf_torch.h"

namespace sparse24::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using sparse24::testing::random_floats;
using sparse24::testing::rng;
using sparse24::testing::run_cli;
using sparse24::testing::TempDirTest;

// The vocabulary of the tiny models' tokenizer (vocab.txt): BERT's specials, the letters, a few words.
std::vector<std::string> tiny_vocab() {
  std::vector<std::string> v = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (char c = 'a'; c <= 'z'; ++c) v.push_back(std::string(1, c));
  for (const char* w : {"the", "and", "of", "lord", "god", "he", "said", "unto", "king"}) v.push_back(w);
  return v;
}

// The tiny encoders of the engine's tests (test/engine/tiny_encoder.h) with their pooling choice and 40
// positions, plus a vocab.txt tokenizer.
struct Tiny : engine::Tiny {
  bool cls = false, normalize = true;
  Tiny() { max_pos = 40; }
};

void write_tiny(const fs::path& dir, const Tiny& t, uint64_t salt) {
  std::mt19937_64 g = rng(salt);
  engine::write_model(dir, t, engine::weights_of(t, g), t.cls, t.normalize);
  std::ofstream v(dir / "vocab.txt");
  for (const std::string& w : tiny_vocab()) v << w << "\n";
}

// The same directory magnitude-pruned to 2:4 (every encoder Linear), in `layout`.
void write_pruned(const fs::path& dense, const fs::path& out, CheckpointFormat layout) {
  HfDir d = read_hf_dir(dense.string());
  SparsifyOptions so;
  so.prune = true;
  so.targets = R"(encoder\.layer\.[0-9]+\.)";
  so.rank2_only = true;
  sparsify(d.weights, so);
  write_hf_dir(d, d.weights, layout, out.string());
}

std::vector<std::vector<int32_t>> random_sentences(std::mt19937_64& g, int n, int64_t vocab, int longest) {
  std::uniform_int_distribution<int> len(1, longest);
  std::uniform_int_distribution<int32_t> id(5, static_cast<int32_t>(vocab) - 1);
  std::vector<std::vector<int32_t>> s(static_cast<size_t>(n));
  for (auto& x : s) {
    x.push_back(2);  // [CLS]
    for (int i = len(g); i > 0; --i) x.push_back(id(g));
    x.push_back(3);  // [SEP]
  }
  return s;
}

// Embeddings of `sentences` by the engine (one packed batch, dense GEMMs) and by the libtorch encoder (one
// padded batch); the largest absolute difference.
double max_difference(const std::string& dir, const std::vector<std::vector<int32_t>>& sentences) {
  const HfDir d = read_hf_dir(dir);
  HfEncoder e = load_hf_torch(d);
  std::vector<int64_t> order(sentences.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  const auto [ids, mask] = pad_batch(sentences, order, 0, static_cast<int64_t>(sentences.size()), 0);
  torch::Tensor got;
  {
    torch::NoGradGuard no_grad;
    got = e->forward(ids, mask).embedding.contiguous();
  }
  const engine::Model m = engine::load_hf_encoder(dir);
  engine::TokenBatch tb;
  for (const auto& s : sentences) tb.add(s);
  engine::Engine eng(m, tb.tokens(), 1, engine::Mode::kDense);
  std::vector<float> want(static_cast<size_t>(tb.sequences() * eng.output_rows()));
  eng.run_tokens(tb, want.data());
  EXPECT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got.data_ptr<float>()[i]) - want[i]));
  return worst;
}

class RetrainTest : public TempDirTest {};

TEST_F(RetrainTest, TorchEncoderEqualsEngine) {
  SPARSE24_SEED_TRACE();
  int salt = 0;
  for (const char* type : {"bert", "mpnet"})
    for (const bool cls : {false, true})
      for (const bool pruned : {false, true}) {
        SCOPED_TRACE(std::string(type) + (cls ? " cls" : " mean") + (pruned ? " 2:4" : " dense"));
        Tiny t;
        t.type = type;
        t.cls = cls;
        t.normalize = !cls;
        const std::string name = std::string(type) + std::to_string(salt);
        write_tiny(dir_ / name, t, ++salt);
        std::string dir = (dir_ / name).string();
        if (pruned) {
          write_pruned(dir, dir + "-24",
                       salt % 2 ? CheckpointFormat::kSparse24 : CheckpointFormat::kBitmask24);
          dir += "-24";
        }
        std::mt19937_64 g = rng(100 + salt);
        // Ragged lengths 3..25 (longer than MPNet's exact buckets, so the logarithmic ones are used).
        const auto sentences = random_sentences(g, 6, t.vocab, 23);
        EXPECT_LT(max_difference(dir, sentences), 2e-5);
      }
}

// A tiny teacher, its 2:4 copy as the student; `n` random sentences.
struct TinyPair {
  HfDir teacher_dir, student_dir;
  HfEncoder teacher{nullptr}, student{nullptr};
  std::map<std::string, torch::Tensor> stored;
};

TinyPair make_pair(const fs::path& root, const std::string& type, uint64_t salt) {
  Tiny t;
  t.type = type;
  write_tiny(root / "dense", t, salt);
  write_pruned(root / "dense", root / "pruned", CheckpointFormat::kSparse24);
  TinyPair p;
  p.teacher_dir = read_hf_dir((root / "dense").string());
  p.student_dir = read_hf_dir((root / "pruned").string());
  p.teacher = load_hf_torch(p.teacher_dir);
  p.student = load_hf_torch(p.student_dir);
  p.stored = stored_masks(p.student, p.student_dir.weights);
  return p;
}

// The neighbour loss against a plain computation in double, and zero when the two agree.
TEST(NeighbourLoss, MatchesHandComputedKl) {
  SPARSE24_SEED_TRACE();
  torch::manual_seed(static_cast<uint64_t>(sparse24::testing::test_seed()));
  const int64_t n = 5, d = 7;
  const torch::Tensor s = torch::randn({n, d}), t = torch::randn({n, d});
  const double temp = 0.3;
  auto cosines = [&](const torch::Tensor& e) {
    std::vector<std::vector<double>> c(n, std::vector<double>(n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0, ni = 0, nj = 0;
        for (int64_t k = 0; k < d; ++k) {
          const double a = e[i][k].item<float>(), b = e[j][k].item<float>();
          dot += a * b;
          ni += a * a;
          nj += b * b;
        }
        c[i][j] = dot / std::sqrt(ni * nj);
      }
    return c;
  };
  const auto cs = cosines(s), ct = cosines(t);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    double zs = 0, zt = 0;
    for (int64_t j = 0; j < n; ++j)
      if (j != i) {
        zs += std::exp(cs[i][j] / temp);
        zt += std::exp(ct[i][j] / temp);
      }
    for (int64_t j = 0; j < n; ++j)
      if (j != i) {
        const double q = std::exp(ct[i][j] / temp) / zt, p = std::exp(cs[i][j] / temp) / zs;
        kl += q * std::log(q / p);
      }
  }
  EXPECT_NEAR(neighbour_loss(s, t, temp).item<double>(), kl / n, 1e-5);
  EXPECT_NEAR(neighbour_loss(t, t, temp).item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(neighbour_loss(3 * t, t, temp).item<double>(), 0.0, 1e-6);  // cosines ignore the scale
}

TEST_F(RetrainTest, MasksStayFixedAndLossFalls) {
  SPARSE24_SEED_TRACE();
  for (const char* type : {"bert", "mpnet"}) {
    SCOPED_TRACE(type);
    TinyPair p = make_pair(dir_ / type, type, 7);
    ASSERT_EQ(p.stored.size(), 12u);  // 2 layers x (q, k, v, o, ffn1, ffn2)
    MaskSet masks = MaskSet::fixed(*p.student, p.stored);
    std::mt19937_64 g = rng(8);
    const auto sentences = random_sentences(g, 64, 40, 12);
    DistillOptions o;
    o.steps = 60;
    o.batch = 16;
    o.lr = 3e-3;
    o.seed = sparse24::testing::test_seed();
    o.similarity_weight = 1.0;  // every term of the loss in play
    const std::vector<DistillStep> h = distill(p.student, p.teacher, masks, sentences, 0, o);
    ASSERT_EQ(h.size(), 60u);
    double first = 0, last = 0;
    for (int i = 0; i < 8; ++i) {
      first += h[i].loss;
      last += h[h.size() - 1 - i].loss;
    }
    EXPECT_LT(last, 0.5 * first);
    // Every pruned position exactly 0, every kept one trained (changed), and the export 2:4 on the same
    // positions as the input.
    torch::NoGradGuard no_grad;
    for (const auto& item : p.student->named_parameters()) {
      const std::string module = item.key().substr(0, item.key().rfind('.'));
      if (!p.stored.count(module) || item.key().find(".weight") == std::string::npos) continue;
      const torch::Tensor& m = p.stored.at(module);
      EXPECT_EQ((item.value() * (1 - m)).abs().max().item<float>(), 0.0f) << item.key();
      EXPECT_EQ(m.sum().item<float>() * 2, static_cast<float>(m.numel())) << item.key();
    }
    const Checkpoint ck = export_weights(p.student, p.student_dir.weights);
    for (const CheckpointTensor& t : p.student_dir.weights.tensors) {
      if (!t.sparse) continue;
      const CheckpointTensor* u = ck.find(t.name);
      ASSERT_TRUE(u && u->sparse) << t.name;
      EXPECT_EQ(u->sparse->metadata, t.sparse->metadata) << t.name;
      EXPECT_NE(u->sparse->values, t.sparse->values) << t.name;
    }
  }
}

TEST_F(RetrainTest, CommandWritesACheckpointTheEngineRuns) {
  SPARSE24_SEED_TRACE();
  for (const CheckpointFormat layout : {CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24}) {
    const std::string name = checkpoint_format_name(layout);
    SCOPED_TRACE(name);
    Tiny t;
    write_tiny(dir_ / name / "dense", t, 11);
    write_pruned(dir_ / name / "dense", dir_ / name / "pruned", layout);
    std::ofstream(dir_ / "corpus.txt")
        << "the lord said unto the king\nand god said\n\nhe said of the king\n";
    RetrainOptions o;
    o.model_dir = (dir_ / name / "dense").string();
    o.pruned_dir = (dir_ / name / "pruned").string();
    o.out_dir = (dir_ / name / "out").string();
    o.corpus = (dir_ / "corpus.txt").string();
    o.eval = o.corpus;
    o.steps = 5;
    o.batch = 2;
    o.threads = 1;
    o.seed = sparse24::testing::test_seed();
    run_retrain(o);
    // Read back: the same layout, files and masks; the engine loads it.
    const HfDir in = read_hf_dir(o.pruned_dir), out = read_hf_dir(o.out_dir);
    // The same config (a sparse-24-bitmask one lists its targets in the writer's tensor order).
    auto config = [](const HfDir& d) {
      json j = json::parse(d.config_json);
      if (j.contains("quantization_config")) {
        auto& targets = j["quantization_config"]["sparsity_config"]["targets"];
        std::vector<std::string> v = targets.get<std::vector<std::string>>();
        std::sort(v.begin(), v.end());
        targets = v;
      }
      return j;
    };
    EXPECT_EQ(config(out), config(in));
    EXPECT_TRUE(fs::exists(dir_ / name / "out" / "vocab.txt"));
    EXPECT_TRUE(fs::exists(dir_ / name / "out" / "1_Pooling" / "config.json"));
    EXPECT_EQ(out.weights.sparse_count(), in.weights.sparse_count());
    for (const CheckpointTensor& x : in.weights.tensors)
      if (x.sparse) {
        EXPECT_EQ(out.weights.find(x.name)->sparse->metadata, x.sparse->metadata) << x.name;
      }
    EXPECT_NO_THROW(engine::load_hf_encoder(o.out_dir));
  }
}

TEST_F(RetrainTest, HostileDirectoriesAreOneLineErrors) {
  Tiny t;
  write_tiny(dir_ / "dense", t, 21);
  write_pruned(dir_ / "dense", dir_ / "pruned", CheckpointFormat::kSparse24);
  Tiny wide = t;
  wide.ffn = 36;
  write_tiny(dir_ / "wide", wide, 22);
  write_pruned(dir_ / "wide", dir_ / "wide-pruned", CheckpointFormat::kSparse24);
  Tiny mpnet = t;
  mpnet.type = "mpnet";
  write_tiny(dir_ / "mpnet", mpnet, 23);
  write_pruned(dir_ / "mpnet", dir_ / "mpnet-pruned", CheckpointFormat::kSparse24);
  std::ofstream(dir_ / "corpus.txt") << "the king\n";
  const std::string d = dir_.string() + "/";
  struct Case {
    std::string model, pruned, out, corpus, expect;
  };
  const Case cases[] = {
      {"dense", "dense", "o1", "corpus.txt", "no 2:4 weights"},
      {"dense", "wide-pruned", "o2", "corpus.txt", "intermediate_size"},
      {"mpnet", "pruned", "o3", "corpus.txt", "model_type"},
      {"dense", "nothing", "o4", "corpus.txt", "nothing"},
      {"dense", "pruned", "pruned", "corpus.txt", "already exists"},
      {"dense", "pruned", "o5", "missing.txt", "missing.txt"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pruned + " " + c.expect);
    RetrainOptions o;
    o.model_dir = d + c.model;
    o.pruned_dir = d + c.pruned;
    o.out_dir = d + c.out;
    o.corpus = d + c.corpus;
    o.steps = 1;
    o.threads = 1;
    try {
      run_retrain(o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      EXPECT_NE(m.find(c.expect), std::string::npos) << m;
    }
  }
  // Nothing was written.
  for (const char* o : {"o1", "o2", "o3", "o4", "o5"}) EXPECT_FALSE(fs::exists(dir_ / o)) << o;
  // The command: one line "sparse24: error: ..." and exit status 1.
  const auto r = run_cli("retrain " + d + "dense " + d + "dense -o " + d + "o6");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out.rfind("sparse24: error: ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("no 2:4 weights"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sparse24::train
