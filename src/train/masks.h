// 2:4 masks on a torch module's Linear and Conv2d weights, and masked training.
//
// Which layers: every Linear and Conv2d (groups = 1) whose name passes the allow list (when non-empty, only
// these names) and the deny list, and whose weight fits the pattern: the reduction dimension K (in_features,
// or in_channels for a conv, pruned as [out*kh*kw, in] like pattern.h's matrix_view) a multiple of 4, and for
// transposable masks also the row count a multiple of 4. Others are recorded as skipped with the reason.
//
// Holding a mask fixed while training: mask_gradients() before each optimizer step (so momentum and Adam
// state never see a pruned position's gradient), apply() after it (so weight decay or any state left from
// before pruning cannot bring a pruned weight back). Pruned weights stay exactly 0.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace sparse24::train {

enum class MaskKind { kMagnitude24, kTransposable24, kUnstructured };

struct MaskOptions {
  MaskKind kind = MaskKind::kMagnitude24;
  double density = 0.5;            // kUnstructured only: fraction of each layer's weights kept
  std::vector<std::string> allow;  // layer names; empty = all
  std::vector<std::string> deny;   // layer names never pruned
};

struct LayerMask {
  std::string name;            // module name, e.g. "conv2"
  std::vector<int64_t> shape;  // weight shape
  bool pruned = false;
  std::string reason;           // why not pruned ("" when pruned)
  double kept_magnitude = 1.0;  // fraction of sum |w| the mask keeps (at pruning time)
  torch::Tensor weight;         // the module's weight parameter (shared storage)
  torch::Tensor mask;           // float 0/1, weight's shape; undefined when not pruned
};

class MaskSet {
 public:
  // Computes masks from the module's current weights (magnitude, per MaskOptions) and applies them.
  static MaskSet prune(torch::nn::Module& module, const MaskOptions& options);
  // Lists the candidate layers without pruning (every entry pruned = false).
  static std::vector<LayerMask> candidates(torch::nn::Module& module, const MaskOptions& options);
  // Masks given per layer name (e.g. read from a 2:4 checkpoint); applies them. Error naming the layer if
  // a name is not a Linear/Conv2d of the module or a mask's shape is not its weight's.
  static MaskSet fixed(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& masks);

  void mask_gradients();  // grad *= mask, for every pruned weight with a gradient
  void apply();           // weight *= mask
  const std::vector<LayerMask>& layers() const { return layers_; }

  // Checkpoint: the module's parameters and buffers plus one "mask.<layer>" tensor per pruned layer.
  void save_checkpoint(torch::nn::Module& module, const std::string& path) const;
  // Loads parameters, buffers and masks into `module` (same architecture); layers not in the checkpoint's
  // masks are dense.
  static MaskSet load_checkpoint(torch::nn::Module& module, const std::string& path);

 private:
  std::vector<LayerMask> layers_;
};

// The [rows, K] matrix of a weight (pattern.h's matrix_view order), as floats.
std::vector<float> weight_matrix(const torch::Tensor& w);

}  // namespace sparse24::train
