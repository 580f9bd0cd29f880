// The training integration: fixed masks through optimizer steps, gradient masking, layer selection, the IDX
// reader on good and hostile files, export/reload, checkpoints, and a smoke run of the whole workflow.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/seed.h"
#include "io/io_test_util.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "sparse24/pattern.h"
#include "train/density_png.h"
#include "train/export.h"
#include "train/idx.h"
#include "train/masks.h"
#include "train/net.h"
#include "train/trainer.h"
#include "train/workflow.h"

namespace sparse24::train {
namespace {

namespace fs = std::filesystem;

using sparse24::testing::TempDir;

LayerSpec layer(std::string type, std::string name = "", int64_t in = 0, int64_t out = 0,
                int64_t kernel = 0) {
  LayerSpec l;
  l.type = std::move(type);
  l.name = std::move(name);
  l.in = in;
  l.out = out;
  l.kernel = kernel;
  if (l.type == "maxpool2d") l.stride = kernel;
  if (l.type == "conv2d") l.padding = kernel / 2;
  return l;
}

// A small conv net on [2, 8, 8] inputs: conv1 (K = 2, does not fit 2:4), bn1, conv2 (K = 8), fc1, fc2 (10
// out).
NetSpec tiny_spec() {
  NetSpec s;
  s.model = "tiny";
  s.input_shape = {2, 8, 8};
  s.classes = 10;
  s.layers = {layer("conv2d", "conv1", 2, 8, 3),
              layer("batchnorm2d", "bn1", 8, 8),
              layer("relu"),
              layer("conv2d", "conv2", 8, 8, 3),
              layer("relu"),
              layer("maxpool2d", "", 0, 0, 2),
              layer("flatten"),
              layer("linear", "fc1", 8 * 4 * 4, 16),
              layer("relu"),
              layer("linear", "fc2", 16, 10)};
  return s;
}

const LayerMask& find_layer(const MaskSet& m, const std::string& name) {
  for (const LayerMask& l : m.layers())
    if (l.name == name) return l;
  throw Error("no layer " + name);
}

TEST(Masks, SelectsLayersByNameAndShape) {
  torch::manual_seed(1);
  Net net(tiny_spec());
  MaskSet all = MaskSet::prune(*net, MaskOptions{});
  ASSERT_EQ(all.layers().size(), 4u);  // conv1, conv2, fc1, fc2 (not bn1)
  EXPECT_FALSE(find_layer(all, "conv1").pruned);
  EXPECT_EQ(find_layer(all, "conv1").reason, "K = 2 is not a multiple of 4");
  EXPECT_TRUE(find_layer(all, "conv2").pruned);
  EXPECT_TRUE(find_layer(all, "fc1").pruned);
  EXPECT_TRUE(find_layer(all, "fc2").pruned);
  EXPECT_EQ(find_layer(all, "conv2").shape, (std::vector<int64_t>{8, 8, 3, 3}));

  MaskOptions deny;
  deny.deny = {"fc2"};
  MaskSet d = MaskSet::prune(*net, deny);
  EXPECT_FALSE(find_layer(d, "fc2").pruned);
  EXPECT_EQ(find_layer(d, "fc2").reason, "in the deny list");
  EXPECT_TRUE(find_layer(d, "fc1").pruned);

  MaskOptions allow;
  allow.allow = {"conv2", "conv1"};
  MaskSet a = MaskSet::prune(*net, allow);
  EXPECT_TRUE(find_layer(a, "conv2").pruned);
  EXPECT_FALSE(find_layer(a, "conv1").pruned);  // allowed, but the shape does not fit
  EXPECT_FALSE(find_layer(a, "fc1").pruned);
  EXPECT_EQ(find_layer(a, "fc1").reason, "not in the allow list");

  MaskOptions tr;
  tr.kind = MaskKind::kTransposable24;
  MaskSet t = MaskSet::prune(*net, tr);
  EXPECT_FALSE(find_layer(t, "fc2").pruned);  // 10 rows
  EXPECT_TRUE(find_layer(t, "fc1").pruned);
  const std::vector<float> w = weight_matrix(find_layer(t, "fc1").weight);
  EXPECT_TRUE(is_transposable_24(w.data(), 16, 128));
}

TEST(Masks, ConvMaskRunsAlongInputChannels) {
  torch::manual_seed(2);
  Net net(tiny_spec());
  MaskSet m = MaskSet::prune(*net, MaskOptions{});
  const LayerMask& l = find_layer(m, "conv2");
  // Every (out, kh, kw) row of 8 input channels keeps exactly 2 of each 4.
  const torch::Tensor kept = l.mask.permute({0, 2, 3, 1}).reshape({-1, 2, 4}).sum(2);
  EXPECT_TRUE(kept.eq(2).all().item<bool>());
  EXPECT_GT(l.kept_magnitude, 0.5);
  EXPECT_LE(l.kept_magnitude, 1.0);
}

TEST(Masks, StayFixedThroughOptimizerStepsWithMomentumAndWeightDecay) {
  SPARSE24_SEED_TRACE();
  torch::manual_seed(static_cast<uint64_t>(testing::test_seed()));
  Net net(tiny_spec());
  // Momentum state from dense steps before pruning: a plain step would move pruned weights.
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-2));
  auto step = [&](MaskSet* masks, bool check_grads) {
    const torch::Tensor x = torch::randn({16, 2, 8, 8}), y = torch::randint(0, 10, {16});
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    if (masks) {
      masks->mask_gradients();
      if (check_grads)
        for (const LayerMask& l : masks->layers())
          if (l.pruned) {
            EXPECT_EQ((l.weight.grad() * (1 - l.mask)).abs().max().item<float>(), 0.f) << l.name;
          }
    }
    opt.step();
    if (masks) masks->apply();
  };
  for (int i = 0; i < 3; ++i) step(nullptr, false);
  MaskSet masks = MaskSet::prune(*net, MaskOptions{});
  const torch::Tensor conv2_before = find_layer(masks, "conv2").weight.detach().clone();
  for (int i = 0; i < 5; ++i) step(&masks, true);
  for (const LayerMask& l : masks.layers()) {
    if (!l.pruned) continue;
    EXPECT_EQ((l.weight.detach() * (1 - l.mask)).abs().max().item<float>(), 0.f) << l.name;
    const std::vector<float> w = weight_matrix(l.weight);
    const MatrixView v = matrix_view(l.shape);
    EXPECT_TRUE(check_pattern(w.data(), v.rows, v.cols).valid) << l.name;
  }
  // The kept weights did train.
  EXPECT_FALSE(find_layer(masks, "conv2").weight.detach().equal(conv2_before));
}

TEST(Masks, CheckpointKeepsMasks) {
  TempDir dir;
  torch::manual_seed(3);
  Net net(tiny_spec());
  MaskSet m = MaskSet::prune(*net, MaskOptions{});
  m.save_checkpoint(*net, dir.file("ck.pt"));
  torch::manual_seed(4);
  Net other(tiny_spec());
  MaskSet loaded = MaskSet::load_checkpoint(*other, dir.file("ck.pt"));
  for (const LayerMask& l : m.layers()) {
    const LayerMask& o = find_layer(loaded, l.name);
    EXPECT_EQ(o.pruned, l.pruned) << l.name;
    if (l.pruned) {
      EXPECT_TRUE(o.mask.equal(l.mask)) << l.name;
    }
    EXPECT_TRUE(o.weight.equal(l.weight)) << l.name;
  }
}

// ---- IDX -------------------------------------------------------------------------------------------------

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) { write_file_atomic(path, b); }

std::vector<uint8_t> gz(const std::vector<uint8_t>& b) { return gzip(b.data(), b.size()); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Idx, ReadsGzippedAndPlainFiles) {
  TempDir dir;
  std::vector<uint8_t> pixels(3 * 4 * 5);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  write_bytes(dir.file("img.gz"), gz(encode_idx({3, 4, 5}, pixels)));
  write_bytes(dir.file("lab"), encode_idx({3}, {0, 9, 4}));
  const IdxDataset ds = read_idx_dataset(dir.file("img.gz"), dir.file("lab"));
  EXPECT_EQ(ds.n, 3);
  EXPECT_EQ(ds.rows, 4);
  EXPECT_EQ(ds.cols, 5);
  EXPECT_EQ(ds.images, pixels);
  EXPECT_EQ(ds.labels, (std::vector<uint8_t>{0, 9, 4}));
  const Data d = make_data(ds.images, ds.labels, ds.n, ds.rows, ds.cols, 0.0, 1.0);
  EXPECT_EQ(d.x.sizes().vec(), (std::vector<int64_t>{3, 1, 4, 5}));
  EXPECT_FLOAT_EQ(d.x[0][0][0][1].item<float>(), 7.f / 255.f);
  EXPECT_EQ(d.y[1].item<int64_t>(), 9);
}

TEST(Idx, RejectsBadFilesWithOneLineMessages) {
  TempDir dir;
  const std::string p = dir.file("bad.gz");
  auto err = [&](const std::vector<uint8_t>& bytes, int rank) {
    write_bytes(p, bytes);
    return error_of([&] { read_idx(p, rank); });
  };
  const std::vector<uint8_t> good = encode_idx({2, 2, 2}, std::vector<uint8_t>(8, 1));
  EXPECT_EQ(err(gz(good), 3), "");
  EXPECT_NE(err(gz({1, 2}), 3).find("too short"), std::string::npos);
  std::vector<uint8_t> magic = good;
  magic[0] = 8;
  EXPECT_NE(err(gz(magic), 3).find("bad IDX magic"), std::string::npos);
  std::vector<uint8_t> type = good;
  type[2] = 0x0D;  // float
  EXPECT_NE(err(gz(type), 3).find("element type 13"), std::string::npos);
  EXPECT_NE(err(gz(good), 1).find("IDX rank 3, expected 1"), std::string::npos);
  std::vector<uint8_t> truncated(good.begin(), good.end() - 1);
  EXPECT_NE(err(gz(truncated), 3).find("IDX data is 7 bytes, dimensions [2, 2, 2] need 8"),
            std::string::npos);
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_NE(err(gz(longer), 3).find("need 8"), std::string::npos);
  std::vector<uint8_t> huge = encode_idx({0x7fffffff, 0x7fffffff, 0x7fffffff}, {});
  EXPECT_NE(err(gz(huge), 3).find("overflows"), std::string::npos);
  std::vector<uint8_t> cut = gz(good);
  cut.resize(cut.size() / 2);
  EXPECT_NE(err(cut, 3).find("truncated gzip data"), std::string::npos);
  std::vector<uint8_t> corrupt = gz(good);
  for (size_t i = 10; i < corrupt.size(); ++i) corrupt[i] ^= 0x5A;
  EXPECT_NE(err(corrupt, 3).find("gzip"), std::string::npos);
  const std::string msg = err(gz(magic), 3);
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_EQ(msg.rfind(p, 0), 0u) << msg;  // starts with the file name

  // Image and label files that disagree.
  write_bytes(dir.file("img"), good);
  write_bytes(dir.file("lab"), encode_idx({3}, {1, 2, 3}));
  EXPECT_NE(error_of([&] { read_idx_dataset(dir.file("img"), dir.file("lab")); }).find("2 images but"),
            std::string::npos);
  write_bytes(dir.file("lab"), encode_idx({2}, {1, 10}));
  EXPECT_NE(error_of([&] { read_idx_dataset(dir.file("img"), dir.file("lab")); }).find("label 10 at index 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_idx(dir.file("missing"), 1); }).find("cannot open"), std::string::npos);
}

TEST(Idx, BoundsInflatedSize) {
  const std::vector<uint8_t> zeros(1 << 20, 0);
  const std::vector<uint8_t> z = gz(zeros);
  EXPECT_NE(error_of([&] { gunzip(z.data(), z.size(), 1000, "x"); }).find("inflates to more than 1000"),
            std::string::npos);
  EXPECT_EQ(gunzip(z.data(), z.size(), zeros.size(), "x"), zeros);
}

// ---- Export ----------------------------------------------------------------------------------------------

TEST(Export, ReloadsToIdenticalPredictions) {
  TempDir dir;
  torch::manual_seed(5);
  Net net(tiny_spec());
  // Make BN statistics non-trivial.
  net->train();
  for (int i = 0; i < 3; ++i) net->forward(torch::randn({32, 2, 8, 8}));
  MaskSet masks = MaskSet::prune(*net, MaskOptions{});
  export_model(net, masks, dir.path().string());
  Net back = load_exported(dir.path().string());
  net->eval();
  const torch::Tensor x = torch::randn({64, 2, 8, 8});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(net->forward(x).equal(back->forward(x)));

  const SafeTensors st = read_safetensors(dir.file("model.safetensors"));
  EXPECT_NE(st.find("conv2.weight.values"), nullptr);
  EXPECT_NE(st.find("conv2.weight.metadata"), nullptr);
  EXPECT_EQ(st.find("conv2.weight"), nullptr);
  EXPECT_NE(st.find("conv1.weight"), nullptr);  // not pruned: dense
  EXPECT_NE(st.find("bn1.running_var"), nullptr);
  EXPECT_EQ(st.at("fc1.weight.values").shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(st.at("conv2.weight.metadata").shape, (std::vector<int64_t>{8 * 9, 1}));
  const auto cfg = nlohmann::json::parse(read_file(dir.file("model.json")));
  EXPECT_EQ(cfg["pruned"]["conv2.weight"]["shape"], nlohmann::json({8, 8, 3, 3}));

  // A config that does not match the weights is an error, not garbage.
  nlohmann::json bad = cfg;
  bad["layers"][7]["out"] = 32;
  write_file_atomic(dir.file("model.json"), bad.dump());
  EXPECT_THROW(load_exported(dir.path().string()), Error);
  // The envelope is checked as the engine checks it (io/model_dir.h): the message names the problem.
  auto reload_error = [&](const auto& edit) {
    nlohmann::json c = cfg;
    edit(c);
    write_file_atomic(dir.file("model.json"), c.dump());
    try {
      load_exported(dir.path().string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(reload_error([](nlohmann::json&) {}), "");
  EXPECT_NE(reload_error([](nlohmann::json& c) {
              c["pruned"]["conv2.weight"]["pattern"] = "1:2";
            }).find("pruned entry for 'conv2.weight'"),
            std::string::npos);
  EXPECT_NE(reload_error([](nlohmann::json& c) {
              c["pruned"] = {1, 2};
            }).find("pruned must be an object"),
            std::string::npos);
  EXPECT_NE(reload_error([](nlohmann::json& c) { c["format"] = 3; }).find("format is not sparse24-model"),
            std::string::npos);
  EXPECT_NE(reload_error([](nlohmann::json& c) {
              c["weights"] = "../model.safetensors";
            }).find("weights must be a file name"),
            std::string::npos);
}

TEST(Export, RejectsNonTwoFourWeights) {
  TempDir dir;
  torch::manual_seed(6);
  Net net(tiny_spec());
  MaskSet masks = MaskSet::prune(*net, MaskOptions{});
  {
    torch::NoGradGuard no_grad;
    find_layer(masks, "fc1").weight.fill_(1.f);
  }
  EXPECT_THROW(export_model(net, masks, dir.path().string()), Error);
}

TEST(Spec, JsonRoundTripAndValidation) {
  for (const char* m : {"mlp", "cnn"}) {
    const NetSpec s = builtin_spec(m);
    const nlohmann::json j = spec_to_json(s);
    EXPECT_EQ(spec_to_json(spec_from_json(j, "x")), j);
  }
  nlohmann::json j = spec_to_json(builtin_spec("cnn"));
  j["layers"][0]["in"] = -1;
  EXPECT_THROW(spec_from_json(j, "x"), Error);
  j = spec_to_json(builtin_spec("cnn"));
  j["layers"][0]["type"] = "lstm";
  EXPECT_THROW(spec_from_json(j, "x"), Error);
  EXPECT_THROW(builtin_spec("resnet"), Error);
}

TEST(Trainer, EpochOrderIsAPermutationAndDependsOnSeedAndEpoch) {
  const std::vector<int64_t> a = epoch_order(1000, 1, 0);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(a, epoch_order(1000, 1, 0));
  EXPECT_NE(a, epoch_order(1000, 1, 1));
  EXPECT_NE(a, epoch_order(1000, 2, 0));
}

TEST(DensityPng, WritesAValidPng) {
  TempDir dir;
  const std::vector<float> w = {1.f, -1.f, 0.f, 0.5f, 0.f, 0.f};
  write_density_png(dir.file("m.png"), w.data(), 2, 3, 2);
  const std::vector<uint8_t> b = read_file(dir.file("m.png"));
  ASSERT_GT(b.size(), 8u);
  EXPECT_EQ(b[1], 'P');
  EXPECT_EQ(b[2], 'N');
  EXPECT_EQ(b[3], 'G');
}

// ---- The whole workflow
// ------------------------------------------------------------------------------------

TEST(Workflow, SmokeRunWritesTheReport) {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  WorkflowOptions o;
  o.model = "cnn";
  o.limit = 512;
  o.epochs = 1;
  o.out = dir.file("out");
  std::FILE* log = std::tmpfile();
  o.log = log;
  const WorkflowResult r = run_workflow(o);
  std::fclose(log);
  EXPECT_TRUE(r.reload_identical);
  const auto j = nlohmann::json::parse(read_file(dir.file("out/report.json")));
  for (const char* key : {"dataset", "model", "seed", "epochs", "dense_accuracy", "oneshot_accuracy",
                          "retrained_accuracy", "seconds", "layers"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["dataset"], "fashion-mnist");
  EXPECT_EQ(j["model"], "cnn");
  EXPECT_EQ(j["epochs"], 1);
  EXPECT_EQ(j["train_images"], 512);
  EXPECT_GT(j["dense_accuracy"].get<double>(), 0.3);  // far better than chance (0.1) even on 512 images
  ASSERT_EQ(j["layers"].size(), 4u);
  for (const auto& l : j["layers"]) {
    for (const char* key : {"name", "shape", "pruned", "kept_magnitude"}) EXPECT_TRUE(l.contains(key)) << key;
    if (l["pruned"]) {
      EXPECT_TRUE(fs::exists(dir.file("out/" + l["maps"]["pruned"].get<std::string>())));
    }
  }
  EXPECT_FALSE(j["layers"][0]["pruned"]);  // conv1: one input channel
  EXPECT_TRUE(fs::exists(dir.file("out/report.md")));
  EXPECT_TRUE(fs::exists(dir.file("out/export/model.safetensors")));
}

}  // namespace
}  // namespace sparse24::train
