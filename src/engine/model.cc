// Models: the loader for the workflow's export and the BERT encoder builder.
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "builder.h"
#include "fingerprint.h"
#include "io/model_dir.h"
#include "io/net_spec.h"
#include "kernels/convert.h"
#include "sparse24/decoder.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/pattern.h"

namespace sparse24::engine {
namespace {

// The weights file, with every tensor checked against what the architecture needs.
class WeightFile {
 public:
  explicit WeightFile(const std::string& path) : st_(path), path_(path) {}

  const StTensorView& find(const std::string& name) {
    const StTensorView* t = st_.view.find(name);
    if (t == nullptr) throw Error(path_ + ": missing tensor '" + name + "'");
    used_.insert(name);
    return *t;
  }
  std::vector<float> dense(const std::string& name, const std::vector<int64_t>& shape) {
    const StTensorView& t = find(name);
    if (t.dtype != "F32" || t.shape != shape)
      throw Error(path_ + ": tensor '" + name + "' is " + t.dtype + " " + shape_string(t.shape) +
                  ", the architecture needs F32 " + shape_string(shape));
    std::vector<float> v(t.bytes.size() / sizeof(float));
    std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
    if (!kernels::all_finite(v.data(), static_cast<int64_t>(v.size())))
      throw Error(path_ + ": tensor '" + name + "' holds a non-finite value");
    return v;
  }
  Compressed compressed(const std::string& name, const std::vector<int64_t>& shape) {
    Compressed c;
    try {
      c = compressed_from_st(st_.view, name, shape, DType::kF32);
    } catch (const Error& e) {
      throw Error(path_ + ": " + e.what());
    }
    used_.insert(name + ".values");
    used_.insert(name + ".metadata");
    if (!kernels::all_finite(reinterpret_cast<const float*>(c.values.data()), c.rows * c.values_per_row()))
      throw Error(path_ + ": tensor '" + name + ".values' holds a non-finite value");
    return c;
  }
  // Names a tensor the architecture did not use, if any.
  void check_all_used() const {
    for (const auto& [name, t] : st_.view.tensors)
      if (!used_.count(name)) throw Error(path_ + ": tensor '" + name + "' is not used by the architecture");
  }
  const MappedFile& file() const { return st_.file; }

 private:
  MappedSafeTensors st_;
  std::string path_;
  std::set<std::string> used_;
};

// A conv weight compressed as pattern.h's [out*kh*kw, in] matrix, regrouped to the GEMM's [out, kh*kw*in]
// (reduction order ky, kx, in): row o concatenates rows (o, ky, kx). Groups stay groups when in % 4 == 0.
Compressed regroup_conv(const Compressed& c, int64_t out, int64_t in, int64_t kk) {
  Compressed r;
  r.dtype = DType::kF32;
  r.rows = out;
  r.cols = kk * in;
  r.shape = {out, kk * in};
  r.values.resize(static_cast<size_t>(r.rows * r.values_per_row()) * sizeof(float));
  r.metadata.assign(static_cast<size_t>(r.rows * r.meta_bytes_per_row()), 0);
  const int64_t g_in = in / 4, v_in = in / 2;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < kk; ++j) {
      const int64_t src_row = o * kk + j;
      std::memcpy(&r.values[(o * r.values_per_row() + j * v_in) * sizeof(float)],
                  &c.values[src_row * c.values_per_row() * sizeof(float)], v_in * sizeof(float));
      for (int64_t g = 0; g < g_in; ++g) {
        const int64_t g2 = j * g_in + g;
        uint8_t& b = r.metadata[static_cast<size_t>(o * r.meta_bytes_per_row() + g2 / 2)];
        b = static_cast<uint8_t>(b | (c.code(src_row, g) << ((g2 & 1) ? 4 : 0)));
      }
    }
  return r;
}

// Dense conv weight [out, in, k, k] -> [out, (ky, kx, in)].
std::vector<float> regroup_conv_dense(const std::vector<float>& w, int64_t out, int64_t in, int64_t k) {
  std::vector<float> r(w.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c = 0; c < in; ++c)
      for (int64_t ky = 0; ky < k; ++ky)
        for (int64_t kx = 0; kx < k; ++kx)
          r[(o * k * k + ky * k + kx) * in + c] = w[((o * in + c) * k + ky) * k + kx];
  return r;
}

void scale_rows(Gemm& g, const std::vector<float>& s) {
  if (g.pruned) {
    g.sparse = to_f32(std::move(g.sparse));
    float* v = reinterpret_cast<float*>(g.sparse.values.data());
    const int64_t vpr = g.sparse.values_per_row();
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t j = 0; j < vpr; ++j) v[r * vpr + j] *= s[r];
  } else {
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t j = 0; j < g.k; ++j) g.dense[r * g.k + j] *= s[r];
  }
}

}  // namespace

SparseValues parse_sparse_values(const std::string& s) {
  if (s == "fp32") return SparseValues::kF32;
  if (s == "bf16") return SparseValues::kBf16;
  if (s == "int8") return SparseValues::kInt8;
  throw Error("2:4 weights '" + s + "': expected fp32, bf16 or int8");
}

const char* sparse_values_name(SparseValues v) {
  switch (v) {
    case SparseValues::kF32:
      return "fp32";
    case SparseValues::kBf16:
      return "bf16";
    case SparseValues::kInt8:
      return "int8";
  }
  return "?";
}

const char* sparse_activations_name(SparseActivations a) {
  return a == SparseActivations::kF32 ? "fp32" : a == SparseActivations::kBf16 ? "bf16" : "int8";
}

void set_sparse_precision(Model& m, SparseValues v, SparseActivations a) {
  if (a == SparseActivations::kBf16 && v == SparseValues::kF32)
    throw Error("bf16 activations need bf16 or int8 2:4 values");
  if (a == SparseActivations::kInt8 && v != SparseValues::kInt8)
    throw Error("int8 activations need int8 2:4 values");
  bool any = false;
  for (Gemm& g : m.gemms) {
    if (!g.pruned) continue;
    any = true;
    if (v == SparseValues::kBf16) g.sparse = to_bf16(std::move(g.sparse));
    if (v == SparseValues::kInt8 && g.sparse.dtype != DType::kI8)
      g.sparse = quantize_int8(to_f32(std::move(g.sparse)), detail::kInt8ScaleGroup);
    g.activations = a;
  }
  // Values as loaded (fp32, or bf16 from a bf16 checkpoint) and fp32 activations leave the model as it is.
  if (any && (v != SparseValues::kF32 || a != SparseActivations::kF32))
    m.fingerprint += std::string("-") + sparse_values_name(v) +
                     (a == SparseActivations::kF32 ? "" : std::string("-x") + sparse_activations_name(a));
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kIm2col:
      return "im2col";
    case OpKind::kMaxPool:
      return "maxpool";
    case OpKind::kFlatten:
      return "flatten";
    case OpKind::kRelu:
      return "relu";
    case OpKind::kAffine:
      return "affine";
    case OpKind::kLayerNorm:
      return "layernorm";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kEmbed:
      return "embed";
    case OpKind::kPool:
      return "pool";
    case OpKind::kL2Norm:
      return "l2norm";
  }
  return "?";
}

void StoredRows::row(int64_t i, float* out) const {
  const uint8_t* r = data + static_cast<size_t>(i) * row_bytes();
  if (ggml_type != kNoGgml)
    dequantize_row(static_cast<uint32_t>(ggml_type), r, out, cols);
  else
    kernels::elements_to_floats(type, r, cols, out);
}
size_t StoredRows::row_bytes() const {
  if (ggml_type == kNoGgml) return static_cast<size_t>(cols) * dtype_size(type);
  const GgmlTypeInfo* t = ggml_type_info(static_cast<uint32_t>(ggml_type));
  if (t == nullptr) throw Error("stored rows: unknown ggml type " + std::to_string(ggml_type));
  return static_cast<size_t>(cols / t->block * t->block_bytes);
}
size_t StoredRows::bytes() const { return static_cast<size_t>(rows) * row_bytes(); }

int64_t Model::input_size() const { return tensors.at(0).rows * tensors.at(0).h * tensors.at(0).w; }
int64_t Model::output_size() const {
  const TensorShape& t = tensors.at(output);
  return t.rows * t.h * t.w;
}

void Model::check() const {
  const int nt = static_cast<int>(tensors.size());
  auto bad = [&](size_t i, const std::string& what) {
    return Error("model '" + name + "': op " + std::to_string(i) + ": " + what);
  };
  if (nt == 0 || output < 0 || output >= nt) throw Error("model '" + name + "': bad output tensor");
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.in < 0 || op.in >= nt || op.out <= 0 || op.out >= nt || op.in2 >= nt || op.out == op.in ||
        op.out == op.in2)
      throw bad(i, "bad tensor id");
    const TensorShape &x = tensors[op.in], &y = tensors[op.out];
    if ((op.kind == OpKind::kEmbed) != (op.in == 0 && token_input))
      throw bad(i, "only the first op of a token model reads its ids");
    if (op.kind != OpKind::kPool && op.kind != OpKind::kEmbed && x.tokens != y.tokens)
      throw bad(i, "token and sample tensors mixed");
    if (op.kind == OpKind::kGemm) {
      if (op.gemm < 0 || op.gemm >= static_cast<int>(gemms.size())) throw bad(i, "bad gemm id");
      const Gemm& g = gemms[op.gemm];
      if (g.k != x.rows || g.m != y.rows || x.h * x.w != y.h * y.w) throw bad(i, "gemm shape mismatch");
    }
  }
}

namespace {

// What the export's layer handlers share while the model is built.
struct ExportContext {
  const model_dir::Config& config;
  WeightFile& weights;
  ModelBuilder& b;
  int t = 0;                       // the current tensor
  bool last_gemm_is_conv = false;  // a BatchNorm right after it folds into it

  Gemm gemm(const std::string& name, int64_t out, int64_t k, const std::vector<int64_t>& shape) {
    Gemm g;
    g.name = name;
    g.m = out;
    g.k = k;
    g.pruned = config.is_pruned(name + ".weight", shape);
    if (g.pruned)
      g.sparse = weights.compressed(name + ".weight", shape);
    else
      g.dense = weights.dense(name + ".weight", shape);
    g.bias = weights.dense(name + ".bias", {out});
    return g;
  }
  Error bad(const std::string& problem) const { return Error(config.path + ": " + problem); }
};

using LayerHandler = void (*)(ExportContext&, const LayerSpec&);

void linear_layer(ExportContext& c, const LayerSpec& l) {
  const TensorShape& s = c.b.shape(c.t);
  if (s.h * s.w != 1 || s.rows != l.in)
    throw c.bad("linear '" + l.name + "' expects " + std::to_string(l.in) + " inputs, gets " +
                std::to_string(s.rows * s.h * s.w) + (s.h * s.w != 1 ? " (not flattened)" : ""));
  c.t = c.b.gemm(c.t, c.gemm(l.name, l.out, l.in, {l.out, l.in}));
  c.last_gemm_is_conv = false;
}

void conv2d_layer(ExportContext& c, const LayerSpec& l) {
  const TensorShape& s = c.b.shape(c.t);
  if (s.h * s.w == 1 || s.rows != l.in)
    throw c.bad("conv2d '" + l.name + "' expects an image of " + std::to_string(l.in) + " channels");
  if (s.h + 2 * l.padding < l.kernel || s.w + 2 * l.padding < l.kernel)
    throw c.bad("conv2d '" + l.name + "' kernel larger than its input");
  const std::vector<int64_t> shape{l.out, l.in, l.kernel, l.kernel};
  Gemm g = c.gemm(l.name, l.out, l.kernel * l.kernel * l.in, shape);
  if (g.pruned) {
    if (l.in % 4 != 0)
      throw c.bad("conv2d '" + l.name + "' is pruned but its input channels are not a multiple of 4");
    g.sparse = regroup_conv(g.sparse, l.out, l.in, l.kernel * l.kernel);
  } else {
    g.dense = regroup_conv_dense(g.dense, l.out, l.in, l.kernel);
  }
  c.t = c.b.conv2d(c.t, std::move(g), l.kernel, l.stride, l.padding);
  c.last_gemm_is_conv = true;
}

void batchnorm2d_layer(ExportContext& c, const LayerSpec& l) {
  const TensorShape& s = c.b.shape(c.t);
  const int64_t f = l.in;
  if (s.h * s.w == 1 || s.rows != f)
    throw c.bad("batchnorm2d '" + l.name + "' expects an image of " + std::to_string(f) + " channels");
  const std::vector<float> gamma = c.weights.dense(l.name + ".weight", {f}),
                           beta = c.weights.dense(l.name + ".bias", {f}),
                           mean = c.weights.dense(l.name + ".running_mean", {f}),
                           var = c.weights.dense(l.name + ".running_var", {f});
  std::vector<float> scale(f), shift(f);
  for (int64_t i = 0; i < f; ++i) {
    if (!(var[i] >= 0))
      throw Error(c.weights.file().path() + ": tensor '" + l.name + ".running_var' is negative");
    scale[i] = gamma[i] / std::sqrt(var[i] + 1e-5f);  // PyTorch's default eps
    shift[i] = beta[i] - mean[i] * scale[i];
  }
  Gemm* g = c.last_gemm_is_conv ? c.b.open_gemm(c.t) : nullptr;
  if (g != nullptr) {  // fold: W' = s W, b' = s b + shift
    scale_rows(*g, scale);
    for (int64_t i = 0; i < f; ++i) g->bias[i] = g->bias[i] * scale[i] + shift[i];
  } else {
    c.t = c.b.affine(c.t, std::move(scale), std::move(shift));
  }
}

void relu_layer(ExportContext& c, const LayerSpec&) { c.t = c.b.relu(c.t); }

void maxpool2d_layer(ExportContext& c, const LayerSpec& l) {
  c.t = c.b.maxpool(c.t, l.kernel);
  c.last_gemm_is_conv = false;
}

void flatten_layer(ExportContext& c, const LayerSpec&) {
  c.t = c.b.flatten(c.t);
  c.last_gemm_is_conv = false;
}

void dropout_layer(ExportContext&, const LayerSpec&) {}  // the identity at inference

// One handler per layer type of the vocabulary (io/net_spec.h).
const std::map<std::string, LayerHandler>& export_handlers() {
  static const std::map<std::string, LayerHandler> h = {
      {"linear", linear_layer},  {"conv2d", conv2d_layer},       {"batchnorm2d", batchnorm2d_layer},
      {"relu", relu_layer},      {"maxpool2d", maxpool2d_layer}, {"flatten", flatten_layer},
      {"dropout", dropout_layer}};
  return h;
}

}  // namespace

Model load_model(const std::string& dir) {
  const model_dir::Config mc = model_dir::read_config(dir);
  const NetSpec spec = spec_from_json(mc.json, mc.path);
  WeightFile wf(mc.weights_path);
  ModelBuilder b(spec.model);
  TensorShape in{spec.input_shape[0], 1, 1};
  if (spec.input_shape.size() == 3) in = {spec.input_shape[0], spec.input_shape[1], spec.input_shape[2]};
  ExportContext c{mc, wf, b};
  c.t = b.float_input(in);
  try {
    for (const LayerSpec& l : spec.layers) {
      const auto h = export_handlers().find(l.type);
      if (h == export_handlers().end()) throw c.bad("unknown layer type '" + l.type + "'");
      h->second(c, l);
    }
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(mc.path, 0) == 0 || msg.rfind(wf.file().path(), 0) == 0) throw;
    throw c.bad(msg);
  }
  const TensorShape& out = b.shape(c.t);
  if (out.h * out.w != 1 || out.rows != spec.classes)
    throw c.bad("the network's output is not " + std::to_string(spec.classes) + " classes");
  wf.check_all_used();
  uint64_t h = fnv1a(kFnvBasis, mc.raw.data(), mc.raw.size());
  h = fnv1a(h, wf.file().data(), wf.file().size());
  Model m = b.finish(c.t, hex(h));
  m.mean = spec.mean;
  m.std = spec.std;
  return m;
}

Model bert_model(const BertOptions& o) {
  if (o.layers < 1 || o.hidden < 4 || o.heads < 1 || o.hidden % o.heads != 0 || o.hidden % 4 != 0 ||
      o.ffn % 4 != 0 || o.seq < 1)
    throw Error("bert: bad shape (hidden must divide into heads, hidden and ffn multiples of 4)");
  uint64_t state = o.seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state]() {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto uniform = [&]() {
    return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  };
  static const uint8_t kCodes[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};
  auto gemm = [&](const std::string& name, int64_t mm, int64_t k, Epilogue ep) {
    Gemm g;
    g.name = name;
    g.m = mm;
    g.k = k;
    g.pruned = true;
    g.epilogue = ep;
    Compressed& c = g.sparse;
    c.shape = {mm, k};
    c.rows = mm;
    c.cols = k;
    const int64_t nv = mm * c.values_per_row();
    std::vector<float> v(nv);
    const float a = std::sqrt(3.0f / static_cast<float>(k / 2));  // unit variance of the output
    for (float& x : v) x = a * uniform();
    c.values.resize(nv * sizeof(float));
    std::memcpy(c.values.data(), v.data(), c.values.size());
    c.metadata.assign(mm * c.meta_bytes_per_row(), 0);
    for (int64_t r = 0; r < mm; ++r)
      for (int64_t gi = 0; gi < c.groups_per_row(); ++gi)
        c.metadata[r * c.meta_bytes_per_row() + gi / 2] |=
            static_cast<uint8_t>(kCodes[next() % 6] << ((gi & 1) ? 4 : 0));
    g.bias.resize(mm);
    for (float& b : g.bias) b = 0.1f * uniform();
    return g;
  };
  const std::string name = "bert-l" + std::to_string(o.layers) + "-h" + std::to_string(o.hidden) + "-a" +
                           std::to_string(o.heads) + "-f" + std::to_string(o.ffn);
  ModelBuilder b(name);
  int h = b.float_input({o.hidden, o.seq, 1});
  auto layer_norm = [&](int x, int residual) {
    std::vector<float> gamma(o.hidden), beta(o.hidden);
    for (float& g : gamma) g = 1.0f + 0.1f * uniform();
    for (float& v : beta) v = 0.1f * uniform();
    return b.layer_norm(x, residual, std::move(gamma), std::move(beta), 1e-12f);  // BERT's eps
  };
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    const int qkv = b.gemm(h, gemm(p + "qkv", 3 * o.hidden, o.hidden, Epilogue::kNone));
    const int att = b.attention(qkv, o.heads);
    const int ao = b.gemm(att, gemm(p + "attn_out", o.hidden, o.hidden, Epilogue::kNone));
    const int h1 = layer_norm(ao, h);
    const int f1 = b.gemm(h1, gemm(p + "ffn1", o.ffn, o.hidden, Epilogue::kGelu));
    const int f2 = b.gemm(f1, gemm(p + "ffn2", o.hidden, o.ffn, Epilogue::kNone));
    h = layer_norm(f2, h1);
  }
  return b.finish(h, name + "-s" + std::to_string(o.seq) + "-seed" + std::to_string(o.seed));
}

}  // namespace sparse24::engine
