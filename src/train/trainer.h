// Data, training loop and evaluation for the workflow and the sweep.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "train/masks.h"
#include "train/net.h"

namespace sparse24::train {

// A labelled image set in memory: x [n, 1, rows, cols] float32 normalised, y [n] int64.
struct Data {
  torch::Tensor x, y;
  int64_t size() const { return x.size(0); }
};

// Fashion-MNIST from `dir` (train-/t10k-{images-idx3,labels-idx1}-ubyte.gz). `limit` > 0 keeps the first
// `limit` training images. Normalisation: (pixel / 255 - mean) / std.
void load_fashion_mnist(const std::string& dir, int64_t limit, double mean, double std, Data& train,
                        Data& test);
// Images [n, rows, cols] bytes + labels to a Data.
Data make_data(const std::vector<uint8_t>& images, const std::vector<uint8_t>& labels, int64_t n,
               int64_t rows, int64_t cols, double mean, double std);

struct TrainOptions {
  int epochs = 1;
  int64_t batch = 128;
  double lr = 0.05;       // peak; cosine decay to 0 over all steps after a warm-up of 1/4 epoch
  double momentum = 0.9;  // SGD, Nesterov
  double weight_decay = 5e-4;
  uint64_t seed = 1;            // data order of epoch e comes from (seed, e): dense and retrain see the same
  std::string label = "train";  // progress label prefix
  std::FILE* log = stdout;
};

struct EpochLog {
  double loss = 0, train_accuracy = 0, test_accuracy = 0, seconds = 0;
};

// The defaults of `sparse24 workflow` and `sparse24 sweep` for a built-in model (epochs, batch, lr), chosen
// so the default workflow meets issue 4's accuracy targets in well under 20 minutes on 2 cores
// (docs/accuracy.md).
TrainOptions model_defaults(const std::string& model);

// Trains `net`; with `masks`, gradients are masked before and weights after each optimizer step. Evaluates on
// `test` after each epoch when given.
std::vector<EpochLog> train(Net& net, const Data& data, const Data* test, const TrainOptions& options,
                            MaskSet* masks);

// Predicted class of every sample (eval mode, no grad), batches of `batch`.
torch::Tensor predict(Net& net, const Data& data, int64_t batch = 250);
double accuracy(const torch::Tensor& predictions, const Data& data);

// The permutation of 0..n-1 for (seed, epoch): a splitmix64-driven Fisher-Yates shuffle, the same on every
// platform and library version.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int epoch);

}  // namespace sparse24::train
