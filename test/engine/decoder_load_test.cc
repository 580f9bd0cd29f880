// The decoder loaders (decoder.h): Hugging Face directories of each architecture and GGUF files as llama.cpp
// writes them load to the model written (its logits against the double reference, tiny_decoder.h), convert
// to directories, and refuse what they do not support with one-line errors. The forward pass itself:
// decoder_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "../common/same_tensors.h"
#include "../common/seed.h"
#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "sparse24/prune_model.h"
#include "text/bpe.h"
#include "tiny_decoder.h"
#include "tiny_gguf.h"

namespace sparse24::engine {
namespace {
TEST_F(HfDecoderDir, LoadsWhatItWrote) {
  SPARSE24_SEED_TRACE();
  auto g = rng(7);
  const DecoderModel m = tiny_model(g, t_);
  write(m, config());
  EXPECT_TRUE(is_hf_decoder(dir_.string()));
  const DecoderModel back = load_hf_decoder(dir_.string());
  EXPECT_EQ(back.config.kv_heads, t_.kv);
  EXPECT_EQ(back.config.rope.theta, 100000.0);
  const std::vector<int32_t> ids = random_ids(g, 9, t_.vocab);
  const std::vector<double> ref = ref_forward(m, ids);
  expect_logits_match(back, ids, ref);
}

// Each architecture's directory (transformers' names and config fields) loads to the model written: Qwen2
// (Q, K, V biases), Qwen3 (per-head Q/K norms), Mistral (a sliding window of 4 positions over 9 tokens),
// Llama with attention_bias and mlp_bias, Phi-3 (Q, K, V in one tensor and gate, up in another; a window).
TEST_F(HfDecoderDir, ArchitecturesLoadWhatTheyWrote) {
  SPARSE24_SEED_TRACE();
  auto g = rng(32);
  for (const std::string type : {"qwen2", "qwen3", "mistral", "llama", "phi3"}) {
    t_.biases = type == "qwen2" || type == "llama";
    t_.qk_norm = type == "qwen3";
    t_.window = type == "mistral" || type == "phi3" ? 4 : 0;
    t_.fused = type == "phi3";
    DecoderModel m = tiny_model(g, t_);
    json c = config();
    c["model_type"] = type;
    if (type == "qwen2")  // Qwen2: Q, K and V only
      for (DecoderLayer& L : m.layers)
        for (Gemm* gm : {&L.o, &L.gate_up, &L.down}) gm->bias.clear();
    if (type == "llama") c["attention_bias"] = c["mlp_bias"] = true;
    if (type == "mistral" || type == "phi3") c["sliding_window"] = 4;
    if (type == "qwen2") c["sliding_window"] = 8;  // not used without use_sliding_window
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    write(m, c);
    EXPECT_TRUE(is_hf_decoder(dir_.string())) << type;
    const DecoderModel back = load_hf_decoder(dir_.string());
    EXPECT_EQ(back.config.model_type, type);
    EXPECT_EQ(back.config.qk_norm, type == "qwen3");
    EXPECT_EQ(back.config.sliding_window, t_.window) << type;
    EXPECT_EQ(Decoder(back, {}).capacity(), 64) << type;  // a window does not cap the context
    const std::vector<int32_t> ids = random_ids(g, 9, t_.vocab);
    SCOPED_TRACE(type);
    expect_logits_match(back, ids, ref_forward(m, ids));
    if (type == "qwen2") {  // its biases are not optional, nor are Qwen3's norms
      std::filesystem::remove(dir_ / "model.safetensors");
      for (DecoderLayer& L : m.layers) L.qkv.bias.clear();
      write(m, c);
      EXPECT_NE(load_error().find("missing tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos)
          << load_error();
    }
  }
  t_ = Tiny();
}

// Gemma 2 and 3 (Gemma2ForCausalLM's and Gemma3ForCausalLM's names and config fields; norms stored as
// w - 1): the config in transformers 5's form (layer_types, Gemma 3's per-layer-type rope_parameters) and in
// the Hub's older one (Gemma 3's sliding_window_pattern, rope_theta and rope_local_base_freq; Gemma 2's
// every other layer sliding) load to the model written; transformers' defaults for absent fields; refusals.
TEST_F(HfDecoderDir, GemmaLoadsWhatItWrote) {
  SPARSE24_SEED_TRACE();
  auto g = rng(33);
  for (int version : {2, 3}) {
    SCOPED_TRACE(version);
    t_ = Tiny();
    t_.gemma = version;
    t_.window = 3;
    const DecoderModel m = tiny_model(g, t_);
    const json now = gemma_config();
    json old = now;
    old.erase("layer_types");
    if (version == 3) {
      old.erase("rope_parameters");
      old["sliding_window_pattern"] = 2;
      old["rope_theta"] = 100000.0;
      old["rope_local_base_freq"] = 50.0;
      old["rope_scaling"] = nullptr;
    }
    const std::vector<int32_t> ids = random_ids(g, 11, t_.vocab);
    const std::vector<double> ref = ref_forward(m, ids);
    for (const json& cfg : {now, old}) {
      std::filesystem::remove_all(dir_);
      std::filesystem::create_directories(dir_);
      write(m, cfg);
      const DecoderModel back = load_hf_decoder(dir_.string());
      EXPECT_TRUE(back.config.tied && back.config.gelu && back.config.sandwich_norms);
      EXPECT_EQ(back.config.sliding_rope, version == 3);
      EXPECT_EQ(back.config.qk_norm, version == 3);
      EXPECT_EQ(back.config.sliding, (std::vector<bool>{true, false}));
      EXPECT_EQ(back.config.attn_scale, 0.25f);
      EXPECT_EQ(back.config.final_softcap, 3.0f);
      EXPECT_EQ(back.config.attn_softcap, version == 2 ? 1.5f : 0.0f);
      if (version == 3) {
        EXPECT_EQ(back.config.rope_sliding.theta, 50.0);
      }
      expect_logits_match(back, ids, ref);
    }
    // Absent fields take transformers' defaults: a window of 4096, Gemma 2's soft caps 50 and 30.
    json bare = now;
    for (const char* field :
         {"sliding_window", "layer_types", "attn_logit_softcapping", "final_logit_softcapping"})
      bare.erase(field);
    std::filesystem::remove(dir_ / "config.json");
    std::ofstream(dir_ / "config.json") << bare.dump();
    const DecoderConfig c = load_hf_decoder(dir_.string()).config;
    EXPECT_EQ(c.sliding_window, 4096);
    EXPECT_EQ(c.attn_softcap, version == 2 ? 50.0f : 0.0f);
    EXPECT_EQ(c.final_softcap, version == 2 ? 30.0f : 0.0f);
    auto refused = [&](const std::function<void(json&)>& change, const std::string& phrase) {
      json cfg = now;
      change(cfg);
      std::filesystem::remove(dir_ / "config.json");
      std::ofstream(dir_ / "config.json") << cfg.dump();
      EXPECT_NE(load_error().find(phrase), std::string::npos) << load_error();
    };
    refused([](json& j) { j["attn_logit_softcapping"] = -1.0; }, "attn_logit_softcapping");
    refused([](json& j) { j["hidden_activation"] = "gelu"; }, "hidden_activation 'gelu' is not supported");
    refused([](json& j) { j["layer_types"] = {"full_attention"}; }, "'layer_types' is not a list");
    refused([](json& j) { j["layer_types"][0] = "chunked_attention"; }, "a layer type is not");
    refused([](json& j) { j["use_bidirectional_attention"] = true; }, "use_bidirectional_attention");
  }
  t_ = Tiny();
}

TEST_F(HfDecoderDir, OneLineErrors) {
  auto g = rng(8);
  const DecoderModel m = tiny_model(g, t_);
  json c = config();
  c["model_type"] = "gpt2";
  write(m, c);
  EXPECT_NE(load_error().find("model_type 'gpt2'"), std::string::npos) << load_error();
  EXPECT_FALSE(is_hf_decoder(dir_.string()));
  c = config();
  c["rope_parameters"]["rope_type"] = "yarn";
  write(m, c);
  EXPECT_NE(load_error().find("rope type 'yarn'"), std::string::npos) << load_error();
  c = config();
  c["num_key_value_heads"] = 4;
  write(m, c);
  EXPECT_NE(load_error().find("num_key_value_heads"), std::string::npos) << load_error();
  c = config();
  c["hidden_act"] = "gelu";
  write(m, c);
  EXPECT_NE(load_error().find("hidden_act"), std::string::npos) << load_error();
  c = config();
  c["rope_parameters"]["partial_rotary_factor"] = 0.75;  // 3 of head_dim 4
  write(m, c);
  EXPECT_NE(load_error().find("partial_rotary_factor gives 3 rotated dims"), std::string::npos)
      << load_error();
  c["rope_parameters"]["partial_rotary_factor"] = 1.0;
  c["rope_parameters"]["rope_type"] = "longrope";  // the 128k Phi-3s
  write(m, c);
  EXPECT_NE(load_error().find("longrope's 'short_factor' is not a list"), std::string::npos) << load_error();
  c["rope_parameters"]["short_factor"] = {1.0, 2.0, 3.0};
  c["rope_parameters"]["long_factor"] = {1.0, 2.0, 3.0};
  write(m, c);
  EXPECT_NE(load_error().find("original_max_position_embeddings"), std::string::npos) << load_error();
  c["original_max_position_embeddings"] = 16;
  write(m, c);
  EXPECT_NE(load_error().find("must have 2 values"), std::string::npos) << load_error();
  write(m, config(), /*drop_one=*/true);
  EXPECT_NE(load_error().find("missing tensor 'model.norm.weight'"), std::string::npos) << load_error();
  write(m, config(), false, /*extra=*/true);
  EXPECT_NE(load_error().find("'model.unexpected.weight' is not used"), std::string::npos) << load_error();
  c = config();
  c["hidden_size"] = 25;
  write(m, c);
  EXPECT_NE(load_error().find("model.embed_tokens.weight"), std::string::npos) << load_error();
  for (const std::string& e : {load_error()}) EXPECT_EQ(e.find('\n'), std::string::npos);
}

// ---- GGUF -----------------------------------------------------------------------------------------------

TEST(GgufDecoder, LoadsWhatLlamaCppWrites) {
  SPARSE24_SEED_TRACE();
  auto g = rng(21);
  const Tiny t;
  const DecoderModel m = tiny_model(g, t);
  const std::vector<int32_t> ids = random_ids(g, 9, t.vocab);
  const std::vector<double> ref = ref_forward(m, ids);
  for (bool untied : {false, true}) {
    GgufWriter w;
    const Gguf file = tiny_gguf(m, t, w, untied);
    // Through the bytes, as from a file.
    const std::vector<uint8_t> bytes = encode_gguf(file);
    const DecoderModel back =
        load_gguf_decoder(parse_gguf(bytes.data(), bytes.size(), "tiny.gguf"), "tiny.gguf");
    EXPECT_EQ(back.config.tied, !untied);
    EXPECT_EQ(back.config.kv_heads, t.kv);
    EXPECT_EQ(back.config.rope.theta, 100000.0);
    EXPECT_EQ(weights_of(back.layers[1].qkv), weights_of(m.layers[1].qkv));  // the RoPE order undone
    expect_logits_match(back, ids, ref);
  }
}

// A tokenizer in the GGUF metadata: byte-level BPE over single letters with one merge, a CONTROL token that
// the post-processor puts first.
// Pruning and quantizing each layer as it is read (DecoderLoadOptions) gives the model that pruning the
// loaded model gives (prune_magnitude, then a Decoder quantizing to int8 or rounding to bf16 at
// construction): the same 2:4 values and codes, the same fingerprint, bit-identical logits, on one thread or
// two; a NaN still fails the load.
void expect_load_options_match(const std::function<DecoderModel(const DecoderLoadOptions&)>& load,
                               const std::vector<int32_t>& ids) {
  DecoderModel whole = load({});
  whole.prune_magnitude();
  // int8 / bf16: the Decoder's int8_weights / bf16_weights.
  const auto logits = [&](const DecoderModel& m, bool int8, bool bf16 = false) {
    DecoderOptions o;
    o.int8_weights = int8;
    o.bf16_weights = bf16;
    Decoder d(m, o);
    std::vector<float> out(static_cast<size_t>(ids.size() * m.config.vocab));
    d.forward(ids.data(), static_cast<int64_t>(ids.size()), out.data(), true);
    return out;
  };
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    DecoderLoadOptions o;
    o.prune = true;
    o.threads = threads;
    const DecoderModel pruned = load(o);
    EXPECT_EQ(pruned.fingerprint, whole.fingerprint);
    for (size_t l = 0; l < whole.layers.size(); ++l)
      for (auto G : {&DecoderLayer::qkv, &DecoderLayer::o, &DecoderLayer::gate_up, &DecoderLayer::down}) {
        ASSERT_TRUE((pruned.layers[l].*G).pruned);
        EXPECT_EQ((pruned.layers[l].*G).sparse.values, (whole.layers[l].*G).sparse.values) << l;
        EXPECT_EQ((pruned.layers[l].*G).sparse.metadata, (whole.layers[l].*G).sparse.metadata) << l;
      }
    EXPECT_EQ(logits(pruned, false), logits(whole, false));
    // Narrowed as read (int8 or bf16): the 2:4 values, the embeddings and an untied head held in that type
    // only (their fp32 never kept beside them), the weights a Decoder with those weights makes of `whole`.
    const auto narrowed = [&](bool int8) {
      DecoderLoadOptions n = o;
      n.int8 = int8;
      n.bf16 = !int8;
      DecoderModel r = load(n);
      const auto none = [&](const WeightTable& t) { return int8 ? t.i8.empty() : t.bf16.empty(); };
      for (const DecoderLayer& L : r.layers) EXPECT_EQ(L.down.sparse.dtype, int8 ? DType::kI8 : DType::kBF16);
      EXPECT_TRUE(r.embed.empty() && !none(r.embed_table));
      EXPECT_EQ(none(r.head_table), r.config.tied);
      EXPECT_TRUE(r.head.dense.empty());
      EXPECT_EQ(r.fingerprint, whole.fingerprint + (int8 ? "-int8" : "-bf16"));
      EXPECT_EQ(logits(r, int8, !int8), logits(whole, int8, !int8));
      return r;
    };
    const DecoderModel int8 = narrowed(true);
    o.int8 = true;
    {  // a Decoder that takes the model (its 2:4 values and head released once packed) runs the same
      DecoderOptions i8;
      i8.int8_weights = true;
      Decoder taken(load(o), i8);
      std::vector<float> out(static_cast<size_t>(ids.size() * whole.config.vocab));
      taken.forward(ids.data(), static_cast<int64_t>(ids.size()), out.data(), true);
      EXPECT_EQ(out, logits(whole, true));
      EXPECT_EQ(taken.weight_bytes(), Decoder(whole, i8).weight_bytes());
    }
    DecoderOptions bf16;  // int8 values run int8 whatever the options say (the head is bf16 here)
    bf16.bf16_weights = true;
    EXPECT_EQ(Decoder(int8, bf16).sparse_linears(), 4 * static_cast<int>(int8.layers.size()));
    // bf16 values (and tables) run bf16 whatever the options say.
    EXPECT_EQ(logits(narrowed(false), false), logits(whole, false, true));
    o.bf16 = true;  // with o.int8
    EXPECT_THROW(load(o), Error);
  }
}

TEST(GgufDecoder, PrunesAndQuantizesAsItReads) {
  SPARSE24_SEED_TRACE();
  auto g = rng(22);
  Tiny t;
  DecoderModel m;
  for (int64_t vocab : {150, 37}) {  // (150: tables narrowed and hashed in three blocks of rows)
    t.vocab = vocab;
    m = tiny_model(g, t);
    GgufWriter w;
    const std::vector<uint8_t> bytes = encode_gguf(tiny_gguf(m, t, w, /*untied=*/true));
    const Gguf file = parse_gguf(bytes.data(), bytes.size(), "tiny.gguf");
    expect_load_options_match(
        [&](const DecoderLoadOptions& o) { return load_gguf_decoder(file, "tiny.gguf", o); },
        random_ids(g, 7, t.vocab));
  }
  m.layers.back().gate_up.dense[5] = std::nanf("");  // caught by the loader before pruning
  GgufWriter w2;
  const std::vector<uint8_t> bad = encode_gguf(tiny_gguf(m, t, w2));
  DecoderLoadOptions o;
  o.prune = o.int8 = true;
  EXPECT_THROW(load_gguf_decoder(parse_gguf(bad.data(), bad.size(), "bad.gguf"), "bad.gguf", o), Error);
  // The embeddings narrowed a block of rows at a time (on two threads): a non-finite value in the last
  // block still fails the load, with the tensor's name.
  m.layers.back().gate_up.dense[5] = 0.5f;
  m.embed[m.embed.size() - 3] = std::numeric_limits<float>::infinity();
  GgufWriter w3;
  const std::vector<uint8_t> inf = encode_gguf(tiny_gguf(m, t, w3, /*untied=*/true));
  for (bool int8 : {true, false}) {
    DecoderLoadOptions n;
    (int8 ? n.int8 : n.bf16) = true;
    n.threads = 2;
    try {
      load_gguf_decoder(parse_gguf(inf.data(), inf.size(), "inf.gguf"), "inf.gguf", n);
      ADD_FAILURE() << "a non-finite embedding loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token_embd.weight' holds a non-finite value"), std::string::npos)
          << e.what();
    }
  }
}

// A file's tables stay in its mapping in their ggml type: an untied model's embeddings whatever their type
// (a token reads one row), and a head that runs as stored (detail::head_runs_stored: Q8_0; Q6_K and F16
// unless int8; a tied model's table with it). Against the same file read into memory first:
// the rows and fingerprint; the logits (the head's sums in another order: within 1e-5 of the largest); with
// int8 (bf16) weights, the logits of a head that stays unchanged, any other converted as the held one is (the
// same logits where the embeddings are not rounded too); the bytes left in the file, whatever the load and
// weights options; a non-finite value still fails the load.
TEST_F(HfDecoderDir, GgufTablesStayInTheMappedFile) {
  SPARSE24_SEED_TRACE();
  auto g = rng(23);
  Tiny t;
  t.hidden = 256;  // a whole Q6_K block per row
  t.heads = 8;
  t.d = 32;
  const DecoderModel m = tiny_model(g, t);
  const std::vector<int32_t> ids = random_ids(g, 9, t.vocab);  // (from 8 tokens on the head is widened)
  const std::string path = (dir_ / "tiny.gguf").string();
  // m.embed in `type`: F32, F16, Q8_0 (per 32 values an fp16 scale and int8s), or random Q6_K blocks.
  const auto encode = [&](GgmlType type) {
    std::vector<uint8_t> out;
    const auto half = [&](float v) {
      const uint16_t h = float_to_half(v);
      out.insert(out.end(), {static_cast<uint8_t>(h & 0xff), static_cast<uint8_t>(h >> 8)});
    };
    for (size_t i = 0; i < m.embed.size(); i += 32) {
      if (type == GgmlType::kF32) {
        out.resize(out.size() + 32 * sizeof(float));
        std::memcpy(out.data() + out.size() - 32 * sizeof(float), &m.embed[i], 32 * sizeof(float));
      } else if (type == GgmlType::kF16) {
        for (size_t j = i; j < i + 32; ++j) half(m.embed[j]);
      } else if (type == GgmlType::kQ8_0) {
        float amax = 0.f;
        for (size_t j = i; j < i + 32; ++j) amax = std::max(amax, std::fabs(m.embed[j]));
        const float d = amax / 127.f;
        half(d);
        for (size_t j = i; j < i + 32; ++j)
          out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::lround(m.embed[j] / d))));
      } else if (i % 256 == 0) {  // Q6_K: ql, qh, int8 scales, fp16 d
        for (int j = 0; j < 208; ++j) out.push_back(static_cast<uint8_t>(g()));
        half(std::uniform_real_distribution<float>(-1e-3f, 1e-3f)(g));
      }
    }
    return out;
  };
  // The file with token_embd.weight as `embed_type` and output.weight as `head_type` (none: tied), row 3's
  // first fp16 value (Q6_K: its scale) of the `poison`ed tensor inf; written to path, its bytes returned.
  const auto file_with = [&](GgmlType embed_type, std::optional<GgmlType> head_type,
                             const std::string& poison = "") {
    GgufWriter w;
    Gguf f = tiny_gguf(m, t, w, head_type.has_value());
    std::vector<std::vector<uint8_t>> tables;
    for (size_t i = 0; i < (head_type ? 3u : 1u); i += 2) {  // token_embd.weight, output.weight
      const GgmlType type = i == 0 ? embed_type : *head_type;
      tables.push_back(encode(type));
      if (f.tensors[i].name == poison)
        tables.back()[3 * (tables.back().size() / t.vocab) + (type == GgmlType::kQ6_K ? 209 : 1)] = 0x7c;
      f.tensors[i].type = static_cast<uint32_t>(type);
      f.tensors[i].bytes = tables.back();
    }
    const std::vector<uint8_t> bytes = encode_gguf(f);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  };
  struct Run {
    std::vector<float> logits;
    size_t stored, weights;
  };
  // Every token's logits (the head's rows widened into one sgemm), and the last token's alone again (a GEMV
  // over the head as the Decoder holds it): the same within the sums' order.
  const auto run = [&](const DecoderModel& model, const DecoderOptions& o) {
    Decoder d(model, o);
    Run r{std::vector<float>(static_cast<size_t>(ids.size() * t.vocab)), d.stored_bytes(), d.weight_bytes()};
    d.forward(ids.data(), static_cast<int64_t>(ids.size()), r.logits.data(), true);
    std::vector<float> last(static_cast<size_t>(t.vocab));
    d.reset();
    d.forward(ids.data(), static_cast<int64_t>(ids.size()), last.data());
    float diff = 0.f, scale = 0.f;
    for (int64_t v = 0; v < t.vocab; ++v) {
      diff = std::max(diff, std::fabs(last[v] - r.logits[(ids.size() - 1) * t.vocab + v]));
      scale = std::max(scale, std::fabs(last[v]));
    }
    EXPECT_LE(diff, 1e-5f * scale) << "the last token's logits alone";
    return r;
  };
  const auto expect_near = [](const std::vector<float>& a, const std::vector<float>& b, float rel) {
    float diff = 0.f, scale = 0.f;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::fabs(a[i] - b[i]));
      scale = std::max(scale, std::fabs(b[i]));
    }
    EXPECT_LE(diff, rel * scale) << diff << " of " << scale;
  };
  const auto table_bytes = [&](GgmlType type) {
    const GgmlTypeInfo& ti = *ggml_type_info(static_cast<uint32_t>(type));
    return static_cast<size_t>(t.vocab * t.hidden / ti.block * ti.block_bytes);
  };
  DecoderOptions as_int8, as_bf16;
  as_int8.int8_weights = true;
  as_bf16.bf16_weights = true;
  using Case = std::pair<GgmlType, std::optional<GgmlType>>;  // embeddings, head (none: tied)
  for (const auto& [embed_type, head_type] :
       {Case{GgmlType::kF16, GgmlType::kQ6_K}, Case{GgmlType::kQ8_0, GgmlType::kQ8_0},
        Case{GgmlType::kQ8_0, GgmlType::kF32}, Case{GgmlType::kQ8_0, GgmlType::kF16},
        Case{GgmlType::kQ6_K, std::nullopt}, Case{GgmlType::kQ8_0, std::nullopt},
        Case{GgmlType::kF16, std::nullopt}, Case{GgmlType::kF32, std::nullopt}}) {
    const GgmlType table = head_type.value_or(embed_type);
    const bool tied = !head_type, head_stays = table != GgmlType::kF32;
    SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(embed_type)) + " embeddings, " +
                 (tied ? "tied" : ggml_type_name(static_cast<uint32_t>(table)) + " head"));
    const std::vector<uint8_t> bytes = file_with(embed_type, head_type);
    const DecoderModel mapped = load_gguf_decoder(path);
    const DecoderModel held = load_gguf_decoder(parse_gguf(bytes.data(), bytes.size(), path), path);
    EXPECT_EQ(mapped.fingerprint, held.fingerprint);
    EXPECT_TRUE(held.embed_stored.empty() && held.head_stored.empty());
    const size_t in_file =
        (!tied || head_stays ? table_bytes(embed_type) : 0) + (!tied && head_stays ? table_bytes(table) : 0);
    EXPECT_EQ(mapped.embed_stored.bytes() + mapped.head_stored.bytes(), in_file);
    if (head_stays) {
      EXPECT_EQ((tied ? mapped.embed_stored : mapped.head_stored).ggml_type, int64_t(table));
    }
    EXPECT_EQ(mapped.embed.empty(), !tied || head_stays);
    std::vector<float> x(static_cast<size_t>(t.hidden)), y(x.size());
    for (int32_t id = 0; id < t.vocab; ++id) {
      mapped.embedding(id, x.data());
      held.embedding(id, y.data());
      ASSERT_EQ(x, y) << id;
    }
    std::filesystem::remove(path);  // the mapping outlives the name
    std::vector<float> as_stored;   // the mapped model's logits with fp32 weights
    for (const DecoderOptions& o : {DecoderOptions{}, as_int8, as_bf16}) {
      SCOPED_TRACE(o.int8_weights ? "int8" : o.bf16_weights ? "bf16" : "fp32");
      const bool narrowed = o.int8_weights || o.bf16_weights;
      const Run a = run(mapped, o), b = run(held, o);
      const bool runs_stored = head_stays && (!o.int8_weights || table == GgmlType::kQ8_0);
      if (!narrowed) {
        expect_near(a.logits, b.logits, 1e-5f);
        as_stored = a.logits;
      } else if (runs_stored) {  // a head read as it is (Q8_0 whatever the weights; not int8: every type)
        EXPECT_EQ(a.logits, as_stored);
      } else if (tied) {  // both tables rounded to the same int8 rows
        EXPECT_EQ(a.logits, b.logits);
      } else {  // the held model's embeddings rounded to int8 too (through random layers and a random Q6_K
                // head's cancelling sums: up to 8% of the largest logit seen)
        expect_near(a.logits, b.logits, 0.15f);
      }
      const size_t stored = (!tied ? table_bytes(embed_type) : 0) + (runs_stored ? table_bytes(table) : 0);
      EXPECT_EQ(a.stored, stored);
      EXPECT_EQ(b.stored, 0u);
      if (runs_stored && !narrowed) {  // the stored head counted in place of the held fp32 tables
        EXPECT_EQ(a.weights + (tied ? 1 : 2) * table_bytes(GgmlType::kF32), b.weights + table_bytes(table));
      }
    }
    file_with(embed_type, head_type);
    for (const bool int8 : {true, false}) {  // pruned as read, into int8 or bf16 values
      DecoderLoadOptions lo;
      lo.prune = true;
      (int8 ? lo.int8 : lo.bf16) = true;
      const DecoderModel narrow = load_gguf_decoder(path, lo);
      const bool stays = head_stays && (!int8 || table == GgmlType::kQ8_0);
      EXPECT_EQ(narrow.embed_stored.bytes() + narrow.head_stored.bytes(),
                (!tied || stays ? table_bytes(embed_type) : 0) + (!tied && stays ? table_bytes(table) : 0))
          << (int8 ? "int8" : "bf16");
      EXPECT_EQ(narrow.head_table.empty() && narrow.embed_table.empty(), stays) << (int8 ? "int8" : "bf16");
    }
    if (table == GgmlType::kF32) continue;
    for (const std::string poisoned : {"token_embd.weight", "output.weight"}) {
      if (tied && poisoned == "output.weight") continue;
      file_with(embed_type, head_type, poisoned);
      try {
        load_gguf_decoder(path);
        ADD_FAILURE() << "an inf in the stored " << poisoned << " loaded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'" + poisoned + "' holds a non-finite value"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

TEST_F(HfDecoderDir, PrunesAndQuantizesAsItReads) {
  SPARSE24_SEED_TRACE();
  auto g = rng(23);
  for (int64_t vocab : {37, 150}) {  // (150: tables narrowed and hashed in three blocks of rows)
    t_.vocab = vocab;
    write(tiny_model(g, t_), config());
    expect_load_options_match([&](const DecoderLoadOptions& o) { return load_hf_decoder(dir_.string(), o); },
                              random_ids(g, 7, t_.vocab));
  }
  t_ = Tiny();
}

// `convert MODEL.gguf DIR` and prune-model on a GGUF: the directory loads to the same model (logits) and its
// tokenizer.json to the same tokenizer (ids, specials); an existing output is refused.
TEST_F(HfDecoderDir, GgufConvertsToAHuggingFaceDirectory) {
  SPARSE24_SEED_TRACE();
  auto g = rng(23);
  const DecoderModel m = tiny_model(g, t_);
  const std::vector<int32_t> ids = random_ids(g, 9, t_.vocab);
  const std::vector<double> ref = ref_forward(m, ids);
  for (bool untied : {false, true}) {
    GgufWriter w;
    Gguf file = tiny_gguf(m, t_, w, untied);
    add_tiny_tokenizer(file, t_.vocab);
    const std::string gguf = (dir_ / "tiny.gguf").string(),
                      out = (dir_ / (untied ? "untied" : "tied")).string();
    write_file_atomic(gguf, encode_gguf(file));
    gguf_to_hf_dir(gguf, out);
    const DecoderModel back = load_hf_decoder(out);
    EXPECT_EQ(back.config.tied, !untied);
    EXPECT_EQ(weights_of(back.layers[1].qkv), weights_of(m.layers[1].qkv));
    expect_logits_match(back, ids, ref);
    const text::ByteBpe want = text::ByteBpe::from_gguf(file, "tiny.gguf"),
                        got = text::ByteBpe::from_dir(out);
    for (const char* s : {"ABBA", "<|s|>AB CAB 12", "A\nB\tAAB", ""})
      EXPECT_EQ(got.encode(s), want.encode(s)) << s;
    EXPECT_EQ(got.encode("AB").front(), 0);  // the post-processor's BOS
    EXPECT_EQ(got.bos_id(), 0);
    EXPECT_EQ(got.eos_id(), 1);
    EXPECT_EQ(got.vocab_size(), want.vocab_size());
    try {
      gguf_to_hf_dir(gguf, out);
      ADD_FAILURE() << "an existing directory was overwritten";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
    }
    // `convert MODEL.gguf DIR --to L --prune` converts each layer's shard as it is read: the directory the
    // converted one becomes (convert_hf_dir), shard for shard and bit for bit, with the same report.
    for (CheckpointFormat to : {CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24}) {
      ConvertOptions c;
      c.to = to;
      c.prune = true;
      const std::string direct = out + "-" + checkpoint_format_name(to), via = direct + "-via-dir";
      const ConvertReport r = convert_model(gguf, direct, c), rv = convert_model(out, via, c);
      EXPECT_EQ(r.sparsify.pruned, rv.sparsify.pruned);
      EXPECT_EQ(r.sparsify.skipped, rv.sparsify.skipped);
      EXPECT_EQ(r.sparsify.pruned.size(), static_cast<size_t>(7 * t_.layers));  // Q, K, V, O, gate, up, down
      EXPECT_EQ(r.sparse_out, rv.sparse_out);
      EXPECT_EQ(r.tensors, rv.tensors);
      const HfDir a = read_hf_dir(direct), b = read_hf_dir(via);
      EXPECT_EQ(a.shards.size(), b.shards.size());
      testing::expect_same_tensors(a.weights, b.weights);
      EXPECT_EQ(json::parse(a.config_json), json::parse(b.config_json));
      EXPECT_EQ(load_hf_decoder(direct).fingerprint, load_hf_decoder(via).fingerprint);
    }
  }
}

// prune-model of a GGUF file reads it a layer at a time (GgufCheckpoint), with no converted directory in
// between: the output is the one prune-model makes of the converted directory, tensor for tensor and bit for
// bit (an F32 file: both keep fp32), with the same config and tokenizer; a failure leaves nothing.
TEST_F(HfDecoderDir, GgufPrunesAsItsConvertedDirectoryDoes) {
  SPARSE24_SEED_TRACE();
  auto g = rng(24);
  const DecoderModel m = tiny_model(g, t_);
  GgufWriter w;
  Gguf file = tiny_gguf(m, t_, w, /*untied=*/true);
  add_tiny_tokenizer(file, t_.vocab);
  const std::string gguf = (dir_ / "tiny.gguf").string(), converted = (dir_ / "converted").string();
  write_file_atomic(gguf, encode_gguf(file));
  gguf_to_hf_dir(gguf, converted);
  PruneModelOptions o;
  o.calibration = {"ABBA AB BA", "BAAB\nABAB A", "AAB BBA ABBA"};
  o.sequence_tokens = 5;
  int run = 0;
  for (PruneMethod method : {PruneMethod::kMagnitude, PruneMethod::kSparseGpt})
    for (CheckpointFormat to : {CheckpointFormat::kDense, CheckpointFormat::kBitmask24}) {
      o.method = method;
      // No permutations: their search stops at a wall-clock budget, which under ASan on a busy machine ran
      // out at different points of the two runs (and run to convergence took minutes there).
      // decoder_prune_test.cc covers permuted pruning.
      o.permute = false;
      const std::string a = (dir_ / ("from-gguf-" + std::to_string(run))).string(),
                        b = (dir_ / ("from-dir-" + std::to_string(run))).string();
      ++run;
      const PruneModelReport ra = prune_model(gguf, a, to, o), rb = prune_model(converted, b, to, o);
      SCOPED_TRACE(a);
      EXPECT_EQ(ra.weights.size(), rb.weights.size());
      EXPECT_EQ(ra.calibration_tokens, rb.calibration_tokens);
      const HfDir da = read_hf_dir(a), db = read_hf_dir(b);
      testing::expect_same_tensors(da.weights, db.weights);
      EXPECT_EQ(json::parse(std::ifstream(a + "/config.json")),
                json::parse(std::ifstream(b + "/config.json")));
      for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        EXPECT_EQ(read_file(a + "/" + f), read_file(b + "/" + f)) << f;
      EXPECT_EQ(load_hf_decoder(a).fingerprint, load_hf_decoder(b).fingerprint);
    }
  // A failure once shards are written (an exception from progress, how a caller stops it) leaves nothing.
  o.progress = [&](int64_t done, int64_t total) {
    if (2 * done > total) throw Error("stopped");  // past the first layers' shards
  };
  const std::string stopped = (dir_ / "stopped").string();
  EXPECT_THROW(prune_model(gguf, stopped, CheckpointFormat::kDense, o), Error);
  EXPECT_FALSE(std::filesystem::exists(stopped));
  for (const auto& e : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find("stopped"), std::string::npos) << e.path();
}

// Qwen2 (Q, K, V biases) and Qwen3 (Q/K norms) as llama.cpp writes them (their RoPE rows as they are): the
// model, and the Hugging Face directory gguf_to_hf_dir makes of the file.
TEST_F(HfDecoderDir, GgufQwenAndGemmaFilesLoadAndConvert) {
  SPARSE24_SEED_TRACE();
  auto g = rng(33);
  for (const std::string arch : {"qwen2", "qwen3", "gemma2", "gemma3"}) {
    Tiny t;
    t.biases = arch == "qwen2";
    t.qk_norm = arch == "qwen3";
    t.gemma = arch == "gemma2" ? 2 : arch == "gemma3" ? 3 : 0;
    t.window = t.gemma != 0 ? 3 : 0;
    t.layers = t.gemma != 0 ? 3 : t.layers;
    DecoderModel m = tiny_model(g, t);
    // llama.cpp scales Gemma's scores by 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim but in the
    // 27Bs).
    if (t.gemma != 0) m.config.attn_scale = 1.0f / std::sqrt(static_cast<float>(t.d));
    for (DecoderLayer& L : m.layers)
      for (Gemm* gm : {&L.o, &L.gate_up, &L.down}) gm->bias.clear();
    GgufWriter w;
    Gguf file = tiny_gguf(m, t, w, false, arch);
    const std::vector<int32_t> ids = random_ids(g, 9, t.vocab);
    const std::vector<double> ref = ref_forward(m, ids);
    SCOPED_TRACE(arch);
    const DecoderModel back = load_gguf_decoder(file, "tiny.gguf");
    const std::string type = arch == "gemma3" ? "gemma3_text" : arch;
    EXPECT_EQ(back.config.model_type, type);
    expect_logits_match(back, ids, ref);
    add_tiny_tokenizer(file, t.vocab);
    const std::string gguf = (dir_ / (arch + ".gguf")).string(), out = (dir_ / arch).string();
    write_file_atomic(gguf, encode_gguf(file));
    gguf_to_hf_dir(gguf, out);
    const json config = json::parse(std::ifstream(out + "/config.json"));
    EXPECT_EQ(config["model_type"], type);
    EXPECT_EQ(config["architectures"][0], arch == "qwen2"    ? "Qwen2ForCausalLM"
                                          : arch == "qwen3"  ? "Qwen3ForCausalLM"
                                          : arch == "gemma2" ? "Gemma2ForCausalLM"
                                                             : "Gemma3ForCausalLM");
    expect_logits_match(load_hf_decoder(out), ids, ref);  // Gemma's norms written back as w - 1
  }
}

TEST(GgufDecoder, OneLineErrors) {
  auto g = rng(22);
  const Tiny t;
  const DecoderModel m = tiny_model(g, t);
  auto error_of = [&](const std::function<void(Gguf&)>& edit) -> std::string {
    GgufWriter w;
    Gguf f = tiny_gguf(m, t, w);
    edit(f);
    try {
      load_gguf_decoder(f, "tiny.gguf");
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.what();
    }
    return "";
  };
  auto set = [](Gguf& f, const std::string& key, GgufValue v) {
    for (auto& [k, old] : f.metadata)
      if (k == key) {
        old = std::move(v);
        return;
      }
    f.metadata.emplace_back(key, std::move(v));
  };
  std::string e = error_of([&](Gguf& f) { set(f, "general.architecture", GgufValue::of_string("gpt2")); });
  EXPECT_NE(e.find("architecture 'gpt2'"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { set(f, "llama.rope.scaling.type", GgufValue::of_string("yarn")); });
  EXPECT_NE(e.find("rope scaling 'yarn'"), std::string::npos) << e;
  e = error_of(
      [&](Gguf& f) { set(f, "llama.attention.head_count_kv", GgufValue::of_int(GgufType::kU32, 4)); });
  EXPECT_NE(e.find("num_key_value_heads"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { set(f, "llama.block_count", GgufValue::of_string("two")); });
  EXPECT_NE(e.find("llama.block_count"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { set(f, "llama.rope.dimension_count", GgufValue::of_int(GgufType::kU32, 2)); });
  EXPECT_NE(e.find("part of a head"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors.erase(f.tensors.begin() + 1); });
  EXPECT_NE(e.find("missing tensor 'output_norm.weight'"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors.push_back(f.tensors[1]), f.tensors.back().name = "blk.9.extra"; });
  EXPECT_NE(e.find("'blk.9.extra' is not used"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors[1].shape = {t.hidden / 2, 2}; });
  EXPECT_NE(e.find("'output_norm.weight' has shape [12, 2], expected [24]"), std::string::npos) << e;
  e = error_of([&](Gguf& f) { f.tensors[0].type = static_cast<uint32_t>(GgmlType::kIQ2_XXS); });
  EXPECT_NE(e.find("IQ2_XXS"), std::string::npos) << e;
  EXPECT_NE(e.find("token_embd.weight"), std::string::npos) << e;
  // A Gemma 3 file's layer count is bounded before its sliding-layer list is built (a fuzzer's input once
  // asked for 2^40 entries).
  Tiny gt;
  gt.gemma = 3;
  gt.window = 3;
  const DecoderModel gm = tiny_model(g, gt);
  GgufWriter gw;
  Gguf gf = tiny_gguf(gm, gt, gw, false, "gemma3");
  set(gf, "gemma3.block_count", GgufValue::of_int(GgufType::kU64, int64_t{1} << 40));
  set(gf, "gemma3.attention.sliding_window_pattern", GgufValue::of_int(GgufType::kU32, 6));
  try {
    load_gguf_decoder(gf, "tiny.gguf");
    ADD_FAILURE() << "a 2^40-layer Gemma 3 file loaded";
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("num_hidden_layers"), std::string::npos) << x.what();
  }
  std::vector<uint8_t> nan(t.hidden * sizeof(float), 0xff);
  e = error_of([&](Gguf& f) { f.tensors[1].bytes = nan; });
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
}

}  // namespace
}  // namespace sparse24::engine
