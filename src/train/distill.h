// Distillation of a 2:4 student encoder from its dense teacher with the masks fixed (retrain.h's loop).
//
// Per step: a batch of sentences padded to its longest (attention mask), the teacher's embeddings and layer
// outputs under no_grad, the student's with gradients; loss = mean(1 - cos(student, teacher embedding))
// + hidden_weight * mean over layers of MSE(student layer output, teacher's) over the real tokens, divided by
// the teacher's mean square there (so every layer counts alike whatever its scale) + similarity_weight *
// the batch's neighbour loss: each sentence's softmax over its cosine similarities to the others in the
// batch (temperature similarity_temperature), the teacher's as the target of the student's (KL divergence,
// mean over sentences): what recall@k and the Spearman of pairwise similarities rank; backward; grad *= mask;
// AdamW step (weight decay 0.01 on Linear weights, none on biases and LayerNorms); weight *= mask.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "train/hf_torch.h"
#include "train/masks.h"

namespace sparse24::train {

struct DistillOptions {
  int64_t steps = 300, batch = 32;
  double lr = 1e-4, hidden_weight = 1.0, weight_decay = 0.01;
  double similarity_weight = 0.0, similarity_temperature = 0.05;
  int64_t warmup = -1;  // -1: 5% of the steps (at least 1)
  bool train_embeddings = false;
  // The sentence order: per pass over the corpus, Fisher-Yates over mt19937_64, then batches of similar
  // lengths (chunks of 50 batches sorted by length) in shuffled order.
  uint64_t seed = 1;
};

struct DistillStep {
  double loss = 0, cosine = 0;  // the batch's loss and mean embedding cosine (before the step)
};

// Pads sentences [first, first + n) of `ids` into a batch: ids [n, longest] (pad_id after each), mask float.
std::pair<torch::Tensor, torch::Tensor> pad_batch(const std::vector<std::vector<int32_t>>& ids,
                                                  const std::vector<int64_t>& order, int64_t first, int64_t n,
                                                  int32_t pad_id);

// The batch's neighbour loss: mean over rows i of KL(q_i || p_i), q_i and p_i the softmax over j != i of
// cos(e_i, e_j) / temperature for the teacher's and the student's embeddings [n, d] (n >= 2).
torch::Tensor neighbour_loss(const torch::Tensor& student, const torch::Tensor& teacher, double temperature);

// Trains `student` (its masks in `masks`) toward `teacher` on `sentences` (token ids). `on_step(i, step)`
// after each step. Returns every step's loss and cosine.
std::vector<DistillStep> distill(HfEncoder& student, HfEncoder& teacher, MaskSet& masks,
                                 const std::vector<std::vector<int32_t>>& sentences, int32_t pad_id,
                                 const DistillOptions& o,
                                 const std::function<void(int64_t, const DistillStep&)>& on_step = {});

}  // namespace sparse24::train
