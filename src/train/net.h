// The models: a network is a list of layer specs (the architecture config written with an export), built
// into a torch module whose parametric layers are registered under their spec names ("conv1", "fc2"), so
// parameter names are "conv1.weight", "fc2.bias", ...
#pragma once
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sparse24::train {

struct LayerSpec {
  std::string type;         // conv2d, linear, batchnorm2d, relu, maxpool2d, flatten, dropout
  std::string name;         // parametric layers only
  int64_t in = 0, out = 0;  // conv2d/linear channels or features; batchnorm2d: in = features
  int64_t kernel = 0, stride = 1, padding = 0;  // conv2d, maxpool2d (kernel = stride for maxpool2d)
  double p = 0;                                 // dropout probability
};

struct NetSpec {
  std::string model;                 // "mlp", "cnn", or a user's name
  std::vector<int64_t> input_shape;  // per sample, e.g. [1, 28, 28]
  int64_t classes = 10;
  double mean = 0, std = 1;  // input normalisation: x = (pixel / 255 - mean) / std
  std::vector<LayerSpec> layers;
};

// The defaults of `sparse24 workflow --model mlp|cnn`; Error for an unknown name.
NetSpec builtin_spec(const std::string& model);

nlohmann::json spec_to_json(const NetSpec& spec);
// Validates every field (types, positive sizes, unique names); Error naming the problem.
NetSpec spec_from_json(const nlohmann::json& j, const std::string& what);

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
