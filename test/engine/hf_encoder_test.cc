// Hugging Face encoders in the engine: tiny BERT and MPNet checkpoints written here (config.json,
// safetensors, sentence-transformers modules) against a scalar forward pass written from transformers'
// definitions; ragged batches against one sequence at a time; 2:4 checkpoints (sparse24 and sparse-24-bitmask
// layouts, one file or shards) in every mode; the plan's whole-model check; hostile directories.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "../../src/engine/ops.h"
#include "common/cli.h"
#include "common/seed.h"
#include "sparse24/checkpoint.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "sparse24/prune_model.h"
#include "sparse24/spmm.h"
#include "tiny_encoder.h"

namespace sparse24::engine {
namespace {

using json = nlohmann::json;
using sparse24::testing::random_floats;
using sparse24::testing::rng;
using sparse24::testing::TempDirTest;

class HfEncoder : public TempDirTest {};

TEST(HfEncoderOps, RelativeBucketsMatchTransformers) {
  // The boundaries where float32 rounding could move a bucket are at n = 8 * 2^(k/2) for 32 buckets; the
  // reference (double) and the engine (float32, as PyTorch) agree on every distance a sequence can have.
  for (int64_t rel = -600; rel <= 600; ++rel)
    ASSERT_EQ(detail::relative_bucket(rel, 32, 128), bucket_reference(rel, 32)) << "rel " << rel;
}

TEST_F(HfEncoder, TinyBertAndMpnetMatchTheScalarReference) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"})
    for (bool cls : {false, true}) {
      Tiny t;
      t.type = type;
      const SafeTensors w = weights_of(t, g);
      const std::filesystem::path dir = dir_ / (std::string(type) + (cls ? "-cls" : "-mean"));
      write_model(dir, t, w, cls, /*normalize=*/!cls);
      TextModelInfo info;
      const Model m = load_hf_encoder(dir.string(), &info);
      EXPECT_EQ(info.model_type, type);
      EXPECT_EQ(info.pool, cls ? PoolMode::kCls : PoolMode::kMean);
      EXPECT_EQ(m.max_sequence, t.max_pos - t.offset());
      const auto seqs = random_sequences(g, t, 5, m.max_sequence);
      std::vector<float> want;
      for (const auto& s : seqs) {
        const std::vector<float> e = reference_embedding(t, w, s, cls, !cls);
        want.insert(want.end(), e.begin(), e.end());
      }
      for (int threads : {1, 2}) {
        Engine e(m, 5 * m.max_sequence, threads, Mode::kDense);
        expect_near_all(run(e, seqs), want, 2e-5f, std::string(type) + " ragged batch");
        // One at a time gives the same (no padding leaks between sequences).
        for (size_t i = 0; i < seqs.size(); ++i) {
          const std::vector<float> one = run(e, {seqs[i]});
          for (int64_t r = 0; r < t.hidden; ++r) ASSERT_NEAR(one[r], want[i * t.hidden + r], 2e-5f);
        }
      }
    }
}

// Running the ops in ranges, each starting from the state the previous one left (calibration's scheme,
// prune_model.cc), gives exactly what one run gives; a range on another engine of the same graph too.
TEST_F(HfEncoder, OpRangesComposeToTheWholeRun) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"}) {
    Tiny t;
    t.type = type;
    t.layers = 3;
    const std::filesystem::path dir = dir_ / type;
    write_model(dir, t, weights_of(t, g), false, true);
    const Model m = load_hf_encoder(dir.string());
    const auto seqs = random_sequences(g, t, 4, m.max_sequence);
    TokenBatch batch;
    for (const auto& s : seqs) batch.add(s);
    Engine a(m, batch.tokens(), 1, Mode::kDense), b(m, batch.tokens(), 2, Mode::kDense);
    std::vector<float> whole(static_cast<size_t>(batch.sequences() * a.output_rows()));
    a.run_tokens(batch, whole.data());
    const size_t n = m.ops.size();
    for (std::vector<size_t> cuts :
         {std::vector<size_t>{0, n}, {0, 1, n / 2, n}, {0, n / 3, n / 3, 2 * n / 3, n}}) {
      Engine::State st;
      for (size_t i = 0; i + 1 < cuts.size(); ++i)
        (i % 2 ? b : a).run_tokens_range(batch, cuts[i], cuts[i + 1], st);
      ASSERT_TRUE(st.count(m.output)) << type;
      const std::vector<float>& out = st.at(m.output);  // [rows, sequences], feature-major
      ASSERT_EQ(out.size(), whole.size());
      const int64_t rows = a.output_rows(), seqn = batch.sequences();
      for (int64_t q = 0; q < seqn; ++q)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(out[r * seqn + q], whole[q * rows + r], 1e-6f) << type << " cut " << cuts[1];
    }
    Engine::State empty;
    EXPECT_THROW(a.run_tokens_range(batch, n / 2, n, empty), Error);  // the state it needs is missing
    EXPECT_THROW(a.run_tokens_range(batch, 2, 1, empty), Error);
  }
}

TEST_F(HfEncoder, PrunedCheckpointsRunSparseInEveryLayoutAndMode) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"}) {
    Tiny t;
    t.type = type;
    const std::filesystem::path dense_dir = dir_ / (std::string(type) + "-dense");
    write_model(dense_dir, t, weights_of(t, g), false, true);
    HfDir d = read_hf_dir(dense_dir.string());
    SparsifyOptions so;
    so.prune = true;
    so.targets = R"(encoder\.layer\.[0-9]+\.)";
    so.rank2_only = true;
    const SparsifyReport r = sparsify(d.weights, so);
    EXPECT_EQ(static_cast<int64_t>(r.pruned.size()), t.layers * 6);
    // The reference runs on the pruned weights with their zeros stored.
    Checkpoint zeros = d.weights;
    densify(zeros);
    SafeTensors zw = encode_checkpoint(zeros, CheckpointFormat::kDense);
    const auto seqs = random_sequences(g, t, 4, t.max_pos - t.offset());
    std::vector<float> want;
    for (const auto& s : seqs) {
      const std::vector<float> e = reference_embedding(t, zw, s, false, true);
      want.insert(want.end(), e.begin(), e.end());
    }
    for (CheckpointFormat f : {CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24}) {
      const std::string out = (dir_ / (std::string(type) + "-" + checkpoint_format_name(f))).string();
      write_hf_dir(d, d.weights, f, out);
      EXPECT_TRUE(std::filesystem::exists(out + "/1_Pooling/config.json"));  // the rest is carried along
      const Model m = load_hf_encoder(out);
      int pruned = 0;
      for (const Gemm& gm : m.gemms) pruned += gm.pruned;
      EXPECT_EQ(pruned, t.layers * 4);  // qkv (fused), attention output, ffn1, ffn2
      const Plan plan = build_plan(m, 64, 1, 1);
      EXPECT_TRUE(plan.whole == "layers" || plan.whole == "dense" || plan.whole == "sparse");
      EXPECT_GT(plan.dense_ms, 0.0);
      for (Mode mode : {Mode::kDense, Mode::kSparse, Mode::kPlan}) {
        Engine e(m, 4 * m.max_sequence, 1, mode, &plan);
        expect_near_all(run(e, seqs), want, 2e-5f, std::string(type) + " " + checkpoint_format_name(f));
      }
      EXPECT_LT(Engine(m, 64, 1, Mode::kSparse).weight_bytes(),
                Engine(m, 64, 1, Mode::kDense).weight_bytes());
    }
  }
}

// set_sparse_precision: the 2:4 Linears' values bf16 or int8 (and their inputs bf16 or int8 where the CPU
// can), the
// sparse engine against the dense one on the same narrowed values, at a capacity the memory-bound layout
// takes alone and at one where it is packed beside the compute-bound layout (run short and long there).
TEST_F(HfEncoder, NarrowerSparseValuesRunInBothLayouts) {
  auto g = rng();
  for (const char* type : {"bert", "mpnet"}) {
    Tiny t;
    t.type = type;
    const std::filesystem::path dir = dir_ / type;
    write_model(dir, t, weights_of(t, g), false, true);
    HfDir d = read_hf_dir(dir.string());
    SparsifyOptions so;
    so.prune = true;
    so.targets = kEncoderLinears;
    so.rank2_only = true;
    sparsify(d.weights, so);
    const Model base = load_hf_encoder(std::move(d));
    const auto seqs = random_sequences(g, t, 4, base.max_sequence);
    // Two tokens (random_sequences may give a sequence of one).
    const std::vector<std::vector<int32_t>> short_input = {{seqs[0].front(), seqs[1].front()}};
    Engine base_dense(base, 4 * base.max_sequence, 1, Mode::kDense);
    const std::vector<float> fp32 = run(base_dense, seqs);
    for (SparseValues v : {SparseValues::kBf16, SparseValues::kInt8})
      for (SparseActivations act :
           {SparseActivations::kF32, SparseActivations::kBf16, SparseActivations::kInt8}) {
        if (act == SparseActivations::kInt8 && v != SparseValues::kInt8) continue;
        const std::string what =
            std::string(type) + " " + sparse_values_name(v) + " x " + sparse_activations_name(act);
        Model m = base;
        set_sparse_precision(m, v, act);
        EXPECT_NE(m.fingerprint, base.fingerprint) << what;
        for (const Gemm& gm : m.gemms) {
          ASSERT_TRUE(gm.pruned) << what;
          EXPECT_EQ(gm.sparse.dtype, v == SparseValues::kBf16 ? DType::kBF16 : DType::kI8) << what;
          EXPECT_EQ(gm.activations, act) << what;
        }
        // Dense runs the narrowed values exactly (fp32 activations): near the fp32 model, not equal to it.
        Engine dense(m, 4 * m.max_sequence, 1, Mode::kDense);
        const std::vector<float> want = run(dense, seqs), want_short = run(dense, short_input);
        float moved = 0;
        for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, std::fabs(want[i] - fp32[i]));
        EXPECT_GT(moved, 0.0f) << what;
        EXPECT_LT(moved, 0.05f) << what;
        // Rounding the inputs to bf16 moves each product by up to 2^-8 of itself; int8 moves each input by
        // up to 1/254 of the largest in its block of 64.
        const float tol = act == SparseActivations::kBf16 && bf16_activations_supported()   ? 2e-2f
                          : act == SparseActivations::kInt8 && int8_activations_supported() ? 1e-2f
                                                                                            : 2e-5f;
        const bool rounds = tol > 2e-5f;
        for (int64_t capacity : {int64_t{2}, 4 * m.max_sequence}) {
          Engine e(m, capacity, 1, Mode::kSparse);
          const std::vector<float> got_short = run(e, short_input);
          expect_near_all(got_short, want_short, tol, what + " short, capacity " + std::to_string(capacity));
          // Where the activations are rounded, the short input (the memory-bound kernels) shows it.
          float apart = 0;
          for (size_t i = 0; i < got_short.size(); ++i)
            apart = std::max(apart, std::fabs(got_short[i] - want_short[i]));
          if (rounds) {
            EXPECT_GT(apart, 2e-5f) << what << ": the activations were not rounded";
          }
          if (capacity > 2) expect_near_all(run(e, seqs), want, tol, what + " long");
        }
        // At a large capacity the memory-bound layout is packed beside the compute-bound one (which holds
        // fp32 values, as the fp32 model's does) with AVX-512; with AVX2 the compute-bound one alone.
        const size_t narrow = Engine(m, 4 * m.max_sequence, 1, Mode::kSparse).weight_bytes(),
                     fp32_bytes = Engine(base, 4 * m.max_sequence, 1, Mode::kSparse).weight_bytes();
        if (active_isa() == Isa::kAvx512)
          EXPECT_GT(narrow, fp32_bytes) << what;
        else
          EXPECT_EQ(narrow, fp32_bytes) << what;
      }
    Model same = base;
    set_sparse_precision(same, SparseValues::kF32);
    EXPECT_EQ(same.fingerprint, base.fingerprint);
    EXPECT_THROW(set_sparse_precision(same, SparseValues::kF32, SparseActivations::kBf16), Error);
    EXPECT_THROW(set_sparse_precision(same, SparseValues::kBf16, SparseActivations::kInt8), Error);
    EXPECT_THROW(parse_sparse_values("int4"), Error);
  }
}

TEST_F(HfEncoder, ShardedCheckpointsLoadLikeOneFile) {
  auto g = rng();
  Tiny t;
  const SafeTensors w = weights_of(t, g);
  write_model(dir_ / "one", t, w, false, true);
  // Two shards and an index.
  SafeTensors a, b;
  json map = json::object();
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    (i % 2 ? a : b).add(w.tensors[i].first, w.tensors[i].second);
    map[w.tensors[i].first] = i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_model(dir_ / "sharded", t, w, false, true);
  std::filesystem::remove(dir_ / "sharded" / "model.safetensors");
  write_safetensors((dir_ / "sharded" / "model-00001-of-00002.safetensors").string(), a);
  write_safetensors((dir_ / "sharded" / "model-00002-of-00002.safetensors").string(), b);
  write_json(dir_ / "sharded" / "model.safetensors.index.json",
             {{"metadata", json::object()}, {"weight_map", map}});
  const Model one = load_hf_encoder(path("one")), sharded = load_hf_encoder(path("sharded"));
  const auto seqs = random_sequences(g, t, 3, one.max_sequence);
  const int64_t tokens = 3 * one.max_sequence;  // room for three sequences of any length
  Engine e1(one, tokens, 1, Mode::kDense), e2(sharded, tokens, 1, Mode::kDense);
  EXPECT_EQ(run(e1, seqs), run(e2, seqs));
}

// Every hostile directory is an Error whose one-line message names the problem.
void expect_error(const std::string& dir, const std::string& needle) {
  try {
    load_hf_encoder(dir);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(HfEncoder, HostileDirectoriesGiveOneLineErrors) {
  auto g = rng();
  Tiny t;
  const SafeTensors w = weights_of(t, g);
  const std::filesystem::path d = dir_ / "m";
  auto with_config = [&](const std::function<void(json&)>& edit) {
    std::filesystem::remove_all(d);
    write_model(d, t, w, false, true);
    json c = config_of(t);
    edit(c);
    write_json(d / "config.json", c);
  };
  with_config([](json& c) { c["hidden_size"] = "sixteen"; });
  expect_error(d.string(), "'hidden_size' is not an integer");
  with_config([](json& c) { c["num_hidden_layers"] = 1000000; });
  expect_error(d.string(), "'num_hidden_layers' is 1000000");
  with_config([](json& c) { c.erase("vocab_size"); });
  expect_error(d.string(), "missing 'vocab_size'");
  with_config([](json& c) { c["model_type"] = "gpt2"; });
  expect_error(d.string(), "model_type 'gpt2' is not supported");
  with_config([](json& c) { c["hidden_act"] = "relu"; });
  expect_error(d.string(), "hidden_act 'relu'");
  with_config([](json& c) { c["num_attention_heads"] = 3; });
  expect_error(d.string(), "not a multiple of num_attention_heads");
  with_config([](json& c) { c["hidden_size"] = 32; });  // the tensors are 16 wide
  expect_error(d.string(), "embeddings.word_embeddings.weight");
  with_config([](json&) {});
  std::ofstream(d / "config.json") << "[1, 2]";
  expect_error(d.string(), "not a JSON object");

  // Shards: an index pointing outside the directory, a truncated shard, a missing shard.
  with_config([](json&) {});
  write_json(d / "model.safetensors.index.json", {{"weight_map", {{"x", "../escape.safetensors"}}}});
  expect_error(d.string(), "not a file name in the directory");
  std::filesystem::remove(d / "model.safetensors.index.json");
  {
    const std::vector<uint8_t> bytes = read_file((d / "model.safetensors").string());
    std::ofstream f(d / "model.safetensors", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() / 2));
  }
  expect_error(d.string(), "model.safetensors");
  std::filesystem::remove(d / "model.safetensors");
  std::ofstream(d / "pytorch_model.bin") << "pickle";
  expect_error(d.string(), "pytorch_model.bin");

  // sentence-transformers modules.
  with_config([](json&) {});
  write_json(d / "1_Pooling" / "config.json", {{"pooling_mode_max_tokens", true}});
  expect_error(d.string(), "pooling_mode_max_tokens");
  with_config([](json&) {});
  write_json(d / "modules.json",
             json::array({{{"type", "sentence_transformers.models.Dense"}, {"path", "2_Dense"}}}));
  expect_error(d.string(), "sentence_transformers.models.Dense");
  with_config([](json&) {});
  write_json(d / "modules.json",
             json::array({{{"type", "sentence_transformers.models.Pooling"}, {"path", "../x"}}}));
  expect_error(d.string(), "leaves the directory");
}

// An engine that takes its model frees each layer's weights once packed (the model and the engine are never
// both whole in memory) and runs exactly as one built from a copy, dense and 2:4.
TEST_F(HfEncoder, AnEngineTakingItsModelFreesItsWeights) {
  auto g = rng();
  Tiny t;
  write_model(dir_ / "m", t, weights_of(t, g), false, true);
  HfDir d = read_hf_dir(path("m"));
  SparsifyOptions so;
  so.prune = true;
  so.targets = R"(encoder\.layer\.[0-9]+\.)";
  so.rank2_only = true;
  sparsify(d.weights, so);
  const Model pruned = load_hf_encoder(std::move(d));
  const auto seqs = random_sequences(g, t, 3, pruned.max_sequence);
  const int64_t tokens = 3 * pruned.max_sequence;
  for (Mode mode : {Mode::kDense, Mode::kSparse}) {
    Model taken = pruned;
    Engine copy(pruned, tokens, 1, mode), took(std::move(taken), tokens, 1, mode);
    for (const Gemm& gm : taken.gemms)
      EXPECT_TRUE(gm.dense.empty() && gm.sparse.values.empty() && gm.sparse.metadata.empty()) << gm.name;
    EXPECT_EQ(run(took, seqs), run(copy, seqs));
    EXPECT_EQ(took.weight_bytes(), copy.weight_bytes());
  }
}

// The word embeddings stay in the directory's mapped file in their stored type (f32, f16, bf16), widened a
// row at a time: the reference's embeddings over the stored values, exactly those of the same model read
// into memory first, the table counted by stored_bytes() instead of weight_bytes(), still running after the
// directory is removed (the mapping outlives the name); a non-finite value in it is refused at load.
TEST_F(HfEncoder, WordEmbeddingsStayInTheMappedFile) {
  auto g = rng();
  const std::string word = "embeddings.word_embeddings.weight";
  auto store = [&](SafeTensors& w, const Tiny& t, DType type, float poison) {
    std::vector<float> v = get(w, word);
    v[7] = poison;
    for (auto& [name, x] : w.tensors)
      if (name == word) x = to_st(Tensor::from_float(v, {t.vocab, t.hidden}, type));
  };
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::string what = "stored as " + std::to_string(static_cast<int>(type));
    Tiny t;
    t.type = type == DType::kF16 ? "mpnet" : "bert";
    SafeTensors w = weights_of(t, g);
    store(w, t, type, 0.75f);
    const std::filesystem::path dir = dir_ / std::to_string(static_cast<int>(type));
    write_model(dir, t, w, false, true);
    const Model mapped = load_hf_encoder(dir.string()),
                in_memory = load_hf_encoder(read_hf_dir(dir.string()));
    std::filesystem::remove_all(dir);
    const Op &a = mapped.ops.front(), &b = in_memory.ops.front();
    ASSERT_EQ(a.kind, OpKind::kEmbed);
    EXPECT_TRUE(a.table.empty() && a.stored_table.data != nullptr) << what;
    EXPECT_EQ(a.stored_table.type, type) << what;
    EXPECT_TRUE(b.stored_table.data == nullptr && !b.table.empty()) << what;

    const auto seqs = random_sequences(g, t, 4, mapped.max_sequence);
    std::vector<float> want;
    for (const auto& s : seqs) {
      const std::vector<float> e = reference_embedding(t, w, s, false, true);
      want.insert(want.end(), e.begin(), e.end());
    }
    const int64_t tokens = 4 * mapped.max_sequence;
    Engine ea(mapped, tokens, 1, Mode::kDense), eb(in_memory, tokens, 1, Mode::kDense);
    const std::vector<float> got = run(ea, seqs);
    expect_near_all(got, want, 2e-5f, what);
    EXPECT_EQ(got, run(eb, seqs)) << what;
    const auto table = static_cast<size_t>(t.vocab * t.hidden);
    EXPECT_EQ(ea.stored_bytes(), table * dtype_size(type)) << what;
    EXPECT_EQ(eb.stored_bytes(), 0u) << what;
    EXPECT_EQ(ea.weight_bytes() + table * sizeof(float), eb.weight_bytes()) << what;
  }
  for (DType type : {DType::kF32, DType::kBF16}) {
    Tiny t;
    SafeTensors w = weights_of(t, g);
    store(w, t, type, std::numeric_limits<float>::infinity());
    write_model(dir_ / "inf", t, w, false, true);
    expect_error(path("inf"), "tensor '" + word + "' holds a non-finite value");
    std::filesystem::remove_all(dir_ / "inf");
  }
}

TEST_F(HfEncoder, TokenBatchesAreChecked) {
  auto g = rng();
  Tiny t;
  write_model(dir_ / "m", t, weights_of(t, g), false, true);
  const Model m = load_hf_encoder(path("m"));
  Engine e(m, 30, 1, Mode::kDense);
  std::vector<float> out(64 * t.hidden);
  TokenBatch b;
  b.add({1, 2, static_cast<int32_t>(t.vocab)});
  EXPECT_THROW(e.run_tokens(b, out.data()), Error);  // id outside the vocabulary
  TokenBatch empty;
  EXPECT_THROW(e.run_tokens(empty, out.data()), Error);
  TokenBatch long_seq;
  long_seq.add(std::vector<int32_t>(m.max_sequence + 1, 3));
  EXPECT_THROW(e.run_tokens(long_seq, out.data()), Error);
  TokenBatch too_many;
  for (int i = 0; i < 4; ++i) too_many.add(std::vector<int32_t>(10, 3));
  EXPECT_THROW(e.run_tokens(too_many, out.data()), Error);  // 40 tokens > 30
}

}  // namespace
}  // namespace sparse24::engine
