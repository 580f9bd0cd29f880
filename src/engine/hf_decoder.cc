// Hugging Face Llama-family decoders (LlamaForCausalLM's checkpoint names) into a DecoderModel: the config
// read and bounded once, then a name map from the checkpoint's tensors onto the decoder's Linears (Q, K
// and V joined into one GEMM, gate and up into another, so a decoded token runs four GEMMs per layer).
#include <filesystem>

#include "builder.h"
#include "hf_weights.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"

namespace sparse24::engine {
namespace {

using detail::Fields;
using detail::json;

RopeConfig read_rope(const json& j, const std::string& what) {
  RopeConfig r;
  // transformers 5 keeps rope_theta and the scaling in "rope_parameters"; older configs have rope_theta
  // and "rope_scaling" at the top level.
  const json* params = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (j.contains(key) && !j[key].is_null()) {
      if (!j[key].is_object()) throw Error(what + ": '" + key + "' is not an object");
      params = &j[key];
      break;
    }
  const Fields top{j, what};
  r.theta = top.number("rope_theta", 10000.0, 1.0, 1e12);
  if (params == nullptr) return r;
  const Fields f{*params, what + " (rope parameters)"};
  r.theta = f.number("rope_theta", r.theta, 1.0, 1e12);
  r.type = f.string("rope_type", f.string("type", "default"));
  if (r.type == "default") return r;
  if (r.type != "llama3")
    throw Error(what + ": rope type '" + r.type + "' is not supported (default, llama3)");
  r.factor = f.number("factor", 8.0, 1e-3, 1e6);
  r.low_freq_factor = f.number("low_freq_factor", 1.0, 1e-6, 1e6);
  r.high_freq_factor = f.number("high_freq_factor", 4.0, 1e-6, 1e6);
  if (!(r.high_freq_factor > r.low_freq_factor))
    throw Error(what + ": rope high_freq_factor must exceed low_freq_factor");
  r.original_max_positions = f.integer_or("original_max_position_embeddings", 8192, 1, 1 << 24);
  return r;
}

DecoderConfig read_decoder_config(const json& j, const std::string& what) {
  const Fields f{j, what};
  DecoderConfig c;
  c.model_type = f.string("model_type", "");
  if (c.model_type != "llama")
    throw Error(what + ": model_type '" + c.model_type + "' is not a supported decoder (llama)");
  c.vocab = f.integer("vocab_size", 1, 1 << 22);
  c.hidden = f.integer("hidden_size", 4, 1 << 15);
  c.layers = f.integer("num_hidden_layers", 1, 1024);
  c.heads = f.integer("num_attention_heads", 1, 1024);
  c.kv_heads = f.integer_or("num_key_value_heads", c.heads, 1, c.heads);
  if (c.heads % c.kv_heads != 0)
    throw Error(what + ": num_attention_heads is not a multiple of num_key_value_heads");
  const bool has_dim = j.contains("head_dim") && !j["head_dim"].is_null();
  if (!has_dim && c.hidden % c.heads != 0)
    throw Error(what + ": hidden_size is not a multiple of num_attention_heads");
  c.head_dim = has_dim ? f.integer("head_dim", 2, 512) : c.hidden / c.heads;
  if (c.head_dim % 2 != 0 || c.head_dim > 512) throw Error(what + ": head_dim must be even and at most 512");
  c.ffn = f.integer("intermediate_size", 4, 1 << 18);
  c.max_positions = f.integer_or("max_position_embeddings", 2048, 1, 1 << 24);
  c.eps = static_cast<float>(f.number("rms_norm_eps", 1e-6, 1e-30, 0.1));
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu") throw Error(what + ": hidden_act '" + act + "' is not supported (silu)");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (f.boolean(key)) throw Error(what + ": '" + key + "' is not supported");
  // transformers' LlamaConfig defaults to untied embeddings.
  c.tied = j.contains("tie_word_embeddings") && f.boolean("tie_word_embeddings");
  c.rope = read_rope(j, what);
  return c;
}

}  // namespace

bool is_hf_decoder(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!std::filesystem::exists(path)) return false;
  const json j = detail::read_json(path);
  return j.contains("model_type") && j["model_type"].is_string() && j["model_type"] == "llama";
}

DecoderModel load_hf_decoder(const std::string& dir) { return load_hf_decoder(read_hf_dir(dir)); }

DecoderModel load_hf_decoder(HfDir d) {
  const std::string config_path = d.dir + "/config.json";
  const json cj = json::parse(d.config_json, nullptr, false);
  if (cj.is_discarded() || !cj.is_object()) throw Error(config_path + ": not a JSON object");
  DecoderModel m;
  m.config = read_decoder_config(cj, config_path);
  const DecoderConfig& c = m.config;
  const std::string what = d.shards.size() == 1 ? d.shards[0] : d.dir;
  detail::Weights w(std::move(d.weights), what);
  m.embed = w.dense("model.embed_tokens.weight", {c.vocab, c.hidden});
  m.norm = w.dense("model.norm.weight", {c.hidden});
  if (!c.tied) {
    m.head = w.linear("lm_head", "lm_head", c.vocab, c.hidden, false);
    if (m.head.pruned) throw Error(what + ": the output head 'lm_head.weight' must be dense");
  }
  const int64_t q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string name = "layer" + std::to_string(l) + ".";
    DecoderLayer L;
    L.attn_norm = w.dense(p + "input_layernorm.weight", {c.hidden});
    L.ffn_norm = w.dense(p + "post_attention_layernorm.weight", {c.hidden});
    const Gemm q = w.linear(p + "self_attn.q_proj", name + "q", q_rows, c.hidden, false);
    const Gemm k = w.linear(p + "self_attn.k_proj", name + "k", kv_rows, c.hidden, false);
    const Gemm v = w.linear(p + "self_attn.v_proj", name + "v", kv_rows, c.hidden, false);
    L.qkv = concat_rows(name + "qkv", {&q, &k, &v});
    L.o = w.linear(p + "self_attn.o_proj", name + "o", c.hidden, q_rows, false);
    const Gemm gate = w.linear(p + "mlp.gate_proj", name + "gate", c.ffn, c.hidden, false);
    const Gemm up = w.linear(p + "mlp.up_proj", name + "up", c.ffn, c.hidden, false);
    L.gate_up = concat_rows(name + "gate_up", {&gate, &up});
    L.down = w.linear(p + "mlp.down_proj", name + "down", c.hidden, c.ffn, false);
    m.layers.push_back(std::move(L));
  }
  w.check_all_used([&](const std::string& n) {
    return n.find("rotary_emb.inv_freq") != std::string::npos || (c.tied && n == "lm_head.weight");
  });
  m.fingerprint = w.fingerprint(d.config_json);
  return m;
}

}  // namespace sparse24::engine
