#include "builder.h"

#include <utility>

#include "sparse24/compressed.h"
#include "sparse24/error.h"

namespace sparse24::engine {
namespace {

constexpr int64_t kMaxRows = int64_t{1} << 20;
constexpr int64_t kMaxSampleSize = int64_t{1} << 28;  // elements of one tensor per sample

}  // namespace

Gemm concat_rows(std::string name, const std::vector<const Gemm*>& parts) {
  Gemm g;
  g.name = std::move(name);
  g.k = parts.at(0)->k;
  g.epilogue = parts[0]->epilogue;
  g.pruned = true;
  for (const Gemm* p : parts) {
    if (p->k != g.k || p->epilogue != g.epilogue || p->bias.empty() != parts[0]->bias.empty() ||
        (!p->bias.empty() && p->bias.size() != static_cast<size_t>(p->m)))
      throw Error("layer '" + g.name + "': parts of different shapes");
    g.m += p->m;
    g.pruned = g.pruned && p->pruned;
    if (p->pruned &&
        (p->sparse.dtype != parts[0]->sparse.dtype || p->sparse.scale_group != parts[0]->sparse.scale_group))
      throw Error("layer '" + g.name + "': 2:4 parts of different types");
  }
  // Each array grown once (inserted part by part, the joined 2:4 values were copied again per part).
  size_t values = 0, metadata = 0, scales = 0;
  for (const Gemm* p : parts) {
    values += p->sparse.values.size();
    metadata += p->sparse.metadata.size();
    scales += p->sparse.scales.size();
  }
  if (g.pruned) {
    g.sparse.values.reserve(values);
    g.sparse.metadata.reserve(metadata);
    g.sparse.scales.reserve(scales);
  } else {
    g.dense.reserve(static_cast<size_t>(g.m * g.k));
  }
  for (const Gemm* p : parts) {
    g.sources.insert(g.sources.end(), p->sources.begin(), p->sources.end());
    g.bias.insert(g.bias.end(), p->bias.begin(), p->bias.end());
    if (g.pruned) {
      g.sparse.values.insert(g.sparse.values.end(), p->sparse.values.begin(), p->sparse.values.end());
      g.sparse.metadata.insert(g.sparse.metadata.end(), p->sparse.metadata.begin(), p->sparse.metadata.end());
      g.sparse.scales.insert(g.sparse.scales.end(), p->sparse.scales.begin(), p->sparse.scales.end());
    } else {
      if (p->pruned) {
        const std::vector<float> w = decompress(p->sparse).to_float();
        g.dense.insert(g.dense.end(), w.begin(), w.end());
      } else {
        g.dense.insert(g.dense.end(), p->dense.begin(), p->dense.end());
      }
    }
  }
  if (g.pruned) {
    g.sparse.dtype = parts[0]->sparse.dtype;
    g.sparse.scale_group = parts[0]->sparse.scale_group;
    g.sparse.rows = g.m;
    g.sparse.cols = g.k;
    g.sparse.shape = {g.m, g.k};
  }
  return g;
}

ModelBuilder::ModelBuilder(std::string name) { m_.name = std::move(name); }

int ModelBuilder::tensor(TensorShape s) {
  if (s.rows <= 0 || s.h <= 0 || s.w <= 0 || s.rows > kMaxRows || s.rows * s.h * s.w > kMaxSampleSize)
    throw Error("model '" + m_.name + "': tensor size out of range");
  m_.tensors.push_back(s);
  return static_cast<int>(m_.tensors.size()) - 1;
}

int ModelBuilder::op(Op o) {
  m_.ops.push_back(std::move(o));
  return m_.ops.back().out;
}

int ModelBuilder::float_input(TensorShape s) {
  if (!m_.tensors.empty()) throw Error("model '" + m_.name + "': the input must come first");
  m_.input_shape = {s.rows};
  if (s.h * s.w > 1) m_.input_shape = {s.rows, s.h, s.w};
  s.tokens = false;
  return tensor(s);
}

int ModelBuilder::token_input(int64_t vocab, int64_t max_sequence) {
  if (!m_.tensors.empty()) throw Error("model '" + m_.name + "': the input must come first");
  if (vocab <= 0 || vocab > (int64_t{1} << 24) || max_sequence <= 0 || max_sequence > (int64_t{1} << 20))
    throw Error("model '" + m_.name + "': vocabulary or sequence length out of range");
  m_.token_input = true;
  m_.vocab = vocab;
  m_.max_sequence = max_sequence;
  m_.input_shape = {1};
  return tensor({1, 1, 1, true});
}

int ModelBuilder::gemm(int x, Gemm g) {
  const TensorShape s = shape(x);
  if (g.k != s.rows)
    throw Error("layer '" + g.name + "' expects " + std::to_string(g.k) + " inputs, gets " +
                std::to_string(s.rows));
  if (!g.bias.empty() && static_cast<int64_t>(g.bias.size()) != g.m)
    throw Error("layer '" + g.name + "': bias size mismatch");
  Op o;
  o.kind = OpKind::kGemm;
  o.in = x;
  o.out = tensor({g.m, s.h, s.w, s.tokens});
  m_.gemms.push_back(std::move(g));
  o.gemm = static_cast<int>(m_.gemms.size()) - 1;
  return op(std::move(o));
}

int ModelBuilder::conv2d(int x, Gemm g, int64_t kernel, int64_t stride, int64_t padding) {
  const TensorShape s = shape(x);
  if (s.tokens || kernel <= 0 || stride <= 0 || padding < 0 || s.h + 2 * padding < kernel ||
      s.w + 2 * padding < kernel)
    throw Error("conv2d '" + g.name + "': kernel larger than its input");
  if (g.k != kernel * kernel * s.rows)
    throw Error("conv2d '" + g.name + "' expects an image of " + std::to_string(g.k / (kernel * kernel)) +
                " channels");
  Op col;
  col.kind = OpKind::kIm2col;
  col.in = x;
  col.kernel = kernel;
  col.stride = stride;
  col.padding = padding;
  col.out =
      tensor({g.k, (s.h + 2 * padding - kernel) / stride + 1, (s.w + 2 * padding - kernel) / stride + 1});
  return gemm(op(std::move(col)), std::move(g));
}

Gemm* ModelBuilder::open_gemm(int t) {
  if (m_.ops.empty() || m_.ops.back().kind != OpKind::kGemm || m_.ops.back().out != t) return nullptr;
  Gemm& g = m_.gemms[m_.ops.back().gemm];
  return g.epilogue == Epilogue::kNone ? &g : nullptr;
}

int ModelBuilder::relu(int x) {
  if (Gemm* g = open_gemm(x)) {
    g->epilogue = Epilogue::kRelu;
    return x;
  }
  Op o;
  o.kind = OpKind::kRelu;
  o.in = x;
  o.out = tensor(shape(x));
  return op(std::move(o));
}

int ModelBuilder::affine(int x, std::vector<float> scale, std::vector<float> shift) {
  const TensorShape s = shape(x);
  if (static_cast<int64_t>(scale.size()) != s.rows || static_cast<int64_t>(shift.size()) != s.rows)
    throw Error("model '" + m_.name + "': affine size mismatch");
  Op o;
  o.kind = OpKind::kAffine;
  o.in = x;
  o.scale = std::move(scale);
  o.shift = std::move(shift);
  o.out = tensor(s);
  return op(std::move(o));
}

int ModelBuilder::maxpool(int x, int64_t kernel) {
  const TensorShape s = shape(x);
  if (s.tokens || kernel <= 0 || s.h < kernel || s.w < kernel)
    throw Error("maxpool2d needs an image at least as large as its kernel");
  Op o;
  o.kind = OpKind::kMaxPool;
  o.in = x;
  o.kernel = o.stride = kernel;
  o.out = tensor({s.rows, s.h / kernel, s.w / kernel});
  return op(std::move(o));
}

int ModelBuilder::flatten(int x) {
  const TensorShape s = shape(x);
  if (s.tokens) throw Error("model '" + m_.name + "': flatten of a token tensor");
  if (s.h * s.w == 1) return x;  // already one column per sample
  Op o;
  o.kind = OpKind::kFlatten;
  o.in = x;
  o.out = tensor({s.rows * s.h * s.w, 1, 1});
  return op(std::move(o));
}

int ModelBuilder::layer_norm(int x, int residual, std::vector<float> gamma, std::vector<float> beta,
                             float eps) {
  const TensorShape s = shape(x);
  if (residual >= 0) {
    const TensorShape& r = shape(residual);
    if (r.rows != s.rows || r.h != s.h || r.w != s.w || r.tokens != s.tokens)
      throw Error("model '" + m_.name + "': residual shape mismatch");
  }
  if (static_cast<int64_t>(gamma.size()) != s.rows || static_cast<int64_t>(beta.size()) != s.rows)
    throw Error("model '" + m_.name + "': layer norm size mismatch");
  if (!(eps > 0.0f && eps < 1.0f)) throw Error("model '" + m_.name + "': layer norm eps out of range");
  Op o;
  o.kind = OpKind::kLayerNorm;
  o.in = x;
  o.in2 = residual;
  o.scale = std::move(gamma);
  o.shift = std::move(beta);
  o.eps = eps;
  o.out = tensor(s);
  return op(std::move(o));
}

int ModelBuilder::attention(int qkv, int64_t heads, RelativeBias bias) {
  const TensorShape s = shape(qkv);
  if (heads <= 0 || s.rows % 3 != 0 || (s.rows / 3) % heads != 0)
    throw Error("model '" + m_.name + "': attention rows do not split into Q, K, V of whole heads");
  if (bias.buckets != 0 &&
      (bias.buckets < 2 || bias.buckets > 1024 || bias.max_distance < 1 || bias.max_distance > (1 << 20) ||
       static_cast<int64_t>(bias.table.size()) != bias.buckets * heads))
    throw Error("model '" + m_.name + "': bad relative attention bias");
  Op o;
  o.kind = OpKind::kAttention;
  o.in = qkv;
  o.heads = heads;
  o.bias = std::move(bias);
  o.out = tensor({s.rows / 3, s.h, s.w, s.tokens});
  return op(std::move(o));
}

int ModelBuilder::embed(int ids, int64_t hidden, std::vector<float> word, StoredRows stored_word,
                        std::vector<float> positions, int64_t position_offset) {
  if (!m_.token_input || ids != 0) throw Error("model '" + m_.name + "': embed reads the token input");
  const bool stored = !stored_word.empty();
  if (hidden <= 0 ||
      (stored ? !word.empty() || stored_word.rows != m_.vocab || stored_word.cols != hidden
              : static_cast<int64_t>(word.size()) != m_.vocab * hidden) ||
      static_cast<int64_t>(positions.size()) != (m_.max_sequence + position_offset) * hidden ||
      position_offset < 0)
    throw Error("model '" + m_.name + "': embedding table size mismatch");
  Op o;
  o.kind = OpKind::kEmbed;
  o.in = ids;
  o.table = std::move(word);
  o.stored_table = std::move(stored_word);
  o.positions = std::move(positions);
  o.position_offset = position_offset;
  o.out = tensor({hidden, 1, 1, true});
  return op(std::move(o));
}

int ModelBuilder::pool(int x, PoolMode mode) {
  const TensorShape s = shape(x);
  if (!s.tokens) throw Error("model '" + m_.name + "': pooling needs a token tensor");
  Op o;
  o.kind = OpKind::kPool;
  o.in = x;
  o.pool = mode;
  o.out = tensor({s.rows, 1, 1, false});
  return op(std::move(o));
}

int ModelBuilder::l2norm(int x) {
  Op o;
  o.kind = OpKind::kL2Norm;
  o.in = x;
  o.out = tensor(shape(x));
  return op(std::move(o));
}

Model ModelBuilder::finish(int output, std::string fingerprint) {
  m_.output = output;
  m_.fingerprint = std::move(fingerprint);
  m_.check();
  return std::move(m_);
}

}  // namespace sparse24::engine
