// A tiny valid Hugging Face / sentence-transformers BERT directory as file name -> bytes: the template the
// hf_encoder harness fuzzes one file of, and the source of its seeds (make_seeds.cc).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

}  // namespace hf_template
