// The models: a network is a list of layer specs (the architecture config written with an export), built
// into a torch module whose parametric layers are registered under their spec names ("conv1", "fc2"), so
// parameter names are "conv1.weight", "fc2.bias", ...
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "io/net_spec.h"

namespace sparse24::train {

// LayerSpec, NetSpec, builtin_spec, spec_to_json, spec_from_json: io/net_spec.h (shared with the engine).

class NetImpl : public torch::nn::Module {
 public:
  explicit NetImpl(NetSpec spec);
  torch::Tensor forward(torch::Tensor x);
  const NetSpec& spec() const { return spec_; }

 private:
  NetSpec spec_;
  std::vector<torch::nn::AnyModule> modules_;  // one per spec layer; empty for functional layers
};
TORCH_MODULE(Net);

}  // namespace sparse24::train
