// The language model of the LM experiment (lm.h): King James Bible text and its split, a pre-LayerNorm
// decoder-only transformer over bytes, training, perplexity, and the function-preserving channel
// permutations.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "train/lm.h"

namespace sparse24::train {

// ---- Data ------------------------------------------------------------------------------------------------

// The text split by whole books. Verse references are stripped: each verse's text is one line ending in
// '\n', books follow each other in canonical order. Validation = every book whose index (0 = Genesis) is
// 9 modulo 11: 2 Samuel, Ecclesiastes, Jonah, John, 1 Timothy, Jude (about 6% of the text).
struct KjvSplit {
  std::string train, valid;
  std::vector<std::string> train_books, valid_books;  // book names as the references spell them ("2Sm")
  int64_t verses = 0;
};

// Parses `bible -f` output ("<Book><chapter>:<verse> <text>" per line; the book is an optional digit 1-3
// then letters). Throws Error naming the line number of a malformed line, or if there are no verses.
KjvSplit split_kjv(const std::string& raw);
// The raw text: `program -f Gen1:1-Rev22:21` when `file` is empty, else the file's content.
std::string read_kjv(const std::string& program, const std::string& file);
// 64-bit FNV-1a of the bytes (cache fingerprints).
uint64_t fnv1a(const std::string& s);

// ---- Model -----------------------------------------------------------------------------------------------

// Inputs of a block's four Linear layers, [tokens, in_features] (filled by forward when requested).
struct BlockInputs {
  torch::Tensor qkv, proj, up, down;
};

class LmBlockImpl : public torch::nn::Module {
 public:
  explicit LmBlockImpl(const LmConfig& c);
  // x: [batch, T, d_model]. With `inputs`, stores each Linear's input (detached, flattened).
  torch::Tensor forward(const torch::Tensor& x, BlockInputs* inputs = nullptr);

  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, up{nullptr}, down{nullptr};
  int64_t heads = 1;
};
TORCH_MODULE(LmBlock);

class LmImpl : public torch::nn::Module {
 public:
  explicit LmImpl(const LmConfig& c);
  // tokens: int64 [batch, T <= context] -> logits [batch, T, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);
  torch::Tensor embed(const torch::Tensor& tokens);   // token + position embedding, [batch, T, d_model]
  torch::Tensor head_logits(const torch::Tensor& x);  // final LayerNorm + LM head

  LmConfig config;
  torch::nn::Embedding tok{nullptr};
  torch::Tensor pos;  // [context, d_model]
  std::vector<LmBlock> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Lm);

// Names of the Linear layers that are pruned: blocks.<i>.{qkv,proj,up,down}. The embeddings, LayerNorms and
// the LM head stay dense.
std::vector<std::string> prunable_layers(const LmConfig& c);
// The four pruned Linears of a block, in prunable_layers() order.
inline constexpr const char* kLmLayerKinds[] = {"qkv", "proj", "up", "down"};

// Bytes per training window: context + 1 without BOS (inputs are bytes 0..T-1, targets 1..T), context with
// BOS (inputs BOS and bytes 0..T-2, targets 0..T-1).
int64_t window_bytes(const LmConfig& c);
// Splits windows [n, window_bytes(c)] into inputs and targets, both [n, context].
void split_window(const LmConfig& c, const torch::Tensor& windows, torch::Tensor& inputs,
                  torch::Tensor& targets);

// ---- Training and evaluation -----------------------------------------------------------------------------

// Makes OpenBLAS (libtorch's BLAS here) single-threaded and then sets libtorch's intra-op threads. Attention
// runs thousands of small per-head GEMMs per step (torch's bmm loops over the batch); a threaded OpenBLAS
// synchronises its threads on every one of them, which dominated a step on a busy 2-core machine. Large
// GEMMs lose their second thread; elementwise ops, softmax and LayerNorm keep both (libtorch's OpenMP).
// A no-op for the BLAS part when the process has no openblas_set_num_threads.
void set_lm_threads(int threads);

// The bytes of a text as int64 tokens.
torch::Tensor to_tokens(const std::string& text);

// `count` windows of length `len` starting at deterministic pseudo-random offsets drawn from (seed, stream):
// int64 [count, len].
torch::Tensor sample_windows(const torch::Tensor& tokens, int64_t count, int64_t len, uint64_t seed,
                             uint64_t stream);

struct LmTrainOptions {
  int64_t steps = 100, batch = 32;
  double lr = 2e-3, weight_decay = 0.1, clip = 1.0;
  int64_t warmup = 0;     // 0 = steps / 20
  int64_t log_every = 0;  // steps per progress line; 0 = steps / 10
  uint64_t seed = 1;      // batch b of the run is sample_windows(train, batch, context + 1, seed, b)
  std::string label = "train";
  std::FILE* log = stdout;
  const torch::Tensor* valid = nullptr;  // when set, a progress line reports ppl on its first 16 windows
};

class MaskSet;
// AdamW (decay on Linear weights only), linear warm-up then cosine decay to lr/10, gradient clipping. With
// `masks`, gradients are masked before and weights after each step (masks.h). Returns mean loss of the
// last log_every steps.
double train_lm(Lm& lm, const torch::Tensor& train_tokens, const LmTrainOptions& o, MaskSet* masks);

// exp(mean cross-entropy) over non-overlapping windows of `context` tokens (each predicts its next byte;
// the last partial window included). `max_windows` > 0 limits the number of windows.
double perplexity(Lm& lm, const torch::Tensor& tokens, int64_t max_windows = 0);

// ---- Channel permutations that keep the function -------------------------------------------------------
// Each vector is a permutation in prune.h's convention (new channel c = old channel perm[c]); empty =
// identity.
struct LmPermutation {
  // The residual stream (d_model): token and position embedding columns, every LayerNorm's gamma and beta,
  // the input columns of qkv, up and the LM head, and the output rows (+ bias) of proj and down.
  std::vector<int64_t> residual;
  // Per block, the FFN hidden channels (d_ff): up's rows (+ bias) and down's input columns (GELU is
  // elementwise).
  std::vector<std::vector<int64_t>> ffn;
  // Per block, proj's input channels (d_model) permuted within each head: the V rows of qkv (+ bias) and
  // proj's columns. Entry c must stay within c's head.
  std::vector<std::vector<int64_t>> head;
};
// Applies p to the parameters in place. Throws Error on a vector that is not a permutation of the right
// length or a head permutation that crosses heads.
void permute_lm(Lm& lm, const LmPermutation& p);

}  // namespace sparse24::train

namespace sparse24::train {

// ---- One-shot 2:4 pruning of the blocks' Linear layers ---------------------------------------------------

enum class LmMethod { kMagnitude, kWanda, kSparseGpt };

struct LmPruneOptions {
  LmMethod method = LmMethod::kMagnitude;
  // Permute channels first (permute_lm), searched with prune.h's search_permutation on |W| (magnitude) or
  // on the Wanda score |W| * ||X_j|| of the dense model (Wanda, SparseGPT).
  bool permute = false;
  double permutation_seconds = 1;        // budget per search
  uint64_t permutation_evaluations = 0;  // work budget per search (PermutationOptions::max_evaluations)
  uint64_t seed = 1;
};

struct LmPruneStats {
  double seconds = 0;
  // Sums over the permutation searches (in the units of the searched matrix): kept by 2:4 without and with
  // the permutation, and by unstructured 50%.
  double kept_identity = 0, kept_permuted = 0, kept_unstructured = 0;
  int searches = 0;
};

// Prunes every layer of prunable_layers() to 2:4 in place. Wanda and SparseGPT run layer by layer in
// forward order: each layer's calibration inputs come from the model whose earlier layers are already
// pruned. `calibration` is int64 [sequences, T]. Checks that every pruned weight is 2:4 (throws Error).
LmPruneStats prune_lm(Lm& lm, const torch::Tensor& calibration, const LmPruneOptions& o);

}  // namespace sparse24::train
