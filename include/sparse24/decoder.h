// Decoder language models (Llama-style: Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3) at batch 1: a
// prompt is prefilled in one pass, then tokens are decoded one at a time against a KV cache. Every Linear is
// a GEMM through the same dense (oneDNN) or 2:4 sparse kernels as the encoder engine; at batch 1 the sparse
// kernels run their memory-bound GEMV layout.
//
//   DecoderModel m = load_hf_decoder("models/SmolLM2-135M-Instruct-hf");  // or load_decoder(dir or .gguf)
//   Decoder d(m, {});                                  // dense weights dense, 2:4 weights sparse
//   // or Decoder d(path, load_options, options): loaded and packed in one step
//   std::vector<float> logits(m.config.vocab);
//   d.forward(prompt.data(), prompt.size(), logits.data());   // prefill: the last token's logits
//   d.forward(&next, 1, logits.data());                       // one more token, attending to the cache
//
// The forward pass follows transformers' modeling_llama.py: h = embed[id]; per layer
// h += o(attn(rope(q(rms(h))), rope(k(rms(h))), v(rms(h)))); h += down(silu(gate(rms(h))) * up(rms(h)));
// logits = head(rms(h)), the head being the embedding table when the embeddings are tied. The Llama-style
// architectures differ only in what that pass has: Linears with biases (Qwen2's Q, K and V; Llama's
// attention_bias and mlp_bias), an RMSNorm over each head of Q and K before RoPE (Qwen3, Gemma 3), a sliding
// attention window in every layer (Mistral) or in some (Gemma 2; Gemma 3, whose sliding layers have their own
// RoPE), and Gemma's changes: embeddings times sqrt(hidden), each sublayer's output RMS-normalized before its
// residual add, GELU (tanh form) for SiLU, the scores scaled by query_pre_attn_scalar^-1/2, the logits (and
// in Gemma 2 the scores) soft-capped. (Gemma's RMSNorm weights are stored as w - 1: the loader adds the 1.)
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sparse24/engine.h"
#include "sparse24/hf_dir.h"

namespace sparse24 {
struct Gguf;
}

namespace sparse24::engine {

// RoPE's frequencies: "default" (inv_freq[i] = theta^(-2i/d)), "linear" (those divided by factor),
// "llama3" (Llama 3.1's wavelength-dependent rescaling of them) or "longrope" (Phi-3's: each divided by its
// own factor, short_factor while the sequence holds at most original_max_positions tokens and long_factor
// beyond, cos and sin multiplied by attention_factor).
struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_positions = 8192;
  std::vector<double> short_factor, long_factor;  // longrope: one per frequency
  double attention_factor = 1.0;                  // longrope
};

struct DecoderConfig {
  std::string model_type;  // config.json's: "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text",
                           // "phi3"
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  int64_t max_positions = 0;
  float eps = 1e-6f;
  RopeConfig rope;
  int64_t rotary_dim = 0;  // > 0: RoPE rotates each head's first rotary_dim dims only (partial_rotary_factor)
  bool tied = true;        // the output head is the embedding table
  bool qk_norm = false;    // Q's and K's heads are RMS-normalized before RoPE (DecoderLayer::q_norm)
  int64_t sliding_window = 0;  // > 0: in the sliding layers a token attends to the last this many positions
  std::vector<bool> sliding;   // per layer: whether it slides (empty: every layer, when sliding_window > 0)
  bool sliding_rope = false;   // the sliding layers rotate with rope_sliding instead of rope (Gemma 3)
  RopeConfig rope_sliding;
  // Gemma's differences.
  float embed_scale = 1.0f;     // the embeddings are multiplied by this (Gemma: sqrt(hidden) in fp32)
  float attn_scale = 0.0f;      // the scores' scale; 0: 1 / sqrt(head_dim)
  bool gelu = false;            // the MLP's gate through GELU's tanh form instead of SiLU
  bool sandwich_norms = false;  // attention's and the MLP's outputs RMS-normalized before the residual add
  float final_softcap = 0.0f;   // > 0: logits = cap * tanh(logits / cap)
  float attn_softcap = 0.0f;    // > 0: scores = cap * tanh(scores / cap) before the softmax (Gemma 2)
};

struct DecoderLayer {
  std::vector<float> attn_norm, ffn_norm;          // RMSNorm weights, hidden floats each
  std::vector<float> q_norm, k_norm;               // config.qk_norm: per-head RMSNorm weights, head_dim each
  std::vector<float> attn_out_norm, ffn_out_norm;  // config.sandwich_norms: the sublayers' output norms
  // Each GEMM may carry a bias (Gemm::bias, m floats; Q, K and V's joined as their rows are).
  Gemm qkv;      // [(heads + 2 kv_heads) * head_dim, hidden]: Q rows, then K, then V
  Gemm o;        // [hidden, heads * head_dim]
  Gemm gate_up;  // [2 ffn, hidden]: gate rows, then up
  Gemm down;     // [hidden, ffn]
};

// A [vocab, hidden] table (embeddings, output head) as a Decoder with bf16 or int8 weights holds it.
struct WeightTable {
  std::vector<uint16_t> bf16;  // bf16 weights
  std::vector<int8_t> i8;      // int8 weights with an fp32 scale per 64 of a row (kernels::gemv_i8, as
  std::vector<float> scales;   //   llama.cpp's Q8_0 head): [vocab, ceil(hidden / 64)]
  // Or the int8 weights and scales where a mapped file stores them (DecoderLoadOptions::in_place; i8 and
  // scales then empty), kept mapped by `owner`.
  std::span<const int8_t> i8_in_file;
  std::span<const float> scales_in_file;
  std::shared_ptr<const void> owner;
  const int8_t* i8_data() const { return i8.empty() ? i8_in_file.data() : i8.data(); }
  const float* scales_data() const { return scales.empty() ? scales_in_file.data() : scales.data(); }
  size_t i8_size() const { return i8.empty() ? i8_in_file.size() : i8.size(); }
  size_t scales_size() const { return scales.empty() ? scales_in_file.size() : scales.size(); }
  bool empty() const { return bf16.empty() && i8_size() == 0; }
  size_t bytes() const { return bf16.size() * sizeof(uint16_t) + i8_size() + scales_size() * sizeof(float); }
};

struct DecoderModel {
  DecoderConfig config;
  std::vector<float> embed;  // [vocab, hidden]; empty when embed_table holds it
  std::vector<float> norm;   // the final RMSNorm
  Gemm head;                 // untied: [vocab, hidden]; tied: empty (the embedding table is the head)
  // The embedding table and an untied head held as tables instead (embed and head.dense then empty): bf16
  // as a checkpoint stores them in bfloat16 (exactly its values, never widened to fp32: Llama 3.1 8B's
  // 4.2 GB), or int8 when read with DecoderLoadOptions::int8 or stored as int8 (prune-model --int8's, read
  // as they are under any options). A Decoder runs them as they are whatever its options ask, except that
  // int8_weights makes int8 tables of bf16 ones.
  WeightTable embed_table, head_table;
  // An untied model's embeddings read from a directory stay in its mapped checkpoint file, as stored
  // (f32/f16/bf16; embed and embed_table then empty): a token reads one row, so the 128k-token table of
  // Llama 3.1 8B (1 GB in bf16) is never held, whatever the Decoder's weights.
  StoredRows embed_stored;
  // The head left in the mapped file too, run as stored (kernels::gemv_ggml; head and head_table then
  // empty): a GGUF file's quantized head, or an F16 one (a directory's too), where detail::head_runs_stored
  // says so for the load's options (Q8_0 always; Q6_K and F16 unless int8). Never widened to
  // fp32 (Llama 3's Q6_K head: 430 MB, 2.1 GB in fp32). An untied model's: here, with its embeddings in
  // embed_stored; a tied model's is embed_stored itself (this one empty).
  StoredRows head_stored;
  std::vector<DecoderLayer> layers;
  std::string fingerprint;
  // Token `id`'s embedding row (hidden floats) into out, from whichever form holds it (int8: dequantized).
  void embedding(int32_t id, float* out) const;
  // Frees the embeddings and the head (fp32 or tables): what a layer-at-a-time reader that needs only the
  // layers does once they are read.
  void release_tables();
  // Magnitude-prunes every layer's Linears 2:4 in memory (the embeddings and head stay dense), `threads`
  // Linears at a time.
  void prune_magnitude(int threads = 1);
};

// What a loader does to each layer's Linears as soon as it has read them, before it reads the next layer: a
// model is then never whole in fp32 (Llama 3.1 8B's 32 GB), only one layer of it.
struct DecoderLoadOptions {
  bool prune = false;  // magnitude-prune the dense Linears 2:4 (as DecoderModel::prune_magnitude)
  // Hold the 2:4 Linears' values as int8 with an fp32 scale per 64 positions of a row, and the embeddings and
  // an untied head as int8 tables (DecoderModel::embed_table, head_table): what a Decoder with int8_weights
  // holds (bit for bit the same weights as quantizing at Decoder construction), never the fp32 tables beside
  // them (Llama 3.1 8B's 4.2 GB).
  bool int8 = false;
  // Hold the 2:4 Linears' fp32 values as bfloat16 (rounded to nearest even) and the embeddings and an untied
  // head as bf16 tables: what a Decoder with bf16_weights holds (bit for bit), never the fp32 ones beside
  // them (pruned in fp32 first, Llama 3.1 8B's Linears alone are 16 GB). Not with int8.
  bool bf16 = false;
  int threads = 1;  // a layer's Linears pruned and quantized this many at a time
  // What prune-model saved as the Decoder runs it is left in the mapped files and run there, never copied:
  // 2:4 Linears in the kernels' layout (Gemm::lanes, checked; their `sparse` empty; those whose values the
  // load rounds, int8 / bf16, are decoded instead) and int8 tables (WeightTable::i8_in_file). What the
  // Decoder's loading constructor asks for where it runs the Linears sparse on the memory-bound layout alone.
  bool in_place = false;
  // Called with each layer as soon as it is read (after the steps above), in order, with the model read so
  // far (config, embeddings, norm and head are in it): what it leaves in the layer is what the model keeps
  // (calibrated pruning, prune_model.h, takes each layer's weights and leaves it empty).
  std::function<void(DecoderModel& read_so_far, DecoderLayer& layer, int64_t index)> on_layer;
};

// The config.json model_types this engine loads, e.g. "llama, mistral, qwen2, qwen3, gemma2, ..., phi3".
std::string decoder_architectures();
// True when DIR/config.json names a decoder architecture this engine loads.
bool is_hf_decoder(const std::string& dir);
// Loads a Hugging Face decoder directory (hf_dir.h; LlamaForCausalLM's, MistralForCausalLM's,
// Qwen2ForCausalLM's or Qwen3ForCausalLM's tensor names), weights dense or 2:4. An unknown model_type,
// rope type or activation, a missing or misshapen tensor, or a tensor the architecture does not use is an
// Error naming the file and the field or tensor.
DecoderModel load_hf_decoder(const std::string& dir, const DecoderLoadOptions& o = {});
DecoderModel load_hf_decoder(HfDir dir, const DecoderLoadOptions& o = {});
// Loads a GGUF file (gguf.h) of general.architecture "llama", "qwen2", "qwen3", "gemma2" or "gemma3" (Gemma's
// norms stored as 1 + w, its sliding layers, score scale and soft caps as llama.cpp's loader derives them):
// its ARCH.* metadata bounded as config.json's fields are, llama.cpp's tensor names, every supported ggml
// type dequantized to fp32 (the weights carry the file's rounding), Q's and K's rows put back into
// transformers' RoPE layout (llama only: llama.cpp reorders them for its RoPE), the head tied when the file
// has no output.weight. rope_freqs.weight (Llama 3.1's and 3.2's scaling as llama.cpp's converter stores it)
// is read back as rope_scaling "llama3" (detail::rope_from_factors); other RoPE scaling (rope.scaling.type
// other than none; linear for Gemma 3) is refused.
DecoderModel load_gguf_decoder(const std::string& path, const DecoderLoadOptions& o = {});
// A parsed file (gguf.h).
DecoderModel load_gguf_decoder(const Gguf& gguf, const std::string& what, const DecoderLoadOptions& o = {});
// A GGUF decoder (checked as load_gguf_decoder checks it) as a new Hugging Face directory OUT_DIR:
// config.json (the mapped metadata; LlamaForCausalLM, Qwen2ForCausalLM, ...), the weights (fp32,
// transformers' tensor names, Q and K rows in transformers' RoPE order) written as read, a shard per layer
// with an index (one layer: model.safetensors), tokenizer.json and tokenizer_config.json (the GGUF
// tokenizer, text/bpe.h), and chat_template.jinja when the file has tokenizer.chat_template. Written
// atomically (hf_dir.h: HfDirWriter). Each shard is converted (convert_weights: c.to, c.prune, c.targets)
// before it is written, so `convert MODEL.gguf DIR --to sparse24 --prune` holds one layer in fp32, not the
// model. What `convert` does with a GGUF input (and prune-model's experiment, dense).
ConvertReport gguf_to_hf_dir(const std::string& gguf_path, const std::string& out_dir,
                             const ConvertOptions& c = {});
// `sparse24 convert IN OUT` (and Python's sparse24.convert): a Hugging Face directory (convert_hf_dir) or a
// GGUF decoder (gguf_to_hf_dir) into the new directory OUT, or one checkpoint file
// (convert_checkpoint_file) into the file OUT, its config from `config_in` (default: the config.json beside
// IN, if there is one) to `config_out` (default: the config.json beside OUT).
ConvertReport convert_model(const std::string& in, const std::string& out, const ConvertOptions& o,
                            std::string config_in = "", std::string config_out = "");
// A GGUF decoder as the Hugging Face checkpoint gguf_to_hf_dir writes of it, read a layer at a time, with
// no directory in between: what gguf_to_hf_dir and prune-model (prune_model.h) read a .gguf through.
class GgufCheckpoint {
 public:
  struct Stored {
    uint32_t type;               // the GGUF type (GgmlType)
    std::vector<int64_t> shape;  // in transformers' order
  };
  // Maps the file and reads its config and tokenizer (checked as load_gguf_decoder checks them).
  explicit GgufCheckpoint(const std::string& path);
  ~GgufCheckpoint();
  GgufCheckpoint(const GgufCheckpoint&) = delete;
  GgufCheckpoint& operator=(const GgufCheckpoint&) = delete;
  // config.json (architectures LlamaForCausalLM, ...; torch_dtype float32, the caller's to change).
  std::string config_json(const std::string& torch_dtype = "float32") const;
  // tokenizer.json, tokenizer_config.json and, when the file has one, chat_template.jinja.
  const std::map<std::string, std::string>& files() const { return files_; }
  // Every tensor the model reads, by transformers' name (rope_freqs.weight, which the config carries, not).
  const std::map<std::string, Stored>& tensors() const { return tensors_; }
  // Token ids of a text, with the file's tokenizer.
  std::vector<int32_t> encode(const std::string& text) const;
  // The model as load_gguf_decoder reads it; each tensor read is also appended to `read` under its
  // transformers name, in fp32 as a checkpoint holds it (Gemma's norms as w - 1), for o.on_layer to take;
  // without `tables`, only the layers' tensors (the embeddings, final norm and head not: see tensor()).
  DecoderModel load(const DecoderLoadOptions& o, std::vector<std::pair<std::string, StTensor>>& read,
                    bool tables = true) const;
  // One tensor of tensors() read on its own, as load hands it over.
  StTensor tensor(const std::string& name) const;
  // A [rows, cols] one (the embeddings, the head) as the int8 table load() with int8 weights makes of it
  // (detail::narrowed_table on `threads`: never whole in fp32).
  WeightTable int8_table(const std::string& name, int threads = 1) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<std::string, std::string> files_;
  std::map<std::string, Stored> tensors_;
};
// A GGUF file or a Hugging Face decoder directory.
DecoderModel load_decoder(const std::string& path, const DecoderLoadOptions& o = {});

namespace detail {
// int8 weights: one fp32 scale per this many positions of a row (one per super chunk of the int8 kernels'
// layout; docs/accuracy.md measured 64 against whole rows and 32).
constexpr int64_t kInt8ScaleGroup = 64;
// The loaders' step per layer (DecoderLoadOptions) and prune_magnitude's: each of `linears` pruned (if
// o.prune and dense) and quantized to int8 (if o.int8, 2:4 and not int8) or rounded to bf16 (if o.bf16, 2:4
// and fp32 or f16), o.threads of them at a time; the first error is rethrown after all have run.
void prepare_linears(const std::vector<Gemm*>& linears, const DecoderLoadOptions& o);
// Rows of a dense weight where they are stored (a mapped file's, a checkpoint's in memory), read as fp32 a
// block at a time from any thread; a GGUF file's Q and K rows are in llama.cpp's RoPE order (rope_heads heads
// of rope_dim rows), put back in transformers' order as they are read.
struct RowSource {
  StoredRows stored;
  std::string what;  // "file: tensor 'name'", for errors
  int64_t rope_heads = 0, rope_dim = 0;
  void read(int64_t r0, int64_t r1, float* out) const;  // rows [r0, r1), checked finite
};
// A dense Linear, its parts' rows stacked, pruned 2:4 as it is read (int8 if o.int8, else bf16 if o.bf16): a
// block of rows at a time on o.threads, never the fp32 matrix whole. The weights prepare_linears makes of
// it read dense; the first failing block's error.
Compressed prune_as_read(const std::vector<RowSource>& parts, int64_t cols, const DecoderLoadOptions& o);
// W [rows, cols] as an int8 table (WeightTable::i8 and scales); of a bf16 table, its values widened.
WeightTable int8_table(const std::vector<float>& w, int64_t rows, int64_t cols);
WeightTable int8_table(const WeightTable& bf16, int64_t rows, int64_t cols);
// W as a bf16 table (WeightTable::bf16), each value rounded to nearest even.
WeightTable bf16_table(const std::vector<float>& w);
// A table left in a file, or one read by rows, as an int8 (int8_table's) or bf16 table: widened a block of
// rows at a time (never the fp32 table whole) on `threads`; a RowSource's first failing block's error.
// A RowSource's: in_order(r0, r1) is called with each block of rows once it is read, in order, one call at a
// time (on whichever thread read the block): the loader hashing the stored rows while they are at hand.
using RowsInOrder = std::function<void(int64_t r0, int64_t r1)>;
WeightTable narrowed_table(const StoredRows& t, bool int8, int threads = 1);
WeightTable narrowed_table(const RowSource& t, bool int8, int threads = 1, const RowsInOrder& in_order = {});
// Whether a head of this ggml type runs as stored (kernels::gemv_ggml) under int8 or bf16 weights: unless
// they ask for a table it is wider than (F32 under bf16; F32, F16, BF16 under int8) or slower than (Q6_K
// under int8: 0.82 bytes a value, but its rows bound by their vector work, as fast as the int8 table's or
// up to 15% slower on an Intel Xeon model 207 with AVX-512; under bf16 1.3-1.6x faster than the bf16 table
// there, about as fast on AVX2, at 0.41 of its bytes: docs/design.md). Q8_0 always (as narrow as int8, and
// not rounded a second time).
bool head_runs_stored(uint32_t ggml_type, bool int8, bool bf16);
// Row `row` of a [rows, cols] bf16 or int8 table as floats (int8: times its scales) into out.
void table_row(const WeightTable& t, int64_t row, int64_t cols, float* out);

// The decoder's ops on feature-major tensors ([rows, n] row-major, one column per token).
// Per column j: y[:, j] = x[:, j] / sqrt(mean(x[:, j]^2) + eps) * w.
void rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y);
// RoPE's inverse frequencies for `dim` rotated dims, dim / 2 of them (longrope: with the long factors when
// `long_factors`, else the short ones).
std::vector<float> rope_inv_freq(const RopeConfig& r, int64_t dim, bool long_factors = false);
// Llama 3's RoPE scaling (type "llama3": factor, low and high frequency factors, original positions) from
// the per-frequency divisors llama.cpp's converter stores as rope_freqs.weight (factors[i] divides
// frequency i of theta^(-2i/dim)): those of a default RoPE when every divisor is 1. Only the ratios of the
// original positions to the two frequency factors are fixed by the divisors: original_max_positions is
// 8192 (Llama 3's), the factors follow from it. Error (naming `what`) when the divisors are not of that
// form (recomputed, each within 1e-4 of the file's).
RopeConfig rope_from_factors(double theta, int64_t dim, const std::vector<float>& factors,
                             const std::string& what);
// Rotates each head of x [heads * head_dim, n] in place, column j at position pos0 + j, in transformers'
// rotate_half layout over the head's first `rotary_dim` dims (0: all; pairs i and i + rotary_dim / 2), the
// rest left as they are. cos_sin: [positions, rotary_dim / 2] pairs (cos, sin).
void rope(float* x, int64_t heads, int64_t head_dim, int64_t n, int64_t pos0, const float* cos_sin,
          int64_t rotary_dim = 0);
// [positions, inv_freq.size()] (cos, sin) pairs of position * inv_freq, as transformers computes them
// (fp32), multiplied by `scale` (longrope's attention_factor).
std::vector<float> rope_table(const std::vector<float>& inv_freq, int64_t positions, float scale = 1.0f);
// y[:, j] = silu(gu[i, j]) * gu[ffn + i, j] for gu [2 ffn, n]; with gelu, GELU's tanh form for silu
// (transformers' gelu_pytorch_tanh).
void swiglu(const float* gu, int64_t ffn, int64_t n, float* y, bool gelu = false);
// One layer's KV cache: the keys and values of kv_heads heads at up to `capacity` positions, [kv_heads,
// rows(), d] token-major, held as fp32 (k, v) or as IEEE half (kh, vh; `half`). A sliding layer's cache can
// be a ring of `ring` positions (its window plus the most tokens a call adds): position p in rows p % ring
// and p % ring + ring, so that any `ring` consecutive positions are contiguous rows from row(first) on.
struct KvCache {
  KvCache() = default;
  KvCache(int64_t kv_heads, int64_t capacity, int64_t d, bool half, int64_t ring = 0);
  int64_t kv_heads = 0, capacity = 0, d = 0, ring = 0;
  bool half = false;
  int64_t rows() const { return ring > 0 ? 2 * ring : capacity; }
  int64_t row(int64_t pos) const { return ring > 0 ? pos % ring : pos; }
  size_t bytes() const {
    return half ? (kh.size() + vh.size()) * sizeof(uint16_t) : (k.size() + v.size()) * sizeof(float);
  }
  std::vector<float> k, v;
  std::vector<uint16_t> kh, vh;
};
// What a layer's attention does beyond plain causal softmax(Q K^T / sqrt(d)) V.
struct AttentionOptions {
  float scale = 0.0f;    // the scores' scale (0: 1 / sqrt(d))
  int64_t window = 0;    // > 0: a position attends to the last `window` positions only (itself included)
  float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap) before the softmax (Gemma 2)
};
// Grouped-query causal attention with a KV cache. qkv [(heads + 2 kv_heads) * d, n] holds the n new tokens
// (Q, K, V rows, RoPE already applied to Q and K), at positions pos0 .. pos0 + n - 1. Their K and V are
// written into the cache (rounded to half in a half cache), then query head h attends to the keys of kv
// head h / (heads / kv_heads) at positions 0 .. its own (with a window, the last `window` of them; a ring
// cache needs one, and n + window - 1 <= ring).
// out: [heads * d, n]. d <= 512. scratch: attention_scratch(threads, heads, kv_heads, d, capacity,
// cache.half) floats. Fewer than 8 new tokens run one position at a time (kernels/attend.h: a kv head's
// query heads read each cached row once); more run as oneDNN GEMMs over blocks of queries.
void attention_cached(const float* qkv, int64_t heads, int64_t n, int64_t pos0, KvCache& cache, float* out,
                      float* scratch, int threads, const AttentionOptions& options = {});
int64_t attention_scratch(int threads, int64_t heads, int64_t kv_heads, int64_t d, int64_t capacity,
                          bool half);
}  // namespace detail

struct DecoderOptions {
  int threads = 1;
  // kDense: every Linear dense oneDNN; kSparse (or kPlan): 2:4 Linears sparse, the others dense.
  Mode mode = Mode::kSparse;
  // Sparse Linears, the output head and the embedding rows tokens look up hold bfloat16 weights (the tied
  // head's table is both; a Decoder that took its model frees the fp32 embedding table).
  bool bf16_weights = false;
  // Sparse Linears hold their 2:4 values as int8 with an fp32 scale per 64 positions of a row
  // (quantize_int8, docs/accuracy.md), the output head and the embedding rows int8 too (an fp32 scale per 64
  // positions of a row, kernels::gemv_i8; the head bf16 until session 17, the embeddings fp32 until session
  // 22). Not with bf16_weights.
  bool int8_weights = false;
  // Sparse Linears of bf16 or int8 weights round their inputs to bfloat16 where bf16_activations_supported()
  // (AVX512_BF16, not Intel's cores; PackOptions::bf16_activations: about twice the multiply-adds per
  // instruction; docs/accuracy.md has what it does to the logits); elsewhere, and for fp32 weights, no
  // effect.
  bool bf16_activations = false;
  // Sparse Linears of int8 weights quantise their inputs to int8 (per block of 64 positions) and multiply in
  // integers where int8_activations_supported() (AVX512_VNNI and AVX512_VBMI; PackOptions::int8_activations,
  // as llama.cpp's Q8_0 dot products; docs/accuracy.md); elsewhere, and for fp32 or bf16 weights, no effect.
  // Not with bf16_activations.
  bool int8_activations = false;
  int64_t max_context = 2048;  // the KV cache's capacity in tokens (at most max_positions)
  // Sparse Linears also pack the compute-bound layout, for long prefills (perplexity); weight_bytes then
  // counts both layouts. Off: only the memory-bound layout a decoded token reads (any n runs on it).
  bool prefill_layout = false;
  // The KV cache holds K and V as IEEE half (as llama.cpp's default cache) instead of fp32: half the bytes
  // a decoded token reads from it, which at long contexts is a large share of its time (docs/accuracy.md
  // has what the rounding changes).
  bool kv_half = false;
  // A sliding layer's cache keeps its window and one call's tokens (a ring; forward runs a longer call
  // 512 tokens at a time) instead of every position, when that is smaller: Gemma 3's 512-position windows at
  // a 32k context hold 1/16 of the positions. Off (the layer-by-layer calibration, whose run_layers takes a
  // whole sequence at once): every position.
  bool sliding_ring = true;
};

// Shown each Linear's input before it runs: the layer, which Linear (0 QKV, 1 O, 2 gate/up, 3 down) and
// x [k, n] (feature-major).
using LinearObserver = std::function<void(int64_t layer, int linear, const float* x, int64_t k, int64_t n)>;

class Decoder {
 public:
  // m must outlive the Decoder, unchanged: it reads m's embedding table, norm weights and dense Linears'
  // weights in place.
  Decoder(const DecoderModel& m, const DecoderOptions& o);
  // Takes the model instead: each layer's packed Linears' 2:4 values are released as soon as they are
  // packed, and the untied head's weights and the fp32 embedding table once held as bf16 or int8, so the
  // weights are never in memory twice (an 8B int8 model's 4.8 GB).
  Decoder(DecoderModel&& m, const DecoderOptions& o);
  // Loads the model at `path` (load_decoder(path, load)) and takes it as above, each layer's 2:4 Linears
  // packed on a thread of their own while the loader reads the next layers (with o.threads >= 2; the reading
  // and the packing were each most of a load): the Decoder that Decoder(load_decoder(path, load), o) is,
  // sooner. The loader's errors, then the first Linear's.
  Decoder(const std::string& path, const DecoderLoadOptions& load, const DecoderOptions& o);
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  // Appends n >= 1 tokens to the sequence and writes logits: the last token's [vocab] floats, or with
  // `all` every new token's, [n, vocab]. Error on an id outside the vocabulary or a full cache.
  void forward(const int32_t* ids, int64_t n, float* logits, bool all = false);
  // Calibration: runs every layer over h [hidden, n] (feature-major, in place) as a fresh sequence at
  // positions 0 .. n - 1, no embedding and no head; `observe` (may be empty) sees each Linear's input.
  // The sequence is forgotten afterwards.
  void run_layers(float* h, int64_t n, const LinearObserver& observe);
  void reset();  // forgets the sequence
  // Forgets the tokens from position `pos` on (0 <= pos <= position()): the next forward continues there,
  // as if only the first pos tokens had been given.
  void rewind(int64_t pos);
  // Rewinds to the longest prefix of ids[0, n - 1) that the cache holds and returns its length: forward the
  // rest (ids + k, n - k) to continue as from a fresh sequence of all n (what a chat reuses of its turns).
  int64_t reuse_prefix(const int32_t* ids, int64_t n);
  int64_t position() const;  // tokens in the cache
  int64_t capacity() const;
  const DecoderConfig& config() const;
  // Bytes of the weights one decoded token reads (GEMMs as packed or dense, embeddings/head, norms).
  size_t weight_bytes() const;
  // Bytes of the tables left in the checkpoint's file (DecoderModel::embed_stored, head_stored; a tied table
  // once). A head among them is in weight_bytes too (a decoded token reads all of it), embeddings are not
  // (it reads one row).
  size_t stored_bytes() const;
  size_t cache_bytes() const;  // the KV caches' bytes (allocated for the whole capacity)
  int sparse_linears() const;  // how many Linears run the 2:4 kernel

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void build(const DecoderModel& m, const DecoderOptions& o, DecoderModel* owned);
};

// Perplexity of `ids` over non-overlapping windows of ctx tokens (a tail shorter than a window is left
// out): every token but a window's first is scored given those before it in the window. Error if there is
// not one whole window or the decoder's context is shorter than ctx. progress(done, total) per window.
struct Perplexity {
  double perplexity = 0, mean_nll = 0;
  int64_t windows = 0, scored = 0;
};
Perplexity perplexity(Decoder& d, const std::vector<int32_t>& ids, int64_t ctx,
                      const std::function<void(int64_t done, int64_t total)>& progress = {});

// Samples a token from logits: greedy at temperature 0, else softmax(logits / t) restricted to the smallest
// set of tokens whose probability reaches top_p. `state` is the caller's RNG state (splitmix64).
int32_t sample_token(const float* logits, int64_t vocab, float temperature, float top_p, uint64_t& state);

}  // namespace sparse24::engine
