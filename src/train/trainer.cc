#include "train/trainer.h"

#include <cmath>
#include <numeric>

#include "sparse24/error.h"
#include "train/idx.h"
#include "train/progress.h"

namespace sparse24::train {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double lr_at(const TrainOptions& o, int64_t step, int64_t total) {
  const double warmup = std::max<double>(1.0, static_cast<double>(total) / (4.0 * std::max(o.epochs, 1)));
  const double s = static_cast<double>(step);
  if (s < warmup) return o.lr * (s + 1) / warmup;
  const double t = (s - warmup) / std::max(1.0, static_cast<double>(total) - warmup);
  return 0.5 * o.lr * (1 + std::cos(M_PI * t));
}

}  // namespace

TrainOptions model_defaults(const std::string& model) {
  TrainOptions o;
  o.batch = 128;
  o.lr = 0.05;
  o.epochs = model == "cnn" ? 10 : 20;
  return o;
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(epoch) + 1;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

Data make_data(const std::vector<uint8_t>& images, const std::vector<uint8_t>& labels, int64_t n,
               int64_t rows, int64_t cols, double mean, double std) {
  if (images.size() < static_cast<size_t>(n * rows * cols) || labels.size() < static_cast<size_t>(n))
    throw Error("make_data: fewer bytes than the shape needs");
  Data d;
  torch::Tensor raw =
      torch::from_blob(const_cast<uint8_t*>(images.data()), {n, 1, rows, cols}, torch::kUInt8);
  d.x = ((raw.to(torch::kFloat32) / 255.0 - mean) / std).contiguous();
  d.y = torch::from_blob(const_cast<uint8_t*>(labels.data()), {n}, torch::kUInt8).to(torch::kInt64);
  return d;
}

void load_fashion_mnist(const std::string& dir, int64_t limit, double mean, double std, Data& train,
                        Data& test) {
  IdxDataset tr = read_idx_dataset(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
  IdxDataset te = read_idx_dataset(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  if (tr.rows != 28 || tr.cols != 28 || te.rows != 28 || te.cols != 28)
    throw Error(dir + ": Fashion-MNIST images must be 28x28");
  const int64_t n = limit > 0 ? std::min(limit, tr.n) : tr.n;
  train = make_data(tr.images, tr.labels, n, 28, 28, mean, std);
  test = make_data(te.images, te.labels, te.n, 28, 28, mean, std);
}

torch::Tensor predict(Net& net, const Data& data, int64_t batch) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < data.size(); i += batch) {
    const int64_t end = std::min(data.size(), i + batch);
    parts.push_back(net->forward(data.x.slice(0, i, end)).argmax(1));
  }
  return torch::cat(parts);
}

double accuracy(const torch::Tensor& predictions, const Data& data) {
  return predictions.eq(data.y).sum().item<double>() / static_cast<double>(data.size());
}

std::vector<EpochLog> train(Net& net, const Data& data, const Data* test, const TrainOptions& o,
                            MaskSet* masks) {
  torch::optim::SGD opt(
      net->parameters(),
      torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(true).weight_decay(o.weight_decay));
  const int64_t n = data.size();
  const int64_t batches = (n + o.batch - 1) / o.batch;
  const int64_t total = batches * o.epochs;
  std::vector<EpochLog> logs;
  int64_t step = 0;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    net->train();
    const std::vector<int64_t> order = epoch_order(n, o.seed, epoch);
    const torch::Tensor perm = torch::from_blob(const_cast<int64_t*>(order.data()), {n}, torch::kInt64);
    Progress bar(o.label + " " + std::to_string(epoch + 1) + "/" + std::to_string(o.epochs), batches, o.log);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t b = 0; b < batches; ++b, ++step) {
      const torch::Tensor idx = perm.slice(0, b * o.batch, std::min(n, (b + 1) * o.batch));
      const torch::Tensor x = data.x.index_select(0, idx), y = data.y.index_select(0, idx);
      const double lr = lr_at(o, step, total);
      for (auto& group : opt.param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
      opt.zero_grad();
      const torch::Tensor out = net->forward(x);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(out, y);
      loss.backward();
      if (masks) masks->mask_gradients();
      opt.step();
      if (masks) masks->apply();
      const int64_t bs = idx.size(0);
      loss_sum += loss.item<double>() * static_cast<double>(bs);
      correct += out.argmax(1).eq(y).sum().item<int64_t>();
      seen += bs;
      bar.update(b + 1, loss_sum / static_cast<double>(seen),
                 static_cast<double>(correct) / static_cast<double>(seen));
    }
    EpochLog log;
    log.loss = loss_sum / static_cast<double>(seen);
    log.train_accuracy = static_cast<double>(correct) / static_cast<double>(seen);
    std::string extra;
    if (test) {
      log.test_accuracy = accuracy(predict(net, *test), *test);
      char buf[64];
      std::snprintf(buf, sizeof buf, "test acc %.2f%%", 100 * log.test_accuracy);
      extra = buf;
    }
    log.seconds = bar.seconds();
    bar.finish(extra);
    logs.push_back(log);
  }
  return logs;
}

}  // namespace sparse24::train
