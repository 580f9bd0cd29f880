// One-shot pruning of a decoder (prune_model.h: prune_hf_decoder) on a tiny random Llama (tiny_decoder.h):
// layer-by-layer Wanda against a direct computation with the reference forward pass, permutations undone,
// SparseGPT against magnitude on its objective, bad requests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "../common/prune_objective.h"
#include "../common/same_tensors.h"
#include "sparse24/checkpoint.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "sparse24/mask.h"
#include "sparse24/prune.h"
#include "sparse24/prune_model.h"
#include "tiny_decoder.h"
#include "tiny_gguf.h"

namespace sparse24::engine {
namespace {

// ---- one-shot pruning of a decoder (prune_model.h) -------------------------------------------------------

class PruneDecoder : public HfDecoderDir {
 protected:
  // The checkpoint's weight of `g` (a DecoderLayer GEMM) as the loader joins it, from a pruned directory.
  static std::vector<float> joined(const DecoderModel& m, int64_t l, int which) {
    const DecoderLayer& L = m.layers[l];
    return weights_of(which == 0 ? L.qkv : which == 1 ? L.o : which == 2 ? L.gate_up : L.down);
  }
  static Gemm& gemm(DecoderModel& m, int64_t l, int which) {
    DecoderLayer& L = m.layers[l];
    return which == 0 ? L.qkv : which == 1 ? L.o : which == 2 ? L.gate_up : L.down;
  }
  // A tiny model of t's shape as a Q8_0 GGUF file (with a tokenizer) in the test directory, and that file
  // converted to a Hugging Face directory (fp32): their paths.
  std::pair<std::string, std::string> q8_0_sources(std::mt19937_64& g, const Tiny& t) {
    GgufWriter w;
    w.q8_0 = true;
    Gguf file = tiny_gguf(tiny_model(g, t), t, w);
    add_tiny_tokenizer(file, t.vocab);
    const std::string gguf = (dir_ / "tiny.gguf").string(), converted = (dir_ / "converted").string();
    write_file_atomic(gguf, encode_gguf(file));
    gguf_to_hf_dir(gguf, converted);
    return {gguf, converted};
  }
  std::vector<std::vector<int32_t>> sequences(std::mt19937_64& g, int count) {
    std::vector<std::vector<int32_t>> s;
    for (int i = 0; i < count; ++i) s.push_back(random_ids(g, 5 + i * 3, t_.vocab));
    return s;
  }
};

// Wanda, layer by layer: each layer's Linears see the inputs the earlier layers, already pruned, give them.
// The direct computation: the double reference collects the inputs on the weights pruned so far, Wanda
// prunes that layer, and on to the next. A Llama, and a Gemma 3 (scaled embeddings, sliding and full
// layers, sandwich norms: what each layer computes on its own during calibration).
class PruneDecoderArch : public PruneDecoder, public ::testing::WithParamInterface<bool> {};
INSTANTIATE_TEST_SUITE_P(LlamaAndGemma3, PruneDecoderArch, ::testing::Bool());
TEST_P(PruneDecoderArch, WandaCalibratesLayerByLayerOnThePrunedModel) {
  SPARSE24_SEED_TRACE();
  auto g = rng(11);
  t_.layers = 3;
  t_.gemma = GetParam() ? 3 : 0;
  t_.window = t_.gemma != 0 ? 3 : 0;
  DecoderModel m = tiny_model(g, t_);
  write(m, t_.gemma != 0 ? gemma_config() : config());
  const auto seqs = sequences(g, 5);
  HfDir d = read_hf_dir(dir_.string());
  PruneModelOptions o;
  o.method = PruneMethod::kWanda;
  o.calibration_ids = seqs;
  const PruneModelReport r = prune_hf_decoder(d, o);
  EXPECT_EQ(r.weights.size(), static_cast<size_t>(7 * t_.layers));
  EXPECT_EQ(r.calibration_sequences, 5);
  const DecoderModel got = load_hf_decoder(d);
  for (int64_t l = 0; l < t_.layers; ++l) {
    std::map<int, std::vector<double>> sumsq;
    for (const auto& s : seqs)
      ref_forward(m, s, [&](int64_t layer, int which, const std::vector<double>& x) {
        if (layer != l) return;
        auto& v = sumsq[which];
        v.resize(x.size(), 0.0);
        for (size_t c = 0; c < x.size(); ++c) v[c] += x[c] * x[c];
      });
    for (int which = 0; which < 4; ++which) {
      Gemm& G = gemm(m, l, which);
      std::vector<float> norms(static_cast<size_t>(G.k));
      for (int64_t c = 0; c < G.k; ++c) norms[c] = static_cast<float>(std::sqrt(sumsq.at(which)[c]));
      const std::vector<float> before = G.dense;
      apply_mask(G.dense.data(), wanda_mask(G.dense.data(), G.m, G.k, norms));
      const std::vector<float> w = joined(got, l, which);
      int decided = 0;
      for (int64_t row = 0; row < G.m; ++row)
        for (int64_t c0 = 0; c0 < G.k; c0 += 4) {
          std::vector<double> score;
          for (int64_t c = c0; c < c0 + 4; ++c) score.push_back(std::fabs(before[row * G.k + c]) * norms[c]);
          std::sort(score.begin(), score.end());
          if (score[2] - score[1] < 1e-4 * score[2]) continue;  // a near tie: float and double may differ
          ++decided;
          for (int64_t c = c0; c < c0 + 4; ++c)
            ASSERT_EQ(w[row * G.k + c], G.dense[row * G.k + c]) << "layer " << l << " linear " << which;
        }
      EXPECT_GT(decided, G.m * G.k / 4 * 9 / 10);
    }
  }
}

// Permutations: the O Linear's columns with V's rows (within heads, one permutation per V head for the
// query heads that share it), down's columns with gate's and up's rows. Undone, the weights are the
// originals pruned; the permuted model computes what the undone one does.
TEST_F(PruneDecoder, PermutationsKeepTheFunction) {
  SPARSE24_SEED_TRACE();
  auto g = rng(12);
  t_.hidden = 32;
  t_.heads = 4;
  t_.kv = 2;
  t_.d = 8;
  t_.ffn = 48;
  for (bool biases : {false, true}) {  // biases: V's and gate's/up's rows carry theirs along
    SCOPED_TRACE(biases ? "biases" : "no biases");
    t_.biases = biases;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const DecoderModel m = tiny_model(g, t_);
    json cfg = config();
    if (biases) cfg["attention_bias"] = cfg["mlp_bias"] = true;
    write(m, cfg);
    HfDir d = read_hf_dir(dir_.string());
    PruneModelOptions o;
    o.method = PruneMethod::kWanda;
    o.permute = true;
    o.permute_seconds = 0.2;
    o.calibration_ids = sequences(g, 4);
    const PruneModelReport r = prune_hf_decoder(d, o);
    DecoderModel u = load_hf_decoder(d);  // becomes the undone model
    const DecoderModel pruned = load_hf_decoder(d);
    const int64_t H = t_.hidden, d_ = t_.d, group = t_.heads / t_.kv, q = t_.heads * d_, kv = t_.kv * d_;
    int permuted = 0;
    for (const PrunedWeight& pw : r.weights) {
      const bool o_proj = pw.name.find("o_proj") != std::string::npos,
                 down = pw.name.find("down_proj") != std::string::npos;
      ASSERT_EQ(!pw.perm.empty(), o_proj || down) << pw.name << ": " << pw.permutation;
      if (pw.perm.empty()) continue;
      ++permuted;
      EXPECT_GE(pw.kept_permuted, pw.kept_identity - 1e-9) << pw.name;
      const int64_t l = std::stoll(pw.name.substr(std::string("model.layers.").size()));
      const int64_t k = static_cast<int64_t>(pw.perm.size());
      std::vector<int64_t> inverse(k);
      for (int64_t c = 0; c < k; ++c) inverse[pw.perm[c]] = c;
      DecoderLayer& L = u.layers[l];
      if (o_proj) {
        EXPECT_NE(pw.permutation.find("v_proj"), std::string::npos) << pw.permutation;
        // Within heads, and the same inside each group of query heads.
        for (int64_t c = 0; c < k; ++c) {
          ASSERT_EQ(pw.perm[c] / d_, c / d_) << "left its head";
          ASSERT_EQ(pw.perm[c] % d_, pw.perm[(c / (d_ * group)) * d_ * group + c % d_] % d_)
              << "group differs";
        }
        std::vector<float> ow = weights_of(L.o);
        permute_columns(ow.data(), H, k, inverse);
        L.o.dense = ow;
        L.o.pruned = false;
        // V's rows: kv head v took the permutation of its query heads.
        std::vector<float> qkv = weights_of(L.qkv);
        std::vector<int64_t> vinv(kv);
        for (int64_t v = 0; v < t_.kv; ++v)
          for (int64_t c = 0; c < d_; ++c)
            vinv[v * d_ + c] = inverse[v * group * d_ + c] - v * group * d_ + v * d_;
        permute_rows(qkv.data() + (q + kv) * H, kv, H, vinv);
        if (biases) permute_rows(L.qkv.bias.data() + q + kv, kv, 1, vinv);
        L.qkv.dense = qkv;
        L.qkv.pruned = false;
      } else {
        EXPECT_NE(pw.permutation.find("gate_proj"), std::string::npos) << pw.permutation;
        EXPECT_NE(pw.permutation.find("up_proj"), std::string::npos) << pw.permutation;
        std::vector<float> dw = weights_of(L.down), gu = weights_of(L.gate_up);
        permute_columns(dw.data(), H, k, inverse);
        permute_rows(gu.data(), k, H, inverse);
        permute_rows(gu.data() + k * H, k, H, inverse);
        if (biases) {
          permute_rows(L.gate_up.bias.data(), k, 1, inverse);
          permute_rows(L.gate_up.bias.data() + k, k, 1, inverse);
        }
        L.down.dense = dw;
        L.down.pruned = false;
        L.gate_up.dense = gu;
        L.gate_up.pruned = false;
      }
    }
    EXPECT_EQ(permuted, 2 * t_.layers);
    // Undone, every kept weight is an original one at its original place.
    for (int64_t l = 0; l < t_.layers; ++l)
      for (int which = 0; which < 4; ++which) {
        const std::vector<float> orig = joined(m, l, which), undone = joined(u, l, which);
        for (size_t i = 0; i < orig.size(); ++i)
          if (undone[i] != 0) {
            ASSERT_EQ(undone[i], orig[i]) << "layer " << l << " linear " << which;
          }
        EXPECT_EQ(gemm(u, l, which).bias, gemm(const_cast<DecoderModel&>(m), l, which).bias);
      }
    const std::vector<int32_t> ids = random_ids(g, 12, t_.vocab);
    const std::vector<double> want = ref_forward(u, ids);
    for (Mode mode : {Mode::kDense, Mode::kSparse}) {
      DecoderOptions dopt;
      dopt.mode = mode;
      Decoder dec(pruned, dopt);
      EXPECT_EQ(dec.sparse_linears(), mode == Mode::kSparse ? 4 * t_.layers : 0);
      std::vector<float> all(ids.size() * t_.vocab);
      dec.forward(ids.data(), 12, all.data(), true);
      for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], want[i], 2e-4) << "logit " << i;
    }
  }
  t_.biases = false;
}

// SparseGPT minimizes each Linear's output error on its calibration inputs: below magnitude's on the
// first layer, whose inputs both methods see alike.
TEST_F(PruneDecoder, SparseGptBeatsMagnitudeOnItsObjective) {
  SPARSE24_SEED_TRACE();
  auto g = rng(13);
  const DecoderModel m = tiny_model(g, t_);
  write(m, config());
  const auto seqs = sequences(g, 6);
  HfDir sg = read_hf_dir(dir_.string());
  HfDir mag = sg;
  PruneModelOptions o;
  o.method = PruneMethod::kSparseGpt;
  o.calibration_ids = seqs;
  prune_hf_decoder(sg, o);
  o.method = PruneMethod::kMagnitude;
  prune_hf_decoder(mag, o);
  const DecoderModel a = load_hf_decoder(sg), b = load_hf_decoder(mag);
  std::map<int, std::vector<std::vector<double>>> inputs;
  for (const auto& s : seqs)
    ref_forward(m, s, [&](int64_t layer, int which, const std::vector<double>& x) {
      if (layer == 0) inputs[which].push_back(x);
    });
  for (int which = 0; which < 4; ++which) {
    const std::vector<float> W = joined(m, 0, which);
    EXPECT_LT(testing::output_error(W, joined(a, 0, which), inputs.at(which)),
              testing::output_error(W, joined(b, 0, which), inputs.at(which)))
        << "linear " << which;
  }
}

// Phi-3 stores V with Q and K, gate with up: nothing can absorb the O and down Linears' permutations, which
// are left out with the reason; the pruned directory loads and runs.
TEST_F(PruneDecoder, FusedTensorsAreNotPermuted) {
  SPARSE24_SEED_TRACE();
  auto g = rng(13);
  t_.fused = true;
  const DecoderModel m = tiny_model(g, t_);
  json cfg = config();
  cfg["model_type"] = "phi3";
  write(m, cfg);
  HfDir d = read_hf_dir(dir_.string());
  PruneModelOptions o;
  o.method = PruneMethod::kWanda;
  o.permute = true;
  o.permute_seconds = 0.05;
  o.calibration_ids = sequences(g, 3);
  const PruneModelReport r = prune_hf_decoder(d, o);
  EXPECT_EQ(r.weights.size(),
            static_cast<size_t>(4 * t_.layers));  // qkv_proj, o_proj, gate_up_proj, down_proj
  for (const PrunedWeight& pw : r.weights) {
    EXPECT_TRUE(pw.perm.empty()) << pw.name;
    if (pw.name.find("o_proj") != std::string::npos || pw.name.find("down_proj") != std::string::npos) {
      EXPECT_NE(pw.permutation.find("fused"), std::string::npos) << pw.name << ": " << pw.permutation;
    }
  }
  const DecoderModel back = load_hf_decoder(d);
  EXPECT_EQ(Decoder(back, {}).sparse_linears(), 4 * static_cast<int>(t_.layers));
  t_ = Tiny();
}

// What the CLI runs: DIR pruned layer by layer straight into OUT_DIR, one shard per layer, gives the same
// weights bit for bit as pruning the checkpoint in memory, from a bf16 checkpoint in two shards with biases
// and one Linear already 2:4 (copied as stored), the pruned values still bf16; the output loads in either
// layout. A failure leaves no directory behind.
TEST_F(PruneDecoder, StreamedIntoADirectoryEqualsPruningInMemory) {
  SPARSE24_SEED_TRACE();
  auto g = rng(15);
  t_.layers = 3;
  t_.biases = true;
  json cfg = config();
  cfg["attention_bias"] = true;
  cfg["mlp_bias"] = true;
  write(tiny_model(g, t_), cfg);
  // The checkpoint as bf16, layer 1's o_proj already 2:4, in two shards listed by an index.
  Checkpoint ck = load_checkpoint((dir_ / "model.safetensors").string());
  for (CheckpointTensor& t : ck.tensors) {
    const Tensor f = from_st(t.dense, t.name);
    t.dense = to_st(Tensor::from_float(f.to_float(), f.shape, DType::kBF16));
  }
  SparsifyOptions so;
  so.prune = true;
  so.targets = R"(layers\.1\.self_attn\.o_proj\.weight)";
  ASSERT_EQ(sparsify(ck, so).pruned.size(), 1u);
  std::filesystem::remove(dir_ / "model.safetensors");
  json map;
  for (int shard = 0; shard < 2; ++shard) {
    Checkpoint part;
    for (size_t i = 0; i < ck.tensors.size(); ++i)
      if (static_cast<int>(i % 2) == shard) part.tensors.push_back(ck.tensors[i]);
    const std::string name = "w" + std::to_string(shard) + ".safetensors";
    write_safetensors((dir_ / name).string(), encode_checkpoint(part, CheckpointFormat::kSparse24));
    for (const CheckpointTensor& t : part.tensors) {
      map[t.name] = name;
      map[t.name + ".values"] = name;
    }
  }
  std::ofstream(dir_ / "model.safetensors.index.json") << json{{"weight_map", map}}.dump();
  const auto seqs = sequences(g, 4);
  for (PruneMethod method : {PruneMethod::kSparseGpt, PruneMethod::kWanda}) {
    SCOPED_TRACE(prune_method_name(method));
    PruneModelOptions o;
    o.method = method;
    // Both runs must search alike: a work budget stops each search at the same point on any machine and
    // under the sanitizers (a wall-clock budget once did not: under AddressSanitizer on a slow core one
    // Linear's search took more than 10 s and the two runs differed), and the wall-clock one is not reached.
    o.permute = method == PruneMethod::kWanda;
    o.permute_evaluations = 1000;
    o.permute_seconds = 3600;
    o.calibration_ids = seqs;
    HfDir held = read_hf_dir(dir_.string());
    const PruneModelReport a = prune_hf_decoder(held, o);
    const std::string out = dir_.string() + "-out";
    std::filesystem::remove_all(out);
    const PruneModelReport b = prune_hf_decoder(dir_.string(), out, CheckpointFormat::kSparse24, o);
    ASSERT_EQ(a.weights.size(), static_cast<size_t>(7 * t_.layers - 1));
    ASSERT_EQ(a.weights.size(), b.weights.size());
    int stopped = 0;
    for (size_t i = 0; i < a.weights.size(); ++i) {
      EXPECT_EQ(a.weights[i].name, b.weights[i].name);
      EXPECT_EQ(a.weights[i].permutation, b.weights[i].permutation);
      EXPECT_EQ(a.weights[i].perm, b.weights[i].perm);
      EXPECT_EQ(a.weights[i].evaluations, b.weights[i].evaluations);
      stopped += a.weights[i].stopped_early;
    }
    // The MLP's searches run into the budget (so both runs stop at it alike).
    EXPECT_EQ(stopped, o.permute ? t_.layers : 0);
    EXPECT_EQ(b.skipped, std::vector<std::string>{"model.layers.1.self_attn.o_proj.weight: already 2:4"});
    EXPECT_TRUE(std::filesystem::exists(out + "/model.safetensors.index.json"));
    EXPECT_TRUE(std::filesystem::exists(out + "/model-00004-of-00004.safetensors"));  // 3 layers + the rest
    const HfDir streamed = read_hf_dir(out);
    ASSERT_EQ(streamed.weights.tensors.size(), held.weights.tensors.size());
    for (const CheckpointTensor& t : held.weights.tensors) {
      SCOPED_TRACE(t.name);
      const CheckpointTensor* u = streamed.weights.find(t.name);
      ASSERT_NE(u, nullptr);
      ASSERT_EQ(u->sparse.has_value(), t.sparse.has_value());
      if (t.sparse) {
        EXPECT_EQ(u->sparse->dtype, DType::kBF16);
        EXPECT_EQ(u->sparse->values, t.sparse->values);
        EXPECT_EQ(u->sparse->metadata, t.sparse->metadata);
      } else {
        EXPECT_EQ(u->dense.dtype, "BF16");
        EXPECT_EQ(u->dense.bytes, t.dense.bytes);
      }
    }
    const DecoderModel back = load_hf_decoder(out);
    EXPECT_EQ(Decoder(back, {}).sparse_linears(), 4 * static_cast<int>(t_.layers));
    // The compressed-tensors layout: the same Linears once loaded.
    const std::string bitmask = out + "-bitmask";
    std::filesystem::remove_all(bitmask);
    prune_hf_decoder(dir_.string(), bitmask, CheckpointFormat::kBitmask24, o);
    const DecoderModel back2 = load_hf_decoder(bitmask);
    for (int64_t l = 0; l < t_.layers; ++l)
      for (int which = 0; which < 4; ++which) {
        const Gemm &x = gemm(const_cast<DecoderModel&>(back), l, which),
                   &y = gemm(const_cast<DecoderModel&>(back2), l, which);
        EXPECT_EQ(weights_of(x), weights_of(y)) << "layer " << l << " linear " << which;
      }
    std::filesystem::remove_all(out);
    std::filesystem::remove_all(bitmask);
  }
  // A calibration token outside the vocabulary fails in the first layer, after the output was begun.
  PruneModelOptions o;
  o.method = PruneMethod::kWanda;
  o.calibration_ids = {{0, 1, static_cast<int32_t>(t_.vocab)}};
  const std::string out = dir_.string() + "-failed";
  EXPECT_THROW(prune_hf_decoder(dir_.string(), out, CheckpointFormat::kSparse24, o), Error);
  for (const auto& e : std::filesystem::directory_iterator(dir_.parent_path()))
    EXPECT_EQ(e.path().string().find(out), std::string::npos) << e.path();
  t_ = Tiny();
}

// Magnitude pruning without permutations prunes each Linear's rows straight into its 2:4 tensor (no dense
// copies; an f16 checkpoint's weights, which that path cannot hold, the general way): the directory is the
// one `convert --prune` (sparsify: compress with pruning, another path) makes of the same checkpoint, tensor
// for tensor: fp32, bf16 and f16 weights, split (with biases) and fused (Phi-3's qkv_proj and gate_up_proj).
// With int8 (the rows path for f16 too) the Linears are those loading with --prune --int8 makes.
TEST_F(PruneDecoder, MagnitudeEqualsConvertPruning) {
  SPARSE24_SEED_TRACE();
  auto g = rng(17);
  for (bool fused : {false, true})
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(fused ? "fused " : "split ") + dtype_name(dtype));
      t_.fused = fused;
      t_.biases = !fused;
      json cfg = config();
      if (fused) cfg["model_type"] = "phi3";
      cfg["attention_bias"] = cfg["mlp_bias"] = !fused;
      write(tiny_model(g, t_), cfg);
      if (dtype != DType::kF32) {
        Checkpoint ck = load_checkpoint((dir_ / "model.safetensors").string());
        for (CheckpointTensor& t : ck.tensors) {
          const Tensor f = from_st(t.dense, t.name);
          t.dense = to_st(Tensor::from_float(f.to_float(), f.shape, dtype));
        }
        write_safetensors((dir_ / "model.safetensors").string(),
                          encode_checkpoint(ck, CheckpointFormat::kDense));
      }
      const std::string pruned = dir_.string() + "-pruned", converted = dir_.string() + "-converted";
      const PruneModelReport r = prune_model(dir_.string(), pruned, CheckpointFormat::kSparse24, {});
      EXPECT_EQ(r.weights.size(), static_cast<size_t>((fused ? 4 : 7) * t_.layers));
      ConvertOptions c;
      c.to = CheckpointFormat::kSparse24;
      c.prune = true;
      c.targets = kDecoderLinears;
      convert_model(dir_.string(), converted, c);
      const HfDir a = read_hf_dir(pruned), b = read_hf_dir(converted);
      EXPECT_EQ(a.weights.sparse_count(), static_cast<int64_t>(r.weights.size()));
      testing::expect_same_tensors(a.weights, b.weights);
      PruneModelOptions o;
      o.int8 = true;
      const std::string int8 = dir_.string() + "-int8";
      prune_model(dir_.string(), int8, CheckpointFormat::kSparse24, o);
      DecoderLoadOptions as_read;
      as_read.prune = as_read.int8 = true;
      DecoderModel saved = load_hf_decoder(int8), read = load_hf_decoder(dir_.string(), as_read);
      for (int64_t l = 0; l < t_.layers; ++l)
        for (int which = 0; which < 4; ++which) {
          const Compressed &x = gemm(saved, l, which).sparse, &y = gemm(read, l, which).sparse;
          EXPECT_EQ(x.values, y.values) << l << " " << which;
          EXPECT_EQ(x.metadata, y.metadata) << l << " " << which;
          EXPECT_EQ(x.scales, y.scales) << l << " " << which;
        }
      for (const std::string& d : {pruned, converted, int8}) std::filesystem::remove_all(d);
    }
  t_ = Tiny();
}

// prune-model with int8: the pruned Linears stored as int8 with scales (sparse24 layout). Loaded, they are
// bit for bit the Linears loading the source with --prune --int8 makes, and give its logits: from a Q8_0
// GGUF file (pruned from the dequantized fp32 values, not from the bf16 ones the file's directory holds)
// and from a bf16 directory. The other layouts are refused before anything is written.
TEST_F(PruneDecoder, Int8DirectoryHoldsWhatPruningAsReadRuns) {
  SPARSE24_SEED_TRACE();
  auto g = rng(16);
  Tiny t;
  t.hidden = 32;  // rows of whole Q8_0 blocks
  t.heads = 8;
  t.ffn = 64;
  const auto [gguf, converted] = q8_0_sources(g, t);
  const std::vector<int32_t> ids = random_ids(g, 7, t.vocab);
  DecoderLoadOptions as_read;
  as_read.prune = as_read.int8 = true;
  DecoderOptions i8;
  i8.int8_weights = true;
  auto logits = [&](const DecoderModel& model) {
    std::vector<float> out(ids.size() * static_cast<size_t>(t.vocab));
    Decoder(model, i8).forward(ids.data(), static_cast<int64_t>(ids.size()), out.data(), true);
    return out;
  };
  for (const std::string& source : {gguf, converted}) {
    SCOPED_TRACE(source);
    PruneModelOptions o;
    o.int8 = true;
    const std::string out = source + "-int8";
    EXPECT_EQ(prune_model(source, out, CheckpointFormat::kSparse24, o).weights.size(),
              static_cast<size_t>(7 * t.layers));
    DecoderModel got = load_hf_decoder(out), want = source == gguf ? load_gguf_decoder(gguf, as_read)
                                                                   : load_hf_decoder(converted, as_read);
    for (int64_t l = 0; l < t.layers; ++l)
      for (int which = 0; which < 4; ++which) {
        SCOPED_TRACE("layer " + std::to_string(l) + " linear " + std::to_string(which));
        const Compressed &a = gemm(got, l, which).sparse, &b = gemm(want, l, which).sparse;
        ASSERT_TRUE(gemm(got, l, which).pruned);
        EXPECT_EQ(a.dtype, DType::kI8);
        EXPECT_GT(a.scale_group, 0);
        EXPECT_EQ(a.scale_group, b.scale_group);
        EXPECT_EQ(a.values, b.values);
        EXPECT_EQ(a.metadata, b.metadata);
        EXPECT_EQ(a.scales, b.scales);
      }
    // The embeddings and head written as the int8 tables a load with int8 weights makes (a scale per 64 of
    // a row; a row of the embeddings within half a step of its value), read back as they are.
    for (const CheckpointInfo::Tensor& x : inspect_checkpoint(out).tensors)
      if (x.name == "model.embed_tokens.weight" || x.name == "lm_head.weight") {
        EXPECT_EQ(x.dtype, "I8") << x.name;
        EXPECT_EQ(x.scale_group, 64) << x.name;
      }
    ASSERT_FALSE(got.embed_table.i8.empty());
    const WeightTable &head = got.config.tied ? got.embed_table : got.head_table,
                      &want_head = want.config.tied ? want.embed_table : want.head_table;
    ASSERT_FALSE(head.i8.empty());
    if (source == converted) {  // (the GGUF file's Q8_0 head runs as stored)
      EXPECT_EQ(head.i8, want_head.i8);
      EXPECT_EQ(head.scales, want_head.scales);
    }
    std::vector<float> a(static_cast<size_t>(t.hidden)), b(a.size());
    for (int32_t id = 0; id < t.vocab; ++id) {
      got.embedding(id, a.data());
      want.embedding(id, b.data());
      const float step = got.embed_table.scales[static_cast<size_t>(id)];  // (one scale: hidden 32)
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 0.5001f * step) << id << " " << i;
    }
    // The same Linears; the embeddings and head as each source holds them (the GGUF file's in its mapping).
    const std::vector<float> x = logits(got), y = logits(want);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4 * (1 + std::abs(y[i]))) << i;
    // The Linears stored in the kernels' layout, and run where the files hold them (with the int8 tables) by
    // a Decoder loading the directory: bit for bit what the decoded and packed model computes.
    int64_t lanes = 0;
    for (const MappedHfDir::Tensor& mt : map_hf_dir(out, true).tensors) lanes += mt.t.lanes_kb > 0;
    EXPECT_EQ(lanes, 7 * t.layers);
    DecoderLoadOptions here;
    here.in_place = true;
    const std::string fp = load_hf_decoder(out).fingerprint;  // (one fingerprint however it is read)
    EXPECT_EQ(load_hf_decoder(out, here).fingerprint, fp);
    EXPECT_EQ(load_hf_decoder(read_hf_dir(out)).fingerprint, fp);
    for (int threads : {1, 2})
      for (bool int8_activations : {false, true}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + (int8_activations ? " int8 activations" : ""));
        DecoderOptions d = i8;
        d.threads = threads;
        d.int8_activations = int8_activations;
        std::vector<float> in_place(x.size()), decoded(x.size());
        Decoder(out, {}, d).forward(ids.data(), static_cast<int64_t>(ids.size()), in_place.data(), true);
        Decoder(load_hf_decoder(out), d)
            .forward(ids.data(), static_cast<int64_t>(ids.size()), decoded.data(), true);
        EXPECT_EQ(in_place, decoded);
      }
    std::filesystem::remove_all(out);
    for (CheckpointFormat to : {CheckpointFormat::kBitmask24, CheckpointFormat::kDense}) {
      try {
        prune_model(source, out, to, o);
        ADD_FAILURE() << "int8 written as " << checkpoint_format_name(to);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("int8 2:4 weights are written only in the sparse24 layout"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_FALSE(std::filesystem::exists(out));
    }
  }
}

// prune-model's fp32 and bf16 outputs store their Linears in the kernels' layout too (F32 from the fp32
// directory, BF16 from the Q8_0 file, as it writes its quantized weights), and a Decoder loading the
// directory runs them where the files hold them: bit for bit what the decoded and packed model computes,
// also where the Decoder's weights are narrower than what is stored (then decoded and rounded).
TEST_F(PruneDecoder, PrunedDirectoriesRunInPlace) {
  SPARSE24_SEED_TRACE();
  auto g = rng(17);
  Tiny t;
  t.hidden = 64;
  t.heads = 8;
  t.ffn = 128;
  const auto [gguf, converted] = q8_0_sources(g, t);
  const std::vector<int32_t> ids = random_ids(g, 5, t.vocab);
  for (const auto& [source, stored] :
       {std::pair<std::string, DType>{converted, DType::kF32}, {gguf, DType::kBF16}}) {
    SCOPED_TRACE(source);
    const std::string out = source + "-pruned";
    prune_model(source, out, CheckpointFormat::kSparse24, {});
    int64_t lanes = 0;
    for (const MappedHfDir::Tensor& mt : map_hf_dir(out, true).tensors)
      lanes += mt.t.lanes_kb > 0 && mt.t.lanes_dtype == stored;
    EXPECT_EQ(lanes, 7 * t.layers);
    for (int weights = 0; weights < 3; ++weights) {  // as stored, bf16, int8
      SCOPED_TRACE("weights " + std::to_string(weights));
      DecoderLoadOptions lo;
      lo.bf16 = weights == 1;
      lo.int8 = weights == 2;
      DecoderOptions d;
      d.threads = 2;
      d.bf16_weights = lo.bf16;
      d.int8_weights = lo.int8;
      std::vector<float> in_place(ids.size() * static_cast<size_t>(t.vocab)), decoded(in_place.size());
      Decoder(out, lo, d).forward(ids.data(), static_cast<int64_t>(ids.size()), in_place.data(), true);
      Decoder(load_hf_decoder(out, lo), d)
          .forward(ids.data(), static_cast<int64_t>(ids.size()), decoded.data(), true);
      EXPECT_EQ(in_place, decoded);
    }
    std::filesystem::remove_all(out);
  }
}

TEST_F(PruneDecoder, BadRequestsAreErrors) {
  auto g = rng(14);
  write(tiny_model(g, t_), config());
  HfDir d = read_hf_dir(dir_.string());
  auto error_of = [&](const PruneModelOptions& o) -> std::string {
    HfDir copy = d;
    try {
      prune_hf_decoder(copy, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  PruneModelOptions o;
  o.method = PruneMethod::kSparseGpt;
  EXPECT_NE(error_of(o).find("calibration"), std::string::npos) << error_of(o);
  o.calibration_ids = {random_ids(g, 65, t_.vocab)};  // longer than max_position_embeddings (64)
  EXPECT_NE(error_of(o).find("64 positions"), std::string::npos) << error_of(o);
  o.calibration_ids = {{0, 1, static_cast<int32_t>(t_.vocab)}};
  EXPECT_NE(error_of(o).find("outside the vocabulary"), std::string::npos) << error_of(o);
  o.method = PruneMethod::kMagnitude;
  o.targets = "nothing-like-this";
  EXPECT_NE(error_of(o).find("no weight matched"), std::string::npos) << error_of(o);
  // Pruned once, nothing is left to prune.
  o.targets = "";
  prune_hf_decoder(d, o);
  EXPECT_NE(error_of(o).find("no weight matched"), std::string::npos) << error_of(o);
}

}  // namespace
}  // namespace sparse24::engine
