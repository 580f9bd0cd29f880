// The workflow export's layer vocabulary (net_spec.h): the one parser and writer of model.json's
// architecture, shared by the training library and the engine.
#include "net_spec.h"

#include <set>

#include "sparse24/error.h"

namespace sparse24 {
namespace {

LayerSpec parametric(std::string type, std::string name, int64_t in, int64_t out) {
  LayerSpec l;
  l.type = std::move(type);
  l.name = std::move(name);
  l.in = in;
  l.out = out;
  return l;
}
LayerSpec conv(std::string name, int64_t in, int64_t out) {
  LayerSpec l = parametric("conv2d", std::move(name), in, out);
  l.kernel = 3;
  l.padding = 1;
  return l;
}
LayerSpec plain(std::string type) {
  LayerSpec l;
  l.type = std::move(type);
  return l;
}
LayerSpec maxpool(int64_t k) {
  LayerSpec l = plain("maxpool2d");
  l.kernel = l.stride = k;
  return l;
}
// Retraining starts from a converged dense model and repeats the whole schedule, so it overfits more than
// dense training did; dropout keeps the retrained model's test accuracy with the dense one's.
LayerSpec dropout(double p) {
  LayerSpec l = plain("dropout");
  l.p = p;
  return l;
}
LayerSpec batchnorm(std::string name, int64_t features) {
  LayerSpec l = parametric("batchnorm2d", std::move(name), features, features);
  return l;
}

const std::set<std::string> kTypes = {"conv2d",    "linear",  "batchnorm2d", "relu",
                                      "maxpool2d", "flatten", "dropout"};

}  // namespace

NetSpec builtin_spec(const std::string& model) {
  NetSpec s;
  s.model = model;
  s.input_shape = {1, 28, 28};
  s.classes = 10;
  // Fashion-MNIST training-set pixel statistics.
  s.mean = 0.2860;
  s.std = 0.3530;
  if (model == "mlp") {
    s.layers = {plain("flatten"), parametric("linear", "fc1", 784, 512),
                plain("relu"),    parametric("linear", "fc2", 512, 256),
                plain("relu"),    parametric("linear", "fc3", 256, 10)};
  } else if (model == "cnn") {
    s.layers = {conv("conv1", 1, 32),
                batchnorm("bn1", 32),
                plain("relu"),
                maxpool(2),
                conv("conv2", 32, 64),
                batchnorm("bn2", 64),
                plain("relu"),
                maxpool(2),
                plain("flatten"),
                dropout(0.3),
                parametric("linear", "fc1", 64 * 7 * 7, 256),
                plain("relu"),
                dropout(0.3),
                parametric("linear", "fc2", 256, 10)};
  } else {
    throw Error("unknown model '" + model + "' (expected mlp or cnn)");
  }
  return s;
}

nlohmann::json spec_to_json(const NetSpec& spec) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) {
    nlohmann::json j = {{"type", l.type}};
    if (!l.name.empty()) j["name"] = l.name;
    if (l.type == "conv2d" || l.type == "linear") {
      j["in"] = l.in;
      j["out"] = l.out;
    }
    if (l.type == "batchnorm2d") j["features"] = l.in;
    if (l.type == "conv2d") {
      j["kernel"] = l.kernel;
      j["stride"] = l.stride;
      j["padding"] = l.padding;
    }
    if (l.type == "maxpool2d") j["kernel"] = l.kernel;
    if (l.type == "dropout") j["p"] = l.p;
    layers.push_back(j);
  }
  return {{"model", spec.model},
          {"input_shape", spec.input_shape},
          {"classes", spec.classes},
          {"normalize", {{"mean", spec.mean}, {"std", spec.std}}},
          {"layers", layers}};
}

NetSpec spec_from_json(const nlohmann::json& j, const std::string& what) {
  auto bad = [&](const std::string& problem) -> Error { return Error(what + ": " + problem); };
  try {
    NetSpec s;
    s.model = j.at("model").get<std::string>();
    s.input_shape = j.at("input_shape").get<std::vector<int64_t>>();
    s.classes = j.at("classes").get<int64_t>();
    s.mean = j.at("normalize").at("mean").get<double>();
    s.std = j.at("normalize").at("std").get<double>();
    if (s.input_shape.size() != 1 && s.input_shape.size() != 3)
      throw bad("input_shape must be [features] or [channels, height, width]");
    int64_t input_size = 1;
    for (int64_t d : s.input_shape) {
      if (d <= 0 || d > kMaxInputDim)
        throw bad("input_shape dimension " + std::to_string(d) + " out of range");
      input_size *= d;
    }
    if (input_size > kMaxInputSize) throw bad("input too large");
    if (s.classes <= 0 || s.classes > 1 << 20) throw bad("classes out of range");
    if (!(s.std > 0)) throw bad("normalize.std must be positive");
    std::set<std::string> names;
    for (const auto& jl : j.at("layers")) {
      LayerSpec l;
      l.type = jl.at("type").get<std::string>();
      if (!kTypes.count(l.type)) throw bad("unknown layer type '" + l.type + "'");
      auto positive = [&](const char* key) {
        const int64_t v = jl.at(key).get<int64_t>();
        if (v <= 0 || v > kMaxLayerSize)
          throw bad(l.type + " " + key + " " + std::to_string(v) + " out of range");
        return v;
      };
      if (l.type == "conv2d" || l.type == "linear" || l.type == "batchnorm2d") {
        l.name = jl.at("name").get<std::string>();
        if (l.name.empty() || l.name.find('.') != std::string::npos || !names.insert(l.name).second)
          throw bad("layer name '" + l.name + "' is empty, has a '.', or is repeated");
      }
      if (l.type == "conv2d" || l.type == "linear") {
        l.in = positive("in");
        l.out = positive("out");
      }
      if (l.type == "batchnorm2d") l.in = l.out = positive("features");
      if (l.type == "conv2d") {
        l.kernel = positive("kernel");
        l.stride = positive("stride");
        l.padding = jl.at("padding").get<int64_t>();
        if (l.padding < 0 || l.padding > kMaxPadding) throw bad("conv2d padding out of range");
      }
      if (l.type == "maxpool2d") l.kernel = l.stride = positive("kernel");
      if (l.type == "dropout") {
        l.p = jl.at("p").get<double>();
        if (!(l.p >= 0 && l.p < 1)) throw bad("dropout p must be in [0, 1)");
      }
      s.layers.push_back(l);
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("bad architecture config: ") + e.what());
  }
}

}  // namespace sparse24
