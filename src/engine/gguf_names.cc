// transformers' tensor names and llama.cpp's, and llama.cpp's RoPE row order (gguf_names.h).
#include "gguf_names.h"

#include <algorithm>
#include <utility>

namespace sparse24::engine::detail {
namespace {

// transformers' names and llama.cpp's: the tables, the layers' parts (after "model.layers.N." / "blk.N.")
// and Gemma's norms (which take precedence for Gemma).
constexpr std::pair<const char*, const char*> kGgufTop[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"}};
constexpr std::pair<const char*, const char*> kGgufLayer[] = {
    {"input_layernorm", "attn_norm"},    {"post_attention_layernorm", "ffn_norm"},
    {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},      {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
    {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"}};
constexpr std::pair<const char*, const char*> kGgufGemma[] = {
    {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "post_attention_norm"},
    {"pre_feedforward_layernorm", "ffn_norm"},
    {"post_feedforward_layernorm", "post_ffw_norm"}};

}  // namespace

void unpermute_rope_rows(const float* w, int64_t heads, int64_t d, int64_t cols, float* out) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s) {
        const float* src = w + (h * d + 2 * i + s) * cols;
        std::copy(src, src + cols, out + (h * d + s * d / 2 + i) * cols);
      }
}

std::string gguf_name(const std::string& hf, bool gemma) {
  for (const auto& [h, g] : kGgufTop)
    if (hf == h) return g;
  static const std::string kLayers = "model.layers.";
  if (hf.compare(0, kLayers.size(), kLayers) != 0) return "";
  const size_t dot = hf.find('.', kLayers.size());
  if (dot == std::string::npos) return "";
  const std::string layer = hf.substr(kLayers.size(), dot - kLayers.size()), rest = hf.substr(dot + 1);
  for (const auto& [h, g] : kGgufGemma)
    if (gemma && rest == std::string(h) + ".weight") return "blk." + layer + "." + g + ".weight";
  for (const auto& [h, g] : kGgufLayer) {
    const std::string hs = h;
    if (rest.compare(0, hs.size(), hs) == 0 && (rest == hs + ".weight" || rest == hs + ".bias"))
      return "blk." + layer + "." + g + rest.substr(hs.size());
  }
  return "";
}

std::string hf_name_of_gguf(const std::string& name, bool gemma) {
  for (const auto& [h, g] : kGgufTop)
    if (name == g) return h;
  if (name.compare(0, 4, "blk.") != 0) return "";
  const size_t dot = name.find('.', 4), kind = name.rfind('.');
  if (dot == std::string::npos || kind <= dot) return "";
  const std::string prefix = "model.layers." + name.substr(4, dot - 4) + ".", suffix = name.substr(kind);
  std::string found;
  auto search = [&](const auto& table) {
    for (const auto& [h, g] : table)
      if (found.empty() && gguf_name(prefix + h + suffix, gemma) == name) found = prefix + h + suffix;
  };
  search(kGgufGemma);
  search(kGgufLayer);
  return found;
}

}  // namespace sparse24::engine::detail
