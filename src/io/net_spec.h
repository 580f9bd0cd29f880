// The workflow export's architecture (model.json's "model", "input_shape", "classes", "normalize" and
// "layers"): the layer vocabulary, its parameters and their limits, written once and used by both readers,
// the training library (src/train, which builds torch modules from it) and the engine (src/engine, which
// builds its ops from it). Torch-free.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sparse24 {

struct LayerSpec {
  std::string type;         // conv2d, linear, batchnorm2d, relu, maxpool2d, flatten, dropout
  std::string name;         // parametric layers only
  int64_t in = 0, out = 0;  // conv2d/linear channels or features; batchnorm2d: in = features
  int64_t kernel = 0, stride = 1, padding = 0;  // conv2d, maxpool2d (kernel = stride for maxpool2d)
  double p = 0;                                 // dropout probability
};

struct NetSpec {
  std::string model;                 // "mlp", "cnn", or a user's name
  std::vector<int64_t> input_shape;  // per sample: [features] or [channels, height, width]
  int64_t classes = 10;
  double mean = 0, std = 1;  // input normalisation: x = (pixel / 255 - mean) / std
  std::vector<LayerSpec> layers;
};

// The limits every reader enforces.
inline constexpr int64_t kMaxLayerSize = int64_t{1} << 20;  // channels, features, kernel, stride
inline constexpr int64_t kMaxInputDim = 65536;              // each input_shape dimension
inline constexpr int64_t kMaxInputSize = int64_t{1} << 26;  // elements per input sample
inline constexpr int64_t kMaxPadding = 1024;

// The defaults of `sparse24 workflow --model mlp|cnn`; Error for an unknown name.
NetSpec builtin_spec(const std::string& model);

nlohmann::json spec_to_json(const NetSpec& spec);
// Validates every field (types, sizes within the limits above, unique names without '.'); Error "what: ..."
// naming the problem.
NetSpec spec_from_json(const nlohmann::json& j, const std::string& what);

}  // namespace sparse24
