#include "train/distill.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "sparse24/error.h"

namespace sparse24::train {

std::pair<torch::Tensor, torch::Tensor> pad_batch(const std::vector<std::vector<int32_t>>& ids,
                                                  const std::vector<int64_t>& order, int64_t first, int64_t n,
                                                  int32_t pad_id) {
  int64_t longest = 1;
  for (int64_t i = 0; i < n; ++i)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids[order[first + i]].size()));
  std::vector<int64_t> t(static_cast<size_t>(n * longest), pad_id);
  std::vector<float> m(static_cast<size_t>(n * longest), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t>& s = ids[order[first + i]];
    for (size_t j = 0; j < s.size(); ++j) {
      t[i * longest + j] = s[j];
      m[i * longest + j] = 1.0f;
    }
  }
  return {torch::from_blob(t.data(), {n, longest}, torch::kLong).clone(),
          torch::from_blob(m.data(), {n, longest}, torch::kFloat32).clone()};
}

namespace {

// Batches of similar lengths (padding costs as much as tokens): the shuffled order is cut into chunks of 50
// batches, each chunk sorted by length and cut into batches, and the batches shuffled.
void group_by_length(std::vector<int64_t>& order, const std::vector<std::vector<int32_t>>& sentences,
                     int64_t batch, std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(order.size()), chunk = 50 * batch;
  auto longer = [&](int64_t a, int64_t b) { return sentences[a].size() > sentences[b].size(); };
  for (int64_t c = 0; c < n; c += chunk)
    std::stable_sort(order.begin() + c, order.begin() + std::min(n, c + chunk), longer);
  const int64_t batches = n / batch;  // a last partial batch stays last (and is skipped)
  std::vector<int64_t> perm(static_cast<size_t>(batches));
  for (int64_t i = 0; i < batches; ++i) perm[i] = i;
  for (int64_t i = batches - 1; i > 0; --i) std::swap(perm[i], perm[rng() % static_cast<uint64_t>(i + 1)]);
  std::vector<int64_t> out;
  out.reserve(order.size());
  for (int64_t b : perm) out.insert(out.end(), order.begin() + b * batch, order.begin() + (b + 1) * batch);
  out.insert(out.end(), order.begin() + batches * batch, order.end());
  order = std::move(out);
}

}  // namespace

torch::Tensor neighbour_loss(const torch::Tensor& student, const torch::Tensor& teacher, double temperature) {
  // Row i: softmax over j != i of cos(e_i, e_j) / T; the teacher's distribution is the target.
  const torch::Tensor diag = torch::eye(student.size(0), torch::kBool);
  auto logits = [&](const torch::Tensor& e) {
    const torch::Tensor u =
        torch::nn::functional::normalize(e, torch::nn::functional::NormalizeFuncOptions().p(2).dim(1));
    return (u.matmul(u.t()) / temperature).masked_fill(diag, -1e9);
  };
  const torch::Tensor q = torch::softmax(logits(teacher), 1).detach();
  const torch::Tensor log_p = torch::log_softmax(logits(student), 1);
  return (q * (torch::log(q.clamp_min(1e-12)) - log_p)).masked_fill(diag, 0).sum(1).mean();
}

std::vector<DistillStep> distill(HfEncoder& student, HfEncoder& teacher, MaskSet& masks,
                                 const std::vector<std::vector<int32_t>>& sentences, int32_t pad_id,
                                 const DistillOptions& o,
                                 const std::function<void(int64_t, const DistillStep&)>& on_step) {
  if (sentences.empty()) throw Error("no sentences to train on");
  if (o.steps < 1 || o.batch < 1) throw Error("steps and batch must be at least 1");
  teacher->eval();
  for (auto& p : teacher->parameters()) p.set_requires_grad(false);
  student->train();  // no dropout in the module: train() and eval() compute the same

  // Trained: every Linear and LayerNorm of the layers (and the embeddings when asked); decay on Linear
  // weights only.
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& item : student->named_parameters()) {
    const std::string& n = item.key();
    const bool embedding = n.rfind("layers.", 0) != 0;  // word, position, token_type, relative, ln
    const bool train = !embedding || o.train_embeddings;
    item.value().set_requires_grad(train);
    if (!train) continue;
    const bool weight = n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0;
    const bool linear_weight = weight && student->linears.count(n.substr(0, n.size() - 7)) != 0;
    (linear_weight ? decay : no_decay).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(o.lr).weight_decay(0)));
  torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(o.lr));
  const int64_t warmup = o.warmup >= 0 ? std::max<int64_t>(1, o.warmup) : std::max<int64_t>(1, o.steps / 20);

  const int64_t n = static_cast<int64_t>(sentences.size());
  const int64_t batch = std::min(o.batch, n);
  std::mt19937_64 rng(o.seed);
  std::vector<int64_t> order;
  int64_t next = n;  // position in the current pass; n: reshuffle
  std::vector<DistillStep> history;
  for (int64_t step = 0; step < o.steps; ++step) {
    if (next + batch > n) {
      order.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) order[i] = i;
      for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
      group_by_length(order, sentences, batch, rng);
      next = 0;
    }
    const auto [ids, mask] = pad_batch(sentences, order, next, batch, pad_id);
    next += batch;

    double lr = o.lr;
    if (step < warmup) {
      lr = o.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    } else {
      const double t = static_cast<double>(step - warmup) / std::max<double>(1.0, double(o.steps - warmup));
      lr = o.lr * 0.5 * (1.0 + std::cos(M_PI * t));
    }
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);

    const bool states = o.hidden_weight > 0;
    HfOutput target;
    {
      torch::NoGradGuard no_grad;
      target = teacher->forward(ids, mask, states);
    }
    const HfOutput out = student->forward(ids, mask, states);
    const torch::Tensor cos = torch::cosine_similarity(out.embedding, target.embedding, 1);
    torch::Tensor loss = (1.0 - cos).mean();
    if (states) {
      const torch::Tensor m = mask.unsqueeze(-1);
      const torch::Tensor count = m.sum() * static_cast<double>(out.states[0].size(2));
      torch::Tensor hidden = torch::zeros({});
      for (size_t l = 0; l < out.states.size(); ++l) {
        const torch::Tensor err = ((out.states[l] - target.states[l]).pow(2) * m).sum() / count;
        const torch::Tensor scale = (target.states[l].pow(2) * m).sum() / count;
        hidden = hidden + err / scale.clamp_min(1e-12);
      }
      loss = loss + o.hidden_weight * hidden / static_cast<double>(out.states.size());
    }
    if (o.similarity_weight > 0 && out.embedding.size(0) > 1)
      loss = loss +
             o.similarity_weight * neighbour_loss(out.embedding, target.embedding, o.similarity_temperature);
    opt.zero_grad();
    loss.backward();
    masks.mask_gradients();
    opt.step();
    masks.apply();
    DistillStep s{loss.item<double>(), cos.mean().item<double>()};
    if (!std::isfinite(s.loss))
      throw Error("the loss became " + std::to_string(s.loss) + " at step " + std::to_string(step + 1) +
                  " (try a smaller --lr)");
    history.push_back(s);
    if (on_step) on_step(step, s);
  }
  return history;
}

}  // namespace sparse24::train
