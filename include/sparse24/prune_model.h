// One-shot 2:4 pruning of a whole Hugging Face encoder (BERT, MPNet) with calibration through the engine:
// magnitude, Wanda or SparseGPT (prune.h), optionally after input-channel permutations.
//
// Calibration is sequential, block by block, as SparseGPT and Wanda do it: each block (layerN.*) is
// calibrated on the activations the already-pruned earlier blocks give it. The engine runs the ops of one
// block at a time on the states the previous block left (Engine::run_tokens_range): once dense, showing
// each GEMM of the block its input (Wanda: column norms; SparseGPT: H = 2/n X^T X), then, after the block's
// Linears are pruned, once more pruned to carry the states to the next block; every block costs two block
// passes. Inside a block every Linear sees the dense block's activations.
//
// Permutations reorder a Linear's input channels together with what produces them, so the network computes
// the same function and the checkpoint keeps its layout:
//   the FFN output Linear's input comes from the FFN input Linear through GELU: that Linear's rows (and bias)
//   are permuted with it;
//   the attention output Linear's input is the attention context, whose channels are V's rows: permuted
//   within each head (a channel may not change heads), V's rows (and bias) with it;
//   Q, K, V and the FFN input Linear read the residual stream, which every layer shares: no producer can
//   absorb a permutation there, so they are left unpermuted (docs/accuracy.md).
// The permutation of each Linear is searched (search_permutation) on the method's own importance: |W| for
// magnitude, |W_ij| * ||X_j|| for Wanda and SparseGPT.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sparse24/hf_dir.h"
#include "sparse24/prune.h"

namespace sparse24::engine {

enum class PruneMethod { kMagnitude, kWanda, kSparseGpt };
// "magnitude", "wanda", "sparsegpt"; Error otherwise.
PruneMethod parse_prune_method(const std::string& name);
const char* prune_method_name(PruneMethod m);

// The default targets: every Linear of the encoder's layers (embeddings, position bias and pooler stay
// dense).
inline constexpr const char* kEncoderLinears = R"(encoder\.layer\.[0-9]+\.)";
// A Llama decoder's: Q, K, V, O, gate, up and down of every layer (the embeddings, i.e. the tied head, stay
// dense).
inline constexpr const char* kDecoderLinears = R"(model\.layers\.[0-9]+\.(self_attn|mlp)\.)";

struct PruneModelOptions {
  PruneMethod method = PruneMethod::kMagnitude;
  bool permute = false;
  std::string
      targets;  // regex searched in the checkpoint's weight names ("": kEncoderLinears or kDecoderLinears)
  std::vector<std::string> calibration;  // texts (Wanda, SparseGPT); tokenized with the model's tokenizer
  std::vector<std::vector<int32_t>> calibration_ids;  // or sequences already tokenized (used when given)
  int threads = 1;
  int64_t tokens_per_call = 4096;  // encoders: calibration tokens per engine call (whole sequences)
  int64_t sequence_tokens = 512;   // decoders: the calibration text is cut into sequences of this many tokens
  double permute_seconds = 1.0;    // search budget per Linear (per head for the attention output)
  // Work budget of each search (PermutationOptions::max_evaluations; 0: none): reached before
  // permute_seconds, the permutations are the same on every machine.
  uint64_t permute_evaluations = 0;
  SparseGptOptions sparsegpt;
  // The pruned weights' kept values rounded to int8 with an fp32 scale per 64 positions, as a decoder loaded
  // with int8 weights runs them (DecoderLoadOptions::int8, `--int8`), from the values as pruned (bf16 stays
  // the source of a bf16 checkpoint's; a quantized GGUF file's Linears are pruned from their fp32
  // dequantized values, as loading it with --prune --int8 does). Written only in the sparse24 layout. The
  // calibrated methods carry each layer's hidden states on through its pruned values before rounding.
  // A decoder's embeddings and untied head are written as the int8 tables loading with --int8 makes of
  // them (a scale per 64 of a row; from a GGUF file's dequantized values), read back as they are.
  bool int8 = false;
  // Called as work advances (calibration calls of each block, weights pruned): done and total units.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct PrunedWeight {
  std::string name;         // the checkpoint weight
  std::string permutation;  // "" (not asked), "with <producer>", or why it was left unpermuted
  double kept_identity = 0, kept_permuted = 0;  // the permutation search's importance kept, before / after
  uint64_t evaluations = 0;    // the searches' split evaluations (PermutationResult::evaluations), summed
  bool stopped_early = false;  // a search of this weight ended at a budget (seconds or evaluations)
  // When permuted: new input channel c = old channel perm[c] (the producer's rows alike).
  std::vector<int64_t> perm;
};

struct PruneModelReport {
  std::vector<PrunedWeight> weights;  // in model order
  std::vector<std::string> skipped;   // target weights left dense: "name: reason"
  int64_t calibration_sequences = 0, calibration_tokens = 0;
  double forward_s = 0, statistics_s = 0, permute_s = 0, prune_s = 0;  // where the time went
};

// Prunes `dir` (read_hf_dir) in place: every targeted Linear weight of the encoder becomes a 2:4 Compressed
// tensor; permuted producers' weights and biases become float32. Wanda and SparseGPT need calibration
// text. Errors name the problem (no weight matched, no calibration text, a weight already 2:4, ...).
PruneModelReport prune_hf_encoder(HfDir& dir, const PruneModelOptions& options);

// The same for a Llama-family decoder (decoder.h): Q, K, V, O, gate, up and down of every layer. The
// calibration lines are joined by newlines, tokenized with the model's byte-level BPE and cut into
// sequences of sequence_tokens (or calibration_ids are the sequences). Calibration is layer by layer on
// cached hidden states: each layer runs once dense for its statistics, and once pruned to carry the hidden
// states to the next. Permutations: the attention output Linear with V's rows within heads (query heads
// sharing a V head share one permutation), the FFN output Linear with gate's and up's rows (SwiGLU pairs
// them); the others read the residual stream and stay unpermuted.
//
// Layer by layer as it is read: the loader hands each layer over (DecoderLoadOptions::on_layer) and the
// pruner takes its Linears, so only one layer is ever in fp32; the weights keep their stored dtype (a bf16
// checkpoint's pruned values are bf16). In place of `dir` (read_hf_dir), or from directory DIR straight
// into OUT_DIR (which must not exist) in layout `to`: DIR mapped, never read whole, one shard written per
// layer (its norms and any Linear already 2:4 as stored), the embeddings, final norm and head in a last one,
// every other file of DIR and `files` carried along (hf_dir.h: HfDirWriter) — a model of 8B parameters is
// pruned in the memory of a few layers.
PruneModelReport prune_hf_decoder(HfDir& dir, const PruneModelOptions& options);
PruneModelReport prune_hf_decoder(const std::string& dir, const std::string& out_dir, CheckpointFormat to,
                                  const PruneModelOptions& options,
                                  const std::map<std::string, std::string>& files = {});

// A GGUF decoder pruned the same way, a layer at a time, into the Hugging Face directory OUT_DIR
// (decoder.h: GgufCheckpoint; no converted directory in between): the Linears' and other tensors' values in
// their GGUF type when it is F32, F16 or BF16, in bf16 when it is quantized (the dequantized values); the
// config and tokenizer files as `convert MODEL.gguf DIR` writes them.
PruneModelReport prune_gguf_decoder(const std::string& gguf_path, const std::string& out_dir,
                                    CheckpointFormat to, const PruneModelOptions& options);

// A model directory or file pruned into OUT_DIR (which must not exist) in layout `to`: a Hugging Face encoder
// (read whole, prune_hf_encoder, written) or decoder directory (prune_hf_decoder, a layer at a time), or a
// GGUF decoder (prune_gguf_decoder). What `sparse24 prune-model` and Python's sparse24.prune_model run;
// nothing is left at OUT_DIR on an error (including one thrown by options.progress, which is how a caller
// stops it).
PruneModelReport prune_model(const std::string& model, const std::string& out_dir, CheckpointFormat to,
                             const PruneModelOptions& options);

}  // namespace sparse24::engine
