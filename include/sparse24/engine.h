// The inference engine: runs a model (a list of ops over feature-major tensors) with every Linear/Conv2d
// as a GEMM, each one either the 2:4 sparse kernel (spmm.h) or dense oneDNN, chosen per layer by timing
// both on the real shapes (the plan, like a TensorRT engine build).
//
// Layout: every activation is feature-major, [features, batch * positions] row-major (one column per
// token, pixel or sample), which is the X[K, N] the sparse kernel multiplies. A Conv2d is a GEMM over
// im2col with reduction order (ky, kx, in), so its 2:4 groups (along in) stay groups of the GEMM.
// Both paths run the same code outside the GEMMs; bias and ReLU/GELU are fused into both GEMMs' epilogues.
//
//   Model m = load_model("workflow-out/model");        // model.json + model.safetensors, validated
//   Plan p = build_plan(m, /*batch=*/64, /*threads=*/1); // times sparse and dense per layer
//   Engine e(m, 64, 1, Mode::kPlan, &p);                // keeps only the chosen format of each weight
//   e.run(input, output);                               // input [64, *m.input_shape], output [64, classes]
//
// The engine library links oneDNN and OpenMP, never libtorch.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/hf_dir.h"
#include "sparse24/reference.h"

namespace sparse24::engine {

// A Linear, or a Conv2d lowered to a GEMM: Y[M, N] = epilogue(W[M, K] X[K, N] + bias).
// The activations a 2:4 Linear's memory-bound kernels read (set_sparse_precision): fp32, rounded to
// bfloat16, or quantised to int8.
enum class SparseActivations : uint8_t { kF32, kBf16, kInt8 };
const char* sparse_activations_name(SparseActivations a);  // "fp32", "bf16", "int8"

struct Gemm {
  std::string name;  // the layer name in the model ("fc1", "layer3.ffn1")
  int64_t m = 0, k = 0;
  bool pruned = false;
  Compressed sparse;         // pruned: the 2:4 matrix [m, k] (a conv's rows regrouped to (ky, kx, in))
  std::vector<float> dense;  // not pruned: [m, k] row-major
  std::vector<float> bias;   // m floats, or empty
  Epilogue epilogue = Epilogue::kNone;
  // The checkpoint weights whose rows make up W, in order (Q, K, V for a fused QKV), when the loader knows
  // them: how calibration (prune_model.h) maps a GEMM back to the tensors it prunes.
  std::vector<std::string> sources;
  // pruned: the activations its kernel may read (PackOptions::bf16_activations or int8_activations;
  // set_sparse_precision).
  SparseActivations activations = SparseActivations::kF32;
  // pruned, and left where a pruned checkpoint stores it in the kernels' memory-bound layout (the
  // sparse24 layout's `.lanes` tensors, read with DecoderLoadOptions::in_place): its parts in row order (Q,
  // K, V), each checked (kernels::check_lanes), which the Decoder runs in place; `sparse` is then empty.
  struct StoredLanes {
    std::span<const uint8_t> bytes;
    int64_t rows = 0;
    int kb = 0;
    DType dtype = DType::kI8;           // the values' type: kF32, kBF16 or kI8 (with scales)
    std::shared_ptr<const void> owner;  // keeps the bytes mapped
  };
  std::vector<StoredLanes> lanes;
};

enum class OpKind : uint8_t {
  kGemm,       // out = gemm(in)
  kIm2col,     // spatial in [C, B*H*W] -> [(ky, kx, c), B*OH*OW]
  kMaxPool,    // kernel = stride, floor
  kFlatten,    // spatial [C, B*H*W] -> [C*H*W, B] (PyTorch's flatten order c, h, w)
  kRelu,       // (when it cannot be fused into a GEMM)
  kAffine,     // per-row y = x * scale + shift (a BatchNorm that follows no conv)
  kLayerNorm,  // over the rows of each column; in2 (optional) is added first (residual)
  kAttention,  // multi-head self-attention core: in = [3*H, B*S] (Q, K, V rows), out = [H, B*S]
  kEmbed,      // token models: ids -> word embedding + position embedding (+ token type 0), [H, tokens]
  kPool,       // token models: per sequence, the mean of its tokens' columns or its first (CLS) column
  kL2Norm,     // each column divided by max(||column||, 1e-12)
};
const char* op_kind_name(OpKind k);

// Per sample: rows x (h * w) columns; a `tokens` tensor of a token model has one column per token of the
// call instead (sequences of any length, packed one after another without padding).
struct TensorShape {
  int64_t rows = 0, h = 1, w = 1;
  bool tokens = false;
};

enum class PoolMode : uint8_t { kMean, kCls };

// MPNet's relative position bias (T5-style buckets of j - i), added to every layer's attention scores.
struct RelativeBias {
  int64_t buckets = 0, max_distance = 0;  // buckets = 0: none
  std::vector<float> table;               // [buckets, heads]
};

// A table of rows [rows, cols] left where a checkpoint stores it (a mapped file), in its stored type (kF32,
// kF16 or kBF16; or a GGUF file's ggml type, quantized blocks included), read and widened a row at a time
// as it is used: not the process's own memory but the page cache's, mapped as rows are read and shared
// with every process that maps the file. `owner` keeps the mapping alive for as long as any copy of the
// table lives; null `data`: no table.
struct StoredRows {
  static constexpr int64_t kNoGgml = -1;
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;  // row 0; rows follow one another
  DType type = DType::kF32;       // the rows' type where ggml_type is kNoGgml
  int64_t rows = 0, cols = 0;
  int64_t ggml_type = kNoGgml;  // a GgmlType number (sparse24/gguf.h): rows of its blocks
  // Row i as fp32 into out[cols]: exact for the float types (they widen without rounding); a ggml type's
  // as llama.cpp dequantizes it (dequantize_row).
  void row(int64_t i, float* out) const;
  size_t row_bytes() const;
  size_t bytes() const;  // 0 for no table
  bool empty() const { return data == nullptr; }
};

struct Op {
  OpKind kind = OpKind::kRelu;
  int in = -1, in2 = -1, out = -1;  // tensor ids
  int gemm = -1;                    // kGemm: index into Model::gemms
  int64_t kernel = 1, stride = 1, padding = 0;
  int64_t heads = 0;                // kAttention
  float eps = 1e-5f;                // kLayerNorm
  std::vector<float> scale, shift;  // kAffine; kLayerNorm gamma, beta
  // kEmbed: word embeddings [vocab, rows] and position embeddings [positions, rows] (token type 0 folded
  // in); token i of a sequence reads position row i + position_offset. The word embeddings are in `table`,
  // or (table empty) left in the checkpoint's file, `stored_table` (a loaded directory's, when they need no
  // change: a vocabulary's table is most of a small encoder's bytes, and a text reads few of its rows).
  std::vector<float> table, positions;
  StoredRows stored_table;
  int64_t position_offset = 0;
  PoolMode pool = PoolMode::kMean;  // kPool
  RelativeBias bias;                // kAttention (MPNet)
};

struct Model {
  std::string name;
  // A token model (a text encoder) takes token ids, not floats: its tensor 0 is a placeholder, its first op
  // is kEmbed, and the engine runs it with run_tokens.
  bool token_input = false;
  int64_t vocab = 0, max_sequence = 0;  // token models: ids < vocab; tokens per sequence <= max_sequence
  // Per sample, channel first: [C, H, W], [C, L] or [F]. The engine's input is [batch, *input_shape].
  std::vector<int64_t> input_shape;
  double mean = 0, std = 1;          // the export's input normalisation (x = (pixel / 255 - mean) / std)
  std::vector<TensorShape> tensors;  // tensor 0 is the input
  int output = 0;
  std::vector<Gemm> gemms;
  std::vector<Op> ops;
  std::string fingerprint;  // identifies the weights and architecture (plans are matched on it)

  // Elements per sample of the input and the output.
  int64_t input_size() const;
  int64_t output_size() const;
  // Checks op/tensor consistency (ids, shapes); Error naming the problem.
  void check() const;
};

// Loads a workflow export (DIR/model.json + the safetensors it names): conv2d, linear, batchnorm2d (folded
// into the conv before it, else a per-channel affine), relu (fused into the GEMM before it), maxpool2d,
// flatten, dropout (identity). Every tensor is checked against the architecture: a missing tensor, wrong
// dtype or shape, an invalid 2:4 code, a tensor the architecture does not use, or a truncated/hostile file
// is an Error naming the tensor (or the file).
Model load_model(const std::string& dir);

// A text encoder's tokenization and pooling (sentence-transformers' modules, or their defaults).
struct TextModelInfo {
  std::string model_type;  // "bert", "mpnet"
  int64_t max_tokens = 0;  // truncate tokenized text to this many tokens (the special ones included)
  PoolMode pool = PoolMode::kMean;
  bool normalize = false;
};

// Loads a Hugging Face encoder directory (hf_dir.h): config.json model_type "bert" (BertModel) or "mpnet"
// (MPNetModel), weights dense or 2:4 (sparse24 or sparse-24-bitmask layout), in one file or shards, with
// the sentence-transformers pooling and Normalize when the directory has them (mean pooling when it has
// none). The model is a token model whose output is one embedding per sequence. Every config field and
// tensor is checked; an Error names the file and the field or tensor.
Model load_hf_encoder(const std::string& dir, TextModelInfo* info = nullptr);
// The same from a directory already read (e.g. pruned in memory).
Model load_hf_encoder(HfDir dir, TextModelInfo* info = nullptr);
// load_hf_encoder for a directory with config.json, else load_model (the workflow's export).
Model load_any_model(const std::string& dir, TextModelInfo* info = nullptr);

// The precision of a model's 2:4 Linears (docs/accuracy.md): their values as loaded (kF32: fp32, or a bf16
// checkpoint's bf16), bfloat16 (rounded to nearest even: to_bf16) or int8 with an fp32 scale per 64
// positions (quantize_int8), and their inputs as the memory-bound kernels read them: fp32, rounded to
// bfloat16 (bf16 or int8 values, where bf16_activations_supported(): PackOptions::bf16_activations) or
// quantised to int8 per 64 positions (int8 values, where int8_activations_supported():
// PackOptions::int8_activations); elsewhere the activations change nothing. Dense layers, the embeddings and
// every other op stay fp32. A narrower type halves (bf16) or quarters (int8) the bytes short inputs stream:
// the engine packs such Linears with the memory-bound layout beside the compute-bound one (which holds fp32)
// wherever it packs for more columns than that layout takes. The fingerprint records the change (a plan is
// timed on the weights it runs).
enum class SparseValues : uint8_t { kF32, kBf16, kInt8 };
// "fp32", "bf16" or "int8"; Error otherwise.
SparseValues parse_sparse_values(const std::string& s);
const char* sparse_values_name(SparseValues v);
// Error for activations the values do not take: bf16 ones need bf16 or int8 values, int8 ones int8 values.
void set_sparse_precision(Model& m, SparseValues v, SparseActivations a = SparseActivations::kF32);

struct BertOptions {
  int64_t layers = 12, hidden = 768, heads = 12, ffn = 3072, seq = 128;
  uint64_t seed = 1;
};
// A BERT encoder (post-LayerNorm, GELU FFN; no embeddings, no attention mask) with random 2:4 weights in
// every Linear (Q, K and V as one [3H, H] GEMM). Input and output: [hidden, seq] per sample.
Model bert_model(const BertOptions& o);

// ---- The plan ----------------------------------------------------------------------------------------
struct LayerPlan {
  std::string name;
  int64_t m = 0, k = 0, n = 0;
  bool pruned = false;
  double dense_ms = 0, sparse_ms = -1;  // sparse_ms < 0: not pruned, dense only
  bool sparse = false;                  // the choice
};
struct Plan {
  std::string fingerprint, isa;
  int64_t batch = 1;  // a token model's: the tokens per call it was timed at
  int threads = 1;
  std::vector<LayerPlan> layers;  // one per Model::gemms, in order
  // The whole model timed three ways (ms, best of several; -1 when not timed): the per-layer choices, all
  // dense, all sparse. When a whole other than the per-layer one is fastest, `layers` follow it.
  double mixed_ms = -1, dense_ms = -1, sparse_ms = -1;
  std::string whole = "layers";  // which won: "layers", "dense" or "sparse"
  std::string to_json() const;
  // Error naming `what` on malformed JSON or fields.
  static Plan from_json(const std::string& text, const std::string& what);
  // Same model (fingerprint, layer names and shapes), batch, threads and kernel ISA.
  bool matches(const Model& m, int64_t batch, int threads) const;
};
// Times, per GEMM shape, the sparse kernel (pruned layers) and dense oneDNN on the layer's real shape
// (random activations), best of `reps` interleaved, and keeps sparse only when it is at least 3% faster;
// then times the whole model with those choices, all dense and all sparse (random input) and keeps the
// fastest whole, so the engine is never slower than dense because of how layers interact.
Plan build_plan(const Model& m, int64_t batch, int threads, int reps = 5);
// DIR/plan.json when it exists and matches, else a new plan written there atomically (a write failure
// is reported on stderr, not fatal). `*built` tells which happened.
Plan load_or_build_plan(const Model& m, const std::string& dir, int64_t batch, int threads, bool* built);

// ---- The engine --------------------------------------------------------------------------------------
enum class Mode : uint8_t {
  kPlan,    // each layer as the plan says
  kDense,   // every GEMM dense oneDNN
  kSparse,  // every pruned GEMM sparse
};

// "plan", "dense", "sparse"; Error otherwise.
Mode parse_mode(const std::string& name);

struct OpTime {
  std::string name;  // the GEMM's layer name, or the op kind
  std::string kind;
  bool sparse = false;
  double ms = 0;
};

// Token sequences for a token model, packed one after another without padding: sequence s is
// ids[offsets[s], offsets[s+1]).
struct TokenBatch {
  std::vector<int32_t> ids;
  std::vector<int64_t> offsets{0};
  void add(const std::vector<int32_t>& sequence);
  int64_t sequences() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t tokens() const { return static_cast<int64_t>(ids.size()); }
};

class Engine {
 public:
  // Copies what it needs from the model: a sparse layer keeps only its packed 2:4 weights (one kernel
  // layout, the one its N uses), a dense layer only oneDNN's dense weights. `plan` is required for kPlan.
  // For a token model, `batch` is the most tokens one call may hold (the plan's N).
  Engine(const Model& model, int64_t batch, int threads, Mode mode, const Plan* plan = nullptr);
  // The same, taking the model: each layer's weights are freed as soon as their packed form is made, so
  // the model and the engine are never both whole in memory.
  Engine(Model&& model, int64_t batch, int threads, Mode mode, const Plan* plan = nullptr);
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  int64_t batch() const;
  // input: [batch, *input_shape] (sample-major, as PyTorch holds it); output: [batch, rows, positions].
  void run(const float* input, float* output);
  // A token model: output [sequences, rows] when it pools, else [tokens, rows]. Every id must be below
  // the vocabulary, every sequence 1 .. max_sequence tokens long, all of them at most `batch` tokens.
  void run_tokens(const TokenBatch& input, float* output);
  // Runs a token model and shows `observe` each GEMM's input X [k, n] (feature-major, n = the call's tokens)
  // just before the GEMM runs; when it returns false the run stops there (calibration: prune_model.h).
  using GemmObserver = std::function<bool(int gemm, const float* x, int64_t k, int64_t n)>;
  void run_tokens_observed(const TokenBatch& input, const GemmObserver& observe);
  // Calibration in steps: runs only ops [begin, end) of a token model on `input`. `state` holds the tensors
  // written before `begin` that ops from `begin` on read (empty when begin is 0); they are loaded first,
  // and afterwards `state` holds those live at `end` (tensor index -> [rows, tokens] values), so the next
  // range can start there, on this engine or on another one built from the same graph. `observe` (may be
  // empty) as above; if it stops the run, `state` is left unchanged.
  using State = std::map<int, std::vector<float>>;
  void run_tokens_range(const TokenBatch& input, size_t begin, size_t end, State& state,
                        const GemmObserver& observe = {});
  // Output rows per sequence (pooled token models), sample or token.
  int64_t output_rows() const;
  // The same, per op: best of `reps` for each op (in a full run each time); returns one entry per op.
  std::vector<OpTime> profile(const float* input, int reps);
  std::vector<OpTime> profile_tokens(const TokenBatch& input, int reps);
  // Bytes of all weights the engine holds in memory (packed sparse or dense GEMM weights, biases, norms,
  // tables), and of the tables it left in checkpoint files (StoredRows: mapped, read as used).
  size_t weight_bytes() const;
  size_t stored_bytes() const;
  // Per GEMM: true when it runs sparse.
  std::vector<bool> sparse_layers() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- Text in, embeddings out -------------------------------------------------------------------------

// A Hugging Face / sentence-transformers encoder directory with its tokenizer: texts to embeddings.
class TextEncoder {
 public:
  struct Options {
    int threads = 1;
    Mode mode = Mode::kPlan;
    int64_t batch = 8;     // texts per engine call
    bool verbose = false;  // plan building reported on stderr
    // load: the 2:4 Linears' precision (set_sparse_precision); from_model takes the model as it is.
    SparseValues sparse_values = SparseValues::kF32;
    SparseActivations sparse_activations = SparseActivations::kF32;
  };
  // Loads DIR (load_hf_encoder) and its tokenizer; kPlan reuses DIR/plan.json when it matches, else builds
  // it (timed at min(batch, 4) x min(128, max_tokens) tokens) and saves it there.
  static TextEncoder load(const std::string& dir, const Options& o);
  // The same for a model already loaded; `tokenizer_dir` holds the tokenizer files, `plan_dir` the plan
  // (empty: a plan is built and not saved). The engine takes the model (Engine(Model&&): its weights freed
  // as they are packed); pass a copy to keep one.
  static TextEncoder from_model(Model m, const TextModelInfo& info, const std::string& tokenizer_dir,
                                const std::string& plan_dir, const Options& o);
  TextEncoder(TextEncoder&&) noexcept;
  TextEncoder& operator=(TextEncoder&&) noexcept;
  ~TextEncoder();

  // Token ids of one text (special tokens added, truncated to the model's max_tokens).
  std::vector<int32_t> tokenize(const std::string& text) const;
  // One embedding per text, row-major [texts, dim()]; texts go through the engine `batch` at a time.
  std::vector<float> embed(const std::vector<std::string>& texts);
  // The same for texts already tokenized.
  std::vector<float> embed_ids(const std::vector<std::vector<int32_t>>& ids);
  int64_t dim() const;
  const TextModelInfo& info() const;
  Engine& engine();
  const Plan* plan() const;  // null unless kPlan

 private:
  struct Impl;
  explicit TextEncoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sets the OpenMP thread count used by oneDNN and the engine's own ops.
void set_threads(int threads);

}  // namespace sparse24::engine
