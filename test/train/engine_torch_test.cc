// The inference engine (no libtorch inside) against libtorch on exported models: the workflow's MLP and CNN
// with random weights, pruned 2:4 by magnitude, random BatchNorm statistics, exported with export.h.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "common/seed.h"
#include "sparse24/engine.h"
#include "train/engine_check.h"
#include "train/export.h"
#include "train/masks.h"
#include "train/net.h"

namespace sparse24::train {
namespace {

class EngineVsTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sparse24_engine_torch_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  void compare(const std::string& model) {
    SPARSE24_SEED_TRACE();
    torch::manual_seed(static_cast<uint64_t>(sparse24::testing::test_seed()));
    Net net(builtin_spec(model));
    {
      torch::NoGradGuard no_grad;
      for (auto& b : net->named_buffers()) {  // eval-mode BatchNorm with non-trivial statistics
        if (b.key().find("running_mean") != std::string::npos) b.value().uniform_(-0.2, 0.2);
        if (b.key().find("running_var") != std::string::npos) b.value().uniform_(0.5, 2.0);
      }
    }
    MaskSet masks = MaskSet::prune(*net, MaskOptions{});
    net->eval();
    export_model(net, masks, dir_.string());
    Data data;
    data.x = torch::randn({300, 1, 28, 28});
    data.y = torch::randint(0, 10, {300}, torch::kInt64);
    const torch::Tensor ref = logits(net, data);
    const EngineCheck c = check_engine(dir_.string(), data, ref, 64, 1);
    EXPECT_EQ(c.images, 300);
    EXPECT_GE(c.agreement, 0.99) << model;  // near-ties may flip; logits are what is checked tightly
    EXPECT_LT(c.max_logit_diff, 1e-3 * std::max(1.0, ref.abs().max().item<double>())) << model;
    EXPECT_GT(c.layers, 0);
    // Every mode gives the same logits.
    const engine::Model m = engine::load_model(dir_.string());
    int pruned = 0;
    for (const auto& g : m.gemms) pruned += g.pruned;
    EXPECT_GE(pruned, 2) << model;
    const torch::Tensor x = data.x.slice(0, 0, 8).contiguous();
    for (engine::Mode mode : {engine::Mode::kDense, engine::Mode::kSparse}) {
      engine::Engine e(m, 8, 1, mode);
      std::vector<float> y(8 * 10);
      e.run(x.data_ptr<float>(), y.data());
      const torch::Tensor yt = torch::from_blob(y.data(), {8, 10}).clone();
      EXPECT_TRUE(torch::allclose(yt, ref.slice(0, 0, 8), 1e-4, 1e-4)) << model << " mode " << int(mode);
    }
  }
};

TEST_F(EngineVsTorch, Mlp) { compare("mlp"); }
TEST_F(EngineVsTorch, Cnn) { compare("cnn"); }

}  // namespace
}  // namespace sparse24::train
