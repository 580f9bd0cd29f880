// The tiny random decoder (tiny_decoder.h) as llama.cpp writes it: a GGUF file of its tensors (F32, or
// Q8_0 where asked), with a tiny byte-level BPE vocabulary. Shared by the loader and pruning tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "sparse24/dtype.h"
#include "sparse24/gguf.h"
#include "tiny_decoder.h"

namespace sparse24::engine {

// The tiny model as llama.cpp writes it: its tensor names, F32, Q's and K's rows in its RoPE order. With
// q8_0, the layers' matrices whose rows are whole blocks of 32 are Q8_0 as llama.cpp quantizes them (a
// block's scale d = max |x| / 127 in f16, its values round(x / d)).
struct GgufWriter {
  std::vector<std::vector<uint8_t>> storage;
  Gguf g;
  bool q8_0 = false;
  void add(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
    GgufTensor t;
    if (q8_0 && shape.size() == 2 && shape[1] % 32 == 0 && name.rfind("blk.", 0) == 0) {
      storage.emplace_back(v.size() / 32 * 34);
      for (size_t b = 0; b < v.size() / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[32 * b + i]));
        const float d = amax / 127, id = d != 0 ? 1 / d : 0;
        const uint16_t h = float_to_half(d);
        uint8_t* out = storage.back().data() + 34 * b;
        std::memcpy(out, &h, 2);
        for (int i = 0; i < 32; ++i)
          out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(v[32 * b + i] * id)));
      }
      t.type = static_cast<uint32_t>(GgmlType::kQ8_0);
    } else {
      storage.emplace_back(v.size() * sizeof(float));
      std::memcpy(storage.back().data(), v.data(), storage.back().size());
      t.type = static_cast<uint32_t>(GgmlType::kF32);
    }
    t.name = name;
    t.shape = std::move(shape);
    t.bytes = storage.back();
    g.tensors.push_back(t);
  }
};

// transformers' rotate_half rows -> llama.cpp's: file row 2i + s of a head is row s * d/2 + i.
inline std::vector<float> permute_for_gguf(const std::vector<float>& w, int64_t heads, int64_t d,
                                           int64_t cols) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t c = 0; c < cols; ++c)
          out[(h * d + 2 * i + s) * cols + c] = w[(h * d + s * d / 2 + i) * cols + c];
  return out;
}

// arch: "llama" (Q's and K's rows in llama.cpp's RoPE order), "qwen2", "qwen3", "gemma2" or "gemma3" (NEOX
// RoPE: as they are).
inline Gguf tiny_gguf(const DecoderModel& m, const Tiny& t, GgufWriter& w, bool untied = false,
                      const std::string& arch = "llama") {
  const std::string a = arch + ".";
  w.g.metadata = {{"general.architecture", GgufValue::of_string(arch)},
                  {a + "block_count", GgufValue::of_int(GgufType::kU32, t.layers)},
                  {a + "context_length", GgufValue::of_int(GgufType::kU32, 64)},
                  {a + "embedding_length", GgufValue::of_int(GgufType::kU32, t.hidden)},
                  {a + "feed_forward_length", GgufValue::of_int(GgufType::kU32, t.ffn)},
                  {a + "attention.head_count", GgufValue::of_int(GgufType::kU32, t.heads)},
                  {a + "attention.head_count_kv", GgufValue::of_int(GgufType::kU32, t.kv)},
                  {a + "attention.key_length", GgufValue::of_int(GgufType::kU32, t.d)},
                  {a + "rope.dimension_count", GgufValue::of_int(GgufType::kU32, t.d)},
                  {a + "rope.freq_base", GgufValue::of_float(GgufType::kF32, 100000.0)},
                  {a + "attention.layer_norm_rms_epsilon", GgufValue::of_float(GgufType::kF32, 1e-5)}};
  // llama.cpp's Gemma keys (its norms are stored as 1 + w, which m holds; Gemma 2's layers slide in turn).
  if (t.gemma != 0) {
    w.g.metadata.push_back({a + "attention.sliding_window", GgufValue::of_int(GgufType::kU32, t.window)});
    w.g.metadata.push_back(
        {a + "final_logit_softcapping", GgufValue::of_float(GgufType::kF32, m.config.final_softcap)});
  }
  if (t.gemma == 2)
    w.g.metadata.push_back(
        {a + "attn_logit_softcapping", GgufValue::of_float(GgufType::kF32, m.config.attn_softcap)});
  if (t.gemma == 3) {
    std::vector<int64_t> sliding;
    for (bool s : m.config.sliding) sliding.push_back(s);
    w.g.metadata.push_back(
        {a + "attention.sliding_window_pattern", GgufValue::of_ints(GgufType::kBool, sliding)});
    w.g.metadata.push_back(
        {a + "rope.freq_base_swa", GgufValue::of_float(GgufType::kF32, m.config.rope_sliding.theta)});
  }
  const bool permute = arch == "llama";
  const int64_t H = t.hidden, q = t.heads * t.d, kv = t.kv * t.d;
  w.add("token_embd.weight", m.embed, {t.vocab, H});
  w.add("output_norm.weight", m.norm, {H});
  if (untied) w.add("output.weight", m.embed, {t.vocab, H});
  for (int64_t l = 0; l < t.layers; ++l) {
    const DecoderLayer& L = m.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    const std::vector<float> qkv = weights_of(L.qkv), gu = weights_of(L.gate_up);
    auto rows = [&](const std::vector<float>& v, int64_t from, int64_t count) {
      return std::vector<float>(v.begin() + from * H, v.begin() + (from + count) * H);
    };
    w.add(p + "attn_norm.weight", L.attn_norm, {H});
    w.add(p + "ffn_norm.weight", L.ffn_norm, {H});
    if (t.gemma != 0) {
      w.add(p + "post_attention_norm.weight", L.attn_out_norm, {H});
      w.add(p + "post_ffw_norm.weight", L.ffn_out_norm, {H});
    }
    auto rope_rows = [&](const std::vector<float>& v, int64_t heads, int64_t cols) {
      return permute ? permute_for_gguf(v, heads, t.d, cols) : v;
    };
    w.add(p + "attn_q.weight", rope_rows(rows(qkv, 0, q), t.heads, H), {q, H});
    w.add(p + "attn_k.weight", rope_rows(rows(qkv, q, kv), t.kv, H), {kv, H});
    w.add(p + "attn_v.weight", rows(qkv, q + kv, kv), {kv, H});
    w.add(p + "attn_output.weight", weights_of(L.o), {H, q});
    w.add(p + "ffn_gate.weight", rows(gu, 0, t.ffn), {t.ffn, H});
    w.add(p + "ffn_up.weight", rows(gu, t.ffn, t.ffn), {t.ffn, H});
    w.add(p + "ffn_down.weight", weights_of(L.down), {H, t.ffn});
    if (!L.q_norm.empty()) {
      w.add(p + "attn_q_norm.weight", L.q_norm, {t.d});
      w.add(p + "attn_k_norm.weight", L.k_norm, {t.d});
    }
    auto bias = [&](const std::string& name, const Gemm& gm, int64_t from, int64_t count, int64_t heads) {
      if (gm.bias.empty()) return;
      const std::vector<float> b(gm.bias.begin() + from, gm.bias.begin() + from + count);
      w.add(p + name + ".bias", heads > 0 ? rope_rows(b, heads, 1) : b, {count});
    };
    bias("attn_q", L.qkv, 0, q, t.heads);
    bias("attn_k", L.qkv, q, kv, t.kv);
    bias("attn_v", L.qkv, q + kv, kv, 0);
    bias("attn_output", L.o, 0, H, 0);
    bias("ffn_gate", L.gate_up, 0, t.ffn, 0);
    bias("ffn_up", L.gate_up, t.ffn, t.ffn, 0);
    bias("ffn_down", L.down, 0, H, 0);
  }
  return w.g;
}

inline void add_tiny_tokenizer(Gguf& f, int64_t vocab) {
  std::vector<std::string> tokens = {"<|s|>"};
  std::vector<int64_t> types = {3};
  for (int64_t i = 1; i + 1 < vocab; ++i) {
    tokens.push_back(std::string(1, static_cast<char>('A' + i - 1)));
    types.push_back(1);
  }
  tokens.push_back("AB");
  types.push_back(1);
  f.metadata.emplace_back("tokenizer.ggml.model", GgufValue::of_string("gpt2"));
  f.metadata.emplace_back("tokenizer.ggml.pre", GgufValue::of_string("smollm"));
  f.metadata.emplace_back("tokenizer.ggml.tokens", GgufValue::of_strings(tokens));
  f.metadata.emplace_back("tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, types));
  f.metadata.emplace_back("tokenizer.ggml.merges", GgufValue::of_strings({"A B"}));
  f.metadata.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::of_int(GgufType::kU32, 0));
  f.metadata.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::of_int(GgufType::kU32, 1));
  f.metadata.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::of_int(GgufType::kBool, 1));
}

}  // namespace sparse24::engine
