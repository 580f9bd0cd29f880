#include "train/masks.h"

#include <algorithm>
#include <cmath>

#include "sparse24/error.h"
#include "sparse24/mask.h"
#include "sparse24/pattern.h"

namespace sparse24::train {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::vector<float> to_vector(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

torch::Tensor from_vector(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  return torch::from_blob(const_cast<float*>(v.data()), shape, torch::kFloat32).clone();
}

// Keeps the round(density * n) largest |w| of the whole matrix (ties to the lower index).
Mask unstructured_mask(const std::vector<float>& w, double density) {
  const size_t n = w.size();
  const size_t keep =
      static_cast<size_t>(std::llround(std::clamp(density, 0.0, 1.0) * static_cast<double>(n)));
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::fabs(w[a]) > std::fabs(w[b]); });
  Mask m(n, 0);
  for (size_t i = 0; i < keep; ++i) m[order[i]] = 1;
  return m;
}

}  // namespace

std::vector<float> weight_matrix(const torch::Tensor& w) {
  return gather_matrix(to_vector(w), w.sizes().vec());
}

std::vector<LayerMask> MaskSet::candidates(torch::nn::Module& module, const MaskOptions& options) {
  std::vector<LayerMask> out;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    torch::nn::Module* m = item.value().get();
    LayerMask l;
    l.name = name;
    if (auto* lin = dynamic_cast<torch::nn::LinearImpl*>(m)) {
      l.weight = lin->weight;
    } else if (auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(m)) {
      l.weight = conv->weight;
      if (conv->options.groups() != 1) l.reason = "grouped convolution";
    } else {
      continue;
    }
    l.shape = l.weight.sizes().vec();
    const MatrixView v = matrix_view(l.shape);
    if (!l.reason.empty()) {
    } else if (!options.allow.empty() && !contains(options.allow, name)) {
      l.reason = "not in the allow list";
    } else if (contains(options.deny, name)) {
      l.reason = "in the deny list";
    } else if (options.kind != MaskKind::kUnstructured && v.cols % 4 != 0) {
      l.reason = "K = " + std::to_string(v.cols) + " is not a multiple of 4";
    } else if (options.kind == MaskKind::kTransposable24 && v.rows % 4 != 0) {
      l.reason = "rows = " + std::to_string(v.rows) + " is not a multiple of 4 (transposable)";
    }
    out.push_back(std::move(l));
  }
  return out;
}

MaskSet MaskSet::prune(torch::nn::Module& module, const MaskOptions& options) {
  MaskSet set;
  set.layers_ = candidates(module, options);
  for (LayerMask& l : set.layers_) {
    if (!l.reason.empty()) continue;
    const std::vector<float> w = weight_matrix(l.weight);
    const MatrixView v = matrix_view(l.shape);
    Mask m;
    switch (options.kind) {
      case MaskKind::kMagnitude24:
        m = magnitude_mask(w.data(), v.rows, v.cols);
        break;
      case MaskKind::kTransposable24:
        m = transposable_mask(w.data(), v.rows, v.cols, TransposableMethod::kExact);
        break;
      case MaskKind::kUnstructured:
        m = unstructured_mask(w, options.density);
        break;
    }
    l.kept_magnitude = kept_magnitude(w.data(), m);
    std::vector<float> mf(m.begin(), m.end());
    l.mask = from_vector(scatter_from_matrix(mf, l.shape), l.shape).to(l.weight.device());
    l.pruned = true;
  }
  set.apply();
  return set;
}

MaskSet MaskSet::fixed(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& masks) {
  MaskSet set;
  set.layers_ = candidates(module, MaskOptions{MaskKind::kUnstructured, 1.0, {}, {}});
  for (LayerMask& l : set.layers_) {
    const auto it = masks.find(l.name);
    if (it == masks.end()) {
      l.reason = "dense in the checkpoint";
      continue;
    }
    if (it->second.sizes().vec() != l.shape) throw Error("mask of '" + l.name + "' has the wrong shape");
    l.mask = it->second.to(l.weight.device(), torch::kFloat32);
    l.pruned = true;
  }
  for (const auto& [name, mask] : masks) {
    bool known = false;
    for (const LayerMask& l : set.layers_) known = known || l.name == name;
    if (!known) throw Error("mask for '" + name + "', which is not a Linear or Conv2d of the model");
  }
  set.apply();
  return set;
}

void MaskSet::mask_gradients() {
  torch::NoGradGuard no_grad;
  for (LayerMask& l : layers_)
    if (l.pruned && l.weight.grad().defined()) l.weight.mutable_grad().mul_(l.mask);
}

void MaskSet::apply() {
  torch::NoGradGuard no_grad;
  for (LayerMask& l : layers_)
    if (l.pruned) l.weight.mul_(l.mask);
}

void MaskSet::save_checkpoint(torch::nn::Module& module, const std::string& path) const {
  torch::serialize::OutputArchive archive;
  module.save(archive);
  for (const LayerMask& l : layers_)
    if (l.pruned) archive.write("mask." + l.name, l.mask, /*is_buffer=*/true);
  archive.save_to(path);
}

MaskSet MaskSet::load_checkpoint(torch::nn::Module& module, const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  module.load(archive);
  MaskSet set;
  set.layers_ = candidates(module, MaskOptions{MaskKind::kUnstructured, 1.0, {}, {}});
  for (LayerMask& l : set.layers_) {
    l.reason = "no mask in the checkpoint";
    torch::Tensor mask;
    if (archive.try_read("mask." + l.name, mask, /*is_buffer=*/true)) {
      if (mask.sizes().vec() != l.shape) throw Error(path + ": mask of '" + l.name + "' has the wrong shape");
      l.mask = mask;
      l.pruned = true;
      l.reason.clear();
      l.kept_magnitude = 1.0;
    }
  }
  return set;
}

}  // namespace sparse24::train
