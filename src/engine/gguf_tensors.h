// A GGUF file's tensors as the decoder loader (hf_decoder.cc: build_decoder) asks for them: by transformers'
// names, dequantized to fp32, read a block of rows at a time (pruned as read), or left in the mapped file.
#pragma once
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fingerprint.h"
#include "gguf_names.h"
#include "hf_weights.h"
#include "kernels/convert.h"
#include "kernels/huge_pages.h"
#include "sparse24/decoder.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"

namespace sparse24::engine::detail {

// A GGUF file's tensors asked for by transformers' names (build_decoder), dequantized to fp32, Q's and K's
// rows (and biases) in transformers' RoPE order; with `keep`, every tensor read is appended to it under its
// transformers name, as a checkpoint holds it (what gguf_to_hf_dir writes, draining it as layers are read).
class GgufTensors {
 public:
  // file: the mapping g's bytes are in, if any: each tensor's pages are dropped once it is converted.
  // keep_tables: the tensors outside the layers (embeddings, final norm, head) are kept too.
  // owner: what keeps that mapping alive (a shared MappedGguf), if a table may stay in it (stored_rows).
  GgufTensors(const Gguf& g, const std::string& path, const DecoderConfig& c, bool rope_rows,
              std::vector<std::pair<std::string, StTensor>>* keep, const MappedFile* file,
              bool keep_tables = true, std::shared_ptr<const void> owner = nullptr)
      : g_(g),
        path_(path),
        c_(c),
        rope_rows_(rope_rows),
        keep_(keep),
        file_(file),
        keep_tables_(keep_tables),
        owner_(std::move(owner)) {}
  std::vector<float> dense(const std::string& hf, const std::vector<int64_t>& shape) {
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    dense_into(hf, shape, v.data());
    return v;
  }
  // The same into out (shape_numel(shape) floats): a joined GEMM's rows are filled in place.
  void dense_into(const std::string& hf, const std::vector<int64_t>& shape, float* out) {
    const std::string name = detail::gguf_name(hf, c_.sandwich_norms);
    const GgufTensor* t = g_.find_tensor(name);
    if (t == nullptr) throw Error(path_ + ": missing tensor '" + name + "'");
    if (t->shape != shape)
      throw Error(path_ + ": tensor '" + name + "' has shape " + shape_string(t->shape) + ", expected " +
                  shape_string(shape));
    const auto n = static_cast<size_t>(shape_numel(shape));
    // llama.cpp's RoPE order of Q's and K's rows, back to transformers' (through a buffer kept for them).
    const int64_t heads = rope_heads(hf);
    const bool permuted = heads > 0;
    if (permuted && rows_.size() < n) rows_.resize(n);
    float* v = permuted ? rows_.data() : out;
    dequantize_floats_into(*t, v, n);
    if (!kernels::all_finite(v, static_cast<int64_t>(n)))
      throw Error(path_ + ": tensor '" + name + "' holds a non-finite value");
    take(name, *t);  // (and the pages dropped)
    if (permuted) detail::unpermute_rope_rows(v, heads, c_.head_dim, shape.size() == 2 ? shape[1] : 1, out);
    if (keep_ != nullptr && (keep_tables_ || hf.rfind("model.layers.", 0) == 0)) {
      // As a Hugging Face checkpoint holds it (fp32): Gemma's norms as w - 1.
      StTensor k{"F32", shape, std::vector<uint8_t>(n * sizeof(float))};
      float* f = reinterpret_cast<float*>(k.bytes.data());
      std::copy(out, out + n, f);
      if (c_.sandwich_norms && hf.ends_with("norm.weight"))
        for (size_t i = 0; i < n; ++i) f[i] -= 1.0f;
      keep_->push_back({hf, std::move(k)});
    }
  }
  bool is_dense(const std::string&) const { return true; }
  // Whether rows() can read the tensor a block of rows at a time: a [rows, cols] weight of a type
  // dequantize_row reads (quantized ones included), read for running (nothing kept for a conversion).
  bool reads_rows(const std::string& hf, const std::vector<int64_t>& shape) const {
    const GgufTensor* t = g_.find_tensor(detail::gguf_name(hf, c_.sandwich_norms));
    const GgmlTypeInfo* ti = t == nullptr ? nullptr : ggml_type_info(t->type);
    return keep_ == nullptr && ti != nullptr && ti->dequantizable && t->shape == shape && shape.size() == 2;
  }
  // Its rows where the file holds them (Q's and K's put back in transformers' order as they are read);
  // rows_read() takes the tensor once they have been.
  detail::RowSource rows(const std::string& hf, const std::vector<int64_t>& shape) const {
    const std::string name = detail::gguf_name(hf, c_.sandwich_norms);
    if (!reads_rows(hf, shape)) throw Error(path_ + ": tensor '" + name + "' cannot be read by rows");
    const GgufTensor& t = *g_.find_tensor(name);
    detail::RowSource s;
    s.stored.data = t.bytes.data();
    s.stored.rows = shape[0];
    s.stored.cols = shape[1];
    s.stored.ggml_type = t.type;
    s.what = path_ + ": tensor '" + name + "'";
    s.rope_heads = rope_heads(hf);
    s.rope_dim = c_.head_dim;
    return s;
  }
  void rows_read(const std::string& hf) {
    const std::string name = detail::gguf_name(hf, c_.sandwich_norms);
    take(name, *g_.find_tensor(name));
  }
  // The same for a tensor whose bytes the caller hashed as it read them (Weights::row_hash's way).
  FnvWords row_hash(const std::string& hf) const {
    const std::string name = detail::gguf_name(hf, c_.sandwich_norms);
    return FnvWords(fnv1a(h_, reinterpret_cast<const uint8_t*>(name.data()), name.size()));
  }
  void rows_read(const std::string& hf, uint64_t hash) {
    const std::string name = detail::gguf_name(hf, c_.sandwich_norms);
    used_.insert(name);
    h_ = hash;
    if (file_ != nullptr) file_->release(g_.find_tensor(name)->bytes);
  }
  // Whether stored_rows() can leave the tensor in the mapped file (rows() could read it).
  bool stays_in_file(const std::string& hf, const std::vector<int64_t>& shape) const {
    return owner_ != nullptr && file_ != nullptr && reads_rows(hf, shape);
  }
  // The rows of a tensor that stays_in_file(), left there in their ggml type (values checked finite a row
  // at a time, those pages dropped again).
  StoredRows stored_rows(const std::string& hf, const std::vector<int64_t>& shape) {
    const std::string name = detail::gguf_name(hf, c_.sandwich_norms);
    if (!stays_in_file(hf, shape)) throw Error(path_ + ": tensor '" + name + "' cannot stay in its file");
    const GgufTensor& t = *g_.find_tensor(name);
    StoredRows s;
    s.owner = owner_;
    s.data = t.bytes.data();
    s.rows = shape[0];
    s.cols = shape[1];
    s.ggml_type = t.type;
    std::vector<float> row(static_cast<size_t>(s.cols));
    const size_t row_bytes = s.row_bytes();
    constexpr int64_t kPiece = 1024;  // rows checked between two releases of their pages
    for (int64_t r0 = 0; r0 < s.rows; r0 += kPiece) {
      const int64_t r1 = std::min(s.rows, r0 + kPiece);
      for (int64_t r = r0; r < r1; ++r) {
        s.row(r, row.data());
        if (!kernels::all_finite(row.data(), s.cols))
          throw Error(path_ + ": tensor '" + name + "' holds a non-finite value");
      }
      file_->release(
          t.bytes.subspan(static_cast<size_t>(r0) * row_bytes, static_cast<size_t>(r1 - r0) * row_bytes));
    }
    take(name, t);
    return s;
  }
  // The tensor's ggml type by name ("BF16", "F16", "Q8_0", ...: the float types' as safetensors names them),
  // "" for a missing one.
  std::string dense_dtype(const std::string& hf) const {
    const GgufTensor* t = g_.find_tensor(detail::gguf_name(hf, c_.sandwich_norms));
    return t != nullptr ? ggml_type_name(t->type) : "";
  }
  // A bfloat16 tensor's values (dense_dtype "BF16"): read as every tensor is, then narrowed (exactly).
  std::vector<uint16_t> bf16(const std::string& hf, const std::vector<int64_t>& shape) {
    const std::vector<float> f = dense(hf, shape);
    std::vector<uint16_t> v;
    kernels::resize_huge(v, f.size());
    kernels::floats_to_bf16(f.data(), static_cast<int64_t>(f.size()), v.data());
    return v;
  }
  Gemm linear(const std::string& prefix, const std::string& layer, int64_t out, int64_t in, bool bias) {
    Gemm r;
    r.name = layer;
    r.m = out;
    r.k = in;
    r.dense = dense(prefix + ".weight", {out, in});
    r.sources = {prefix + ".weight"};
    if (bias) r.bias = dense(prefix + ".bias", {out});
    return r;
  }
  // A tensor the metadata's reading took in (rope_freqs.weight): used, and part of the fingerprint.
  void used_by_config(const std::string& name) {
    const GgufTensor* t = g_.find_tensor(name);
    if (t != nullptr) take(name, *t);
  }
  void check_all_used() const {
    for (const GgufTensor& t : g_.tensors)
      if (!used_.count(t.name))
        throw Error(path_ + ": tensor '" + t.name + "' is not used by the architecture");
  }
  std::string fingerprint() const { return hex(h_); }

 private:
  // The heads of a tensor whose rows are in llama.cpp's RoPE order (Q's and K's, and their biases); 0 for
  // the rest.
  int64_t rope_heads(const std::string& hf) const {
    if (!rope_rows_) return 0;
    if (hf.find("self_attn.q_proj.") != std::string::npos) return c_.heads;
    return hf.find("self_attn.k_proj.") != std::string::npos ? c_.kv_heads : 0;
  }
  // A tensor read: marked used, its name and bytes hashed into the fingerprint (fnv1a_tensor's hash), a
  // piece at a time, the mapped file's pages dropped as it goes (a table left in the file is never
  // resident whole).
  void take(const std::string& name, const GgufTensor& t) {
    used_.insert(name);
    FnvWords f(fnv1a(h_, reinterpret_cast<const uint8_t*>(name.data()), name.size()));
    constexpr size_t kPiece = size_t{16} << 20;  // a multiple of 32 bytes (FnvWords::add)
    size_t i = 0;
    for (; t.bytes.size() - i > kPiece; i += kPiece) {
      f.add(t.bytes.data() + i, kPiece);
      if (file_ != nullptr) file_->release(t.bytes.subspan(i, kPiece));
    }
    h_ = f.finish(t.bytes.data() + i, t.bytes.size() - i);
    if (file_ != nullptr) file_->release(t.bytes);
  }
  const Gguf& g_;
  std::string path_;
  DecoderConfig c_;
  bool rope_rows_;
  std::vector<std::pair<std::string, StTensor>>* keep_;
  const MappedFile* file_;
  bool keep_tables_;
  std::shared_ptr<const void> owner_;
  std::vector<float> rows_;  // a permuted tensor's rows before they are put back in order
  std::set<std::string> used_;
  uint64_t h_ = kFnvBasis;
};

}  // namespace sparse24::engine::detail
