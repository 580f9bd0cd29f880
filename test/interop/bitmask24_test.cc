// compressed-tensors 'sparse-24-bitmask' interop: checkpoints written by an independent implementation
// (reference_writer.h) convert to sparse24 and back bit for bit; hostile layers are refused clearly.
#include "sparse24/bitmask24.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/same_tensors.h"
#include "common/seed.h"
#include "interop/reference_writer.h"
#include "io/io_test_util.h"
#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

namespace ref = testing::reference;
using ref::RawTensor;

const std::vector<std::string> kDTypes = {"F32", "F16", "BF16", "I8"};
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 4},   {4, 8},  {8, 12}, {3, 20},
                                                          {16, 64}, {5, 36}, {0, 8},  {7, 4}};

std::vector<uint8_t> encode(const Checkpoint& ck, CheckpointFormat to) {
  return encode_safetensors(encode_checkpoint(ck, to));
}
Checkpoint decode(const std::vector<uint8_t>& f) {
  return read_checkpoint(parse_safetensors_view(f.data(), f.size(), "ck"), "ck");
}

// A checkpoint of every shape in kShapes as a sparse-24-bitmask layer, plus dense tensors of other kinds.
struct RefCheckpoint {
  std::vector<uint8_t> file;
  std::vector<RawTensor> dense_weights;  // what each layer decompresses to (bit for bit, except zeros)
};
RefCheckpoint reference_checkpoint(const std::string& dtype, std::mt19937_64& g) {
  RefCheckpoint out;
  std::vector<RawTensor> tensors;
  int i = 0;
  for (auto [rows, cols] : kShapes) {
    const std::string prefix = "model.layers." + std::to_string(i++) + ".mlp.proj";
    const std::vector<uint8_t> dense = ref::random_24_matrix(dtype, rows, cols, g);
    for (RawTensor& t : ref::bitmask24_layer(prefix, dtype, rows, cols, dense, g)) tensors.push_back(t);
    out.dense_weights.push_back(RawTensor{prefix + ".weight", dtype, {rows, cols}, dense});
  }
  tensors.push_back(
      RawTensor{"model.norm.weight", dtype, {8}, testing::random_bytes(g, 8 * ref::element_bytes(dtype))});
  tensors.push_back(
      RawTensor{"lm_head.weight", dtype, {4, 8}, testing::random_bytes(g, 32 * ref::element_bytes(dtype))});
  tensors.push_back(RawTensor{"position_ids", "I64", {1, 3}, testing::random_bytes(g, 24)});
  out.file = ref::write_safetensors_file(tensors, {{"format", "pt"}});
  return out;
}

TEST(Bitmask24, ReferenceCheckpointConvertsToSparse24AndBackBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(601);
  for (const std::string& dtype : kDTypes) {
    SCOPED_TRACE(dtype);
    const RefCheckpoint ref_ck = reference_checkpoint(dtype, g);
    const Checkpoint ck = decode(ref_ck.file);
    ASSERT_EQ(ck.sparse_count(), static_cast<int64_t>(kShapes.size()));
    EXPECT_EQ(ck.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));

    const std::vector<uint8_t> sparse24 = encode(ck, CheckpointFormat::kSparse24);
    const Checkpoint ck2 = decode(sparse24);
    ASSERT_EQ(ck2.sparse_count(), static_cast<int64_t>(kShapes.size()));
    const std::vector<uint8_t> back = encode(ck2, CheckpointFormat::kBitmask24);
    EXPECT_TRUE(back == ref_ck.file) << "sparse-24-bitmask -> sparse24 -> sparse-24-bitmask changed the file";
    // And the other way round.
    EXPECT_TRUE(encode(decode(back), CheckpointFormat::kSparse24) == sparse24);

    // Every layer decompresses to the matrix the reference writer was given: the same bits, except that a
    // zero that was not stored comes back as +0.0.
    for (const RawTensor& w : ref_ck.dense_weights) {
      const CheckpointTensor* t = ck2.find(w.name);
      ASSERT_TRUE(t && t->sparse) << w.name;
      const Tensor d = decompress(*t->sparse);
      ASSERT_EQ(d.shape, w.shape);
      ASSERT_EQ(d.bytes.size(), w.bytes.size());
      const size_t es = ref::element_bytes(dtype);
      for (size_t e = 0; e < w.bytes.size() / es; ++e) {
        if (ref::is_zero(dtype, &w.bytes[e * es])) {
          EXPECT_TRUE(ref::is_zero(dtype, &d.bytes[e * es])) << w.name << " element " << e;
        } else {
          EXPECT_EQ(std::memcmp(&w.bytes[e * es], &d.bytes[e * es], es), 0) << w.name << " element " << e;
        }
      }
    }
  }
}

TEST(Bitmask24, SingleLayerRoundTripsThroughCompressed) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(602);
  for (const std::string& dtype : kDTypes)
    for (auto [rows, cols] : kShapes) {
      SCOPED_TRACE(dtype + " " + shape_string({rows, cols}));
      const auto dense = ref::random_24_matrix(dtype, rows, cols, g);
      const auto raw = ref::bitmask24_layer("l", dtype, rows, cols, dense, g);
      auto view = [](const RawTensor& t) { return StTensorView{t.dtype, t.shape, t.bytes}; };
      const Compressed c = from_bitmask24(view(raw[0]), view(raw[1]), view(raw[2]), "l", "f");
      EXPECT_EQ(c.shape, (std::vector<int64_t>{rows, cols}));
      EXPECT_EQ(c.values, raw[0].bytes);  // the same bytes in the same order
      const Bitmask24Tensors b = to_bitmask24(c);
      EXPECT_EQ(b.compressed.bytes, raw[0].bytes);
      EXPECT_EQ(b.bitmask.bytes, raw[1].bytes);
      EXPECT_EQ(b.shape.bytes, raw[2].bytes);
      EXPECT_EQ(b.shape.dtype, "I64");
      EXPECT_EQ(b.shape.shape, (std::vector<int64_t>{2, 1}));
    }
}

TEST(Bitmask24, BitOrderIsLittle) {
  // Row [0, 0, 5, 7] keeps columns 2 and 3: bits 2 and 3 of byte 0 (0x0C); metadata code 2 | 3 << 2 = 0xE.
  const Compressed c = compress(Tensor::from_float({0, 0, 5, 7, 1, 0, 0, 2}, {1, 8}));
  const Bitmask24Tensors b = to_bitmask24(c);
  EXPECT_EQ(b.bitmask.bytes, (std::vector<uint8_t>{0x0C | 0x90}));
  EXPECT_EQ(c.metadata, (std::vector<uint8_t>{0xCE}));
}

TEST(Bitmask24, NotRepresentableShapesAreRefused) {
  EXPECT_FALSE(bitmask24_representable(compress(Tensor::zeros(DType::kF32, {2, 6}))));
  EXPECT_FALSE(bitmask24_representable(compress(Tensor::zeros(DType::kF32, {2, 8, 1, 1}))));
  EXPECT_FALSE(bitmask24_representable(compress(Tensor::zeros(DType::kF32, {8}))));
  EXPECT_ERROR(to_bitmask24(compress(Tensor::zeros(DType::kF32, {2, 6}))), "multiple of 4");
}

// ---- hostile layers ------------------------------------------------------------------------------------

struct Layer {
  RawTensor compressed, bitmask, shape;
};
Layer valid_layer() {
  auto g = testing::rng(603);
  const auto dense = ref::random_24_matrix("F16", 2, 12, g);
  auto raw = ref::bitmask24_layer("m.l", "F16", 2, 12, dense, g);
  return {raw[0], raw[1], raw[2]};
}
Compressed read(const Layer& l) {
  auto view = [](const RawTensor& t) { return StTensorView{t.dtype, t.shape, t.bytes}; };
  return from_bitmask24(view(l.compressed), view(l.bitmask), view(l.shape), "m.l", "f.st");
}
RawTensor i64_shape(int64_t a, int64_t b) {
  RawTensor t{"m.l.shape", "I64", {2, 1}, {}};
  for (int64_t d : {a, b})
    for (int i = 0; i < 8; ++i) t.bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(d) >> (8 * i)));
  return t;
}

TEST(Bitmask24, HostileLayersAreRefusedWithAClearMessage) {
  ASSERT_NO_THROW(read(valid_layer()));
  struct Case {
    std::function<void(Layer&)> mutate;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {[](Layer& l) { l.bitmask.bytes[0] = 0x1D; },  // group 0: bits 0, 2, 3
       "tensor 'm.l.bitmask' row 0, group 0 (columns 0..3) has 3 bits set; sparse-24-bitmask keeps exactly 2 "
       "of every 4"},
      {[](Layer& l) { l.bitmask.bytes[0] = 0xF3; }, "row 0, group 1 (columns 4..7) has 4 bits set"},
      {[](Layer& l) { l.bitmask.bytes[2] = 0x31; }, "row 1, group 0 (columns 0..3) has 1 bit set"},
      {[](Layer& l) { l.bitmask.bytes[0] = 0x30; }, "row 0, group 0 (columns 0..3) has 0 bits set"},
      {[](Layer& l) { l.bitmask.bytes[1] |= 0x10; }, "row 0 has bits set past column 11"},
      {[](Layer& l) { l.bitmask.dtype = "I8"; }, "tensor 'm.l.bitmask' has dtype I8, expected U8"},
      {[](Layer& l) {
         l.bitmask.shape = {2, 1};
       },
       "tensor 'm.l.bitmask' has shape [2, 1], expected [2, 2]"},
      {[](Layer& l) {
         l.compressed.shape = {2, 5};
       },
       "tensor 'm.l.compressed' has shape [2, 5], expected [2, 6]"},
      {[](Layer& l) { l.compressed.shape = {12}; }, "expected [2, 6]"},
      {[](Layer& l) { l.compressed.dtype = "F64"; },
       "tensor 'm.l.compressed': safetensors dtype 'F64' is not supported"},
      {[](Layer& l) { l.compressed.dtype = "F8_E4M3"; }, "'F8_E4M3' is not supported"},
      {[](Layer& l) { l.shape.dtype = "F32"; }, "tensor 'm.l.shape' has dtype F32, expected I64 (or I32)"},
      {[](Layer& l) {
         l.shape.shape = {1, 2};
       },
       "tensor 'm.l.shape' has shape [1, 2], expected [2, 1]"},
      {[](Layer& l) { l.shape = i64_shape(2, 10); },
       "holds 10 columns; sparse-24-bitmask needs a multiple of 4"},
      {[](Layer& l) { l.shape = i64_shape(-2, 12); }, "rows must be >= 0 and cols > 0"},
      {[](Layer& l) { l.shape = i64_shape(2, 0); }, "rows must be >= 0 and cols > 0"},
      {[](Layer& l) { l.shape = i64_shape(int64_t{1} << 40, int64_t{1} << 40); }, "which is too large"},
      {[](Layer& l) { l.shape = i64_shape(3, 12); },
       "tensor 'm.l.compressed' has shape [2, 6], expected [3, 6]"},
      {[](Layer& l) { l.shape = i64_shape(2, 16); }, "expected [2, 8]"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].phrase);
    Layer l = valid_layer();
    cases[i].mutate(l);
    EXPECT_ERROR(read(l), cases[i].phrase);
    EXPECT_ERROR(read(l), "f.st: ");
  }
}

TEST(Bitmask24, ShapeTensorMayBeI32OrFlat) {
  Layer l = valid_layer();
  l.shape = RawTensor{"m.l.shape", "I32", {2}, {2, 0, 0, 0, 12, 0, 0, 0}};
  EXPECT_EQ(read(l).shape, (std::vector<int64_t>{2, 12}));
}

std::vector<uint8_t> file_of(const Layer& l, std::vector<RawTensor> extra = {}) {
  extra.push_back(l.compressed);
  extra.push_back(l.bitmask);
  extra.push_back(l.shape);
  return ref::write_safetensors_file(extra, {});
}

TEST(Bitmask24, HostileCheckpointsAreRefusedWithAClearMessage) {
  const Layer l = valid_layer();
  std::vector<RawTensor> only_two = {l.compressed, l.bitmask};
  EXPECT_ERROR(decode(ref::write_safetensors_file(only_two, {})),
               "sparse-24-bitmask layer 'm.l' has no tensor 'm.l.shape'");
  EXPECT_ERROR(decode(file_of(l, {RawTensor{"m.l.row_offsets", "I64", {2}, std::vector<uint8_t>(16)}})),
               "unstructured 'sparse-bitmask' layout");
  EXPECT_ERROR(decode(file_of(l, {RawTensor{"m.l.weight", "F16", {1}, {0, 0}}})),
               "tensor 'm.l.weight' is stored both dense and compressed");

  // sparse24 layers
  Layer bad = l;
  bad.bitmask.bytes[0] = 0x1D;
  EXPECT_ERROR(decode(file_of(bad)), "has 3 bits set");
  const Checkpoint ck = decode(file_of(l));
  SafeTensors s24 = encode_checkpoint(ck, CheckpointFormat::kSparse24);
  auto refuse = [&](SafeTensors st, const std::string& phrase) {
    EXPECT_ERROR(decode(encode_safetensors(st)), phrase);
  };
  {
    SafeTensors st = s24;
    st.metadata["m.l.weight.shape"] = "[2, 16]";
    refuse(st,
           "sparse24 layer 'm.l.weight': tensor 'm.l.weight.values' is F16 [2, 6], expected F16 [2, 8] (2:4 "
           "of a "
           "[2, 16] matrix)");
    st.metadata["m.l.weight.shape"] = "[2, x]";
    refuse(st, "__metadata__ 'm.l.weight.shape' is '[2, x]', not a shape like [64, 128]");
    st.metadata["m.l.weight.shape"] = "[9223372036854775807, 9223372036854775807]";
    refuse(st, "not a shape like");
    st.metadata["m.l.weight.shape"] = "[2, 0]";
    refuse(st, "sparse24 layer 'm.l.weight'");
    st.metadata["m.l.weight.shape"] = "[]";
    refuse(st, "sparse24 layer 'm.l.weight': shape []");
  }
  {
    SafeTensors st = s24;
    st.tensors.erase(std::remove_if(st.tensors.begin(), st.tensors.end(),
                                    [](const auto& p) { return p.first == "m.l.weight.metadata"; }),
                     st.tensors.end());
    refuse(st, "sparse24 layer 'm.l.weight': missing tensor 'm.l.weight.metadata'");
  }
  {
    SafeTensors st = s24;
    for (auto& [name, t] : st.tensors)
      if (name == "m.l.weight.metadata") t.bytes[0] = 0x0F;
    refuse(st, "invalid metadata code 0xf");
  }
  {
    SafeTensors st = s24;
    st.metadata["sparse24.pattern"] = "4:8";
    refuse(st, "only 2:4 is supported");
    st.metadata["sparse24.format"] = "other";
    refuse(st, "__metadata__ 'sparse24.format' is 'other'");
  }
  // Without the marker the same tensors are just dense tensors.
  SafeTensors no_marker = s24;
  no_marker.metadata.erase("sparse24.format");
  EXPECT_EQ(decode(encode_safetensors(no_marker)).sparse_count(), 0);
}

TEST(Bitmask24, RandomCorruptionNeverCrashes) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(604);
  const std::vector<uint8_t> f = reference_checkpoint("F16", g).file;
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> m = f;
    for (int k = 0; k < 1 + static_cast<int>(g() % 4); ++k) m[g() % m.size()] = static_cast<uint8_t>(g());
    try {
      const Checkpoint ck = decode(m);
      for (const auto& t : ck.tensors)
        if (t.sparse) validate(*t.sparse);
    } catch (const Error&) {
    }
  }
}

// ---- config.json ---------------------------------------------------------------------------------------

TEST(Bitmask24, SparsityConfigRoundTrips) {
  SparsityConfig sc;
  sc.targets = {"model.layers.0.mlp.up_proj", "re:.*down_proj"};
  sc.ignore = {"lm_head"};
  sc.global_sparsity = 0.375;
  const std::string base = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})";
  const std::string text = with_sparsity_config(base, sc, "config.json");
  const auto back = parse_sparsity_config(text, "config.json");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->format, "sparse-24-bitmask");
  EXPECT_EQ(back->sparsity_structure, "2:4");
  EXPECT_EQ(back->targets, sc.targets);
  EXPECT_EQ(back->ignore, sc.ignore);
  EXPECT_EQ(back->global_sparsity, 0.375);
  EXPECT_NE(text.find("\"quant_method\": \"compressed-tensors\""), std::string::npos);
  EXPECT_NE(text.find("\"hidden_size\": 64"), std::string::npos);
  // Removing it leaves the rest.
  const std::string removed = with_sparsity_config(text, std::nullopt, "config.json");
  EXPECT_FALSE(parse_sparsity_config(removed, "config.json"));
  EXPECT_EQ(removed.find("quantization_config"), std::string::npos);
  EXPECT_NE(removed.find("LlamaForCausalLM"), std::string::npos);
  EXPECT_FALSE(parse_sparsity_config(base, "c"));
  EXPECT_FALSE(parse_sparsity_config("", "c"));
}

TEST(Bitmask24, MalformedConfigsAreRefused) {
  EXPECT_ERROR(parse_sparsity_config("[1]", "c.json"), "c.json: not a JSON object");
  EXPECT_ERROR(parse_sparsity_config("{", "c.json"), "c.json: not valid JSON");
  EXPECT_ERROR(parse_sparsity_config(R"({"quantization_config": 3})", "c"),
               "quantization_config is not a JSON object");
  EXPECT_ERROR(parse_sparsity_config(R"({"quantization_config": {"sparsity_config": {}}})", "c"),
               "sparsity_config has no string 'format'");
  EXPECT_ERROR(parse_sparsity_config(
                   R"({"quantization_config": {"sparsity_config": {"format": "x", "targets": [1]}}})", "c"),
               "'targets' is not a list of strings");
  EXPECT_ERROR(
      parse_sparsity_config(
          R"({"quantization_config": {"sparsity_config": {"format": "x", "global_sparsity": "a"}}})", "c"),
      "'global_sparsity' is not a number");
  std::string deep(100000, '[');
  EXPECT_ERROR(parse_sparsity_config(deep, "c"), "not valid JSON");
}

// ---- dense <-> sparse ----------------------------------------------------------------------------------

TEST(Checkpoint, SparsifySelectsFloatingWeightsThatAre24) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(605);
  Checkpoint ck;
  auto add = [&](const std::string& name, const Tensor& t) {
    ck.tensors.push_back({name, to_st(t), std::nullopt});
  };
  const std::vector<float> w = testing::random_floats(g, 8 * 16);
  std::vector<float> w24 = w;
  for (size_t i = 0; i < w24.size(); ++i)
    if (i % 4 >= 2) w24[i] = 0;
  add("a.weight", Tensor::from_float(w24, {8, 16}, DType::kF16));  // 2:4: compressed
  add("b.weight", Tensor::from_float(w, {8, 16}, DType::kBF16));   // dense: left, or pruned
  add("c.bias", Tensor::from_float(w24, {8, 16}));                 // not *.weight
  add("d.weight", Tensor::from_float(w24, {128}));                 // 1-D
  add("e.weight", Tensor::from_float(w24, {8, 16}, DType::kI8));   // not floating
  add("conv.weight", Tensor::from_float(std::vector<float>(8 * 4 * 9, 0.f), {8, 4, 3, 3}));  // 4-D
  Checkpoint a = ck;
  SparsifyReport r = sparsify(a, {});
  EXPECT_EQ(r.compressed, (std::vector<std::string>{"a.weight", "conv.weight"}));
  EXPECT_TRUE(r.pruned.empty());
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find("b.weight: not 2:4"), std::string::npos);

  Checkpoint b = ck;
  r = sparsify(b, {true, "^b\\.", false});
  EXPECT_TRUE(r.compressed.empty());
  EXPECT_EQ(r.pruned, (std::vector<std::string>{"b.weight"}));

  Checkpoint c = ck;
  r = sparsify(c, {false, "", true});
  EXPECT_EQ(r.compressed, (std::vector<std::string>{"a.weight"}));
  EXPECT_EQ(r.skipped.size(), 2u);  // b (not 2:4), conv (4-D)

  EXPECT_ERROR(sparsify(c, {false, "(", false}), "is not a valid regular expression");

  // Embedding tables stay dense unless named in targets, 2:4 already or not.
  Checkpoint e;
  for (const char* name : {"model.embed_tokens.weight", "embeddings.word_embeddings.weight", "wte.weight",
                           "h.0.attn.c_attn.weight", "decoder.embed_positions.weight"})
    e.tensors.push_back({name, to_st(Tensor::from_float(w24, {8, 16})), std::nullopt});
  Checkpoint e1 = e;
  r = sparsify(e1, {true, "", false});
  EXPECT_EQ(r.compressed, (std::vector<std::string>{"h.0.attn.c_attn.weight"}));
  ASSERT_EQ(r.skipped.size(), 4u);
  EXPECT_NE(r.skipped[0].find("model.embed_tokens.weight: an embedding table"), std::string::npos);
  r = sparsify(e, {true, "embed_tokens", false});
  EXPECT_EQ(r.compressed, (std::vector<std::string>{"model.embed_tokens.weight"}));

  // Densify restores the dense tensors bit for bit (no -0.0 here).
  densify(a);
  EXPECT_EQ(a.sparse_count(), 0);
  for (size_t i = 0; i < ck.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, ck.tensors[i].name);
    EXPECT_EQ(a.tensors[i].dense.bytes, ck.tensors[i].dense.bytes) << ck.tensors[i].name;
    EXPECT_EQ(a.tensors[i].dense.dtype, ck.tensors[i].dense.dtype);
  }
}

TEST(Checkpoint, BitmaskOutputKeepsUnrepresentableWeightsDense) {
  Checkpoint ck;
  ck.tensors.push_back({"conv.weight", {}, compress(Tensor::zeros(DType::kF32, {8, 4, 1, 1}))});
  ck.tensors.push_back({"odd.weight", {}, compress(Tensor::zeros(DType::kF32, {2, 6}))});
  ck.tensors.push_back({"x.values_like", {}, compress(Tensor::zeros(DType::kF32, {2, 8}))});
  ck.tensors.push_back({"ok.weight", {}, compress(Tensor::zeros(DType::kF32, {2, 8}))});
  const SafeTensors st = encode_checkpoint(ck, CheckpointFormat::kBitmask24);
  std::vector<std::string> names;
  for (const auto& [n, t] : st.tensors) names.push_back(n);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"conv.weight", "odd.weight", "ok.bitmask", "ok.compressed",
                                             "ok.shape", "x.values_like"}));
  EXPECT_EQ(st.at("conv.weight").shape, (std::vector<int64_t>{8, 4, 1, 1}));
  // sparse24 holds all of them.
  const Checkpoint back = decode(encode_safetensors(encode_checkpoint(ck, CheckpointFormat::kSparse24)));
  EXPECT_EQ(back.sparse_count(), 4);
}

TEST(Checkpoint, WriterOrderIsTheReferenceOrder) {
  SafeTensors st;
  for (const char* d : {"U8", "F32", "I64", "BF16", "F16", "I8", "BOOL", "U64", "F64", "I32"})
    st.add(std::string("t_") + d, StTensor{d, {0}, {}});
  st.add("a_F32", StTensor{"F32", {0}, {}});
  sort_like_reference(st);
  std::vector<std::string> names;
  for (const auto& [n, t] : st.tensors) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"t_U64", "t_I64", "t_F64", "a_F32", "t_F32", "t_I32", "t_BF16",
                                             "t_F16", "t_I8", "t_U8", "t_BOOL"}));
}

// A directory written in parts (HfDirWriter) holds what one write_hf_dir of all the tensors holds: the
// same tensors, an index naming each stored tensor's shard, the same sparsity config (its global sparsity
// over every part); destroyed before finish(), a writer leaves nothing.
TEST(Checkpoint, DirectoryWrittenInPartsEqualsOneFile) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(606);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sparse24_parts_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<Checkpoint> parts(3);
  Checkpoint all;
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 2; ++i) {
      const std::string name = "layers." + std::to_string(p) + "." + std::to_string(i) + ".weight";
      std::vector<float> w = testing::random_floats(g, 8 * 16);
      if (i == 0)
        for (size_t k = 0; k < w.size(); ++k)
          if (k % 4 >= 2) w[k] = 0;  // 2:4: compressed by sparsify
      parts[static_cast<size_t>(p)].tensors.push_back({name, to_st(Tensor::from_float(w, {8, 16})), {}});
    }
  for (Checkpoint& part : parts) {
    sparsify(part, {});
    all.tensors.insert(all.tensors.end(), part.tensors.begin(), part.tensors.end());
  }
  const std::string config = R"({"model_type": "llama"})";
  for (CheckpointFormat f : {CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24}) {
    SCOPED_TRACE(checkpoint_format_name(f));
    const std::string one = (dir / ("one-" + std::string(checkpoint_format_name(f)))).string();
    const std::string many = (dir / ("many-" + std::string(checkpoint_format_name(f)))).string();
    HfDir src;
    src.config_json = config;
    write_hf_dir(src, all, f, one);
    {
      HfDirWriter w("", {}, config, f, many);
      for (const Checkpoint& part : parts) w.add(part);
      w.finish();
    }
    const HfDir a = read_hf_dir(one), b = read_hf_dir(many);
    EXPECT_EQ(b.shards.size(), 3u);
    testing::expect_same_tensors(a.weights, b.weights);
    const auto sa = parse_sparsity_config(a.config_json, "a"), sb = parse_sparsity_config(b.config_json, "b");
    ASSERT_EQ(sa.has_value(), f == CheckpointFormat::kBitmask24);
    ASSERT_EQ(sb.has_value(), sa.has_value());
    if (sa) {
      EXPECT_EQ(sb->targets, sa->targets);
      EXPECT_DOUBLE_EQ(sb->global_sparsity, sa->global_sparsity);
    }
    const std::vector<uint8_t> index = read_file(many + "/model.safetensors.index.json");
    const std::string text(index.begin(), index.end());
    EXPECT_NE(text.find("\"model-00002-of-00003.safetensors\""), std::string::npos) << text;
    EXPECT_NE(text.find("\"total_size\""), std::string::npos) << text;
  }
  {
    HfDirWriter w("", {}, config, CheckpointFormat::kSparse24, (dir / "unfinished").string());
    w.add(parts[0]);
  }
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("unfinished"), std::string::npos) << e.path();
  std::filesystem::remove_all(dir);
}

// convert_hf_dir (`sparse24 convert DIR OUT`) converts a shard at a time: the output holds the input's
// shards, each with the tensors one conversion of the whole checkpoint in memory gives (read_hf_dir,
// convert_weights, write_hf_dir), the same report, sparsity config and carried files, for every layout with
// and without pruning; an existing output is refused and left as it was.
TEST(Checkpoint, DirectoryConvertsShardByShardAsAWholeConversionDoes) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(607);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sparse24_convert_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string in = (dir / "in").string();
  {
    HfDirWriter writer("", {}, std::string(R"({"model_type": "llama"})"), CheckpointFormat::kDense, in,
                       {{"tokenizer.json", "{}"}});
    for (int p = 0; p < 3; ++p) {
      Checkpoint part;
      for (int i = 0; i < 3; ++i) {
        const std::string name = "model.layers." + std::to_string(p) + "." + std::to_string(i) + ".weight";
        std::vector<float> w = testing::random_floats(g, 8 * 16);
        if (i == 0)
          for (size_t k = 0; k < w.size(); ++k)
            if (k % 4 >= 2) w[k] = 0;  // already 2:4
        const std::vector<int64_t> shape = i == 2 ? std::vector<int64_t>{8, 15} : std::vector<int64_t>{8, 16};
        w.resize(static_cast<size_t>(shape[0] * shape[1]));
        part.tensors.push_back({name, to_st(Tensor::from_float(w, shape)), {}});
      }
      if (p == 0)
        part.tensors.push_back({"model.embed_tokens.weight",
                                to_st(Tensor::from_float(testing::random_floats(g, 64), {8, 8})),
                                {}});
      writer.add(part);
    }
    writer.finish();
  }
  int run = 0;
  for (CheckpointFormat f :
       {CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24, CheckpointFormat::kDense})
    for (bool prune : {false, true}) {
      SCOPED_TRACE(std::string(checkpoint_format_name(f)) + (prune ? " --prune" : ""));
      ConvertOptions o;
      o.to = f;
      o.prune = prune;
      const std::string out = (dir / ("out" + std::to_string(run))).string(),
                        ref = (dir / ("ref" + std::to_string(run))).string();
      ++run;
      const ConvertReport r = convert_hf_dir(in, out, o);
      HfDir whole = read_hf_dir(in);
      const SparsifyReport rr = convert_weights(whole.weights, o);
      write_hf_dir(whole, whole.weights, f, ref);
      EXPECT_EQ(r.shards, 3u);
      EXPECT_EQ(r.tensors, 10u);
      EXPECT_EQ(r.sparsify.compressed, rr.compressed);
      EXPECT_EQ(r.sparsify.pruned, rr.pruned);
      EXPECT_EQ(r.sparsify.skipped, rr.skipped);
      EXPECT_EQ(r.sparse_out, stored_sparse(whole.weights, f));
      // Pruned: each shard's .1 (and its 8x15 .2, which sparse-24-bitmask cannot hold).
      const size_t pruned = !prune || f == CheckpointFormat::kDense ? 0
                            : f == CheckpointFormat::kSparse24      ? 6
                                                                    : 3;
      EXPECT_EQ(r.sparsify.pruned.size(), pruned);
      const HfDir a = read_hf_dir(out), b = read_hf_dir(ref);
      EXPECT_EQ(a.shards.size(), 3u);
      testing::expect_same_tensors(a.weights, b.weights);
      EXPECT_EQ(a.config_json, b.config_json);
      EXPECT_EQ(read_file(out + "/tokenizer.json"), read_file(ref + "/tokenizer.json"));
      // The output converted back with the same options changes nothing.
      if (f != CheckpointFormat::kDense) {
        const ConvertReport again = convert_hf_dir(out, out + "-again", o);
        EXPECT_EQ(again.sparse_in, static_cast<int64_t>(a.weights.sparse_count()));
        EXPECT_TRUE(again.sparsify.pruned.empty());
      }
    }
  const std::string exists = (dir / "out0").string();
  const auto before = read_file(exists + "/config.json");
  EXPECT_ERROR(convert_hf_dir(in, exists, {}), "already exists");
  EXPECT_EQ(read_file(exists + "/config.json"), before);
  std::filesystem::remove_all(dir);
}

// int8 values with fp32 scales (quantize_int8) in the sparse24 layout: "<name>.scales" and __metadata__
// "<name>.scale_group" beside the values and codes. They read back the same eagerly and deferred, the
// other layouts refuse them, and every inconsistent file is refused naming the problem.
TEST(Checkpoint, ScaledInt8LayersRoundTripInTheSparse24Layout) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(31);
  Checkpoint ck;
  int i = 0;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{3, 20}, {4, 128}, {2, 200}, {5, 4}})
    for (int64_t group : {int64_t{64}, int64_t{4}, int64_t{1} << 20}) {
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (float& v : w) v = std::uniform_real_distribution<float>(-2, 2)(g);
      const Compressed q = quantize_int8(compress_pruned_f32(w.data(), rows, cols), group);
      ck.tensors.push_back({"m.l" + std::to_string(i++) + ".weight", {}, q});
    }
  ck.tensors.push_back({"m.l0.weight.scales.x", StTensor{"F32", {1}, std::vector<uint8_t>(4)}, {}});
  const SafeTensors st = encode_checkpoint(ck, CheckpointFormat::kSparse24);
  const std::vector<uint8_t> file = encode_safetensors(st);
  const SafeTensorsView view = parse_safetensors_view(file.data(), file.size(), "ck");
  const Checkpoint back = read_checkpoint(view, "ck");
  CheckpointView deferred = read_checkpoint_view(view, "ck", true);
  ASSERT_EQ(back.tensors.size(), ck.tensors.size());
  ASSERT_EQ(deferred.tensors.size(), ck.tensors.size());
  for (const CheckpointTensor& want : ck.tensors) {  // (written in the reference writer's order)
    SCOPED_TRACE(want.name);
    const CheckpointTensor* got = back.find(want.name);
    const auto lazy = std::find_if(deferred.tensors.begin(), deferred.tensors.end(),
                                   [&](const CheckpointTensorView& v) { return v.name == want.name; });
    ASSERT_TRUE(got != nullptr && lazy != deferred.tensors.end());
    ASSERT_EQ(got->sparse.has_value(), want.sparse.has_value());
    ASSERT_EQ(static_cast<bool>(lazy->decode), want.sparse.has_value());
    if (!want.sparse) continue;
    const Compressed& a = *want.sparse;
    for (const Compressed& b : {*got->sparse, lazy->decode()}) {
      EXPECT_EQ(b.dtype, DType::kI8);
      EXPECT_EQ(b.shape, a.shape);
      EXPECT_EQ(b.values, a.values);
      EXPECT_EQ(b.metadata, a.metadata);
      EXPECT_EQ(b.scale_group, a.scale_group);
      EXPECT_EQ(b.scales, a.scales);
    }
  }
  EXPECT_ERROR(encode_checkpoint(ck, CheckpointFormat::kBitmask24),
               "int8 weights with scales are stored only in the sparse24 layout");
  {  // dense: the dequantized fp32 matrices
    const SafeTensors dense = encode_checkpoint(ck, CheckpointFormat::kDense);
    for (const CheckpointTensor& t : ck.tensors) {
      if (t.sparse) {
        EXPECT_EQ(dense.find(t.name)->bytes, decompress(*t.sparse).bytes) << t.name;
      }
    }
  }

  auto refuse = [&](SafeTensors bad, const std::string& phrase) {
    EXPECT_ERROR(decode(encode_safetensors(bad)), phrase);
    const std::vector<uint8_t> f = encode_safetensors(bad);
    EXPECT_ERROR(
        {
          CheckpointView v =
              read_checkpoint_view(parse_safetensors_view(f.data(), f.size(), "ck"), "ck", true);
          for (CheckpointTensorView& t : v.tensors)
            if (t.decode) t.decode();
        },
        phrase);
  };
  // m.l1 is [3, 20] in groups of 4: 5 scales a row.
  for (const std::string text : {"0", "6", "-4", "x", "24", ""}) {
    SafeTensors bad = st;
    bad.metadata["m.l1.weight.scale_group"] = text;
    refuse(bad, "__metadata__ 'm.l1.weight.scale_group' is '" + text +
                    "', not a positive multiple of 4 up to the padded row length");
  }
  {
    SafeTensors bad = st;
    bad.metadata["m.l1.weight.scale_group"] = "8";
    refuse(bad, "tensor 'm.l1.weight.scales' is F32 [3, 5], expected F32 [3, 3]");
  }
  {
    SafeTensors bad = st;
    for (auto& [name, t] : bad.tensors)
      if (name == "m.l1.weight.scales") std::memcpy(t.bytes.data() + 8, "\x00\x00\xc0\x7f", 4);  // a NaN
    refuse(bad, "sparse24 layer 'm.l1.weight': tensor 'm.l1.weight': scale 2 of row 0 is not finite");
  }
  {
    SafeTensors bad = st;
    std::erase_if(bad.tensors, [](const auto& p) { return p.first == "m.l1.weight.scales"; });
    refuse(bad, "sparse24 layer 'm.l1.weight': missing tensor 'm.l1.weight.scales'");
  }
  // A layer without scales never takes a key that would read back as its scales; a dense tensor of the
  // name of scales is one as long as no layer claims it.
  Checkpoint plain;
  std::vector<float> w(32, 1.0f);
  plain.tensors.push_back({"p.weight", {}, compress_pruned_f32(w.data(), 2, 16)});
  plain.metadata["p.weight.scale_group"] = "4";
  EXPECT_ERROR(encode_checkpoint(plain, CheckpointFormat::kSparse24),
               "__metadata__ key 'p.weight.scale_group' would give 'p.weight' scales it does not have");
  plain.metadata.clear();
  plain.tensors.push_back({"p.weight.scales", StTensor{"F32", {2, 4}, std::vector<uint8_t>(32)}, {}});
  SafeTensors f32 = encode_checkpoint(plain, CheckpointFormat::kSparse24);
  EXPECT_EQ(decode(encode_safetensors(f32)).sparse_count(), 1);  // the dense tensor as it is
  f32.metadata["p.weight.scale_group"] = "4";                    // fp32 values claiming scales
  refuse(f32, "sparse24 layer 'p.weight': tensor 'p.weight.values' is F32 but the layer has scales");
  plain.tensors[0].sparse = quantize_int8(*plain.tensors[0].sparse, 4);
  EXPECT_ERROR(encode_checkpoint(plain, CheckpointFormat::kSparse24),
               "duplicate tensor name 'p.weight.scales'");
}

TEST(Checkpoint, ScaledInt8MatricesRoundTripInTheSparse24Layout) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(32);
  Checkpoint ck;
  // (a row shorter than its group of 64: one scale per row, as the decoder's int8 tables have)
  for (auto [rows, cols, group] :
       std::vector<std::array<int64_t, 3>>{{3, 20, 64}, {4, 128, 64}, {2, 200, 8}}) {
    CheckpointTensor t{"t" + std::to_string(cols) + ".weight", StTensor{"I8", {rows, cols}, {}}, {}};
    for (int64_t i = 0; i < rows * cols; ++i)
      t.dense.bytes.push_back(static_cast<uint8_t>(std::uniform_int_distribution<int>(-127, 127)(g)));
    t.scale_group = group;
    for (int64_t i = 0; i < rows * ((cols + group - 1) / group); ++i)
      t.scales.push_back(std::uniform_real_distribution<float>(0.001f, 1)(g));
    ck.tensors.push_back(std::move(t));
  }
  ck.tensors.push_back({"plain.weight", StTensor{"I8", {2, 4}, std::vector<uint8_t>(8, 3)}, {}});
  const auto dequantized_at = [](const CheckpointTensor& t, int64_t r, int64_t k) {
    const int64_t cols = t.dense.shape[1], per_row = (cols + t.scale_group - 1) / t.scale_group;
    return static_cast<float>(static_cast<int8_t>(t.dense.bytes[r * cols + k])) *
           t.scales[r * per_row + k / t.scale_group];
  };
  const SafeTensors st = encode_checkpoint(ck, CheckpointFormat::kSparse24);
  EXPECT_EQ(st.metadata.at("t20.weight.scale_group"), "64");
  const std::vector<uint8_t> file = encode_safetensors(st);
  const SafeTensorsView view = parse_safetensors_view(file.data(), file.size(), "ck");
  const Checkpoint back = read_checkpoint(view, "ck");
  ASSERT_EQ(back.tensors.size(), ck.tensors.size());
  EXPECT_TRUE(back.metadata.empty());  // (the layout's keys taken)
  for (const CheckpointTensor& want : ck.tensors) {
    SCOPED_TRACE(want.name);
    const CheckpointTensor* got = back.find(want.name);
    ASSERT_TRUE(got != nullptr);
    EXPECT_FALSE(got->sparse.has_value());
    EXPECT_EQ(got->dense.dtype, "I8");
    EXPECT_EQ(got->dense.bytes, want.dense.bytes);
    EXPECT_EQ(got->scale_group, want.scale_group);
    EXPECT_EQ(got->scales, want.scales);
  }
  for (CheckpointFormat to : {CheckpointFormat::kDense, CheckpointFormat::kBitmask24}) {  // dequantized
    SCOPED_TRACE(checkpoint_format_name(to));
    const SafeTensors plain = encode_checkpoint(ck, to);
    EXPECT_EQ(plain.tensors.size(), ck.tensors.size());
    for (const CheckpointTensor& t : ck.tensors) {
      const StTensor* d = plain.find(t.name);
      ASSERT_TRUE(d != nullptr);
      if (t.scale_group == 0) {
        EXPECT_EQ(d->dtype, "I8");
        continue;
      }
      ASSERT_EQ(d->dtype, "F32");
      ASSERT_EQ(d->shape, t.dense.shape);
      std::vector<float> v(d->bytes.size() / 4);
      std::memcpy(v.data(), d->bytes.data(), d->bytes.size());
      for (int64_t r = 0; r < t.dense.shape[0]; ++r)
        for (int64_t k = 0; k < t.dense.shape[1]; ++k)
          ASSERT_EQ(v[r * t.dense.shape[1] + k], dequantized_at(t, r, k)) << t.name << " " << r << " " << k;
    }
  }
  Checkpoint dense = ck;
  densify(dense);
  for (size_t i = 0; i < ck.tensors.size(); ++i) {
    EXPECT_EQ(dense.tensors[i].scale_group, 0);
    EXPECT_EQ(dense.tensors[i].dense.bytes, dequantized(ck.tensors[i]).bytes);
  }
  {  // without the layout's marker the key and the scales are someone else's: kept as they are
    SafeTensors unmarked = st;
    unmarked.metadata.erase("sparse24.format");
    const Checkpoint u = decode(encode_safetensors(unmarked));
    EXPECT_EQ(u.find("t20.weight")->scale_group, 0);
    EXPECT_TRUE(u.find("t20.weight.scales") != nullptr);
    EXPECT_EQ(u.metadata.at("t20.weight.scale_group"), "64");
  }

  auto refuse = [&](SafeTensors bad, const std::string& phrase) {
    EXPECT_ERROR(decode(encode_safetensors(bad)), phrase);
  };
  for (const std::string text : {"0", "6", "68", "x", ""}) {  // t20: a row of 20, groups up to 64
    SafeTensors bad = st;
    bad.metadata["t20.weight.scale_group"] = text;
    refuse(bad, "tensor 't20.weight': __metadata__ 't20.weight.scale_group' is '" + text +
                    "', not a positive multiple of 4 up to the padded row length (or 64)");
  }
  {
    SafeTensors bad = st;
    bad.metadata["t200.weight.scale_group"] = "16";
    refuse(bad, "tensor 't200.weight.scales' is F32 [2, 25], expected F32 [2, 13]");
  }
  {
    SafeTensors bad = st;
    for (auto& [name, t] : bad.tensors)
      if (name == "t128.weight.scales") std::memcpy(t.bytes.data() + 4, "\x00\x00\x80\x7f", 4);  // inf
    refuse(bad, "tensor 't128.weight.scales': scale 1 of row 0 is not finite");
  }
  {
    SafeTensors bad = st;
    std::erase_if(bad.tensors, [](const auto& p) { return p.first == "t128.weight.scales"; });
    refuse(bad, "tensor 't128.weight': its scales 't128.weight.scales' are missing");
  }
  {
    SafeTensors bad = st;
    for (auto& [name, t] : bad.tensors)
      if (name == "t128.weight") t = StTensor{"U8", t.shape, t.bytes};
    refuse(bad,
           "tensor 't128.weight': __metadata__ 't128.weight.scale_group' gives it scales, but it is U8 "
           "[4, 128], not an I8 matrix");
  }
  {
    SafeTensors bad = st;
    bad.metadata["nothing.weight.scale_group"] = "4";  // names no tensor: someone else's key
    EXPECT_EQ(decode(encode_safetensors(bad)).metadata.at("nothing.weight.scale_group"), "4");
  }
  // The writer refuses scales that would not read back, and a key or a tensor that would read back as some.
  Checkpoint bad = ck;
  bad.tensors[0].scales.pop_back();
  EXPECT_ERROR(encode_checkpoint(bad, CheckpointFormat::kSparse24),
               "tensor 't20.weight': not an I8 matrix with a finite scale per 64 of a row");
  EXPECT_ERROR(encode_checkpoint(bad, CheckpointFormat::kDense),
               "tensor 't20.weight': not an I8 matrix with a finite scale per 64 of a row");
  bad = ck;
  bad.metadata["plain.weight.scale_group"] = "4";
  EXPECT_ERROR(
      encode_checkpoint(bad, CheckpointFormat::kSparse24),
      "__metadata__ key 'plain.weight.scale_group' would give 'plain.weight' scales it does not have");
  bad = ck;
  bad.tensors.push_back({"t20.weight.scales", StTensor{"F32", {3, 1}, std::vector<uint8_t>(12)}, {}});
  EXPECT_ERROR(encode_checkpoint(bad, CheckpointFormat::kSparse24),
               "duplicate tensor name 't20.weight.scales'");
}

TEST(Checkpoint, FormatNames) {
  for (auto f : {CheckpointFormat::kDense, CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24})
    EXPECT_EQ(parse_checkpoint_format(checkpoint_format_name(f)), f);
  EXPECT_ERROR(parse_checkpoint_format("bitmask"), "unknown checkpoint format 'bitmask'");
}

// ---- memory-mapped reading -----------------------------------------------------------------------------

TEST(MappedFile, MapsRegularFilesAndRefusesTheRest) {
  testing::TempDir dir;
  write_file_atomic(dir.file("a"), std::string("hello"));
  MappedFile m(dir.file("a"));
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), 5), "hello");
  MappedFile moved(std::move(m));
  EXPECT_EQ(moved.size(), 5u);
  EXPECT_EQ(m.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract

  write_file_atomic(dir.file("empty"), std::string());
  MappedFile e(dir.file("empty"));
  EXPECT_EQ(e.size(), 0u);
  EXPECT_EQ(e.data(), nullptr);
  EXPECT_ERROR(read_safetensors(dir.file("empty")), "too short to be a safetensors file (0 bytes");
  EXPECT_ERROR(MappedFile(dir.file("none")),
               "cannot open '" + dir.file("none") + "': No such file or directory");
  EXPECT_ERROR(MappedFile(dir.path().string()), "is not a regular file");
  EXPECT_ERROR(MappedFile("/dev/null"), "is not a regular file");
}

TEST(MappedFile, ViewPointsIntoTheMappingAndMatchesTheCopy) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(606);
  testing::TempDir dir;
  SafeTensors st;
  st.metadata = {{"k", "v"}};
  st.add("a", StTensor{"F16", {3, 5}, testing::random_bytes(g, 30)});
  st.add("b", StTensor{"U8", {7}, testing::random_bytes(g, 7)});
  write_safetensors(dir.file("f.safetensors"), st);
  MappedSafeTensors mapped(dir.file("f.safetensors"));
  const SafeTensors copy = read_safetensors(dir.file("f.safetensors"));
  ASSERT_EQ(mapped.view.tensors.size(), 2u);
  EXPECT_EQ(mapped.view.metadata, copy.metadata);
  for (size_t i = 0; i < 2; ++i) {
    const auto& [name, v] = mapped.view.tensors[i];
    EXPECT_EQ(name, copy.tensors[i].first);
    EXPECT_EQ(v.copy().bytes, copy.tensors[i].second.bytes);
    EXPECT_GE(v.bytes.data(), mapped.file.data());
    EXPECT_LE(v.bytes.data() + v.bytes.size(), mapped.file.data() + mapped.file.size());
  }
  EXPECT_EQ(mapped.view.find("b")->shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(mapped.view.find("c"), nullptr);
}

}  // namespace
}  // namespace sparse24
