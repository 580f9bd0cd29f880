#include "train/export.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "io/model_dir.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/pattern.h"

namespace sparse24::train {
namespace {

std::vector<float> to_vector(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// Every tensor that defines the model: parameters and floating-point buffers (num_batches_tracked, an
// int64 counter that inference never reads, is left out).
std::vector<std::pair<std::string, torch::Tensor>> model_tensors(Net& net) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : net->named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : net->named_buffers())
    if (b.value().is_floating_point()) out.emplace_back(b.key(), b.value());
  return out;
}

}  // namespace

void export_model(Net& net, const MaskSet& masks, const std::string& dir) {
  SafeTensors st;
  st.metadata = {{"format", model_dir::kFormat}, {"config", "model.json"}};
  nlohmann::json pruned = nlohmann::json::object();
  for (const auto& [name, tensor] : model_tensors(net)) {
    const LayerMask* mask = nullptr;
    for (const LayerMask& l : masks.layers())
      if (l.pruned && l.name + ".weight" == name) mask = &l;
    const std::vector<int64_t> shape = tensor.sizes().vec();
    Tensor dense = Tensor::from_float(to_vector(tensor), shape);
    if (mask == nullptr) {
      st.add(name, to_st(dense));
      continue;
    }
    const Compressed c = compress(dense, /*prune=*/false);  // throws if the weight is not 2:4
    st.add(name + ".values", StTensor{"F32", {c.rows, c.values_per_row()}, c.values});
    st.add(name + ".metadata", StTensor{"U8", {c.rows, c.meta_bytes_per_row()}, c.metadata});
    pruned[name] = model_dir::pruned_entry(shape);
  }
  nlohmann::json config = spec_to_json(net->spec());
  config["format"] = model_dir::kFormat;
  config["version"] = 1;
  config["weights"] = "model.safetensors";
  config["pruned"] = pruned;
  write_safetensors(dir + "/model.safetensors", st);
  write_file_atomic(dir + "/model.json", config.dump(2) + "\n");
}

Net load_exported(const std::string& dir) {
  const model_dir::Config config = model_dir::read_config(dir);
  torch::manual_seed(0);  // initial values are all overwritten below
  Net net(spec_from_json(config.json, config.path));
  const std::string& weights_path = config.weights_path;
  const MappedSafeTensors st(weights_path);
  size_t used = 0;
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : model_tensors(net)) {
    const std::vector<int64_t> shape = tensor.sizes().vec();
    std::vector<float> values;
    if (config.is_pruned(name, shape)) {
      Compressed c;
      try {
        c = compressed_from_st(st.view, name, shape, DType::kF32);
      } catch (const Error& e) {
        throw Error(weights_path + ": " + e.what());
      }
      values = decompress(c).to_float();
      used += 2;
    } else {
      const StTensorView* s = st.view.find(name);
      if (!s) throw Error(weights_path + ": missing tensor '" + name + "'");
      if (s->dtype != "F32" || s->shape != shape)
        throw Error(weights_path + ": tensor '" + name + "' is " + s->dtype + " " + shape_string(s->shape) +
                    ", the architecture needs F32 " + shape_string(shape));
      values = from_st(s->copy(), weights_path).to_float();
      used += 1;
    }
    tensor.copy_(torch::from_blob(values.data(), shape, torch::kFloat32));
  }
  if (used != st.view.tensors.size())
    throw Error(weights_path + ": " + std::to_string(st.view.tensors.size() - used) +
                " tensors not used by the architecture");
  net->eval();
  return net;
}

}  // namespace sparse24::train
