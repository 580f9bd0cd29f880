#include "train/net.h"

#include <set>

#include "sparse24/error.h"

namespace sparse24::train {

NetImpl::NetImpl(NetSpec spec) : spec_(std::move(spec)) {
  for (const LayerSpec& l : spec_.layers) {
    torch::nn::AnyModule m;
    if (l.type == "conv2d") {
      auto c = torch::nn::Conv2d(
          torch::nn::Conv2dOptions(l.in, l.out, l.kernel).stride(l.stride).padding(l.padding));
      register_module(l.name, c);
      m = torch::nn::AnyModule(c);
    } else if (l.type == "linear") {
      auto c = torch::nn::Linear(l.in, l.out);
      register_module(l.name, c);
      m = torch::nn::AnyModule(c);
    } else if (l.type == "batchnorm2d") {
      auto c = torch::nn::BatchNorm2d(l.in);
      register_module(l.name, c);
      m = torch::nn::AnyModule(c);
    } else if (l.type == "dropout") {
      auto c = torch::nn::Dropout(l.p);
      register_module("dropout" + std::to_string(modules_.size()), c);
      m = torch::nn::AnyModule(c);
    }
    modules_.push_back(std::move(m));
  }
}

torch::Tensor NetImpl::forward(torch::Tensor x) {
  for (size_t i = 0; i < spec_.layers.size(); ++i) {
    const LayerSpec& l = spec_.layers[i];
    if (!modules_[i].is_empty())
      x = modules_[i].forward(x);
    else if (l.type == "relu")
      x = torch::relu(x);
    else if (l.type == "maxpool2d")
      x = torch::max_pool2d(x, l.kernel, l.stride);
    else if (l.type == "flatten")
      x = x.flatten(1);
  }
  return x;
}

}  // namespace sparse24::train
