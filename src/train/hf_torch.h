// Hugging Face sentence encoders (BertModel, MPNetModel with sentence-transformers' pooling and Normalize)
// as libtorch modules, built from a directory read by read_hf_dir (dense or 2:4 weights), and written back.
// The forward is the engine's (src/engine/hf_encoder.cc, ops.cc) on padded batches:
//   embeddings: word[id] + position[i (+ pad_token_id + 1 for MPNet)] (+ token_type[0] for BERT), LayerNorm;
//   each layer: Q, K, V, scores / sqrt(d) (+ MPNet's relative position bias, one table for all layers)
//   + the attention mask (padding keys get -1e9), softmax, output dense, LayerNorm(+ residual),
//   FFN with GELU (erf), LayerNorm(+ residual); mean pooling over the real tokens (or the first token),
//   then L2 normalisation when modules.json has Normalize.
// Module names are short ("layers.3.q"); `params` maps each parameter to its checkpoint tensor name, so
// loading and writing are a name map.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "sparse24/checkpoint.h"
#include "sparse24/hf_dir.h"

namespace sparse24::train {

struct HfConfig {
  std::string type;  // "bert", "mpnet"
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, ffn = 0, max_positions = 0, type_vocab = 0;
  int64_t position_offset = 0, buckets = 0;  // MPNet
  double eps = 1e-12;
  bool cls_pool = false, normalize = false;
  int64_t max_tokens = 0;  // per sequence, the special tokens included
};

class HfLayerImpl : public torch::nn::Module {
 public:
  HfLayerImpl(const HfConfig& c);
  // x [B, S, H]; bias [B or 1, heads, S, S] (mask and relative bias) -> [B, S, H]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias);
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, ffn1{nullptr}, ffn2{nullptr};
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  int64_t heads = 1;
};
TORCH_MODULE(HfLayer);

struct HfOutput {
  torch::Tensor embedding;            // [B, H]: pooled (and normalized when the model normalizes)
  std::vector<torch::Tensor> states;  // with_states: each layer's output [B, S, H] (layers of them)
};

class HfEncoderImpl : public torch::nn::Module {
 public:
  explicit HfEncoderImpl(const HfConfig& c);
  // ids int64 [B, S] (padding anywhere after each sequence's tokens); mask float [B, S], 1 = real token.
  HfOutput forward(const torch::Tensor& ids, const torch::Tensor& mask, bool with_states = false);

  HfConfig config;
  torch::nn::Embedding word{nullptr}, position{nullptr}, token_type{nullptr}, relative{nullptr};
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::ModuleList layers{nullptr};
  // Parameter -> checkpoint tensor name ("encoder.layer.3.attention.self.query.weight"), and the module
  // name of every Linear ("layers.3.q") -> its weight's checkpoint name.
  std::map<std::string, std::string> params, linears;
};
TORCH_MODULE(HfEncoder);

// Builds the encoder of `d` (config.json, sentence-transformers modules, every tensor; 2:4 weights
// decompressed). The directory must pass the engine's loader (engine::load_hf_encoder), which validates
// every field and tensor. Error "DIR: ..." otherwise.
HfEncoder load_hf_torch(const HfDir& d);

// Per Linear whose checkpoint weight is stored 2:4: module name -> float 0/1 mask of the stored positions
// (the metadata, not the zero values).
std::map<std::string, torch::Tensor> stored_masks(const HfEncoder& e, const Checkpoint& ck);

// `ck` with every tensor of the encoder replaced by the module's current values (2:4 tensors compressed
// again, dense ones in float32). Error naming the tensor if a 2:4 weight is no longer 2:4.
Checkpoint export_weights(const HfEncoder& e, const Checkpoint& ck);

}  // namespace sparse24::train
