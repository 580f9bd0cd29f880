// Llama-family decoders into a DecoderModel, from a Hugging Face directory (LlamaForCausalLM's checkpoint
// names) or a GGUF file (llama.cpp's names): the config read and bounded once (GGUF metadata is mapped onto
// config.json's fields and bounded by the same code), then a name map from the checkpoint's tensors onto
// the decoder's Linears (Q, K and V joined into one GEMM, gate and up into another, so a decoded token runs
// four GEMMs per layer).
#include <cmath>
#include <filesystem>
#include <set>

#include "builder.h"
#include "hf_weights.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "text/bpe.h"

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

namespace {

// GGUF metadata (general.architecture "llama", llama.* keys) as the config.json fields read_decoder_config
// bounds. An absent key is left out (the config's default applies, or its error names the field).
json gguf_config(const Gguf& g, const std::string& what) {
  const GgufValue* arch = g.find("general.architecture");
  if (arch == nullptr || arch->is_array() || arch->type != GgufType::kString)
    throw Error(what + ": metadata 'general.architecture' is missing or not a string");
  const std::string a = arch->strings[0];
  if (a != "llama") throw Error(what + ": architecture '" + a + "' is not a supported decoder (llama)");
  json j = {{"model_type", "llama"}};
  auto put = [&](const char* field, const std::string& key, bool real) {
    const GgufValue* v = g.find(a + "." + key);
    if (v == nullptr) return;
    if (real)
      j[field] = g.get_float(a + "." + key);
    else
      j[field] = g.get_int(a + "." + key);
  };
  put("hidden_size", "embedding_length", false);
  put("num_hidden_layers", "block_count", false);
  put("num_attention_heads", "attention.head_count", false);
  put("num_key_value_heads", "attention.head_count_kv", false);
  put("head_dim", "attention.key_length", false);
  put("intermediate_size", "feed_forward_length", false);
  put("max_position_embeddings", "context_length", false);
  put("rms_norm_eps", "attention.layer_norm_rms_epsilon", true);
  put("rope_theta", "rope.freq_base", true);
  put("vocab_size", "vocab_size", false);
  if (!j.contains("vocab_size")) {  // older files: the embedding table's rows
    const GgufTensor* t = g.find_tensor("token_embd.weight");
    if (t == nullptr || t->shape.size() != 2) throw Error(what + ": missing tensor 'token_embd.weight'");
    j["vocab_size"] = t->shape[0];
  }
  const GgufValue* scaling = g.find(a + ".rope.scaling.type");
  if (scaling != nullptr &&
      (scaling->is_array() || scaling->type != GgufType::kString || scaling->strings[0] != "none"))
    throw Error(what + ": rope scaling '" + (scaling->strings.empty() ? "?" : scaling->strings[0]) +
                "' is not supported");
  if (g.find_tensor("rope_freqs.weight") != nullptr)
    throw Error(what + ": rope frequency factors (rope_freqs.weight, Llama 3.1 scaling) are not supported");
  j["tie_word_embeddings"] = g.find_tensor("output.weight") == nullptr;
  return j;
}

// llama.cpp's converter reorders Q's and K's rows within each head for its RoPE, which rotates adjacent
// pairs: file row 2i + s of a head is row s * d/2 + i of transformers' rotate_half layout. Undone here.
std::vector<float> unpermute_rope_rows(const std::vector<float>& w, int64_t heads, int64_t d, int64_t cols) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s) {
        const float* src = w.data() + (h * d + 2 * i + s) * cols;
        std::copy(src, src + cols, out.data() + (h * d + s * d / 2 + i) * cols);
      }
  return out;
}

}  // namespace

DecoderModel load_gguf_decoder(const std::string& path) {
  const MappedGguf f(path);
  return load_gguf_decoder(f.gguf, path);
}

DecoderModel load_gguf_decoder(const Gguf& g, const std::string& path) {
  DecoderModel m;
  m.config = read_decoder_config(gguf_config(g, path), path + " (metadata)");
  const DecoderConfig& c = m.config;
  const GgufValue* rope_dims = g.find("llama.rope.dimension_count");
  if (rope_dims != nullptr && g.get_int("llama.rope.dimension_count") != c.head_dim)
    throw Error(path + ": RoPE over part of a head (llama.rope.dimension_count " +
                std::to_string(g.get_int("llama.rope.dimension_count")) + ", head size " +
                std::to_string(c.head_dim) + ") is not supported");
  std::set<std::string> used;
  uint64_t h = kFnvBasis;
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape) {
    const GgufTensor* t = g.find_tensor(name);
    if (t == nullptr) throw Error(path + ": missing tensor '" + name + "'");
    if (t->shape != shape) {
      std::string want, got;
      for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      for (int64_t d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw Error(path + ": tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
    }
    used.insert(name);
    std::vector<float> v = dequantize(*t).to_float();
    for (float x : v)
      if (!std::isfinite(x)) throw Error(path + ": tensor '" + name + "' holds a non-finite value");
    h = fnv1a(h, reinterpret_cast<const uint8_t*>(name.data()), name.size());
    h = fnv1a(h, t->bytes.data(), t->bytes.size());
    return v;
  };
  auto linear = [&](const std::string& name, const std::string& layer, int64_t out, int64_t in) {
    Gemm r;
    r.name = layer;
    r.m = out;
    r.k = in;
    r.dense = tensor(name, {out, in});
    r.sources = {name};
    return r;
  };
  m.embed = tensor("token_embd.weight", {c.vocab, c.hidden});
  m.norm = tensor("output_norm.weight", {c.hidden});
  if (!c.tied) m.head = linear("output.weight", "lm_head", c.vocab, c.hidden);
  const int64_t q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".", name = "layer" + std::to_string(l) + ".";
    DecoderLayer L;
    L.attn_norm = tensor(p + "attn_norm.weight", {c.hidden});
    L.ffn_norm = tensor(p + "ffn_norm.weight", {c.hidden});
    Gemm q = linear(p + "attn_q.weight", name + "q", q_rows, c.hidden);
    Gemm k = linear(p + "attn_k.weight", name + "k", kv_rows, c.hidden);
    q.dense = unpermute_rope_rows(q.dense, c.heads, c.head_dim, c.hidden);
    k.dense = unpermute_rope_rows(k.dense, c.kv_heads, c.head_dim, c.hidden);
    const Gemm v = linear(p + "attn_v.weight", name + "v", kv_rows, c.hidden);
    L.qkv = concat_rows(name + "qkv", {&q, &k, &v});
    L.o = linear(p + "attn_output.weight", name + "o", c.hidden, q_rows);
    const Gemm gate = linear(p + "ffn_gate.weight", name + "gate", c.ffn, c.hidden);
    const Gemm up = linear(p + "ffn_up.weight", name + "up", c.ffn, c.hidden);
    L.gate_up = concat_rows(name + "gate_up", {&gate, &up});
    L.down = linear(p + "ffn_down.weight", name + "down", c.hidden, c.ffn);
    m.layers.push_back(std::move(L));
  }
  for (const GgufTensor& t : g.tensors)
    if (!used.count(t.name)) throw Error(path + ": tensor '" + t.name + "' is not used by the architecture");
  m.fingerprint = hex(h);
  return m;
}

void gguf_to_hf_dir(const std::string& path, const std::string& out_dir) {
  const MappedGguf f(path);
  const DecoderModel m = load_gguf_decoder(f.gguf, path);
  const text::ByteBpe tok = text::ByteBpe::from_gguf(f.gguf, path);
  const DecoderConfig& c = m.config;
  json config = gguf_config(f.gguf, path);
  config["architectures"] = json::array({"LlamaForCausalLM"});
  config["torch_dtype"] = "float32";
  config["hidden_act"] = "silu";
  if (tok.bos_id() >= 0) config["bos_token_id"] = tok.bos_id();
  if (tok.eos_id() >= 0) config["eos_token_id"] = tok.eos_id();
  HfDir d;
  d.config_json = config.dump(2);
  auto put = [&](const std::string& name, const float* v, std::vector<int64_t> shape) {
    size_t n = 1;
    for (int64_t x : shape) n *= static_cast<size_t>(x);
    d.weights.tensors.push_back({name, to_st(Tensor::from_float(std::vector<float>(v, v + n), shape)), {}});
  };
  // Rows [r0, r0 + rows) of a fused GEMM (QKV, gate/up) as one tensor.
  auto rows_of = [&](const std::string& name, const Gemm& g, int64_t r0, int64_t rows) {
    put(name, g.dense.data() + r0 * g.k, {rows, g.k});
  };
  put("model.embed_tokens.weight", m.embed.data(), {c.vocab, c.hidden});
  put("model.norm.weight", m.norm.data(), {c.hidden});
  if (!c.tied) rows_of("lm_head.weight", m.head, 0, c.vocab);
  const int64_t q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.layers; ++l) {
    const DecoderLayer& L = m.layers[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    put(p + "input_layernorm.weight", L.attn_norm.data(), {c.hidden});
    put(p + "post_attention_layernorm.weight", L.ffn_norm.data(), {c.hidden});
    rows_of(p + "self_attn.q_proj.weight", L.qkv, 0, q_rows);
    rows_of(p + "self_attn.k_proj.weight", L.qkv, q_rows, kv_rows);
    rows_of(p + "self_attn.v_proj.weight", L.qkv, q_rows + kv_rows, kv_rows);
    rows_of(p + "self_attn.o_proj.weight", L.o, 0, c.hidden);
    rows_of(p + "mlp.gate_proj.weight", L.gate_up, 0, c.ffn);
    rows_of(p + "mlp.up_proj.weight", L.gate_up, c.ffn, c.ffn);
    rows_of(p + "mlp.down_proj.weight", L.down, 0, c.hidden);
  }
  std::map<std::string, std::string> files = {{"tokenizer.json", tok.to_json()},
                                              {"tokenizer_config.json", tok.config_json()}};
  // The chat template, where transformers saves one (and text::chat_template_of reads it).
  const GgufValue* chat = f.gguf.find("tokenizer.chat_template");
  if (chat != nullptr && !chat->is_array() && chat->type == GgufType::kString)
    files["chat_template.jinja"] = chat->strings[0];
  write_hf_dir(d, d.weights, CheckpointFormat::kDense, out_dir, files);
}

DecoderModel load_decoder(const std::string& path) {
  if (is_gguf_file(path)) return load_gguf_decoder(path);
  if (!is_hf_decoder(path))
    throw Error(path + ": neither a GGUF file nor a decoder model directory (config.json model_type llama)");
  return load_hf_decoder(path);
}

}  // namespace sparse24::engine
