// ModelBuilder: the one way a Model is made. The workflow-export loader, the synthetic BERT and the Hugging
// Face encoder loaders all add ops through it; it checks that shapes flow from op to op and that sizes stay
// within bounds, so a loader only maps its format's names and parameters onto these calls.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sparse24/engine.h"

namespace sparse24::engine {

// One GEMM whose rows are the given GEMMs' rows in order (e.g. Q, K and V as one [3H, H] GEMM): 2:4 when
// all of them are, else dense. Same K and epilogue required, and a bias on all of them or none.
Gemm concat_rows(std::string name, const std::vector<const Gemm*>& parts);

class ModelBuilder {
 public:
  explicit ModelBuilder(std::string name);

  // The input: float samples of shape [rows, h, w] (h = w = 1 for feature vectors), or token ids.
  int float_input(TensorShape s);
  int token_input(int64_t vocab, int64_t max_sequence);
  const TensorShape& shape(int t) const { return m_.tensors.at(t); }

  // Y = epilogue(W X + bias) for x with g.k rows; every column alike.
  int gemm(int x, Gemm g);
  // im2col (reduction order ky, kx, in) then the GEMM; g.k = kernel * kernel * channels of x.
  int conv2d(int x, Gemm g, int64_t kernel, int64_t stride, int64_t padding);
  // The GEMM that produced t when it is the last op so far and has no epilogue yet (its output can still
  // absorb a per-row scale, a bias or an activation), else null.
  Gemm* open_gemm(int t);
  // Fused into the GEMM before it when that GEMM is open, else an op.
  int relu(int x);
  int affine(int x, std::vector<float> scale, std::vector<float> shift);
  int maxpool(int x, int64_t kernel);  // stride = kernel
  int flatten(int x);                  // an image to one feature vector per sample
  // LayerNorm over the rows of each column of x (+ residual, when >= 0).
  int layer_norm(int x, int residual, std::vector<float> gamma, std::vector<float> beta, float eps);
  // qkv: [3 * hidden] rows (Q, K, V); the output has hidden rows.
  int attention(int qkv, int64_t heads, RelativeBias bias = {});
  // Token ids -> word[id] + positions[i + position_offset] for token i of its sequence; tables row-major
  // [vocab, hidden] and [positions, hidden]; the word table in `word` or (word empty) left where it is
  // stored, `stored_word`.
  int embed(int ids, int64_t hidden, std::vector<float> word, StoredRows stored_word,
            std::vector<float> positions, int64_t position_offset);
  int pool(int x, PoolMode mode);  // one column per sequence
  int l2norm(int x);

  // Checks the whole model and hands it over.
  Model finish(int output, std::string fingerprint);

 private:
  int tensor(TensorShape s);
  int op(Op o);
  Model m_;
};

}  // namespace sparse24::engine
