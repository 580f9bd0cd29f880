// Models: the loader for the workflow's export and the BERT encoder builder.
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "io/model_dir.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/pattern.h"

namespace sparse24::engine {
namespace {

uint64_t fnv1a(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

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
    for (float x : v)
      if (!std::isfinite(x)) throw Error(path_ + ": tensor '" + name + "' holds a non-finite value");
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
    for (int64_t i = 0; i < c.rows * c.values_per_row(); ++i)
      if (!std::isfinite(c.value(i / c.values_per_row(), i % c.values_per_row())))
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
  }
  return "?";
}

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
    if (op.kind == OpKind::kGemm) {
      if (op.gemm < 0 || op.gemm >= static_cast<int>(gemms.size())) throw bad(i, "bad gemm id");
      const Gemm& g = gemms[op.gemm];
      if (g.k != x.rows || g.m != y.rows || x.h * x.w != y.h * y.w) throw bad(i, "gemm shape mismatch");
    }
  }
}

Model load_model(const std::string& dir) {
  const model_dir::Config mc = model_dir::read_config(dir);
  const std::string& config_path = mc.path;
  const nlohmann::json& config = mc.json;
  auto bad = [&](const std::string& problem) { return Error(config_path + ": " + problem); };

  Model m;
  try {
    WeightFile wf(mc.weights_path);
    m.name = config.at("model").get<std::string>();
    m.input_shape = config.at("input_shape").get<std::vector<int64_t>>();
    m.mean = config.at("normalize").at("mean").get<double>();
    m.std = config.at("normalize").at("std").get<double>();
    const int64_t classes = config.at("classes").get<int64_t>();
    if (m.input_shape.size() != 1 && m.input_shape.size() != 3)
      throw bad("input_shape must be [features] or [channels, height, width]");
    for (int64_t d : m.input_shape)
      if (d <= 0 || d > 65536) throw bad("input_shape dimension out of range");
    TensorShape cur{m.input_shape[0], 1, 1};
    bool image = m.input_shape.size() == 3;
    if (image) cur = {m.input_shape[0], m.input_shape[1], m.input_shape[2]};
    if (cur.rows * cur.h * cur.w > (int64_t{1} << 26)) throw bad("input too large");
    m.tensors.push_back(cur);
    int t = 0;  // current tensor
    bool last_gemm_is_conv = false;
    auto add_tensor = [&](TensorShape s) {
      if (s.rows <= 0 || s.h <= 0 || s.w <= 0 || s.rows * s.h * s.w > (int64_t{1} << 28))
        throw bad("tensor size out of range");
      m.tensors.push_back(s);
      return static_cast<int>(m.tensors.size()) - 1;
    };
    auto last_op_makes_current = [&](OpKind k) {
      return !m.ops.empty() && m.ops.back().kind == k && m.ops.back().out == t;
    };
    std::set<std::string> names;
    for (const auto& jl : config.at("layers")) {
      const std::string type = jl.at("type").get<std::string>();
      std::string lname;
      if (type == "conv2d" || type == "linear" || type == "batchnorm2d") {
        lname = jl.at("name").get<std::string>();
        if (lname.empty() || lname.find('.') != std::string::npos || !names.insert(lname).second)
          throw bad("layer name '" + lname + "' is empty, has a '.', or is repeated");
      }
      auto positive = [&](const char* key) {
        const int64_t v = jl.at(key).get<int64_t>();
        if (v <= 0 || v > (1 << 20)) throw bad(type + " '" + lname + "' " + key + " out of range");
        return v;
      };
      if (type == "linear") {
        const int64_t in = positive("in"), out = positive("out");
        if (cur.h * cur.w != 1 || cur.rows != in)
          throw bad("linear '" + lname + "' expects " + std::to_string(in) + " inputs, gets " +
                    std::to_string(cur.rows * cur.h * cur.w) +
                    (cur.h * cur.w != 1 ? " (not flattened)" : ""));
        Gemm g;
        g.name = lname;
        g.m = out;
        g.k = in;
        const std::vector<int64_t> shape{out, in};
        g.pruned = mc.is_pruned(lname + ".weight", shape);
        if (g.pruned) {
          g.sparse = wf.compressed(lname + ".weight", shape);
        } else {
          g.dense = wf.dense(lname + ".weight", shape);
        }
        g.bias = wf.dense(lname + ".bias", {out});
        m.gemms.push_back(std::move(g));
        Op op;
        op.kind = OpKind::kGemm;
        op.gemm = static_cast<int>(m.gemms.size()) - 1;
        op.in = t;
        op.out = t = add_tensor({out, 1, 1});
        m.ops.push_back(op);
        image = false;
        last_gemm_is_conv = false;
      } else if (type == "conv2d") {
        const int64_t in = positive("in"), out = positive("out"), k = positive("kernel"),
                      s = positive("stride");
        const int64_t p = jl.at("padding").get<int64_t>();
        if (p < 0 || p > 1024) throw bad("conv2d '" + lname + "' padding out of range");
        if (!image || cur.rows != in)
          throw bad("conv2d '" + lname + "' expects an image of " + std::to_string(in) + " channels");
        const int64_t oh = (cur.h + 2 * p - k) / s + 1, ow = (cur.w + 2 * p - k) / s + 1;
        if (cur.h + 2 * p < k || cur.w + 2 * p < k)
          throw bad("conv2d '" + lname + "' kernel larger than its input");
        Op col;
        col.kind = OpKind::kIm2col;
        col.in = t;
        col.kernel = k;
        col.stride = s;
        col.padding = p;
        col.out = add_tensor({k * k * in, oh, ow});
        m.ops.push_back(col);
        Gemm g;
        g.name = lname;
        g.m = out;
        g.k = k * k * in;
        const std::vector<int64_t> shape{out, in, k, k};
        g.pruned = mc.is_pruned(lname + ".weight", shape);
        if (g.pruned) {
          if (in % 4 != 0)
            throw bad("conv2d '" + lname + "' is pruned but its input channels are not a multiple of 4");
          g.sparse = regroup_conv(wf.compressed(lname + ".weight", shape), out, in, k * k);
        } else {
          g.dense = regroup_conv_dense(wf.dense(lname + ".weight", shape), out, in, k);
        }
        g.bias = wf.dense(lname + ".bias", {out});
        m.gemms.push_back(std::move(g));
        Op op;
        op.kind = OpKind::kGemm;
        op.gemm = static_cast<int>(m.gemms.size()) - 1;
        op.in = col.out;
        op.out = t = add_tensor({out, oh, ow});
        m.ops.push_back(op);
        cur = m.tensors[t];
        last_gemm_is_conv = true;
      } else if (type == "batchnorm2d") {
        const int64_t f = positive("features");
        if (!image || cur.rows != f)
          throw bad("batchnorm2d '" + lname + "' expects an image of " + std::to_string(f) + " channels");
        const std::vector<float> gamma = wf.dense(lname + ".weight", {f}),
                                 beta = wf.dense(lname + ".bias", {f}),
                                 mean = wf.dense(lname + ".running_mean", {f}),
                                 var = wf.dense(lname + ".running_var", {f});
        std::vector<float> scale(f), shift(f);
        for (int64_t c = 0; c < f; ++c) {
          if (!(var[c] >= 0))
            throw Error(wf.file().path() + ": tensor '" + lname + ".running_var' is negative");
          scale[c] = gamma[c] / std::sqrt(var[c] + 1e-5f);  // PyTorch's default eps
          shift[c] = beta[c] - mean[c] * scale[c];
        }
        if (last_gemm_is_conv && last_op_makes_current(OpKind::kGemm) &&
            m.gemms[m.ops.back().gemm].epilogue == Epilogue::kNone) {
          Gemm& g = m.gemms[m.ops.back().gemm];  // fold: W' = s W, b' = s b + shift
          scale_rows(g, scale);
          for (int64_t c = 0; c < f; ++c) g.bias[c] = g.bias[c] * scale[c] + shift[c];
        } else {
          Op op;
          op.kind = OpKind::kAffine;
          op.in = t;
          op.scale = scale;
          op.shift = shift;
          op.out = t = add_tensor(cur);
          m.ops.push_back(op);
        }
      } else if (type == "relu") {
        if (last_op_makes_current(OpKind::kGemm) && m.gemms[m.ops.back().gemm].epilogue == Epilogue::kNone) {
          m.gemms[m.ops.back().gemm].epilogue = Epilogue::kRelu;
        } else {
          Op op;
          op.kind = OpKind::kRelu;
          op.in = t;
          op.out = t = add_tensor(cur);
          m.ops.push_back(op);
        }
      } else if (type == "maxpool2d") {
        const int64_t k = positive("kernel");
        if (!image || cur.h < k || cur.w < k)
          throw bad("maxpool2d needs an image at least as large as its kernel");
        Op op;
        op.kind = OpKind::kMaxPool;
        op.in = t;
        op.kernel = op.stride = k;
        op.out = t = add_tensor({cur.rows, cur.h / k, cur.w / k});
        m.ops.push_back(op);
        cur = m.tensors[t];
        last_gemm_is_conv = false;
      } else if (type == "flatten") {
        if (cur.h * cur.w != 1) {
          Op op;
          op.kind = OpKind::kFlatten;
          op.in = t;
          op.out = t = add_tensor({cur.rows * cur.h * cur.w, 1, 1});
          m.ops.push_back(op);
        }
        cur = {cur.rows * cur.h * cur.w, 1, 1};
        image = false;
        last_gemm_is_conv = false;
      } else if (type == "dropout") {
        // identity at inference
      } else {
        throw bad("unknown layer type '" + type + "'");
      }
      cur = m.tensors[t];
    }
    if (m.tensors[t].h * m.tensors[t].w != 1 || m.tensors[t].rows != classes)
      throw bad("the network's output is not " + std::to_string(classes) + " classes");
    m.output = t;
    wf.check_all_used();
    uint64_t h = fnv1a(1469598103934665603ull, mc.raw.data(), mc.raw.size());
    h = fnv1a(h, wf.file().data(), wf.file().size());
    m.fingerprint = hex(h);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("bad architecture config: ") + e.what());
  }
  m.check();
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
  Model m;
  m.name = "bert-l" + std::to_string(o.layers) + "-h" + std::to_string(o.hidden) + "-a" +
           std::to_string(o.heads) + "-f" + std::to_string(o.ffn);
  m.input_shape = {o.hidden, o.seq};
  m.fingerprint = m.name + "-s" + std::to_string(o.seq) + "-seed" + std::to_string(o.seed);
  m.tensors.push_back({o.hidden, o.seq, 1});
  int h = 0;
  auto tensor = [&](int64_t rows) {
    m.tensors.push_back({rows, o.seq, 1});
    return static_cast<int>(m.tensors.size()) - 1;
  };
  auto add_gemm = [&](Gemm g, int in) {
    const int64_t rows = g.m;
    m.gemms.push_back(std::move(g));
    Op op;
    op.kind = OpKind::kGemm;
    op.gemm = static_cast<int>(m.gemms.size()) - 1;
    op.in = in;
    op.out = tensor(rows);
    m.ops.push_back(op);
    return op.out;
  };
  auto layer_norm = [&](int x, int residual) {
    Op op;
    op.kind = OpKind::kLayerNorm;
    op.in = x;
    op.in2 = residual;
    op.scale.resize(o.hidden);
    op.shift.resize(o.hidden);
    for (float& g : op.scale) g = 1.0f + 0.1f * uniform();
    for (float& b : op.shift) b = 0.1f * uniform();
    op.eps = 1e-12f;  // BERT's
    op.out = tensor(o.hidden);
    m.ops.push_back(op);
    return op.out;
  };
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    const int qkv = add_gemm(gemm(p + "qkv", 3 * o.hidden, o.hidden, Epilogue::kNone), h);
    Op att;
    att.kind = OpKind::kAttention;
    att.in = qkv;
    att.heads = o.heads;
    att.out = tensor(o.hidden);
    m.ops.push_back(att);
    const int ao = add_gemm(gemm(p + "attn_out", o.hidden, o.hidden, Epilogue::kNone), att.out);
    const int h1 = layer_norm(ao, h);
    const int f1 = add_gemm(gemm(p + "ffn1", o.ffn, o.hidden, Epilogue::kGelu), h1);
    const int f2 = add_gemm(gemm(p + "ffn2", o.hidden, o.ffn, Epilogue::kNone), f1);
    h = layer_norm(f2, h1);
  }
  m.output = h;
  m.check();
  return m;
}

}  // namespace sparse24::engine
