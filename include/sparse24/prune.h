// One-shot 2:4 pruning beyond magnitude: input-channel permutations, Wanda and SparseGPT.
//
// Matrices are row-major float [rows, cols], cols = the reduction dimension (a Linear layer's
// [out_features, in_features] weight); 2:4 groups run along cols. Calibration statistics come from the
// layer's inputs: X is [tokens, cols] row-major (one row per calibration token).
#pragma once
#include <cstdint>
#include <vector>

#include "sparse24/mask.h"

namespace sparse24 {

// ---- Channel permutations (as NVIDIA's ASP): reorder the input channels so 2:4 keeps more magnitude.
// A permutation `perm` of length cols means: permuted column c is original column perm[c]. Apply it to the
// layer's weight columns and to the producing layer's output channels (rows and bias), and the network
// computes the same function.

// cols must be a multiple of 4 (a stripe = 4 adjacent permuted columns = one 2:4 group in every row).
enum class PermutationMethod {
  kAuto,        // stripe-group search, then `escape_attempts` random perturbations (a cycle of 4 columns
                // through 4 stripes), each followed by the stripe-group search again; keeps the best.
                // Wider than 128 columns: the same on windows of 32 random stripes, round after round,
                // so the time budget never loses finished work (docs/design.md)
  kExhaustive,  // stripe-group search only: greedy best-improvement over groups of stripes until no group of
                // `stripe_group` columns can be split better into 2:4 groups
  kSwap,        // channel swap search only: greedy best single-column swap between two stripes (the
                // cheapest to evaluate, for wide layers)
};

struct PermutationOptions {
  PermutationMethod method = PermutationMethod::kAuto;
  int stripe_group = 8;      // columns per exhaustive stripe group: 8 (35 splits per pair of stripes) or 12
                             // (5775 splits per triple; slow beyond ~128 columns)
  double max_seconds = 1.0;  // wall-clock budget; the best permutation found so far is returned
  // Work budget (0: none): the search stops at its first check with at least this many split evaluations
  // done (one evaluation: a group of stripe_group columns, every split of it scored over all rows). Unlike
  // max_seconds it stops at the same point on every machine: with it reached first, the result depends
  // only on the weights and these options.
  uint64_t max_evaluations = 0;
  uint64_t seed = 1;          // deterministic for a given seed unless max_seconds is reached
  int escape_attempts = 300;  // kAuto only: random perturbations tried to leave local optima
};

struct PermutationResult {
  std::vector<int64_t> perm;     // length cols
  double kept_identity = 0;      // sum |w| kept by 2:4 magnitude without permutation
  double kept_permuted = 0;      // ... with the permutation
  double kept_unstructured = 0;  // bound: the largest 50% of |w| in each row (ASP's "50% rows"; the
                                 // unstructured 50% of the whole matrix can be larger, but no
                                 // permutation reaches it, since every row keeps exactly cols/2)
  double seconds = 0;
  uint64_t evaluations = 0;    // split evaluations done (the unit of max_evaluations)
  bool stopped_early = false;  // a budget (max_seconds or max_evaluations) ended the search
  // Share of the gap recovered: (permuted - identity) / (unstructured - identity); 0 if there is no gap.
  double recovered() const;
};

// Every method stops early at max_seconds or max_evaluations. Throws Error on NaN or infinite weights, cols
// not a positive multiple of 4, rows < 1, or bad options.
PermutationResult search_permutation(const float* w, int64_t rows, int64_t cols,
                                     const PermutationOptions& options = {});

// Sum |w| kept by 2:4 magnitude after permuting the columns by perm (the scalar reference the search is
// checked against; double accumulation). cols must be a multiple of 4.
double kept_after_permutation(const float* w, int64_t rows, int64_t cols, const std::vector<int64_t>& perm);

// Permutes columns of w in place: new column c = old column perm[c]. Throws Error if perm is not a
// permutation of 0..cols-1.
void permute_columns(float* w, int64_t rows, int64_t cols, const std::vector<int64_t>& perm);
// Permutes rows of w in place (the producing layer's output channels): new row r = old row perm[r].
void permute_rows(float* w, int64_t rows, int64_t cols, const std::vector<int64_t>& perm);

// ---- Wanda: score |w_ij| * ||X_:,j||_2, keep the 2 best of each group of 4 in each row.
// Column L2 norms of X [tokens, cols] (double accumulation).
std::vector<float> column_norms(const float* x, int64_t tokens, int64_t cols);
Mask wanda_mask(const float* w, int64_t rows, int64_t cols, const std::vector<float>& norms);

// ---- SparseGPT: prune to 2:4 with second-order weight updates.
// H = 2/n X^T X accumulated over calibration batches (cols x cols, double).
class Hessian {
 public:
  explicit Hessian(int64_t cols);
  void add(const float* x, int64_t tokens);  // x: [tokens, cols]
  int64_t cols() const { return cols_; }
  int64_t samples() const { return n_; }
  std::vector<double> matrix() const;  // 2/n X^T X, row-major [cols, cols]
  // The L2 norm of each column of the samples (Wanda's norms, from the same sums).
  std::vector<float> column_norms() const;
  // The Hessian of the same samples with their columns permuted: new column c = old column perm[c]. Throws
  // Error if perm is not a permutation of 0..cols-1.
  Hessian permuted(const std::vector<int64_t>& perm) const;

 private:
  int64_t cols_ = 0, n_ = 0;
  std::vector<double> sum_;  // running sum of X^T X
};

struct SparseGptOptions {
  double dampening = 0.01;  // lambda = dampening * mean(diag H), added to the diagonal
  int block_size = 128;     // columns per lazy-update block
};

// Prunes w [rows, cols] in place to 2:4 and updates the kept weights to compensate (OBS): per block of
// 128 columns, for each group of 4 columns choose the 2 with the smallest w^2 / [H^-1]_jj^2 per row,
// then propagate each column's error to the remaining columns. Dead inputs (H_jj = 0) are pruned first.
// Returns the mask. Throws Error if H is not positive definite even after dampening.
Mask sparsegpt_prune(float* w, int64_t rows, int64_t cols, const Hessian& h,
                     const SparseGptOptions& options = {});

}  // namespace sparse24
