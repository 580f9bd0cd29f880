// Whole checkpoints (one safetensors file of named tensors) in three layouts, and conversion between them:
//
//   dense              every tensor as it is;
//   sparse24           per compressed weight <name>: tensors "<name>.values" (weight dtype, [rows, 2G]) and
//                      "<name>.metadata" (U8, [rows, ceil(G/2)]) of the compressed 2:4 format (compressed.h),
//                      and in __metadata__ "<name>.shape" = the dense shape ("[4096, 11008]"); the marker
//                      keys "sparse24.format" = "checkpoint" and "sparse24.pattern" = "2:4"; a dense I8
//                      matrix <name> with fp32 scales: tensor "<name>.scales" and "<name>.scale_group"
//                      in __metadata__; every other tensor as it is;
//   sparse-24-bitmask  compressed-tensors' layout (bitmask24.h): per weight "<prefix>.weight", the tensors
//                      "<prefix>.compressed", "<prefix>.bitmask", "<prefix>.shape"; every other tensor as it
//                      is.
//
// Reading accepts any mix of the three in one file. Writers lay the tensors out in the order the reference
// safetensors writer uses (descending dtype alignment, then name), so the file is the one it would write.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/io.h"

namespace sparse24 {

enum class CheckpointFormat { kDense, kSparse24, kBitmask24 };
// "dense", "sparse24", "sparse-24-bitmask"; throws Error naming the text otherwise.
CheckpointFormat parse_checkpoint_format(const std::string& text);
const char* checkpoint_format_name(CheckpointFormat f);

struct CheckpointTensor {
  std::string name;                  // the dense tensor's name, e.g. "model.layers.0.mlp.up_proj.weight"
  StTensor dense;                    // when !sparse
  std::optional<Compressed> sparse;  // a compressed 2:4 weight
  // A dense I8 matrix [rows, cols] with fp32 scales (prune-model --int8's embeddings and head; stored only in
  // the sparse24 layout): element (r, k) is dense (r, k) * scales[r * ceil(cols / scale_group) + k /
  // scale_group]. scale_group 0: none.
  int64_t scale_group = 0;
  std::vector<float> scales{};
  // > 0: the 2:4 weight (int8 with a scale per 64 positions) is stored in the sparse24 layout in the kernels'
  // memory-bound layout, K blocks of this many positions (prune-model --int8's Linears; docs/formats.md),
  // which a decoder runs in place. Read back, `sparse` holds the matrix as usual.
  int lanes_kb = 0;
};
// A dense tensor's values as F32: a scaled I8 one's dequantized, any other's as they are (a copy).
StTensor dequantized(const CheckpointTensor& t);
// Rows [r0, r0 + n) of a scaled I8 matrix of `cols` columns as floats into out: q holds those rows' bytes,
// `scales` the whole matrix's F32 scales as stored (ceil(cols / group) a row; unaligned allowed).
void dequantize_rows(const uint8_t* q, std::span<const uint8_t> scales, int64_t r0, int64_t n, int64_t cols,
                     int64_t group, float* out);

struct Checkpoint {
  std::map<std::string, std::string> metadata;  // __metadata__ without the sparse24 layout's own keys
  std::vector<CheckpointTensor> tensors;        // in file order

  const CheckpointTensor* find(const std::string& name) const;
  int64_t sparse_count() const;
};

// The same checkpoint read in place: dense tensors are views into the file's bytes (they live as long as
// the buffer `st` views), 2:4 layers decoded.
struct CheckpointTensorView {
  std::string name;
  StTensorView dense;                // when not 2:4
  std::optional<Compressed> sparse;  // a compressed 2:4 weight
  // Or a sparse24 layer left in the file (read_checkpoint_view's defer_sparse24): its shape checked,
  // decode() reads and validates it (the eager read's errors), from the bytes `stored` spans;
  // stored_layer() checks its tensors (decode's errors about them) and leaves them where they are, for a
  // loader that copies them into weights of its own (validating them: validate_rows).
  std::function<Compressed()> decode;
  std::function<StoredCompressed()> stored_layer;
  std::vector<std::span<const uint8_t>> stored;
  // A dense I8 matrix's fp32 scales (CheckpointTensor's; checked: shape, every one finite), as stored.
  int64_t scale_group = 0;
  std::span<const uint8_t> scales{};
  // A 2:4 weight stored in the kernels' layout (CheckpointTensor::lanes_kb): its bytes as stored (size
  // checked; decode() checks and unpacks them), for a loader that runs them in place.
  int lanes_kb = 0;
  std::span<const uint8_t> lanes{};
  std::vector<int64_t> lanes_shape{};  // its dense shape
  DType lanes_dtype = DType::kI8;      // its values' type: kF32, kBF16 or kI8 (with scales)
  bool is_sparse() const { return sparse.has_value() || decode != nullptr; }
  // The tensor with its dense bytes copied out (the 2:4 weight moved, or decoded).
  CheckpointTensor copy() &&;
};
struct CheckpointView {
  std::map<std::string, std::string> metadata;
  std::vector<CheckpointTensorView> tensors;  // in file order
};

// Decodes every sparse24 and sparse-24-bitmask layer (validating each completely) and leaves the rest in
// place (read_checkpoint_view) or copies it (read_checkpoint). Errors "<what>: ..." name the layer and the
// problem.
// defer_sparse24: sparse24 layers are left in place to decode when asked for (CheckpointTensorView::decode;
// it reads from st's bytes, which must outlive it), so that a loader holds one layer decoded at a time.
CheckpointView read_checkpoint_view(const SafeTensorsView& st, const std::string& what,
                                    bool defer_sparse24 = false);
Checkpoint read_checkpoint(const SafeTensorsView& st, const std::string& what);
Checkpoint load_checkpoint(const std::string& path);  // memory-mapped

// The file in layout `to`. Scaled I8 tensors stay so in kSparse24 and are dequantized (F32) in the others.
// For kBitmask24, a sparse weight the layout cannot hold (not 2-D, columns not a multiple of 4, or a name not
// ending in ".weight") is written dense; kDense writes every weight dense.
SafeTensors encode_checkpoint(const Checkpoint& ck, CheckpointFormat to);
// True when encode_checkpoint(.., kBitmask24) keeps `t` compressed.
bool bitmask24_keeps_sparse(const CheckpointTensor& t);
// The 2:4 weights of `ck` that encode_checkpoint(ck, to) stores compressed.
int64_t stored_sparse(const Checkpoint& ck, CheckpointFormat to);
// Sorts tensors like the reference writer: descending dtype alignment (U64 I64 F64 F32 U32 I32 BF16 F16 U16
// I16 F8_E4M3 F8_E5M2 I8 U8 BOOL), then name (bytewise).
void sort_like_reference(SafeTensors& st);

// Which dense tensors become sparse: floating (F32/F16/BF16) weights named "*.weight" of rank 2, or rank 4
// (conv) unless `rank2_only`, whose name matches `targets` (ECMAScript regex, searched anywhere in the name;
// empty = all but embedding tables, names like *embed*.weight, wte, wpe, and a language model's output head,
// lm_head.weight) and that are already 2:4 — or, with
// `prune`, magnitude-pruned to 2:4.
struct SparsifyOptions {
  bool prune = false;
  std::string targets;
  bool rank2_only = false;  // sparse-24-bitmask holds only 2-D weights with columns a multiple of 4
};
struct SparsifyReport {
  std::vector<std::string> compressed;   // already 2:4
  std::vector<std::string> pruned;       // pruned to 2:4 (with prune)
  std::vector<std::string> skipped;      // candidates left dense, with the reason: "name: reason"
  void append(const SparsifyReport& r);  // r's lists after these (a checkpoint done in parts)
};
SparsifyReport sparsify(Checkpoint& ck, const SparsifyOptions& opts);
// Expands every sparse weight to its dense tensor, and dequantizes every scaled I8 one (F32).
void densify(Checkpoint& ck);
// What `sparse24 convert` does to weights about to be written in layout `to`: kDense expands every 2:4
// weight (densify); the 2:4 layouts keep the 2:4 ones and compress the candidates (sparsify: `targets`)
// that are 2:4 already, or with `prune` magnitude-prune them (sparse-24-bitmask: 2-D ones only).
struct ConvertOptions {
  CheckpointFormat to = CheckpointFormat::kDense;
  bool prune = false;
  std::string targets;
};
SparsifyReport convert_weights(Checkpoint& ck, const ConvertOptions& o);
// Fraction of zero elements (by value) over all floating tensors, sparse ones included; zero_count gives
// the two counts (zero elements, all elements) for totals over several checkpoints.
double zero_fraction(const Checkpoint& ck);
std::pair<double, double> zero_count(const Checkpoint& ck);

}  // namespace sparse24
