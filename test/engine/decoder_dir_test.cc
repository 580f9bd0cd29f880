// How a decoder holds a Hugging Face directory's tensors (decoder.h): read in place (its shards mapped) or
// into memory first, a bf16 checkpoint's tables as stored, an untied model's embeddings left in the file.
// The loaders themselves: decoder_load_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "../common/seed.h"
#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "tiny_decoder.h"

namespace sparse24::engine {
namespace {

// A directory read in place (its shards mapped: what load_hf_decoder(dir) does) and read into memory first
// (read_hf_dir) load the same model: weights, fingerprint, logits; with the weights dense, and with the
// Linears stored 2:4 in sparse24's layout (moved into the model as read; the mapped read copies Q, K and V,
// and gate and up, straight into their joined GEMM, Weights::linear_rows): fp32, bf16 and int8 with scales,
// with and without biases.
TEST_F(HfDecoderDir, MappedAndInMemoryReadsAgree) {
  SPARSE24_SEED_TRACE();
  auto g = rng(24);
  for (bool biases : {false, true}) {
    t_.biases = biases;
    DecoderModel m = tiny_model(g, t_);
    m.prune_magnitude();
    const std::vector<int32_t> ids = random_ids(g, 7, t_.vocab);
    const auto logits = [&](const DecoderModel& model) {
      Decoder d(model, {});
      std::vector<float> out(static_cast<size_t>(ids.size() * t_.vocab));
      d.forward(ids.data(), static_cast<int64_t>(ids.size()), out.data(), true);
      return out;
    };
    json c = config();
    if (biases) c["attention_bias"] = c["mlp_bias"] = true;
    for (const char* layout : {"dense", "fp32", "bf16", "int8"}) {
      SCOPED_TRACE(std::string(layout) + (biases ? ", biases" : ""));
      write(m, c);
      const std::string file = (dir_ / "model.safetensors").string();
      const bool compressed = std::string(layout) != "dense";
      if (compressed) {
        Checkpoint ck = load_checkpoint(file);
        sparsify(ck, {});
        ASSERT_EQ(ck.sparse_count(), 7 * t_.layers);
        for (CheckpointTensor& t : ck.tensors)
          if (t.sparse && std::string(layout) == "bf16")
            t.sparse = to_bf16(std::move(*t.sparse));
          else if (t.sparse && std::string(layout) == "int8")
            t.sparse = quantize_int8(*t.sparse, 64);
        write_safetensors(file, encode_checkpoint(ck, CheckpointFormat::kSparse24));
      }
      const DecoderModel mapped = load_hf_decoder(dir_.string()),
                         held = load_hf_decoder(read_hf_dir(dir_.string()));
      EXPECT_EQ(mapped.fingerprint, held.fingerprint);
      EXPECT_EQ(mapped.embed, held.embed);
      for (size_t l = 0; l < held.layers.size(); ++l)
        for (auto G : {&DecoderLayer::qkv, &DecoderLayer::o, &DecoderLayer::gate_up, &DecoderLayer::down}) {
          const Gemm &a = mapped.layers[l].*G, &b = held.layers[l].*G;
          EXPECT_EQ(a.pruned, compressed);
          EXPECT_EQ(a.pruned, b.pruned);
          EXPECT_EQ(a.m, b.m);
          EXPECT_EQ(a.sources, b.sources);
          EXPECT_EQ(a.dense, b.dense);
          EXPECT_EQ(a.bias, b.bias);
          EXPECT_EQ(a.bias.empty(), !biases);
          EXPECT_EQ(a.sparse.dtype, b.sparse.dtype);
          EXPECT_EQ(a.sparse.shape, b.sparse.shape);
          EXPECT_EQ(a.sparse.scale_group, b.sparse.scale_group);
          EXPECT_EQ(a.sparse.values, b.sparse.values);
          EXPECT_EQ(a.sparse.metadata, b.sparse.metadata);
          EXPECT_EQ(a.sparse.scales, b.sparse.scales);
          if (compressed) {
            EXPECT_NO_THROW(validate(a.sparse));
          }
        }
      EXPECT_EQ(logits(mapped), logits(held));
    }
  }
  t_.biases = false;
  DecoderModel pruned = tiny_model(g, t_);
  pruned.prune_magnitude();
  write(pruned, config());
  {  // a part of a joined GEMM that is not valid: named, its row counted in it
    const std::string file = (dir_ / "model.safetensors").string();
    Checkpoint ck = load_checkpoint(file);
    sparsify(ck, {});
    const std::string k = "model.layers.0.self_attn.k_proj.weight";
    for (CheckpointTensor& t : ck.tensors)
      if (t.sparse && t.name.find(".self_attn.") != std::string::npos)
        t.sparse = quantize_int8(*t.sparse, 64);
    SafeTensors st = encode_checkpoint(ck, CheckpointFormat::kSparse24);
    for (auto& [name, t] : st.tensors)
      if (name == k + ".metadata") t.bytes[static_cast<size_t>(t.shape[1])] = 0x0F;  // row 1, group 0
    write_safetensors(file, st);
    const std::string w = load_error();  // ("" if it loaded)
    EXPECT_NE(w.find("'" + k + "'"), std::string::npos) << w;
    EXPECT_NE(w.find("invalid metadata code 0xf at row 1, group 0"), std::string::npos) << w;
    st = encode_checkpoint(ck, CheckpointFormat::kSparse24);  // an infinity in up_proj's fp32 values
    const std::string up = "model.layers.0.mlp.up_proj.weight";
    const float inf = std::numeric_limits<float>::infinity();
    for (auto& [name, t] : st.tensors)
      if (name == up + ".values") std::memcpy(t.bytes.data() + 4 * 5, &inf, 4);
    write_safetensors(file, st);
    const std::string inf_error = load_error();  // ("" if it loaded)
    EXPECT_NE(inf_error.find("'" + up + "' holds a non-finite value"), std::string::npos) << inf_error;
  }
  write(pruned, config());
  {  // a part whose values do not run as stored (f16: widened to fp32): read part by part, the same model
    const std::string file = (dir_ / "model.safetensors").string();
    Checkpoint ck = load_checkpoint(file);
    sparsify(ck, {});
    for (CheckpointTensor& t : ck.tensors)
      if (t.name == "model.layers.0.self_attn.k_proj.weight") {
        const Tensor d = decompress(*t.sparse);
        t.sparse = compress(Tensor::from_float(d.to_float(), d.shape, DType::kF16));
      }
    write_safetensors(file, encode_checkpoint(ck, CheckpointFormat::kSparse24));
    const DecoderModel mapped = load_hf_decoder(dir_.string()),
                       held = load_hf_decoder(read_hf_dir(dir_.string()));
    EXPECT_EQ(mapped.fingerprint, held.fingerprint);
    EXPECT_EQ(mapped.layers[0].qkv.sparse.values, held.layers[0].qkv.sparse.values);
  }
  // The mapped read decodes a 2:4 layer when its layer is read (map_hf_dir's defer_sparse24: the layer is
  // left in the file until then): an invalid code in the last layer's down_proj still fails the load, naming
  // the layer, with int8 weights too.
  const std::string file = (dir_ / "model.safetensors").string();
  SafeTensors st = read_safetensors(file);
  const std::string down = "model.layers." + std::to_string(t_.layers - 1) + ".mlp.down_proj.weight";
  for (auto& [name, t] : st.tensors)
    if (name == down + ".metadata") t.bytes.back() = 0xFF;  // (positions 3, 3)
  write_safetensors(file, st);
  EXPECT_THROW(map_hf_dir(dir_.string()), Error);  // decoded at once
  bool left = false;
  for (const MappedHfDir::Tensor& t : map_hf_dir(dir_.string(), true).tensors)
    left |= t.t.name == down && t.t.decode && !t.t.sparse;
  EXPECT_TRUE(left);
  for (bool int8 : {false, true}) {
    DecoderLoadOptions o;
    o.int8 = int8;
    try {
      load_hf_decoder(dir_.string(), o);
      ADD_FAILURE() << "an invalid 2:4 layer loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + down + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("invalid metadata code"), std::string::npos) << e.what();
    }
  }
}

// Dense int8 matrices with scales (the sparse24 layout's; prune-model --int8 writes the tables so): a
// [vocab, hidden] table with a scale per 64 of a row is the decoder's int8 table as stored, under any load
// options; any other one (another group, a Linear) is read dequantized. Mapped and in memory alike.
TEST_F(HfDecoderDir, ScaledInt8MatricesReadAsStored) {
  SPARSE24_SEED_TRACE();
  auto g = rng(25);
  DecoderModel m = tiny_model(g, t_);
  m.prune_magnitude();
  const std::vector<int32_t> ids = random_ids(g, 5, t_.vocab);
  const auto logits = [&](const DecoderModel& model) {
    std::vector<float> out(static_cast<size_t>(ids.size() * t_.vocab));
    Decoder(model, {}).forward(ids.data(), static_cast<int64_t>(ids.size()), out.data(), true);
    return out;
  };
  // t as int8 with a scale per `group` of a row (the table's rounding, detail::int8_table, at 64).
  const auto scaled = [](CheckpointTensor& t, int64_t group) {
    const Tensor d = t.sparse ? decompress(*t.sparse) : from_st(t.dense, t.name);
    const int64_t rows = d.shape[0], cols = d.shape[1];
    std::vector<float> w = d.to_float();
    t.sparse.reset();
    t.dense = StTensor{"I8", d.shape, std::vector<uint8_t>(w.size())};
    t.scale_group = group;
    t.scales.assign(static_cast<size_t>(rows * ((cols + group - 1) / group)), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k0 = 0; k0 < cols; k0 += group) {
        float top = 1e-6f;
        for (int64_t k = k0; k < std::min(cols, k0 + group); ++k)
          top = std::max(top, std::abs(w[r * cols + k]));
        t.scales[static_cast<size_t>(r * ((cols + group - 1) / group) + k0 / group)] = top / 127;
        for (int64_t k = k0; k < std::min(cols, k0 + group); ++k)
          t.dense.bytes[static_cast<size_t>(r * cols + k)] =
              static_cast<uint8_t>(static_cast<int8_t>(std::lround(w[r * cols + k] / top * 127)));
      }
  };
  const std::string file = (dir_ / "model.safetensors").string(),
                    o_proj = "model.layers.0.self_attn.o_proj.weight";
  for (int64_t group : {int64_t{64}, int64_t{8}}) {
    SCOPED_TRACE("table group " + std::to_string(group));
    write(m, config());
    Checkpoint ck = load_checkpoint(file);
    sparsify(ck, {});
    std::optional<CheckpointTensor> table, o;
    for (CheckpointTensor& t : ck.tensors) {
      if (t.name == "model.embed_tokens.weight") scaled(t, group), table = t;
      if (t.name == o_proj) scaled(t, 16), o = t;
    }
    ASSERT_TRUE(table && o);
    write_safetensors(file, encode_checkpoint(ck, CheckpointFormat::kSparse24));
    const DecoderModel mapped = load_hf_decoder(dir_.string()),
                       held = load_hf_decoder(read_hf_dir(dir_.string()));
    EXPECT_EQ(mapped.fingerprint, held.fingerprint);
    for (const DecoderModel* x : {&mapped, &held}) {
      const StTensor w = dequantized(*o);  // (a Linear: dense, dequantized)
      const auto* f = reinterpret_cast<const float*>(w.bytes.data());
      EXPECT_FALSE(x->layers[0].o.pruned);
      EXPECT_EQ(x->layers[0].o.dense, std::vector<float>(f, f + w.bytes.size() / 4));
      if (group == 64) {  // the int8 table as stored
        EXPECT_TRUE(x->embed.empty());
        EXPECT_EQ(std::vector<uint8_t>(x->embed_table.i8.begin(), x->embed_table.i8.end()),
                  table->dense.bytes);
        EXPECT_EQ(x->embed_table.scales, table->scales);
      } else {  // dequantized, as an fp32 table is read
        const StTensor e = dequantized(*table);
        const auto* v = reinterpret_cast<const float*>(e.bytes.data());
        EXPECT_TRUE(x->embed_table.empty());
        EXPECT_EQ(x->embed, std::vector<float>(v, v + e.bytes.size() / 4));
      }
    }
    EXPECT_EQ(logits(mapped), logits(held));
    for (bool int8 : {false, true}) {  // bf16 or int8 tables asked for: the stored one still
      DecoderLoadOptions lo;
      (int8 ? lo.int8 : lo.bf16) = true;
      const DecoderModel x = load_hf_decoder(dir_.string(), lo);
      EXPECT_EQ(x.embed_table.i8.empty(), !int8 && group != 64);
      if (group == 64) {
        EXPECT_EQ(x.embed_table.scales, table->scales);
      }
    }
  }
}

// Decoder(path, load options, options) packs each layer's 2:4 Linears on a second thread while the next are
// read: the Decoder of load_decoder then Decoder(model, options) (logits, bytes, Linears), whatever the
// threads, layouts and weight types; the caller's on_layer still sees every layer; a Linear that does not
// pack and a layer that does not load give their errors (the packing thread stopped, not left running).
TEST_F(HfDecoderDir, LoadingConstructorPacksAsItReads) {
  SPARSE24_SEED_TRACE();
  auto g = rng(25);
  t_.layers = 3;
  DecoderModel m = tiny_model(g, t_);
  const std::vector<int32_t> ids = random_ids(g, 6, t_.vocab);
  const auto run = [&](Decoder& d) {
    std::vector<float> out(static_cast<size_t>(ids.size() * t_.vocab));
    d.forward(ids.data(), static_cast<int64_t>(ids.size()), out.data(), true);
    return out;
  };
  const std::string file = (dir_ / "model.safetensors").string();
  const auto store = [&](const char* layout, int64_t scale_group = 64) {
    write(m, config());
    if (std::string(layout) == "dense") return;
    Checkpoint ck = load_checkpoint(file);
    sparsify(ck, {});
    for (CheckpointTensor& t : ck.tensors)
      if (t.sparse && std::string(layout) == "int8") t.sparse = quantize_int8(*t.sparse, scale_group);
    write_safetensors(file, encode_checkpoint(ck, CheckpointFormat::kSparse24));
  };
  const DecoderModel dense = m;
  m.prune_magnitude();
  for (const char* layout : {"dense", "fp32", "int8"}) {
    store(layout);
    if (std::string(layout) == "dense") write(dense, config());
    for (int threads : {1, 2, 3})
      for (bool int8 : {false, true})
        for (Mode mode : {Mode::kSparse, Mode::kDense}) {
          SCOPED_TRACE(std::string(layout) + ", threads " + std::to_string(threads) + (int8 ? ", int8" : "") +
                       (mode == Mode::kDense ? ", dense" : ""));
          DecoderLoadOptions lo;
          lo.prune = std::string(layout) == "dense";
          lo.int8 = int8 && mode != Mode::kDense;
          lo.threads = threads;
          DecoderOptions o;
          o.threads = threads;
          o.mode = mode;
          o.int8_weights = int8;
          o.prefill_layout = threads == 3;
          int64_t seen = 0;
          lo.on_layer = [&](DecoderModel&, DecoderLayer&, int64_t index) { EXPECT_EQ(index, seen++); };
          Decoder a(dir_.string(), lo, o);
          EXPECT_EQ(seen, t_.layers);
          lo.on_layer = nullptr;
          Decoder b(load_hf_decoder(dir_.string(), lo), o);
          EXPECT_EQ(run(a), run(b));
          EXPECT_EQ(a.weight_bytes(), b.weight_bytes());
          EXPECT_EQ(a.sparse_linears(), b.sparse_linears());
          EXPECT_EQ(a.sparse_linears(), mode == Mode::kDense ? 0 : 4 * t_.layers);
        }
  }
  DecoderOptions two;
  two.threads = 2;
  const auto error = [&](auto make) {
    try {
      make();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  store("int8", 32);  // int8 values the kernels do not take (a scale per 32 positions): pack's error
  const std::string plain = error([&] { Decoder(load_hf_decoder(dir_.string()), two); });
  EXPECT_NE(plain.find("int8 scale groups of 32 positions"), std::string::npos) << plain;
  EXPECT_EQ(error([&] { Decoder(dir_.string(), {}, two); }), plain);
  store("fp32");
  SafeTensors st = read_safetensors(file);
  const std::string last = "model.layers." + std::to_string(t_.layers - 1) + ".mlp.down_proj.weight";
  for (auto& [name, t] : st.tensors)
    if (name == last + ".metadata") t.bytes.back() = 0xFF;
  write_safetensors(file, st);
  const std::string bad = error([&] { Decoder(dir_.string(), {}, two); });
  EXPECT_NE(bad.find("'" + last + "'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("invalid metadata code"), std::string::npos) << bad;
  t_ = Tiny();
}

// A bf16 checkpoint (what prune-model writes) runs as it is stored: its 2:4 values as bf16 weights and its
// embeddings and head left in the mapped file (the head run there, kernels::gemv_ggml's BF16 rows: the bf16
// table's kernel), exactly its values. The same
// logits, bit for bit, and bytes as its float32 copy run with bf16_weights (and with int8_weights, whose
// tables are then made of the bf16 rows); fewer bytes than that copy run as float32, and the same logits up
// to the kernels' rounding. Tied and untied.
TEST_F(HfDecoderDir, Bf16CheckpointRunsAsBf16Weights) {
  SPARSE24_SEED_TRACE();
  auto g = rng(26);
  for (bool untied : {false, true}) {
    SCOPED_TRACE(untied ? "untied" : "tied");
    DecoderModel m = tiny_model(g, t_);
    m.prune_magnitude();
    json cfg = config();
    cfg["tie_word_embeddings"] = !untied;
    write(m, cfg);
    const std::string file = (dir_ / "model.safetensors").string();
    Checkpoint f32 = load_checkpoint(file);
    if (untied)
      f32.tensors.push_back({"lm_head.weight",
                             to_st(Tensor::from_float(random_floats(g, t_.vocab * t_.hidden, -0.3f, 0.3f),
                                                      {t_.vocab, t_.hidden})),
                             std::nullopt});
    sparsify(f32, {});
    Checkpoint bf16 = f32;
    // Every float rounded to bf16 in f32 (a's), stored as bf16 in bf16 (b's).
    const auto narrow = [](std::vector<uint8_t>& a, std::vector<uint8_t>& b) {
      b.resize(a.size() / 2);
      for (size_t j = 0; j < b.size() / 2; ++j) {
        float v;
        std::memcpy(&v, &a[4 * j], 4);
        const uint16_t h = float_to_bf16(v);
        v = bf16_to_float(h);
        std::memcpy(&a[4 * j], &v, 4);
        std::memcpy(&b[2 * j], &h, 2);
      }
    };
    for (size_t i = 0; i < f32.tensors.size(); ++i) {
      CheckpointTensor &a = f32.tensors[i], &b = bf16.tensors[i];
      if (a.sparse) {
        narrow(a.sparse->values, b.sparse->values);
        b.sparse->dtype = DType::kBF16;
      } else {
        ASSERT_EQ(a.dense.dtype, "F32");
        narrow(a.dense.bytes, b.dense.bytes);
        b.dense.dtype = "BF16";
      }
    }
    const auto load = [&](const Checkpoint& ck) {
      write_safetensors(file, encode_checkpoint(ck, CheckpointFormat::kSparse24));
      return load_hf_decoder(dir_.string());
    };
    {  // the tables as stored: in the file, no fp32 nor bf16 copy (an fp32 table is read, unless untied)
      const size_t table = static_cast<size_t>(t_.vocab * t_.hidden);
      const DecoderModel b = load(bf16), a = load(f32);
      EXPECT_TRUE(b.embed.empty() && b.head.dense.empty());
      EXPECT_TRUE(b.embed_table.empty() && b.head_table.empty());
      EXPECT_NE(b.embed_stored.data, nullptr);
      EXPECT_EQ(b.head_stored.data != nullptr, untied);
      EXPECT_EQ(a.embed.size(), untied ? 0 : table);
      EXPECT_EQ(a.embed_stored.data != nullptr, untied);
      EXPECT_TRUE(a.embed_table.empty() && a.head_table.empty());
      std::vector<float> x(static_cast<size_t>(t_.hidden)), y(x.size());
      for (int32_t id : {0, static_cast<int32_t>(t_.vocab - 1)}) {
        b.embedding(id, x.data());
        a.embedding(id, y.data());
        EXPECT_EQ(x, y) << id;
      }
    }
    const std::vector<int32_t> ids = random_ids(g, 7, t_.vocab);
    struct Run {
      std::vector<float> logits;
      size_t bytes;
    };
    const auto run = [&](const Checkpoint& ck, const DecoderOptions& o) {
      const DecoderModel model = load(ck);
      Decoder d(model, o);
      Run r{std::vector<float>(static_cast<size_t>(ids.size() * t_.vocab)), d.weight_bytes()};
      d.forward(ids.data(), static_cast<int64_t>(ids.size()), r.logits.data(), true);
      return r;
    };
    DecoderOptions as_bf16, as_int8;
    as_bf16.bf16_weights = true;
    as_int8.int8_weights = true;
    const Run a = run(bf16, {}), b = run(f32, as_bf16), c = run(f32, {});
    EXPECT_EQ(a.logits, b.logits);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_LT(a.bytes, c.bytes);
    for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_NEAR(a.logits[i], c.logits[i], 1e-4) << i;
    const Run i8 = run(bf16, as_int8), f8 = run(f32, as_int8);
    EXPECT_EQ(i8.logits, f8.logits);
    EXPECT_EQ(i8.bytes, f8.bytes);
  }
}

// An untied model's embeddings read from a directory stay in its mapped file as stored (f32, f16, bf16):
// nothing of them held, whatever the Decoder's weights (fp32, bf16, int8; given or taken), and the logits bit
// for bit those of the same directory read into memory first; the mapping outlives the directory's removal.
// A tied model's table (the head too) is still read; a non-finite embedding is refused at load.
TEST_F(HfDecoderDir, UntiedEmbeddingsStayInTheMappedFile) {
  SPARSE24_SEED_TRACE();
  auto g = rng(27);
  DecoderModel m = tiny_model(g, t_);
  m.prune_magnitude();
  const std::string file = (dir_ / "model.safetensors").string(), word = "model.embed_tokens.weight";
  const std::vector<int32_t> ids = random_ids(g, 7, t_.vocab);
  const auto table = static_cast<size_t>(t_.vocab * t_.hidden);
  // The model untied (a head of its own) with its embeddings stored as `type`, one of them `poison`.
  const auto store = [&](DType type, float poison) {
    json cfg = config();
    cfg["tie_word_embeddings"] = false;
    write(m, cfg);
    Checkpoint ck = load_checkpoint(file);
    ck.tensors.push_back({"lm_head.weight",
                          to_st(Tensor::from_float(random_floats(g, t_.vocab * t_.hidden, -0.3f, 0.3f),
                                                   {t_.vocab, t_.hidden})),
                          std::nullopt});
    for (CheckpointTensor& t : ck.tensors)
      if (t.name == word) {
        std::vector<float> v = m.embed;
        v[5] = poison;
        t.dense = to_st(Tensor::from_float(v, {t_.vocab, t_.hidden}, type));
      }
    write_safetensors(file, encode_checkpoint(ck, CheckpointFormat::kSparse24));
  };
  struct Run {
    std::vector<float> logits;
    size_t bytes, stored;
  };
  const auto run = [&](DecoderModel model, const DecoderOptions& o, bool take) {
    std::optional<Decoder> d;
    if (take)
      d.emplace(std::move(model), o);
    else
      d.emplace(model, o);
    Run r{std::vector<float>(ids.size() * static_cast<size_t>(t_.vocab)), d->weight_bytes(),
          d->stored_bytes()};
    d->forward(ids.data(), static_cast<int64_t>(ids.size()), r.logits.data(), true);
    return r;
  };
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE("stored as " + std::to_string(static_cast<int>(type)));
    store(type, 0.5f);
    DecoderModel mapped = load_hf_decoder(dir_.string());
    const DecoderModel held = load_hf_decoder(read_hf_dir(dir_.string()));
    ASSERT_NE(mapped.embed_stored.data, nullptr);
    EXPECT_EQ(mapped.embed_stored.type, type);
    EXPECT_TRUE(mapped.embed.empty() && mapped.embed_table.empty());
    EXPECT_EQ(held.embed_stored.data, nullptr);
    EXPECT_EQ(mapped.fingerprint, held.fingerprint);
    std::vector<float> x(static_cast<size_t>(t_.hidden)), y(x.size());
    for (int32_t id : {0, 1, static_cast<int32_t>(t_.vocab - 1)}) {
      mapped.embedding(id, x.data());
      held.embedding(id, y.data());
      EXPECT_EQ(x, y) << id;
    }
    std::filesystem::remove(file);  // the mapping outlives the name
    // The held model with its fp32 table as rows in memory: what every weights option must match bit for bit
    // (bf16 / int8 weights otherwise round a held untied table's rows; the file's rows are exact).
    DecoderModel rows = held;
    auto values = std::make_shared<std::vector<float>>(std::move(rows.embed));
    rows.embed.clear();
    rows.embed_stored = {values, reinterpret_cast<const uint8_t*>(values->data()), DType::kF32, t_.vocab,
                         t_.hidden};
    DecoderOptions as_bf16, as_int8;
    as_bf16.bf16_weights = true;
    as_int8.int8_weights = true;
    for (const DecoderOptions& o : {DecoderOptions{}, as_bf16, as_int8})
      for (bool take : {false, true}) {
        SCOPED_TRACE(std::string(o.bf16_weights   ? "bf16"
                                 : o.int8_weights ? "int8"
                                                  : "fp32") +
                     (take ? ", taken" : ", given"));
        const Run a = run(mapped, o, take), b = run(rows, o, take), c = run(held, o, take);
        EXPECT_EQ(a.logits, b.logits);
        EXPECT_EQ(a.bytes, b.bytes);
        EXPECT_EQ(a.stored, table * dtype_size(type));
        EXPECT_EQ(b.stored, table * sizeof(float));
        EXPECT_EQ(c.stored, 0u);
        if (!o.bf16_weights && !o.int8_weights) {  // the held table's own path: the same logits, its bytes
          EXPECT_EQ(a.logits, c.logits);
          EXPECT_EQ(a.bytes + table * sizeof(float), c.bytes);
        } else {
          EXPECT_EQ(a.bytes, c.bytes);  // (a token reads one row: not counted)
          for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_NEAR(a.logits[i], c.logits[i], 0.05) << i;
        }
      }
  }
  // As read with the load options too (the Linears pruned and quantized as read; the embeddings left).
  store(DType::kBF16, 0.5f);
  DecoderLoadOptions lo;
  lo.int8 = true;
  const DecoderModel q = load_hf_decoder(dir_.string(), lo);
  EXPECT_NE(q.embed_stored.data, nullptr);
  EXPECT_TRUE(q.embed_table.empty() && !q.head_table.empty());
  {  // tied: the table is the head, read whole
    write(m, config());
    const DecoderModel tied = load_hf_decoder(dir_.string());
    EXPECT_EQ(tied.embed_stored.data, nullptr);
    EXPECT_EQ(tied.embed.size(), table);
  }
  for (DType type : {DType::kF32, DType::kBF16}) {
    store(type, std::numeric_limits<float>::infinity());
    try {
      load_hf_decoder(dir_.string());
      ADD_FAILURE() << "a non-finite embedding loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + word + "' holds a non-finite value"), std::string::npos)
          << e.what();
    }
  }
}

// A directory's F16 head (an untied model's, or a tied model's table) stays in the mapped file and runs
// there as stored, as a GGUF file's does (detail::head_runs_stored): the logits of the same directory read
// into memory first within the head's summation order (9 tokens: the head widened; and the last token alone:
// its GEMV), its bytes left in the file; with int8 weights it becomes the int8 table the held head becomes
// (the same logits where the embeddings are not rounded too); loaded with int8 it is read, not left.
TEST_F(HfDecoderDir, F16HeadRunsInTheMappedFile) {
  SPARSE24_SEED_TRACE();
  auto g = rng(28);
  const DecoderModel m = tiny_model(g, t_);
  const std::string file = (dir_ / "model.safetensors").string();
  const std::vector<int32_t> ids = random_ids(g, 9, t_.vocab);
  const auto table = static_cast<size_t>(t_.vocab * t_.hidden);
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    json cfg = config();
    cfg["tie_word_embeddings"] = tied;
    write(m, cfg);
    Checkpoint ck = load_checkpoint(file);
    const auto f16 = [&](const std::vector<float>& v) {
      return to_st(Tensor::from_float(v, {t_.vocab, t_.hidden}, DType::kF16));
    };
    for (CheckpointTensor& t : ck.tensors)
      if (t.name == "model.embed_tokens.weight") t.dense = f16(m.embed);
    if (!tied)
      ck.tensors.push_back(
          {"lm_head.weight", f16(random_floats(g, t_.vocab * t_.hidden, -0.3f, 0.3f)), std::nullopt});
    write_safetensors(file, encode_checkpoint(ck, CheckpointFormat::kSparse24));
    const DecoderModel mapped = load_hf_decoder(dir_.string()),
                       held = load_hf_decoder(read_hf_dir(dir_.string()));
    const StoredRows& head = tied ? mapped.embed_stored : mapped.head_stored;
    ASSERT_FALSE(head.empty());
    EXPECT_EQ(head.type, DType::kF16);
    EXPECT_TRUE(mapped.embed.empty() && mapped.head.dense.empty());
    EXPECT_TRUE(held.embed_stored.empty() && held.head_stored.empty());
    DecoderOptions as_int8;
    as_int8.int8_weights = true;
    for (const DecoderOptions& o : {DecoderOptions{}, as_int8}) {
      std::vector<std::vector<float>> logits;
      for (const DecoderModel* model : {&mapped, &held}) {
        Decoder d(*model, o);
        // (F16: 2 bytes a value; int8 weights make the head a table in memory, a tied model's rows with it)
        const size_t in_file = tied ? (o.int8_weights ? 0 : 2 * table) : (o.int8_weights ? 2 : 4) * table;
        EXPECT_EQ(d.stored_bytes(), model == &held ? 0 : in_file);
        logits.emplace_back(ids.size() * static_cast<size_t>(t_.vocab));
        d.forward(ids.data(), static_cast<int64_t>(ids.size()), logits.back().data(), true);
        std::vector<float> last(static_cast<size_t>(t_.vocab));
        d.reset();
        d.forward(ids.data(), static_cast<int64_t>(ids.size()), last.data());
        for (int64_t v = 0; v < t_.vocab; ++v)
          ASSERT_NEAR(last[v], logits.back()[(ids.size() - 1) * t_.vocab + v], 1e-4) << v;
      }
      const float tol = o.int8_weights && !tied ? 0.05f : 1e-4f;  // (the held untied embeddings rounded)
      for (size_t i = 0; i < logits[0].size(); ++i) ASSERT_NEAR(logits[0][i], logits[1][i], tol) << i;
    }
    DecoderLoadOptions lo;
    lo.int8 = true;
    const DecoderModel q = load_hf_decoder(dir_.string(), lo);
    EXPECT_TRUE(q.head_stored.empty() && !(tied ? q.embed_table : q.head_table).empty());
    EXPECT_EQ(q.embed_stored.empty(), tied);
  }
}

}  // namespace
}  // namespace sparse24::engine
