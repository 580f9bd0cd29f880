// Llama-style decoders (Llama, Mistral, Qwen2, Qwen3, Gemma 3) into a DecoderModel, from a Hugging Face
// directory or a GGUF file: the config read and bounded once (GGUF metadata is mapped onto config.json's
// fields and bounded by the same code), then one builder asks for the tensors by transformers' names (a GGUF
// file answers under llama.cpp's) and joins them into the decoder's Linears (Q, K and V into one GEMM, gate
// and up into another, so a decoded token runs four GEMMs per layer).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>
#include <type_traits>

#include "builder.h"
#include "gguf_names.h"
#include "gguf_tensors.h"
#include "hf_weights.h"
#include "kernels/huge_pages.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "text/bpe.h"

namespace sparse24::engine {
namespace {

using detail::Fields;
using detail::json;

constexpr int64_t kMaxLayers = 1024;  // num_hidden_layers' bound

// RoPE from a rope-parameters object (or none: theta alone).
RopeConfig read_rope_params(const json* params, double theta, const std::string& what) {
  RopeConfig r;
  r.theta = theta;
  if (params == nullptr) return r;
  if (!params->is_object()) throw Error(what + ": the rope parameters are not an object");
  const Fields f{*params, what + " (rope parameters)"};
  r.theta = f.number("rope_theta", r.theta, 1.0, 1e12);
  r.type = f.string("rope_type", f.string("type", "default"));
  if (r.type == "su") r.type = "longrope";  // the first Phi-3 configs' name for it (Phi3Config maps it)
  if (r.type == "default") return r;
  if (r.type == "longrope") {  // the rest (original positions, attention factor) in read_longrope
    auto factors = [&](const char* key) {
      const json* v = params->contains(key) ? &(*params)[key] : nullptr;
      if (v == nullptr || !v->is_array() || v->empty() || v->size() > 1024)
        throw Error(what + ": longrope's '" + key + "' is not a list of numbers");
      std::vector<double> out;
      for (const json& x : *v) {
        if (!x.is_number() || !(x.get<double>() > 0.0 && x.get<double>() < 1e9))
          throw Error(what + ": longrope's '" + key + "' holds a value that is not a positive number");
        out.push_back(x.get<double>());
      }
      return out;
    };
    r.short_factor = factors("short_factor");
    r.long_factor = factors("long_factor");
    r.factor = f.number("factor", 0.0, 0.0, 1e6);  // 0: max_position_embeddings / original
    r.attention_factor = f.number("attention_factor", 0.0, 0.0, 1e3);  // 0: from the factor
    r.original_max_positions = f.integer_or("original_max_position_embeddings", 0, 1, 1 << 24);
    return r;
  }
  if (r.type == "linear") {
    r.factor = f.number("factor", 1.0, 1e-3, 1e6);
    return r;
  }
  if (r.type != "llama3")
    throw Error(what + ": rope type '" + r.type + "' is not supported (default, linear, llama3, longrope)");
  r.factor = f.number("factor", 8.0, 1e-3, 1e6);
  r.low_freq_factor = f.number("low_freq_factor", 1.0, 1e-6, 1e6);
  r.high_freq_factor = f.number("high_freq_factor", 4.0, 1e-6, 1e6);
  if (!(r.high_freq_factor > r.low_freq_factor))
    throw Error(what + ": rope high_freq_factor must exceed low_freq_factor");
  r.original_max_positions = f.integer_or("original_max_position_embeddings", 8192, 1, 1 << 24);
  return r;
}

const json* non_null(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null() ? &j[key] : nullptr;
}

// transformers 5 keeps rope_theta and the scaling in "rope_parameters"; older configs have rope_theta
// and "rope_scaling" at the top level. With per-layer-type parameters (Gemma 3: "full_attention" and
// "sliding_attention" objects), the full layers' RoPE, the sliding layers' in *sliding.
RopeConfig read_rope(const json& j, const std::string& what, double default_theta = 10000.0,
                     RopeConfig* sliding = nullptr, double sliding_theta = 10000.0) {
  const json* params = non_null(j, "rope_parameters");
  if (params == nullptr) params = non_null(j, "rope_scaling");
  const double theta = Fields{j, what}.number("rope_theta", default_theta, 1.0, 1e12);
  if (sliding != nullptr) {
    if (params != nullptr && params->is_object() && params->contains("full_attention")) {
      *sliding = read_rope_params(non_null(*params, "sliding_attention"), sliding_theta, what + " (sliding)");
      return read_rope_params(non_null(*params, "full_attention"), theta, what);
    }
    *sliding = read_rope_params(nullptr, sliding_theta, what);  // the old form scales the full layers only
  }
  return read_rope_params(params, theta, what);
}

// The Llama-style architectures: one forward pass (decoder.h), these differences.
struct Architecture {
  const char* model_type;  // config.json's
  const char* hf_class;    // config.json's "architectures"
  const char* gguf;        // general.architecture of llama.cpp's files ("": written as "llama")
  bool qkv_bias;           // Q, K and V always have biases (Qwen2); else config.json's attention_bias says
  bool qk_norm;            // q_norm / k_norm over each head (Qwen3)
  bool sliding_always;     // sliding_window applies as given (Mistral); else only with use_sliding_window
  bool gguf_rope_rows;     // llama.cpp reorders Q's and K's rows for its RoPE (not for NEOX-RoPE models)
  int gemma;               // 2, 3: Gemma 2's or Gemma 3's forward pass and config fields (decoder.h), norms
                           // stored as w - 1
  bool fused;              // Q, K and V in one tensor (qkv_proj), gate and up in another (gate_up_proj)
};
// gguf "": not read from GGUF files under a name of its own (Mistral's are written as llama's).
// Phi-3's llama.cpp files (fused tensors under other names, its own window handling) are not read.
constexpr Architecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", "llama", false, false, false, true, 0, false},
    {"mistral", "MistralForCausalLM", "", false, false, true, true, 0, false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", true, false, false, false, 0, false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, true, false, false, 0, false},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", false, false, false, false, 2, false},
    {"gemma3_text", "Gemma3ForCausalLM", "gemma3", false, true, false, false, 3, false},
    {"phi3", "Phi3ForCausalLM", "", false, false, true, false, 0, true},
};

const Architecture* find_architecture(const std::string& model_type) {
  for (const Architecture& a : kArchitectures)
    if (model_type == a.model_type) return &a;
  return nullptr;
}

// Gemma 2's and Gemma 3's config fields (Gemma2Config, Gemma3TextConfig), with transformers' defaults for
// absent ones (null: none): GELU, the scales, the soft caps (Gemma 2: 50 on the scores, 30 on the logits),
// the sliding layers (a window of 4096; Gemma 2: every other layer, Gemma 3: five of every six).
void read_gemma(const json& j, const std::string& what, int version, DecoderConfig& c) {
  const Fields f{j, what};
  const std::string act = f.string("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh")
    throw Error(what + ": hidden_activation '" + act + "' is not supported (gelu_pytorch_tanh)");
  c.gelu = c.sandwich_norms = true;
  c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden)));
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(f.number("query_pre_attn_scalar", 256.0, 1e-6, 1e9)));
  if (non_null(j, "use_bidirectional_attention") && f.boolean("use_bidirectional_attention"))
    throw Error(what + ": use_bidirectional_attention is not supported (a decoder attends causally)");
  auto cap = [&](const char* field, double fallback) {
    if (!j.contains(field)) return static_cast<float>(fallback);
    return non_null(j, field) ? static_cast<float>(f.number(field, 0.0, 1e-6, 1e9)) : 0.0f;
  };
  c.attn_softcap = cap("attn_logit_softcapping", version == 2 ? 50.0 : 0.0);
  c.final_softcap = cap("final_logit_softcapping", version == 2 ? 30.0 : 0.0);
  if (j.contains("sliding_window") && !non_null(j, "sliding_window")) return;
  c.sliding_window = f.integer_or("sliding_window", 4096, 1, 1 << 24);
  // layer_types (transformers 5), or sliding_window_pattern: every pattern-th layer attends to everything.
  if (const json* types = non_null(j, "layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.layers)
      throw Error(what + ": 'layer_types' is not a list of num_hidden_layers names");
    for (const json& t : *types) {
      if (t != "sliding_attention" && t != "full_attention")
        throw Error(what + ": a layer type is not sliding_attention or full_attention");
      c.sliding.push_back(t == "sliding_attention");
    }
    return;
  }
  const int64_t pattern = version == 2 ? 2 : f.integer_or("sliding_window_pattern", 6, 1, 1 << 20);
  for (int64_t l = 0; l < c.layers; ++l) c.sliding.push_back((l + 1) % pattern != 0);
}

// longrope's fields beyond its factors, as transformers' _compute_longrope_parameters reads them: the
// original context (in the rope parameters or, as Phi-3's configs have it, at the top level), the factor
// (absent: max_position_embeddings / original) and the attention factor (absent: sqrt(1 + ln(factor) /
// ln(original)), 1 when the factor is at most 1); a factor per rotated frequency.
void read_longrope(const json& j, const std::string& what, DecoderConfig& c) {
  RopeConfig& r = c.rope;
  if (r.original_max_positions == 0)
    r.original_max_positions = Fields{j, what}.integer("original_max_position_embeddings", 1, 1 << 24);
  if (r.factor == 0.0)
    r.factor = static_cast<double>(c.max_positions) / static_cast<double>(r.original_max_positions);
  if (r.attention_factor == 0.0)
    r.attention_factor =
        r.factor <= 1.0
            ? 1.0
            : std::sqrt(1.0 + std::log(r.factor) / std::log(static_cast<double>(r.original_max_positions)));
  const size_t freqs = static_cast<size_t>((c.rotary_dim > 0 ? c.rotary_dim : c.head_dim) / 2);
  if (r.short_factor.size() != freqs || r.long_factor.size() != freqs)
    throw Error(what + ": longrope's short_factor and long_factor must have " + std::to_string(freqs) +
                " values (one per rotated frequency)");
}

// Which Linears carry a bias (Gemm::bias).
struct Biases {
  bool qkv = false, o = false, mlp = false;
};

DecoderConfig read_decoder_config(const json& j, const std::string& what, Biases& biases) {
  const Fields f{j, what};
  DecoderConfig c;
  c.model_type = f.string("model_type", "");
  const Architecture* arch = find_architecture(c.model_type);
  if (arch == nullptr)
    throw Error(what + ": model_type '" + c.model_type + "' is not a supported decoder (" +
                decoder_architectures() + ")");
  c.vocab = f.integer("vocab_size", 1, 1 << 22);
  c.hidden = f.integer("hidden_size", 4, 1 << 15);
  c.layers = f.integer("num_hidden_layers", 1, kMaxLayers);
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
  if (arch->gemma != 0) {
    read_gemma(j, what, arch->gemma, c);
  } else {
    const std::string act = f.string("hidden_act", "silu");
    if (act != "silu") throw Error(what + ": hidden_act '" + act + "' is not supported (silu)");
  }
  // Llama's attention_bias covers Q, K, V and O (Qwen3's too); Qwen2's Q, K and V always have one.
  biases.qkv = arch->qkv_bias || f.boolean("attention_bias");
  biases.o = !arch->qkv_bias && f.boolean("attention_bias");
  biases.mlp = f.boolean("mlp_bias");
  c.qk_norm = arch->qk_norm;
  if (arch->sliding_always || f.boolean("use_sliding_window"))
    if (j.contains("sliding_window") && !j["sliding_window"].is_null())
      c.sliding_window = f.integer("sliding_window", 1, 1 << 24);
  // transformers' configs default to untied embeddings (Qwen's and Mistral's write the field), Gemma's to
  // tied ones (Gemma 3's configs on the Hub leave the field out).
  c.tied = j.contains("tie_word_embeddings") ? f.boolean("tie_word_embeddings") : arch->gemma != 0;
  if (arch->gemma == 3)
    c.rope = read_rope(j, what, 1e6, &c.rope_sliding, f.number("rope_local_base_freq", 10000.0, 1.0, 1e12));
  else
    c.rope = read_rope(j, what);
  c.sliding_rope = arch->gemma == 3 && c.sliding_window > 0;
  // RoPE over the first int(head_dim * partial_rotary_factor) dims of each head (Phi-4-mini's 0.75), the
  // factor at the top level or among the rope parameters.
  for (const json* o : {&j, non_null(j, "rope_parameters"), non_null(j, "rope_scaling")})
    if (o != nullptr && o->is_object() && non_null(*o, "partial_rotary_factor")) {
      const double p = Fields{*o, what}.number("partial_rotary_factor", 1.0, 0.0, 1.0);
      const auto dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * p);
      if (dim < 2 || dim % 2 != 0)
        throw Error(what + ": partial_rotary_factor gives " + std::to_string(dim) +
                    " rotated dims of a head (must be even and at least 2)");
      c.rotary_dim = dim == c.head_dim ? 0 : dim;
    }
  if (c.rope.type == "longrope") read_longrope(j, what, c);
  return c;
}

// A Linear as build_decoder reads it, from the stored weights whose rows the forward pass runs as one GEMM
// (Q, K, V; gate, up; or one), given as (prefix, rows). Dense ones: with o.prune pruned as their rows are
// read (prune_as_read: the weights and fingerprint of reading them dense, then pruning), otherwise read
// straight into the joined weights (no copy of each, nor its pages); 2:4 ones (a pruned checkpoint) as
// Weights::linear_rows reads them.
template <class Src>
Gemm read_linear(Src& w, const std::string& name, const std::vector<std::pair<std::string, int64_t>>& parts,
                 int64_t in, bool bias, const DecoderLoadOptions& o) {
  bool dense = true, by_rows = o.prune;
  for (const auto& [prefix, rows] : parts) {
    dense = dense && w.is_dense(prefix + ".weight");
    by_rows = by_rows && w.reads_rows(prefix + ".weight", {rows, in});
  }
  if (!dense) {
    if constexpr (std::is_same_v<Src, detail::Weights>)
      return w.linear_rows(name, parts, in, bias);
    else
      throw Error("internal: 2:4 weights in a GGUF file");
  }
  Gemm g;
  g.name = name;
  g.k = in;
  for (const auto& [prefix, rows] : parts) g.m += rows;
  if (by_rows) {
    std::vector<detail::RowSource> sources;
    for (const auto& [prefix, rows] : parts) sources.push_back(w.rows(prefix + ".weight", {rows, in}));
    g.sparse = detail::prune_as_read(sources, in, o);
    g.pruned = true;
  } else {  // (a large one on 2 MB pages: faulted in once per 2 MB, not per 4 KB)
    kernels::reserve_huge(g.dense, static_cast<size_t>(g.m * in));
    g.dense.resize(static_cast<size_t>(g.m * in));
  }
  if (bias) g.bias.resize(static_cast<size_t>(g.m));
  int64_t at = 0;
  for (const auto& [prefix, rows] : parts) {  // (tensors taken in this order either way: one fingerprint)
    if (by_rows)
      w.rows_read(prefix + ".weight");
    else
      w.dense_into(prefix + ".weight", {rows, in}, g.dense.data() + at * in);
    if (bias) w.dense_into(prefix + ".bias", {rows}, g.bias.data() + at);
    g.sources.push_back(prefix + ".weight");
    at += rows;
  }
  return g;
}

// What DecoderLoadOptions did, appended to the weights' fingerprint (as prune_magnitude appends its).
std::string fingerprint_suffix(const DecoderLoadOptions& o) {
  return std::string(o.prune ? "-magnitude24" : "") + (o.int8 ? "-int8" : "") + (o.bf16 ? "-bf16" : "");
}

// The forward pass's tensors asked for by transformers' names (Src: detail::Weights for a Hugging Face
// directory, GgufTensors for a GGUF file).
template <class Src>
DecoderModel build_decoder(const DecoderConfig& c, const Biases& b, Src& w, const std::string& what,
                           bool from_gguf, const DecoderLoadOptions& o) {
  DecoderModel m;
  m.config = c;
  const Architecture& arch = *find_architecture(c.model_type);
  // Gemma's RMSNorms multiply by 1 + w (in fp32, as transformers) and its checkpoints store w; a GGUF file
  // stores 1 + w (llama.cpp's converter adds the 1).
  const bool plus_one = arch.gemma != 0 && !from_gguf;
  auto norm = [&](const std::string& name, int64_t size) {
    std::vector<float> v = w.dense(name, {size});
    if (plus_one)
      for (float& x : v) x += 1.0f;
    return v;
  };
  if (o.int8 && o.bf16) throw Error(what + ": the int8 and bf16 load options exclude each other");
  // The embeddings and an untied head: with o.int8 (o.bf16), int8 (bf16) tables as soon as read (never both
  // in fp32); stored as bfloat16, bf16 tables of exactly those values (never widened); otherwise fp32.
  const bool bf16_tables = !o.int8 && w.dense_dtype("model.embed_tokens.weight") == "BF16" &&
                           (c.tied || w.dense_dtype("lm_head.weight") == "BF16");
  const auto narrow = [&](std::vector<float>& fp32, WeightTable& t) {
    if (!o.int8 && !o.bf16) return;
    t = o.int8 ? detail::int8_table(fp32, c.vocab, c.hidden) : detail::bf16_table(fp32);
    std::vector<float>().swap(fp32);
  };
  // A table the source reads by rows: narrowed a block of rows at a time, never whole in fp32 (Llama 3.2
  // 1B's is 1 GB); false where it must be read first.
  const auto narrow_by_rows = [&](const std::string& name, WeightTable& t) {
    if ((!o.int8 && !o.bf16) || !w.reads_rows(name, {c.vocab, c.hidden})) return false;
    const detail::RowSource rows = w.rows(name, {c.vocab, c.hidden});
    FnvWords f = w.row_hash(name);  // (hashed as read: blocks of rows, multiples of 32 bytes)
    uint64_t h = 0;
    t = detail::narrowed_table(rows, o.int8, o.threads, [&](int64_t r0, int64_t r1) {
      const size_t bytes = rows.stored.row_bytes();
      const uint8_t* p = rows.stored.data + static_cast<size_t>(r0) * bytes;
      if (r1 == c.vocab)
        h = f.finish(p, static_cast<size_t>(r1 - r0) * bytes);
      else
        f.add(p, static_cast<size_t>(r1 - r0) * bytes);
    });
    w.rows_read(name, h);
    return true;
  };
  // An untied model's embeddings stay in the mapped file, as stored (a token reads one row of them). So does
  // a head that would otherwise be widened, quantized a second time or copied (Q8_0, Q6_K, F16, BF16: a
  // bf16 checkpoint's head runs on the bf16 table's kernel there), run as stored (DecoderModel::head_stored)
  // where detail::head_runs_stored says so for the options (fp32 ones are read). A tied model's table stays
  // when its head does.
  const std::vector<int64_t> table{c.vocab, c.hidden};
  const std::string embeddings = "model.embed_tokens.weight", head = c.tied ? embeddings : "lm_head.weight";
  const std::string head_type = w.dense_dtype(head);
  const auto runs_stored = [&](GgmlType t) {
    return head_type == ggml_type_name(static_cast<uint32_t>(t)) &&
           detail::head_runs_stored(static_cast<uint32_t>(t), o.int8, o.bf16);
  };
  const bool head_in_file = (runs_stored(GgmlType::kQ8_0) || runs_stored(GgmlType::kQ6_K) ||
                             runs_stored(GgmlType::kF16) || runs_stored(GgmlType::kBF16)) &&
                            w.stays_in_file(head, table) && w.stays_in_file(embeddings, table);
  // prune-model --int8's tables: int8 as stored, whatever the options ask (the narrowest there is).
  const auto stored_int8 = [&](const std::string& name, WeightTable& t) {
    if constexpr (std::is_same_v<Src, detail::Weights>) {
      if (!w.is_int8_table(name, table)) return false;
      t = w.int8_table(name, table);
      return true;
    }
    return false;
  };
  if ((!c.tied || head_in_file) && w.stays_in_file(embeddings, table))
    m.embed_stored = w.stored_rows(embeddings, table);
  if (m.embed_stored.empty() && !stored_int8(embeddings, m.embed_table)) {
    if (bf16_tables) {
      m.embed_table.bf16 = w.bf16("model.embed_tokens.weight", {c.vocab, c.hidden});
    } else if (!narrow_by_rows(embeddings, m.embed_table)) {
      m.embed = w.dense("model.embed_tokens.weight", {c.vocab, c.hidden});
      narrow(m.embed, m.embed_table);
    }
  }
  m.norm = norm("model.norm.weight", c.hidden);
  if (!c.tied) {
    if (!w.is_dense("lm_head.weight")) throw Error(what + ": the output head 'lm_head.weight' must be dense");
    if (head_in_file) {
      m.head_stored = w.stored_rows("lm_head.weight", table);
    } else if (stored_int8("lm_head.weight", m.head_table)) {  // (as stored)
    } else if (bf16_tables) {
      m.head_table.bf16 = w.bf16("lm_head.weight", {c.vocab, c.hidden});
    } else if (!narrow_by_rows("lm_head.weight", m.head_table)) {
      m.head = w.linear("lm_head", "lm_head", c.vocab, c.hidden, false);
      narrow(m.head.dense, m.head_table);
    }
  }
  const int64_t q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string name = "layer" + std::to_string(l) + ".";
    DecoderLayer L;
    L.attn_norm = norm(p + "input_layernorm.weight", c.hidden);
    if (c.sandwich_norms) {  // Gemma: post_attention_layernorm is attention's output norm
      L.attn_out_norm = norm(p + "post_attention_layernorm.weight", c.hidden);
      L.ffn_norm = norm(p + "pre_feedforward_layernorm.weight", c.hidden);
      L.ffn_out_norm = norm(p + "post_feedforward_layernorm.weight", c.hidden);
    } else {
      L.ffn_norm = norm(p + "post_attention_layernorm.weight", c.hidden);
    }
    if (c.qk_norm) {
      L.q_norm = norm(p + "self_attn.q_norm.weight", c.head_dim);
      L.k_norm = norm(p + "self_attn.k_norm.weight", c.head_dim);
    }
    if (arch.fused) {  // Phi-3: the joined GEMMs as they are stored
      L.qkv = read_linear(w, name + "qkv", {{p + "self_attn.qkv_proj", q_rows + 2 * kv_rows}}, c.hidden,
                          b.qkv, o);
      L.gate_up = read_linear(w, name + "gate_up", {{p + "mlp.gate_up_proj", 2 * c.ffn}}, c.hidden, b.mlp, o);
    } else {
      L.qkv = read_linear(w, name + "qkv",
                          {{p + "self_attn.q_proj", q_rows},
                           {p + "self_attn.k_proj", kv_rows},
                           {p + "self_attn.v_proj", kv_rows}},
                          c.hidden, b.qkv, o);
      L.gate_up = read_linear(w, name + "gate_up", {{p + "mlp.gate_proj", c.ffn}, {p + "mlp.up_proj", c.ffn}},
                              c.hidden, b.mlp, o);
    }
    L.o = read_linear(w, name + "o", {{p + "self_attn.o_proj", c.hidden}}, q_rows, b.o, o);
    L.down = read_linear(w, name + "down", {{p + "mlp.down_proj", c.hidden}}, c.ffn, b.mlp, o);
    if (o.prune || o.int8 || o.bf16) detail::prepare_linears({&L.qkv, &L.o, &L.gate_up, &L.down}, o);
    if (o.on_layer) o.on_layer(m, L, l);
    m.layers.push_back(std::move(L));
  }
  return m;
}

}  // namespace

std::string decoder_architectures() {
  std::string s;
  for (const Architecture& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.model_type);
  return s;
}

bool is_hf_decoder(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!std::filesystem::exists(path)) return false;
  const json j = detail::read_json(path);
  return j.contains("model_type") && j["model_type"].is_string() &&
         find_architecture(j["model_type"].get<std::string>()) != nullptr;
}

namespace {

DecoderModel read_hf_decoder(const std::string& dir, const std::string& config_json, detail::Weights& w,
                             const std::string& what, const DecoderLoadOptions& o) {
  const std::string config_path = dir + "/config.json";
  const json cj = json::parse(config_json, nullptr, false);
  if (cj.is_discarded() || !cj.is_object()) throw Error(config_path + ": not a JSON object");
  Biases b;
  const DecoderConfig c = read_decoder_config(cj, config_path, b);
  DecoderModel m = build_decoder(c, b, w, what, false, o);
  w.check_all_used([&](const std::string& n) {
    return n.find("rotary_emb.inv_freq") != std::string::npos || (c.tied && n == "lm_head.weight");
  });
  m.fingerprint = w.fingerprint(config_json) + fingerprint_suffix(o);
  return m;
}

}  // namespace

DecoderModel load_hf_decoder(const std::string& dir, const DecoderLoadOptions& o) {
  // 2:4 weights decoded as each layer is read (with int8 or bf16 options, narrowed before the next one: a
  // pruned bf16 checkpoint is never in memory whole beside its int8 weights).
  MappedHfDir d = map_hf_dir(dir, true);
  const std::string what = detail::weights_what(d.dir, d.shards), config = d.config_json;
  detail::Weights w(std::move(d), what);
  w.in_place = o.in_place;
  w.rounds_int8 = o.int8;
  w.rounds_bf16 = o.bf16;
  return read_hf_decoder(dir, config, w, what, o);
}

DecoderModel load_hf_decoder(HfDir d, const DecoderLoadOptions& o) {
  const std::string what = detail::weights_what(d.dir, d.shards);
  detail::Weights w(std::move(d.weights), what);
  return read_hf_decoder(d.dir, d.config_json, w, what, o);
}

namespace {

// Gemma 2's and 3's fields from llama.cpp's metadata, as its loader reads them: the sliding window (absent:
// 4096 for Gemma 2, none for Gemma 3) and which layers slide (Gemma 2: every other one; Gemma 3:
// attention.sliding_window_pattern, a flag per layer or n: every n-th layer full; absent: 6), Gemma 3's
// sliding layers' RoPE base (rope.freq_base_swa, absent: 10,000), the scores' scale (1/sqrt(head_dim), or
// 1/sqrt(hidden / heads) for the 27Bs: 46 layers in Gemma 2, 62 in Gemma 3), the soft caps (0: none;
// absent: Gemma 2's 50 and 30; Gemma 3 has none on the scores).
void gemma_gguf_config(const Gguf& g, const std::string& a, int version, bool linear, json& j) {
  j["hidden_activation"] = "gelu_pytorch_tanh";
  const auto number = [&](const std::string& key, double fallback) {
    return g.find(a + "." + key) ? g.get_float(a + "." + key) : fallback;
  };
  if (version == 3) {
    json full = {{"rope_type", linear ? "linear" : "default"}, {"rope_theta", number("rope.freq_base", 1e6)}};
    if (linear) full["factor"] = number("rope.scaling.factor", 1.0);
    j["rope_parameters"] = {
        {"full_attention", full},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", number("rope.freq_base_swa", 1e4)}}}};
    j.erase("rope_theta");
  }
  const int64_t layers = j.value("num_hidden_layers", int64_t{0}),
                heads = j.value("num_attention_heads", int64_t{1});
  const int64_t hidden = j.value("hidden_size", int64_t{0});
  j["query_pre_attn_scalar"] = layers == (version == 2 ? 46 : 62) ? hidden / std::max<int64_t>(heads, 1)
                                                                  : j.value("head_dim", int64_t{256});
  const double attn_cap = version == 2 ? number("attn_logit_softcapping", 50.0) : 0.0,
               final_cap = number("final_logit_softcapping", version == 2 ? 30.0 : 0.0);
  j["attn_logit_softcapping"] = attn_cap != 0.0 ? json(attn_cap) : json(nullptr);
  j["final_logit_softcapping"] = final_cap != 0.0 ? json(final_cap) : json(nullptr);
  const GgufValue* window = g.find(a + ".attention.sliding_window");
  const int64_t w = window != nullptr ? g.get_int(a + ".attention.sliding_window") : version == 2 ? 4096 : 0;
  if (w <= 0) {
    j["sliding_window"] = nullptr;
    return;
  }
  j["sliding_window"] = w;
  json types = json::array();
  const GgufValue* pattern = g.find(a + ".attention.sliding_window_pattern");
  if (version == 3 && pattern != nullptr && pattern->is_array()) {
    for (int64_t flag : g.get_ints(a + ".attention.sliding_window_pattern"))
      types.push_back(flag != 0 ? "sliding_attention" : "full_attention");
  } else {  // a layer count out of bounds gets no list (read_decoder_config refuses it)
    const int64_t n = version == 2         ? 2
                      : pattern != nullptr ? g.get_int(a + ".attention.sliding_window_pattern")
                                           : 6;
    for (int64_t l = 0; l < std::min(layers, kMaxLayers + 1); ++l)
      types.push_back(n > 0 && l % n < n - 1 ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = types;
}

// GGUF metadata (general.architecture and ARCH.* keys) as the config.json fields read_decoder_config
// bounds. An absent key is left out (the config's default applies, or its error names the field).
json gguf_config(const Gguf& g, const std::string& what) {
  const GgufValue* arch = g.find("general.architecture");
  if (arch == nullptr || arch->is_array() || arch->type != GgufType::kString)
    throw Error(what + ": metadata 'general.architecture' is missing or not a string");
  const std::string a = arch->strings[0];
  const Architecture* found = nullptr;
  std::string known;
  for (const Architecture& x : kArchitectures)
    if (*x.gguf != '\0') {
      known += (known.empty() ? "" : ", ") + std::string(x.gguf);
      if (a == x.gguf) found = &x;
    }
  if (found == nullptr)
    throw Error(what + ": architecture '" + a + "' is not a supported decoder (" + known + ")");
  json j = {{"model_type", found->model_type}};
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
  const bool linear = found->gemma == 3 && scaling != nullptr && !scaling->is_array() &&
                      scaling->type == GgufType::kString && scaling->strings[0] == "linear";
  if (scaling != nullptr && !linear &&
      (scaling->is_array() || scaling->type != GgufType::kString || scaling->strings[0] != "none"))
    throw Error(what + ": rope scaling '" + (scaling->strings.empty() ? "?" : scaling->strings[0]) +
                "' is not supported");
  if (found->gemma != 0) gemma_gguf_config(g, a, found->gemma, linear, j);
  if (const GgufTensor* t = g.find_tensor("rope_freqs.weight"); t != nullptr) {
    // Llama 3.1's and 3.2's scaling as llama.cpp's converter stores it: a divisor per frequency.
    if (found->gemma != 0 || scaling != nullptr)
      throw Error(what + ": rope_freqs.weight with " + (scaling != nullptr ? "rope.scaling.type" : a) +
                  " is not supported");
    const int64_t heads = j.value("num_attention_heads", int64_t{0});
    const int64_t dim = j.contains("head_dim")                   ? j["head_dim"].get<int64_t>()
                        : heads > 0 && j.contains("hidden_size") ? j["hidden_size"].get<int64_t>() / heads
                                                                 : 0;
    if (t->shape.size() != 1 || dim < 2 || t->shape[0] != dim / 2)
      throw Error(what + ": tensor 'rope_freqs.weight' has shape " + shape_string(t->shape) + ", expected [" +
                  std::to_string(std::max<int64_t>(dim, 0) / 2) + "]");
    const RopeConfig r =
        detail::rope_from_factors(j.value("rope_theta", 10000.0), dim, dequantize_floats(*t), what);
    if (r.type == "llama3")
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", r.factor},
                           {"low_freq_factor", r.low_freq_factor},
                           {"high_freq_factor", r.high_freq_factor},
                           {"original_max_position_embeddings", r.original_max_positions}};
  }
  j["tie_word_embeddings"] = g.find_tensor("output.weight") == nullptr;
  // Biases are in the file or not (Qwen2's Q, K and V always).
  if (!found->qkv_bias && g.find_tensor("blk.0.attn_q.bias") != nullptr) j["attention_bias"] = true;
  if (g.find_tensor("blk.0.ffn_gate.bias") != nullptr) j["mlp_bias"] = true;
  return j;
}

DecoderModel read_gguf_decoder(const Gguf& g, const std::string& path,
                               std::vector<std::pair<std::string, StTensor>>* kept,
                               const DecoderLoadOptions& o, const MappedFile* file, bool keep_tables = true,
                               std::shared_ptr<const void> owner = nullptr) {
  Biases b;
  const DecoderConfig c = read_decoder_config(gguf_config(g, path), path + " (metadata)", b);
  const Architecture& arch = *find_architecture(c.model_type);
  const std::string a = g.get_string("general.architecture");
  if (g.find(a + ".rope.dimension_count") != nullptr && g.get_int(a + ".rope.dimension_count") != c.head_dim)
    throw Error(path + ": RoPE over part of a head (" + a + ".rope.dimension_count " +
                std::to_string(g.get_int(a + ".rope.dimension_count")) + ", head size " +
                std::to_string(c.head_dim) + ") is not supported");
  detail::GgufTensors w(g, path, c, arch.gguf_rope_rows, kept, file, keep_tables, std::move(owner));
  DecoderModel m = build_decoder(c, b, w, path, true, o);
  w.used_by_config("rope_freqs.weight");
  w.check_all_used();
  m.fingerprint = w.fingerprint() + fingerprint_suffix(o);
  return m;
}

}  // namespace

DecoderModel load_gguf_decoder(const std::string& path, const DecoderLoadOptions& o) {
  // Shared: an untied model's embeddings stay in the mapping (build_decoder), which then outlives the load.
  const auto f = std::make_shared<const MappedGguf>(path);
  return read_gguf_decoder(f->gguf, path, nullptr, o, &f->file, true, f);
}

DecoderModel load_gguf_decoder(const Gguf& g, const std::string& path, const DecoderLoadOptions& o) {
  return read_gguf_decoder(g, path, nullptr, o, nullptr);
}

struct GgufCheckpoint::Impl {
  std::string path;
  MappedGguf f;
  json config;
  DecoderConfig c;
  bool rope_rows = false;
  std::optional<text::ByteBpe> tok;
  explicit Impl(const std::string& p) : path(p), f(p) {}
};

GgufCheckpoint::GgufCheckpoint(const std::string& path) : impl_(std::make_unique<Impl>(path)) {
  const Gguf& g = impl_->f.gguf;
  const text::ByteBpe& tok = impl_->tok.emplace(text::ByteBpe::from_gguf(g, path));
  json& config = impl_->config;
  config = gguf_config(g, path);
  Biases b;
  const DecoderConfig& c = impl_->c = read_decoder_config(config, path + " (metadata)", b);
  impl_->rope_rows = find_architecture(c.model_type)->gguf_rope_rows;
  config["architectures"] = json::array({find_architecture(c.model_type)->hf_class});
  if (!c.gelu) config["hidden_act"] = "silu";
  if (tok.bos_id() >= 0) config["bos_token_id"] = tok.bos_id();
  if (tok.eos_id() >= 0) config["eos_token_id"] = tok.eos_id();
  files_ = {{"tokenizer.json", tok.to_json()}, {"tokenizer_config.json", tok.config_json()}};
  // The chat template, where transformers saves one (and text::chat_template_of reads it).
  const GgufValue* chat = g.find("tokenizer.chat_template");
  if (chat != nullptr && !chat->is_array() && chat->type == GgufType::kString)
    files_["chat_template.jinja"] = chat->strings[0];
  for (const GgufTensor& t : g.tensors) {
    const std::string hf = detail::hf_name_of_gguf(t.name, c.sandwich_norms);
    if (!hf.empty()) tensors_[hf] = {t.type, t.shape};
  }
}

GgufCheckpoint::~GgufCheckpoint() = default;

std::string GgufCheckpoint::config_json(const std::string& torch_dtype) const {
  json config = impl_->config;
  config["torch_dtype"] = torch_dtype;
  return config.dump(2);
}

std::vector<int32_t> GgufCheckpoint::encode(const std::string& text) const {
  return impl_->tok->encode(text);
}

DecoderModel GgufCheckpoint::load(const DecoderLoadOptions& o,
                                  std::vector<std::pair<std::string, StTensor>>& read, bool tables) const {
  return read_gguf_decoder(impl_->f.gguf, impl_->path, &read, o, &impl_->f.file, tables);
}

StTensor GgufCheckpoint::tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(impl_->path + ": no tensor '" + name + "'");
  std::vector<std::pair<std::string, StTensor>> one;
  detail::GgufTensors w(impl_->f.gguf, impl_->path, impl_->c, impl_->rope_rows, &one, &impl_->f.file);
  w.dense(name, it->second.shape);
  return std::move(one.at(0).second);
}

WeightTable GgufCheckpoint::int8_table(const std::string& name, int threads) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(impl_->path + ": no tensor '" + name + "'");
  detail::GgufTensors w(impl_->f.gguf, impl_->path, impl_->c, impl_->rope_rows, nullptr, &impl_->f.file);
  WeightTable t = detail::narrowed_table(w.rows(name, it->second.shape), true, threads);
  w.rows_read(name);  // (its pages dropped)
  return t;
}

ConvertReport gguf_to_hf_dir(const std::string& path, const std::string& out_dir, const ConvertOptions& c) {
  const GgufCheckpoint in(path);
  // Written as read: a shard per layer (the first with the embeddings, norm and head read before it), each
  // converted and the layer dropped from the model once kept, so an 8B file converts in the memory of its
  // tables and a layer.
  HfDirWriter out("", {}, in.config_json(), c.to, out_dir, in.files());
  std::vector<std::pair<std::string, StTensor>> kept;
  ConvertReport report;
  const auto flush = [&] {
    Checkpoint part;
    for (auto& [name, t] : kept) part.tensors.push_back({name, std::move(t), {}});
    kept.clear();
    if (part.tensors.empty()) return;
    // In the order the shard stores them (all fp32: by name), so reports and the sparsity config's targets
    // list them as a conversion of the written directory would.
    std::sort(part.tensors.begin(), part.tensors.end(),
              [](const CheckpointTensor& a, const CheckpointTensor& b) { return a.name < b.name; });
    report.tensors += part.tensors.size();
    report.sparsify.append(convert_weights(part, c));
    report.sparse_out += stored_sparse(part, c.to);
    out.add(part);
  };
  DecoderLoadOptions o;
  o.on_layer = [&](DecoderModel& m, DecoderLayer& layer, int64_t) {
    m.release_tables();
    layer = DecoderLayer{};
    flush();
  };
  in.load(o, kept);
  flush();
  out.finish();
  return report;
}

ConvertReport convert_model(const std::string& in, const std::string& out, const ConvertOptions& o,
                            std::string config_in, std::string config_out) {
  namespace fs = std::filesystem;
  if (fs::is_directory(in)) return convert_hf_dir(in, out, o);
  if (is_gguf_file(in)) return gguf_to_hf_dir(in, out, o);
  const auto beside = [](const std::string& file) {
    return (fs::path(file).parent_path() / "config.json").string();
  };
  if (config_in.empty() && fs::exists(beside(in))) config_in = beside(in);
  if (config_out.empty()) config_out = beside(out);
  return convert_checkpoint_file(in, out, o, config_in, config_out);
}

DecoderModel load_decoder(const std::string& path, const DecoderLoadOptions& o) {
  if (is_gguf_file(path)) return load_gguf_decoder(path, o);
  if (!is_hf_decoder(path))
    throw Error(path + ": neither a GGUF file nor a decoder model directory (config.json model_type " +
                decoder_architectures() + ")");
  return load_hf_decoder(path, o);
}

}  // namespace sparse24::engine
