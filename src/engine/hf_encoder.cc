// Hugging Face encoders (BertModel, MPNetModel) and the sentence-transformers layout around them, built
// through the ModelBuilder. The forward passes follow transformers' modeling_bert.py and modeling_mpnet.py:
//   embeddings: word[id] + position[i (+ pad_token_id + 1 for MPNet)] (+ token_type[0] for BERT), LayerNorm;
//   each layer: Q, K, V (one [3H, H] GEMM), attention (MPNet: + the relative position bias of the first
//   layer, shared by all), output dense, LayerNorm(+ residual), FFN with GELU (erf), LayerNorm(+ residual);
//   then sentence-transformers' pooling (mean over the tokens, or the first token) and Normalize.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "builder.h"
#include "fingerprint.h"
#include "hf_weights.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"

namespace sparse24::engine {
namespace {

namespace fs = std::filesystem;
using detail::Fields;
using detail::json;
using detail::read_json;
using detail::Weights;

// The encoder's shape, from config.json.
struct EncoderConfig {
  std::string type;  // bert, mpnet
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, ffn = 0, max_positions = 0, type_vocab = 0;
  int64_t position_offset = 0, buckets = 0;
  float eps = 1e-12f;
};

EncoderConfig read_encoder_config(const json& j, const std::string& what) {
  const Fields f{j, what};
  EncoderConfig c;
  c.type = f.string("model_type", "");
  if (c.type != "bert" && c.type != "mpnet")
    throw Error(what + ": model_type '" + c.type + "' is not supported (bert, mpnet)");
  c.vocab = f.integer("vocab_size", 1, 1 << 22);
  c.hidden = f.integer("hidden_size", 4, 1 << 14);
  c.layers = f.integer("num_hidden_layers", 1, 1024);
  c.heads = f.integer("num_attention_heads", 1, 1024);
  c.ffn = f.integer("intermediate_size", 4, 1 << 17);
  c.max_positions = f.integer("max_position_embeddings", 1, 1 << 16);
  c.eps = static_cast<float>(f.number("layer_norm_eps", 1e-12, 1e-30, 0.1));
  if (c.hidden % c.heads != 0) throw Error(what + ": hidden_size is not a multiple of num_attention_heads");
  const std::string act = f.string("hidden_act", "gelu");
  if (act != "gelu") throw Error(what + ": hidden_act '" + act + "' is not supported (gelu)");
  if (c.type == "bert") {
    c.type_vocab = f.integer_or("type_vocab_size", 2, 1, 1 << 16);
    const std::string pos = f.string("position_embedding_type", "absolute");
    if (pos != "absolute") throw Error(what + ": position_embedding_type '" + pos + "' is not supported");
  } else {
    c.position_offset = f.integer_or("pad_token_id", 1, 0, 1 << 16) + 1;
    c.buckets = f.integer_or("relative_attention_num_buckets", 32, 4, 1024);
    if (c.max_positions <= c.position_offset) throw Error(what + ": max_position_embeddings too small");
  }
  return c;
}

// sentence-transformers: modules.json (Transformer, Pooling, Normalize), 1_Pooling/config.json and
// sentence_bert_config.json. A plain Hugging Face directory is pooled by the mean, as sentence-transformers
// does when it loads one.
void read_sentence_transformers(const std::string& dir, TextModelInfo& info) {
  info.pool = PoolMode::kMean;
  info.normalize = false;
  const std::string modules = dir + "/modules.json";
  if (!fs::exists(modules)) return;
  const std::vector<uint8_t> b = read_file(modules);
  const json j = json::parse(b.begin(), b.end(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) throw Error(modules + ": not a JSON array");
  bool pooling = false;
  for (const json& m : j) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
      throw Error(modules + ": a module without a \"type\" string");
    const std::string type = m["type"].get<std::string>();
    const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
    if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/'))
      throw Error(modules + ": module path '" + path + "' leaves the directory");
    if (type == "sentence_transformers.models.Transformer") {
      if (!path.empty()) throw Error(modules + ": the Transformer module must be the directory itself");
    } else if (type == "sentence_transformers.models.Pooling") {
      const std::string pc = dir + "/" + path + "/config.json";
      const json p = read_json(pc);
      const Fields f{p, pc};
      const bool cls = f.boolean("pooling_mode_cls_token"), mean = f.boolean("pooling_mode_mean_tokens");
      for (const char* k : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                            "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
        if (f.boolean(k)) throw Error(pc + ": '" + k + "' pooling is not supported (mean or CLS)");
      if (cls == mean) throw Error(pc + ": exactly one of mean and CLS pooling must be set");
      info.pool = cls ? PoolMode::kCls : PoolMode::kMean;
      pooling = true;
    } else if (type == "sentence_transformers.models.Normalize") {
      info.normalize = true;
    } else {
      throw Error(modules + ": module type '" + type + "' is not supported");
    }
  }
  if (!pooling) throw Error(modules + ": no Pooling module");
  const std::string sb = dir + "/sentence_bert_config.json";
  if (fs::exists(sb)) {
    const json s = read_json(sb);
    info.max_tokens =
        std::min(info.max_tokens, Fields{s, sb}.integer_or("max_seq_length", info.max_tokens, 1, 1 << 16));
  }
}

Model read_hf_encoder(const std::string& dir, const std::string& config_json, Weights& w,
                      TextModelInfo* info_out) {
  const std::string config_path = dir + "/config.json";
  const json cj = json::parse(config_json, nullptr, false);
  const EncoderConfig c = read_encoder_config(cj, config_path);
  TextModelInfo info;
  info.model_type = c.type;
  const int64_t max_sequence = c.max_positions - c.position_offset;
  info.max_tokens = max_sequence;
  read_sentence_transformers(dir, info);

  // A task model (BertForX, MPNetForX) keeps the encoder under the model type's prefix.
  const std::string root = w.has(c.type + ".embeddings.word_embeddings.weight") ? c.type + "." : "";
  auto norm = [&](const std::string& prefix) {
    const bool old = !w.has(prefix + ".weight") && w.has(prefix + ".gamma");  // old BERT names
    return std::make_pair(w.dense(prefix + (old ? ".gamma" : ".weight"), {c.hidden}),
                          w.dense(prefix + (old ? ".beta" : ".bias"), {c.hidden}));
  };

  ModelBuilder b(c.type + "-l" + std::to_string(c.layers) + "-h" + std::to_string(c.hidden));
  const int ids = b.token_input(c.vocab, max_sequence);
  const std::string e = root + "embeddings.";
  Weights::Table word = w.table(e + "word_embeddings.weight", {c.vocab, c.hidden});
  std::vector<float> pos = w.dense(e + "position_embeddings.weight", {c.max_positions, c.hidden});
  if (c.type == "bert") {
    const std::vector<float> type = w.dense(e + "token_type_embeddings.weight", {c.type_vocab, c.hidden});
    for (int64_t p = 0; p < c.max_positions; ++p)
      for (int64_t r = 0; r < c.hidden; ++r) pos[p * c.hidden + r] += type[r];  // every token is type 0
  }
  int h = b.embed(ids, c.hidden, std::move(word.values), std::move(word.stored), std::move(pos),
                  c.position_offset);
  {
    auto [g, beta] = norm(e + "LayerNorm");
    h = b.layer_norm(h, -1, std::move(g), std::move(beta), c.eps);
  }
  RelativeBias bias;
  if (c.type == "mpnet") {
    bias.buckets = c.buckets;
    bias.max_distance = 128;  // transformers' relative_position_bucket default
    bias.table = w.dense(root + "encoder.relative_attention_bias.weight", {c.buckets, c.heads});
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = root + "encoder.layer." + std::to_string(l) + ".";
    const std::string lname = "layer" + std::to_string(l) + ".";
    const bool bert = c.type == "bert";
    const std::string att = p + (bert ? "attention.self." : "attention.attn.");
    const int qkv = b.gemm(h, w.linear_rows(lname + "qkv",
                                            {{att + (bert ? "query" : "q"), c.hidden},
                                             {att + (bert ? "key" : "k"), c.hidden},
                                             {att + (bert ? "value" : "v"), c.hidden}},
                                            c.hidden, true));
    const int ctx = b.attention(qkv, c.heads, bias);
    const int ao = b.gemm(ctx, w.linear(p + (bert ? "attention.output.dense" : "attention.attn.o"),
                                        lname + "attn_out", c.hidden, c.hidden));
    auto [g1, b1] = norm(p + (bert ? "attention.output.LayerNorm" : "attention.LayerNorm"));
    const int h1 = b.layer_norm(ao, h, std::move(g1), std::move(b1), c.eps);
    Gemm f1 = w.linear(p + "intermediate.dense", lname + "ffn1", c.ffn, c.hidden);
    f1.epilogue = Epilogue::kGelu;
    const int i1 = b.gemm(h1, std::move(f1));
    const int f2 = b.gemm(i1, w.linear(p + "output.dense", lname + "ffn2", c.hidden, c.ffn));
    auto [g2, b2] = norm(p + "output.LayerNorm");
    h = b.layer_norm(f2, h1, std::move(g2), std::move(b2), c.eps);
  }
  w.check_all_used([](const std::string& n) {  // the heads an encoder does not run
    return n.find("pooler.") != std::string::npos || n.rfind("cls.", 0) == 0 || n.rfind("lm_head.", 0) == 0 ||
           n.find("position_ids") != std::string::npos;
  });
  h = b.pool(h, info.pool);
  if (info.normalize) h = b.l2norm(h);
  if (info_out) *info_out = info;
  return b.finish(h, w.fingerprint(config_json));
}

}  // namespace

Model load_hf_encoder(const std::string& dir, TextModelInfo* info) {
  MappedHfDir d = map_hf_dir(dir);
  const std::string config = d.config_json, what = detail::weights_what(dir, d.shards);
  Weights w(std::move(d), what);
  return read_hf_encoder(dir, config, w, info);
}

Model load_hf_encoder(HfDir d, TextModelInfo* info) {
  Weights w(std::move(d.weights), detail::weights_what(d.dir, d.shards));
  return read_hf_encoder(d.dir, d.config_json, w, info);
}

Model load_any_model(const std::string& dir, TextModelInfo* info) {
  if (fs::exists(dir + "/config.json")) return load_hf_encoder(dir, info);
  return load_model(dir);
}

}  // namespace sparse24::engine
