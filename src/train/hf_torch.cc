#include "train/hf_torch.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24::train {
namespace {

using json = nlohmann::json;

// transformers' MPNet relative_position_bucket (max_distance 128) in float32, as the engine computes it.
int64_t relative_bucket(int64_t rel, int64_t buckets) {
  constexpr int64_t kMaxDistance = 128;
  int64_t n = -rel;
  const int64_t half = buckets / 2;
  const int64_t ret = n < 0 ? half : 0;
  n = n < 0 ? -n : n;
  const int64_t max_exact = half / 2;
  if (n < max_exact) return ret + n;
  const float ratio = static_cast<float>(n) / static_cast<float>(max_exact);
  const float scale =
      static_cast<float>(std::log(static_cast<double>(kMaxDistance) / static_cast<double>(max_exact)));
  const float v = std::log(ratio) / scale * static_cast<float>(half - max_exact);
  return ret + std::min(max_exact + static_cast<int64_t>(v), half - 1);
}

torch::Tensor to_torch(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  return torch::from_blob(const_cast<float*>(v.data()), shape, torch::kFloat32).clone();
}

std::vector<float> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

std::vector<float> tensor_floats(const CheckpointTensor& t) {
  return t.sparse ? decompress(*t.sparse).to_float() : from_st(dequantized(t), t.name).to_float();
}

const std::vector<int64_t>& tensor_shape(const CheckpointTensor& t) {
  return t.sparse ? t.sparse->shape : t.dense.shape;
}

int64_t int_or(const json& j, const char* key, int64_t fallback) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : fallback;
}

}  // namespace

HfLayerImpl::HfLayerImpl(const HfConfig& c) : heads(c.heads) {
  q = register_module("q", torch::nn::Linear(c.hidden, c.hidden));
  k = register_module("k", torch::nn::Linear(c.hidden, c.hidden));
  v = register_module("v", torch::nn::Linear(c.hidden, c.hidden));
  o = register_module("o", torch::nn::Linear(c.hidden, c.hidden));
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.eps)));
  ffn1 = register_module("ffn1", torch::nn::Linear(c.hidden, c.ffn));
  ffn2 = register_module("ffn2", torch::nn::Linear(c.ffn, c.hidden));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.eps)));
}

torch::Tensor HfLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& bias) {
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2), d = H / heads;
  auto split = [&](const torch::Tensor& t) { return t.view({B, S, heads, d}).transpose(1, 2); };
  const torch::Tensor qh = split(q(x)), kh = split(k(x)), vh = split(v(x));
  torch::Tensor scores = torch::matmul(qh, kh.transpose(-1, -2)) / std::sqrt(static_cast<double>(d));
  scores = torch::softmax(scores + bias, -1);
  const torch::Tensor ctx = torch::matmul(scores, vh).transpose(1, 2).reshape({B, S, H});
  const torch::Tensor h1 = ln1(o(ctx) + x);
  return ln2(ffn2(torch::gelu(ffn1(h1))) + h1);
}

HfEncoderImpl::HfEncoderImpl(const HfConfig& c) : config(c) {
  word = register_module("word", torch::nn::Embedding(c.vocab, c.hidden));
  position = register_module("position", torch::nn::Embedding(c.max_positions, c.hidden));
  if (c.type == "bert")
    token_type = register_module("token_type", torch::nn::Embedding(c.type_vocab, c.hidden));
  if (c.type == "mpnet") relative = register_module("relative", torch::nn::Embedding(c.buckets, c.heads));
  ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(c.eps)));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < c.layers; ++l) layers->push_back(HfLayer(c));
}

HfOutput HfEncoderImpl::forward(const torch::Tensor& ids, const torch::Tensor& mask, bool with_states) {
  const int64_t B = ids.size(0), S = ids.size(1);
  if (S + config.position_offset > config.max_positions)
    throw Error("sequence of " + std::to_string(S) + " tokens is longer than the model's positions");
  const torch::Tensor pos = torch::arange(config.position_offset, config.position_offset + S, torch::kLong);
  torch::Tensor h = word(ids) + position(pos).unsqueeze(0);
  if (token_type) h = h + token_type->weight[0];
  h = ln(h);
  // [B, 1, 1, S]: padding keys get -1e9 (exp underflows to exactly 0, as if they were absent).
  torch::Tensor bias = ((1.0 - mask) * -1e9).view({B, 1, 1, S});
  if (relative) {
    std::vector<int64_t> buckets(static_cast<size_t>(S * S));
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j) buckets[i * S + j] = relative_bucket(j - i, config.buckets);
    const torch::Tensor b = torch::from_blob(buckets.data(), {S, S}, torch::kLong).clone();
    bias = bias + relative(b).permute({2, 0, 1}).unsqueeze(0);  // [1, heads, S, S]
  }
  HfOutput out;
  for (const auto& m : *layers) {
    h = m->as<HfLayer>()->forward(h, bias);
    if (with_states) out.states.push_back(h);
  }
  torch::Tensor e;
  if (config.cls_pool) {
    e = h.select(1, 0);
  } else {
    const torch::Tensor m = mask.unsqueeze(-1);
    e = (h * m).sum(1) / m.sum(1).clamp_min(1e-9);
  }
  if (config.normalize)
    e = torch::nn::functional::normalize(e, torch::nn::functional::NormalizeFuncOptions().dim(1));
  out.embedding = e;
  return out;
}

HfEncoder load_hf_torch(const HfDir& d) {
  engine::TextModelInfo info;
  engine::load_hf_encoder(d, &info);  // validates config.json, modules and every tensor
  const json j = json::parse(d.config_json);
  HfConfig c;
  c.type = j["model_type"].get<std::string>();
  c.vocab = j["vocab_size"].get<int64_t>();
  c.hidden = j["hidden_size"].get<int64_t>();
  c.layers = j["num_hidden_layers"].get<int64_t>();
  c.heads = j["num_attention_heads"].get<int64_t>();
  c.ffn = j["intermediate_size"].get<int64_t>();
  c.max_positions = j["max_position_embeddings"].get<int64_t>();
  c.eps = j.contains("layer_norm_eps") ? j["layer_norm_eps"].get<double>() : 1e-12;
  const bool bert = c.type == "bert";
  if (bert) {
    c.type_vocab = int_or(j, "type_vocab_size", 2);
  } else {
    c.position_offset = int_or(j, "pad_token_id", 1) + 1;
    c.buckets = int_or(j, "relative_attention_num_buckets", 32);
  }
  c.cls_pool = info.pool == engine::PoolMode::kCls;
  c.normalize = info.normalize;
  c.max_tokens = info.max_tokens;
  HfEncoder e(c);

  const std::string root = d.weights.find(c.type + ".embeddings.word_embeddings.weight") ? c.type + "." : "";
  auto norm_name = [&](const std::string& prefix, bool weight) {
    const bool old = !d.weights.find(prefix + ".weight") && d.weights.find(prefix + ".gamma");
    return prefix + (weight ? (old ? ".gamma" : ".weight") : (old ? ".beta" : ".bias"));
  };
  auto norm = [&](const std::string& module, const std::string& prefix) {
    e->params[module + ".weight"] = norm_name(prefix, true);
    e->params[module + ".bias"] = norm_name(prefix, false);
  };
  auto linear = [&](const std::string& module, const std::string& prefix) {
    e->params[module + ".weight"] = prefix + ".weight";
    e->params[module + ".bias"] = prefix + ".bias";
    e->linears[module] = prefix + ".weight";
  };
  const std::string em = root + "embeddings.";
  e->params["word.weight"] = em + "word_embeddings.weight";
  e->params["position.weight"] = em + "position_embeddings.weight";
  if (bert) e->params["token_type.weight"] = em + "token_type_embeddings.weight";
  if (!bert) e->params["relative.weight"] = root + "encoder.relative_attention_bias.weight";
  norm("ln", em + "LayerNorm");
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string m = "layers." + std::to_string(l) + ".",
                      p = root + "encoder.layer." + std::to_string(l) + ".";
    const std::string att = p + (bert ? "attention.self." : "attention.attn.");
    linear(m + "q", att + (bert ? "query" : "q"));
    linear(m + "k", att + (bert ? "key" : "k"));
    linear(m + "v", att + (bert ? "value" : "v"));
    linear(m + "o", p + (bert ? "attention.output.dense" : "attention.attn.o"));
    norm(m + "ln1", p + (bert ? "attention.output.LayerNorm" : "attention.LayerNorm"));
    linear(m + "ffn1", p + "intermediate.dense");
    linear(m + "ffn2", p + "output.dense");
    norm(m + "ln2", p + "output.LayerNorm");
  }

  torch::NoGradGuard no_grad;
  for (auto& item : e->named_parameters()) {
    const auto it = e->params.find(item.key());
    if (it == e->params.end()) throw Error(d.dir + ": internal: no tensor for parameter " + item.key());
    const CheckpointTensor* t = d.weights.find(it->second);
    if (!t) throw Error(d.dir + ": missing tensor '" + it->second + "'");
    if (tensor_shape(*t) != item.value().sizes().vec())
      throw Error(d.dir + ": tensor '" + it->second + "' is " + shape_string(tensor_shape(*t)) +
                  ", expected " + shape_string(item.value().sizes().vec()));
    item.value().copy_(to_torch(tensor_floats(*t), tensor_shape(*t)));
  }
  return e;
}

std::map<std::string, torch::Tensor> stored_masks(const HfEncoder& e, const Checkpoint& ck) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [module, name] : e->linears) {
    const CheckpointTensor* t = ck.find(name);
    if (!t || !t->sparse) continue;
    // The stored positions: the same metadata with every kept value 1.
    Compressed ones = *t->sparse;
    ones.dtype = DType::kF32;
    const std::vector<float> v(static_cast<size_t>(ones.rows * ones.values_per_row()), 1.0f);
    ones.values.assign(reinterpret_cast<const uint8_t*>(v.data()),
                       reinterpret_cast<const uint8_t*>(v.data() + v.size()));
    out[module] = to_torch(decompress(ones).to_float(), ones.shape);
  }
  return out;
}

Checkpoint export_weights(const HfEncoder& e, const Checkpoint& ck) {
  Checkpoint out = ck;
  std::map<std::string, torch::Tensor> values;
  for (const auto& item : e->named_parameters()) values[e->params.at(item.key())] = item.value();
  for (CheckpointTensor& t : out.tensors) {
    const auto it = values.find(t.name);
    if (it == values.end()) continue;
    const std::vector<int64_t> shape = tensor_shape(t);
    const Tensor dense = Tensor::from_float(to_vector(it->second), shape);
    if (t.sparse) {
      Compressed c = compress(dense);  // Error naming the group if it is no longer 2:4
      t.sparse = std::move(c);
    } else {  // (a scaled int8 one in fp32 now)
      t.dense = to_st(dense);
      t.scale_group = 0;
      t.scales.clear();
    }
  }
  return out;
}

}  // namespace sparse24::train
