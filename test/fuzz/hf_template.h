// A tiny valid Hugging Face / sentence-transformers BERT directory as file name -> bytes: the template the
// hf_encoder harness fuzzes one file of, and the source of its seeds (make_seeds.cc); and a Llama one for the
// hf_decoder harness.
#pragma once
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/io.h"
#include "sparse24/tensor.h"

namespace hf_template {

inline const char* const kFiles[] = {"config.json", "model.safetensors", "modules.json",
                                     "1_Pooling/config.json", "model.safetensors.index.json"};

inline std::map<std::string, std::vector<uint8_t>> files() {
  using namespace sparse24;
  const int64_t vocab = 8, hidden = 4, ffn = 8, pos = 6;
  SafeTensors st;
  float next = 0.1f;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = (next = next * 1.7f - static_cast<float>(static_cast<int>(next * 1.7f))) - 0.5f;
    st.add(name, to_st(Tensor::from_float(v, shape)));
  };
  auto linear = [&](const std::string& p, int64_t out, int64_t in) {
    add(p + ".weight", {out, in});
    add(p + ".bias", {out});
  };
  add("embeddings.word_embeddings.weight", {vocab, hidden});
  add("embeddings.position_embeddings.weight", {pos, hidden});
  add("embeddings.token_type_embeddings.weight", {2, hidden});
  add("embeddings.LayerNorm.weight", {hidden});
  add("embeddings.LayerNorm.bias", {hidden});
  const std::string l = "encoder.layer.0.";
  for (const char* q : {"query", "key", "value"}) linear(l + "attention.self." + q, hidden, hidden);
  linear(l + "attention.output.dense", hidden, hidden);
  add(l + "attention.output.LayerNorm.weight", {hidden});
  add(l + "attention.output.LayerNorm.bias", {hidden});
  linear(l + "intermediate.dense", ffn, hidden);
  linear(l + "output.dense", hidden, ffn);
  add(l + "output.LayerNorm.weight", {hidden});
  add(l + "output.LayerNorm.bias", {hidden});
  auto text = [](const nlohmann::json& j) {
    const std::string s = j.dump();
    return std::vector<uint8_t>(s.begin(), s.end());
  };
  std::map<std::string, std::vector<uint8_t>> f;
  f["config.json"] = text({{"model_type", "bert"},
                           {"vocab_size", vocab},
                           {"hidden_size", hidden},
                           {"num_attention_heads", 1},
                           {"num_hidden_layers", 1},
                           {"intermediate_size", ffn},
                           {"max_position_embeddings", pos},
                           {"hidden_act", "gelu"},
                           {"type_vocab_size", 2}});
  f["model.safetensors"] = encode_safetensors(st);
  f["modules.json"] = text(nlohmann::json::array(
      {{{"idx", 0}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
       {{"idx", 1}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}},
       {{"idx", 2}, {"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}}}));
  f["1_Pooling/config.json"] = text({{"pooling_mode_mean_tokens", true}});
  nlohmann::json map = nlohmann::json::object();
  for (const auto& t : st.tensors) map[t.first] = "model.safetensors";
  f["model.safetensors.index.json"] = text({{"weight_map", map}});
  return f;
}

// A tiny valid Llama directory (what load_hf_decoder reads; the hf_decoder harness fuzzes one of its files):
// Q, K and V stored 2:4 as int8 with scales, gate and up 2:4 in bf16, both in the kernels' layout (as
// prune-model writes them), O dense fp32, down dense bf16, an untied head as an int8 table (a scale per 64 of
// a row, as prune-model --int8 writes it), in the sparse24 checkpoint layout.
inline const char* const kDecoderFiles[] = {"config.json", "model.safetensors",
                                            "model.safetensors.index.json"};

inline std::map<std::string, std::vector<uint8_t>> decoder_files() {
  using namespace sparse24;
  const int64_t vocab = 8, hidden = 8, heads = 2, kv = 1, d = 4, ffn = 16;
  Checkpoint ck;
  float next = 0.1f;
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = (next = next * 1.7f - static_cast<float>(static_cast<int>(next * 1.7f))) - 0.5f;
    return v;
  };
  auto dense = [&](const std::string& name, std::vector<int64_t> shape, DType t = DType::kF32) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    ck.tensors.push_back({name, to_st(Tensor::from_float(values(n), shape, t)), std::nullopt});
  };
  auto sparse = [&](const std::string& name, int64_t rows, int64_t cols, DType t) {
    Compressed c = compress(Tensor::from_float(values(rows * cols), {rows, cols}), true);
    c = t == DType::kI8 ? quantize_int8(c, cols) : to_bf16(std::move(c));  // (int8: a scale per row)
    ck.tensors.push_back({name, {}, std::move(c)});
    ck.tensors.back().lanes_kb = 64;  // (int8 and bf16 alike)
  };
  const std::string l = "model.layers.0.";
  dense("model.embed_tokens.weight", {vocab, hidden});
  dense("model.norm.weight", {hidden});
  {  // (one scale per row: rows of 8)
    CheckpointTensor head{"lm_head.weight", StTensor{"I8", {vocab, hidden}, {}}, std::nullopt};
    head.scale_group = 64;
    const std::vector<float> v = values(vocab * hidden);
    for (int64_t r = 0; r < vocab; ++r) {
      float top = 1e-6f;
      for (int64_t k = 0; k < hidden; ++k) top = std::max(top, std::abs(v[r * hidden + k]));
      head.scales.push_back(top / 127);
      for (int64_t k = 0; k < hidden; ++k)
        head.dense.bytes.push_back(
            static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[r * hidden + k] / top * 127))));
    }
    ck.tensors.push_back(std::move(head));
  }
  dense(l + "input_layernorm.weight", {hidden});
  dense(l + "post_attention_layernorm.weight", {hidden});
  sparse(l + "self_attn.q_proj.weight", heads * d, hidden, DType::kI8);
  sparse(l + "self_attn.k_proj.weight", kv * d, hidden, DType::kI8);
  sparse(l + "self_attn.v_proj.weight", kv * d, hidden, DType::kI8);
  dense(l + "self_attn.o_proj.weight", {hidden, heads * d});
  sparse(l + "mlp.gate_proj.weight", ffn, hidden, DType::kBF16);
  sparse(l + "mlp.up_proj.weight", ffn, hidden, DType::kBF16);
  dense(l + "mlp.down_proj.weight", {hidden, ffn}, DType::kBF16);
  const SafeTensors st = encode_checkpoint(ck, CheckpointFormat::kSparse24);
  const auto text = [](const nlohmann::json& j) {
    const std::string s = j.dump();
    return std::vector<uint8_t>(s.begin(), s.end());
  };
  std::map<std::string, std::vector<uint8_t>> f;
  f["config.json"] = text({{"model_type", "llama"},
                           {"vocab_size", vocab},
                           {"hidden_size", hidden},
                           {"num_hidden_layers", 1},
                           {"num_attention_heads", heads},
                           {"num_key_value_heads", kv},
                           {"head_dim", d},
                           {"intermediate_size", ffn},
                           {"rms_norm_eps", 1e-5},
                           {"max_position_embeddings", 16},
                           {"tie_word_embeddings", false},
                           {"rope_theta", 10000.0}});
  f["model.safetensors"] = encode_safetensors(st);
  nlohmann::json map = nlohmann::json::object();
  for (const auto& t : st.tensors) map[t.first] = "model.safetensors";
  f["model.safetensors.index.json"] = text({{"weight_map", map}});
  return f;
}

}  // namespace hf_template
