// Reading a Hugging Face directory's config.json and tensors for an architecture's loader: typed, bounded
// config fields and the checkpoint's tensors asked for by name (each checked and marked used), shared by the
// encoder (hf_encoder.cc) and decoder (hf_decoder.cc) loaders.
#pragma once
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "fingerprint.h"
#include "kernels/convert.h"
#include "sparse24/checkpoint.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/tensor.h"

namespace sparse24::engine::detail {

using json = nlohmann::json;

inline json read_json(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  json j = json::parse(b.begin(), b.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a JSON object");
  return j;
}

// Typed, bounded fields of a config; every problem names the file and the key.
struct Fields {
  const json& j;
  std::string what;
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const auto it = j.find(key);
    if (it == j.end()) throw Error(what + ": missing '" + key + "'");
    if (!it->is_number_integer()) throw Error(what + ": '" + key + "' is not an integer");
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi)
      throw Error(what + ": '" + key + "' is " + std::to_string(v) + ", outside " + std::to_string(lo) +
                  ".." + std::to_string(hi));
    return v;
  }
  int64_t integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    return j.contains(key) ? integer(key, lo, hi) : fallback;
  }
  double number(const char* key, double fallback, double lo, double hi) const {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_number()) throw Error(what + ": '" + key + "' is not a number");
    const double v = it->get<double>();
    if (!(v >= lo && v <= hi)) throw Error(what + ": '" + key + "' is out of range");
    return v;
  }
  std::string string(const char* key, const std::string& fallback) const {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_string()) throw Error(what + ": '" + key + "' is not a string");
    return it->get<std::string>();
  }
  bool boolean(const char* key) const {
    const auto it = j.find(key);
    if (it == j.end()) return false;
    if (!it->is_boolean()) throw Error(what + ": '" + key + "' is not true or false");
    return it->get<bool>();
  }
};

// The checkpoint's tensors as the architecture asks for them; every one is checked and marked used.
class Weights {
 public:
  Weights(Checkpoint ck, std::string what) : ck_(std::move(ck)), what_(std::move(what)) {
    for (const CheckpointTensor& t : ck_.tensors) by_name_[t.name] = &t;
  }
  bool has(const std::string& name) const { return by_name_.count(name) != 0; }
  const CheckpointTensor& find(const std::string& name) {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw Error(what_ + ": missing tensor '" + name + "'");
    used_.insert(name);
    return *it->second;
  }
  std::vector<float> dense(const std::string& name, const std::vector<int64_t>& shape) {
    const CheckpointTensor& t = find(name);
    if (t.sparse)
      throw Error(what_ + ": tensor '" + name + "' is stored 2:4, the architecture needs it dense");
    if ((t.dense.dtype != "F32" && t.dense.dtype != "F16" && t.dense.dtype != "BF16") ||
        t.dense.shape != shape)
      throw Error(what_ + ": tensor '" + name + "' is " + t.dense.dtype + " " + shape_string(t.dense.shape) +
                  ", the architecture needs a float " + shape_string(shape));
    std::vector<float> v = from_st(t.dense, name).to_float();
    finite(name, v);
    return v;
  }
  // The same into out (a joined GEMM's rows), and whether a tensor is stored dense (absent: true, so that
  // dense_into names it missing).
  void dense_into(const std::string& name, const std::vector<int64_t>& shape, float* out) {
    const std::vector<float> v = dense(name, shape);
    std::copy(v.begin(), v.end(), out);
  }
  bool is_dense(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() || !it->second->sparse;
  }
  // A Linear's weight [out, in], dense or 2:4, and its bias (when `bias`).
  Gemm linear(const std::string& prefix, const std::string& layer, int64_t out, int64_t in,
              bool bias = true) {
    Gemm g;
    g.name = layer;
    g.m = out;
    g.k = in;
    const std::string name = prefix + ".weight";
    g.sources = {name};
    const CheckpointTensor& t = find(name);
    if (t.sparse) {
      if (t.sparse->shape != std::vector<int64_t>{out, in})
        throw Error(what_ + ": tensor '" + name + "' is 2:4 " + shape_string(t.sparse->shape) +
                    ", the architecture needs " + shape_string({out, in}));
      g.pruned = true;
      g.sparse = *t.sparse;
      if (g.sparse.dtype != DType::kF32)
        g.sparse = compress(Tensor::from_float(decompress(*t.sparse).to_float(), {out, in}));
      finite(name, decompress(g.sparse).to_float());
    } else {
      g.dense = dense(name, {out, in});
    }
    if (bias) g.bias = dense(prefix + ".bias", {out});
    return g;
  }
  // Refuses a tensor nothing used, except those `ignored` accepts (heads the model does not run).
  void check_all_used(const std::function<bool(const std::string&)>& ignored) const {
    for (const CheckpointTensor& t : ck_.tensors)
      if (!used_.count(t.name) && !ignored(t.name))
        throw Error(what_ + ": tensor '" + t.name + "' is not used by the architecture");
  }
  std::string fingerprint(const std::string& config) const {
    uint64_t h = fnv1a(kFnvBasis, reinterpret_cast<const uint8_t*>(config.data()), config.size());
    for (const CheckpointTensor& t : ck_.tensors) {
      h = fnv1a(h, reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size());
      const std::vector<uint8_t>& a = t.sparse ? t.sparse->values : t.dense.bytes;
      h = fnv1a_words(h, a.data(), a.size());
      if (t.sparse) h = fnv1a_words(h, t.sparse->metadata.data(), t.sparse->metadata.size());
    }
    return hex(h);
  }

 private:
  void finite(const std::string& name, const std::vector<float>& v) const {
    if (!kernels::all_finite(v.data(), static_cast<int64_t>(v.size())))
      throw Error(what_ + ": tensor '" + name + "' holds a non-finite value");
  }
  Checkpoint ck_;
  std::string what_;
  std::map<std::string, const CheckpointTensor*> by_name_;
  std::set<std::string> used_;
};

}  // namespace sparse24::engine::detail
