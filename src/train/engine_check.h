// The inference engine (include/sparse24/engine.h) on an exported model against libtorch: the workflow
// runs it on the whole test set after export (issue 5's equivalence check). The engine itself never links
// libtorch; only this comparison does.
#pragma once
#include <torch/torch.h>

#include <string>

#include "train/trainer.h"

namespace sparse24::train {

struct EngineCheck {
  int64_t images = 0;
  double agreement = 0;  // fraction of images whose argmax equals libtorch's
  double accuracy = 0;   // the engine's test accuracy
  double max_logit_diff = 0;
  double ms_per_image = 0;  // engine, the plan's per-layer choice
  int sparse_layers = 0, layers = 0;
};

// Loads DIR with the engine (building or reusing DIR/plan.json for `batch` and `threads`), runs every
// image of `data`, and compares with `torch_logits` [n, classes].
EngineCheck check_engine(const std::string& dir, const Data& data, const torch::Tensor& torch_logits,
                         int64_t batch, int threads);

// Logits of `net` for every image of `data` (eval mode).
torch::Tensor logits(Net& net, const Data& data, int64_t batch = 250);

}  // namespace sparse24::train
