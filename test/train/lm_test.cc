// The language-model experiment (lm.h, lm_model.h): the King James Bible split, the model learning, exact
// channel permutations, 2:4 after every pruning method, and a tiny end-to-end run (report keys, the dense
// cache, a bad --out).
#include "train/lm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "io/io_test_util.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "train/lm_model.h"

namespace sparse24::train {
namespace {

namespace fs = std::filesystem;

using sparse24::testing::TempDir;

const char* const kBooks[] = {"Ge",   "Exo", "Lev", "Num", "Deu", "Josh", "Jdgs",
                              "Ruth", "1Sm", "2Sm", "1Ki", "2Ki", "1Chr"};

// `bible -f`-style text: 13 books, `verses` verses each, words from a small vocabulary (deterministic).
std::string fake_bible(int verses) {
  const char* const words[] = {"and", "the", "lord", "said", "unto", "him", "behold", "land", "of", "israel"};
  std::mt19937 rng(7);
  std::string s;
  for (const char* book : kBooks)
    for (int v = 1; v <= verses; ++v) {
      s += std::string(book) + "1:" + std::to_string(v) + " ";
      const int n = 5 + static_cast<int>(rng() % 8);
      for (int w = 0; w < n; ++w) s += std::string(w ? " " : "") + words[rng() % 10];
      s += ".\n";
    }
  return s;
}

LmConfig tiny_config() {
  LmConfig c;
  c.d_model = 16;
  c.layers = 2;
  c.heads = 2;
  c.d_ff = 32;
  c.context = 16;
  return c;
}

TEST(LmData, SplitsWholeBooksDeterministically) {
  const std::string raw = fake_bible(20);
  const KjvSplit a = split_kjv(raw), b = split_kjv(raw);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.valid, b.valid);
  ASSERT_EQ(a.valid_books, std::vector<std::string>{"2Sm"});  // book index 9
  EXPECT_EQ(a.train_books.size(), 12u);
  EXPECT_EQ(a.verses, 13 * 20);
  // References are stripped, and no line of the validation text is a line of the training text... by
  // construction of the books: check the byte counts add up and no reference survived.
  EXPECT_EQ(a.train.find("1:1 "), std::string::npos);
  EXPECT_EQ(a.valid.find("2Sm"), std::string::npos);
  size_t stripped = 0;
  for (size_t p = 0; p < raw.size();) {
    const size_t sp = raw.find(' ', p), nl = raw.find('\n', p);
    stripped += nl + 1 - (sp + 1);
    p = nl + 1;
  }
  EXPECT_EQ(a.train.size() + a.valid.size(), stripped);
  // The validation text is exactly the 2Sm verses.
  std::string expected;
  for (size_t p = 0; p < raw.size();) {
    const size_t sp = raw.find(' ', p), nl = raw.find('\n', p);
    if (raw.compare(p, 3, "2Sm") == 0) expected += raw.substr(sp + 1, nl - sp);
    p = nl + 1;
  }
  EXPECT_EQ(a.valid, expected);
}

TEST(LmData, RejectsMalformedLines) {
  std::string raw = fake_bible(2);
  raw.insert(0, "Ge1 no verse number\n");
  try {
    split_kjv(raw);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 1 "), std::string::npos) << e.what();
  }
  EXPECT_THROW(split_kjv(""), Error);
}

TEST(LmData, WindowsAreDeterministic) {
  const torch::Tensor t = torch::arange(1000, torch::kInt64);
  const torch::Tensor a = sample_windows(t, 8, 17, 3, 5), b = sample_windows(t, 8, 17, 3, 5);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, sample_windows(t, 8, 17, 3, 6)));
  // Consecutive bytes of the text.
  EXPECT_TRUE(torch::equal(a.slice(1, 1, 17) - a.slice(1, 0, 16), torch::ones({8, 16}, torch::kInt64)));
}

TEST(LmModel, RejectsLayersThatCannotBe24) {
  LmConfig c = tiny_config();
  c.d_ff = 30;
  EXPECT_THROW(c.validate(), Error);
  c = tiny_config();
  c.heads = 4;  // head size 4: fine
  EXPECT_NO_THROW(c.validate());
  c.heads = 8;  // head size 2: a 2:4 group would span heads
  EXPECT_THROW(c.validate(), Error);
}

TEST(LmModel, BosWindowsPredictEveryByte) {
  LmConfig c = tiny_config();
  c.bos = true;
  EXPECT_EQ(window_bytes(c), c.context);
  EXPECT_EQ(window_bytes(tiny_config()), c.context + 1);
  const torch::Tensor w = torch::arange(2 * c.context, torch::kInt64).reshape({2, c.context});
  torch::Tensor x, y;
  split_window(c, w, x, y);
  ASSERT_EQ(x.sizes(), w.sizes());
  EXPECT_TRUE(torch::equal(y, w));
  EXPECT_TRUE(x.select(1, 0).eq(c.vocab).all().item<bool>());  // BOS = id vocab
  EXPECT_TRUE(torch::equal(x.slice(1, 1, c.context), w.slice(1, 0, c.context - 1)));
  torch::manual_seed(4);
  Lm lm(c);
  EXPECT_EQ(lm->tok->weight.size(0), c.vocab + 1);  // an embedding row for BOS
  EXPECT_EQ(lm->head->weight.size(0), c.vocab);     // never predicted
  // Perplexity: windows of `context` bytes, each read as [BOS, bytes 0..T-2], predict every byte of the text
  // (the last window partial).
  const int64_t n = 3 * c.context + 5;
  const torch::Tensor tokens = torch::randint(0, 256, {n}, torch::kInt64);
  torch::NoGradGuard g;
  lm->eval();
  double nll = 0;
  for (int64_t s = 0; s < n; s += c.context) {
    const torch::Tensor chunk = tokens.slice(0, s, std::min(n, s + c.context)).unsqueeze(0);
    split_window(c, chunk, x, y);
    nll +=
        torch::nn::functional::cross_entropy(
            lm->forward(x)[0], y[0], torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
  }
  EXPECT_NEAR(perplexity(lm, tokens), std::exp(nll / static_cast<double>(n)),
              1e-5 * std::exp(nll / n));  // float32 logits, batched differently
}

TEST(LmModel, LossDecreasesOnATinyRun) {
  torch::manual_seed(1);
  Lm lm(tiny_config());
  const torch::Tensor tokens = to_tokens(split_kjv(fake_bible(40)).train);
  const double before = perplexity(lm, tokens, 8);
  LmTrainOptions o;
  o.steps = 60;
  o.batch = 8;
  o.lr = 1e-2;
  o.log = std::fopen("/dev/null", "w");
  train_lm(lm, tokens, o, nullptr);
  std::fclose(o.log);
  const double after = perplexity(lm, tokens, 8);
  EXPECT_LT(after, 0.5 * before) << before << " -> " << after;
}

// A random permutation of 0..n-1 (within each block of `block` channels when block > 0).
std::vector<int64_t> random_perm(int64_t n, std::mt19937& rng, int64_t block = 0) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  if (block == 0) block = n;
  for (int64_t s = 0; s < n; s += block) std::shuffle(p.begin() + s, p.begin() + s + block, rng);
  return p;
}

TEST(LmModel, PermutationsKeepTheLogits) {
  for (bool bos : {false, true}) {
    torch::manual_seed(2);
    LmConfig c = tiny_config();
    c.bos = bos;
    Lm lm(c);
    {  // non-trivial LayerNorm parameters and biases, so every permuted tensor matters
      torch::NoGradGuard g;
      for (torch::Tensor& p : lm->parameters()) p.add_(torch::randn_like(p) * 0.1);
    }
    torch::Tensor x = torch::randint(0, 256, {3, c.context}, torch::kInt64);
    if (bos) x.select(1, 0).fill_(c.vocab);
    torch::NoGradGuard g;
    const torch::Tensor before = lm->forward(x);
    std::mt19937 rng(5);
    LmPermutation p;
    p.residual = random_perm(c.d_model, rng);
    for (int64_t i = 0; i < c.layers; ++i) {
      p.ffn.push_back(random_perm(c.d_ff, rng));
      p.head.push_back(random_perm(c.d_model, rng, c.d_model / c.heads));
    }
    ASSERT_NE(p.residual, random_perm(c.d_model, rng, 1));  // not the identity
    const torch::Tensor w_before = lm->blocks[0]->qkv->weight.clone();
    permute_lm(lm, p);
    EXPECT_FALSE(torch::equal(w_before, lm->blocks[0]->qkv->weight));  // the weights did move
    const torch::Tensor after = lm->forward(x);
    EXPECT_TRUE(torch::allclose(before, after, 1e-4, 1e-5)) << (before - after).abs().max().item<float>();

    // A head permutation that moves a channel to another head would change the function: rejected.
    LmPermutation bad;
    bad.head.assign(static_cast<size_t>(c.layers), {});
    bad.head[0] = random_perm(c.d_model, rng);
    std::swap(bad.head[0][0], bad.head[0][static_cast<size_t>(c.d_model - 1)]);
    EXPECT_THROW(permute_lm(lm, bad), Error);
    LmPermutation short_perm;
    short_perm.residual = {0, 1, 2};
    EXPECT_THROW(permute_lm(lm, short_perm), Error);
  }
}

TEST(LmPrune, EveryMethodGives24AndKeepsTheRestDense) {
  const LmConfig c = tiny_config();
  const torch::Tensor tokens = to_tokens(split_kjv(fake_bible(20)).train);
  const torch::Tensor calib = sample_windows(tokens, 4, c.context, 1, 99);
  for (LmMethod m : {LmMethod::kMagnitude, LmMethod::kWanda, LmMethod::kSparseGpt})
    for (bool permute : {false, true}) {
      torch::manual_seed(3);
      Lm lm(c);
      const torch::Tensor head = lm->head->weight.clone(), tok = lm->tok->weight.clone();
      LmPruneOptions o;
      o.method = m;
      o.permute = permute;
      o.permutation_seconds = 0.05;
      prune_lm(lm, calib, o);
      for (LmBlock& b : lm->blocks)
        for (torch::nn::Linear* l : {&b->qkv, &b->proj, &b->up, &b->down}) {
          const torch::Tensor w = (*l)->weight.detach().contiguous();
          EXPECT_TRUE(check_pattern(w.data_ptr<float>(), w.size(0), w.size(1)).valid);
          EXPECT_EQ(w.eq(0).sum().item<int64_t>(), w.numel() / 2);  // exactly 2 of 4 (random init: no zeros)
        }
      if (!permute) {  // the LM head and the embeddings stay dense and untouched
        EXPECT_TRUE(torch::equal(head, lm->head->weight));
        EXPECT_TRUE(torch::equal(tok, lm->tok->weight));
      } else {
        EXPECT_EQ(lm->head->weight.eq(0).sum().item<int64_t>(), 0);
      }
    }
}

// A tiny experiment on a fake Bible in dir (the caller closes o.log).
LmExperimentOptions tiny_experiment(const TempDir& dir, int64_t steps, int64_t retrain_steps) {
  const std::string text = dir.file("kjv.txt");
  write_file_atomic(text, fake_bible(30));
  LmExperimentOptions o;
  o.out = dir.file("out");
  o.text_file = text;
  o.config = tiny_config();
  o.steps = steps;
  o.retrain_steps = retrain_steps;
  o.batch = 4;
  o.calibration = 4;
  o.eval_sequences = 8;
  o.permutation_seconds = 0.05;
  o.threads = 1;
  o.log = std::fopen("/dev/null", "w");
  return o;
}

TEST(LmExperiment, TinyRunWritesTheReportAndReusesTheDenseModel) {
  TempDir dir;
  LmExperimentOptions o = tiny_experiment(dir, 20, 5);
  const LmExperimentResult a = run_lm_experiment(o);
  EXPECT_FALSE(a.dense_cached);
  EXPECT_TRUE(fs::exists(o.out + "/dense.pt"));
  EXPECT_TRUE(fs::exists(o.out + "/report.md"));
  const std::vector<uint8_t> bytes = read_file(o.out + "/report.json");
  const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
  EXPECT_TRUE(j.at("dense_ppl").is_number());
  for (const char* k : {"magnitude", "magnitude_perm", "wanda", "wanda_perm", "sparsegpt", "sparsegpt_perm",
                        "magnitude_retrained", "dense_continued"}) {
    ASSERT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j.at(k).at("ppl").get<double>(), 1.0) << k;
    EXPECT_GE(j.at(k).at("seconds").get<double>(), 0.0) << k;
  }
  EXPECT_EQ(j.at("dense_cached"), false);
  EXPECT_TRUE(j.at("wanda").contains("mask_agreement_with_magnitude"));
  EXPECT_EQ(j.at("magnitude").at("mask_agreement_with_magnitude").get<double>(), 1.0);
  // Diagnostics: per pruned layer, the relative reconstruction error of each method; feature statistics.
  ASSERT_EQ(j.at("reconstruction_error").size(), 4u * static_cast<size_t>(o.config.layers));
  for (const auto& layer : j.at("reconstruction_error"))
    for (const char* m : {"magnitude", "wanda", "sparsegpt"}) {
      EXPECT_GT(layer.at(m).get<double>(), 0.0) << m;
      EXPECT_LT(layer.at(m).get<double>(), 1.0) << m;
    }
  for (const char* k : {"qkv", "proj", "up", "down"})
    EXPECT_GE(j.at("feature_stats").at(k).at("kurtosis").get<double>(), 1.0 - 1e-9);
  EXPECT_EQ(j.at("feature_stats").at("residual").at("kurtosis").size(),
            static_cast<size_t>(o.config.layers + 1));

  // Rerun: the dense model comes from the cache, with the same perplexity.
  const LmExperimentResult b = run_lm_experiment(o);
  EXPECT_TRUE(b.dense_cached);
  EXPECT_EQ(a.dense_ppl, b.dense_ppl);
  // A different configuration does not reuse it.
  o.steps = 21;
  EXPECT_FALSE(run_lm_experiment(o).dense_cached);
  std::fclose(o.log);
}

TEST(LmExperiment, TinyRunWithBos) {
  TempDir dir;
  LmExperimentOptions o = tiny_experiment(dir, 10, 3);
  o.config.bos = true;
  const LmExperimentResult a = run_lm_experiment(o);
  std::fclose(o.log);
  EXPECT_GT(a.dense_ppl, 1.0);
  EXPECT_GT(a.wanda.ppl, 1.0);
  EXPECT_GT(a.sparsegpt.ppl, 1.0);
  const std::vector<uint8_t> bytes = read_file(o.out + "/dense.json");
  EXPECT_EQ(nlohmann::json::parse(bytes.begin(), bytes.end()).at("config").at("bos"), true);
}

TEST(LmExperiment, BadOutIsAClearError) {
  TempDir dir;
  write_file_atomic(dir.file("file"), std::string("x"));
  LmExperimentOptions o;
  o.out = dir.file("file");
  o.text_file = dir.file("missing.txt");
  try {
    run_lm_experiment(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos) << e.what();
  }
  o.out = dir.file("file") + "/sub";
  EXPECT_THROW(run_lm_experiment(o), Error);
}

}  // namespace
}  // namespace sparse24::train
