// Writes the seed corpora for the fuzz harnesses: small valid files made with the library, one directory per
// harness under argv[1]. Run by run.sh before fuzzing.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf_template.h"
#include "sparse24/bitmask24.h"
#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/dtype.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/pattern.h"
#include "text/bpe_split.h"

namespace {

using namespace sparse24;
namespace fs = std::filesystem;

void put(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  fs::create_directories(dir);
  write_file_atomic((dir / name).string(), bytes);
}

// A small 2:4 matrix: in each group of 4, positions (g % 3) and 3 hold nonzeros, some groups all zero.
Tensor matrix24(DType dt, std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros(dt, shape);
  const MatrixView v = matrix_view(shape);
  std::vector<float> m(static_cast<size_t>(v.rows * v.cols), 0.f);
  for (int64_t r = 0; r < v.rows; ++r)
    for (int64_t c = 0; c < v.cols; ++c)
      if ((c % 4 == (c / 4 + r) % 3 || c % 4 == 3) && (r + c / 4) % 5 != 0)
        m[static_cast<size_t>(r * v.cols + c)] = static_cast<float>((r * 7 + c) % 11) - 5.5f;
  return Tensor::from_float(scatter_from_matrix(m, shape), shape, dt);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const fs::path out = argv[1];
  const std::vector<DType> dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kI8};
  int n = 0;

  // safetensors
  SafeTensors st;
  st.metadata = {{"format", "pt"}};
  st.add("a", StTensor{"F32", {2, 3}, std::vector<uint8_t>(24, 1)});
  st.add("b", StTensor{"U8", {5}, {1, 2, 3, 4, 5}});
  st.add("c", StTensor{"I64", {0}, {}});
  put(out / "safetensors", "small", encode_safetensors(st));
  put(out / "safetensors", "empty", encode_safetensors(SafeTensors{}));

  // gguf: metadata of every kind, one tensor of each dequantized type (and one it only reads), alignment 32
  // and 16
  {
    Gguf g;
    g.metadata = {{"general.architecture", GgufValue::of_string("llama")},
                  {"llama.block_count", GgufValue::of_int(GgufType::kU32, 2)},
                  {"llama.rope.freq_base", GgufValue::of_float(GgufType::kF32, 10000)},
                  {"tokenizer.ggml.add_bos_token", GgufValue::of_int(GgufType::kBool, 0)},
                  {"tokenizer.ggml.tokens", GgufValue::of_strings({"a", "b",
                                                                   "\xc4\xa0"
                                                                   "b"})},
                  {"tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, {1, 1, 3})},
                  {"f64s", GgufValue::of_floats(GgufType::kF64, {0.5, -1})},
                  {"u64", GgufValue::of_int(GgufType::kU64, 7)}};
    std::vector<std::vector<uint8_t>> storage;
    const std::pair<uint32_t, std::vector<int64_t>> specs[] = {
        {0, {2, 3}}, {1, {4}},    {30, {2, 2}}, {2, {1, 32}}, {3, {2, 32}}, {8, {32}},
        {12, {256}}, {14, {256}}, {6, {32}},    {7, {32}},    {10, {256}},  {11, {256}},
        {13, {256}}, {20, {32}},  {23, {256}},  {16, {256}}};
    for (const auto& [type, shape] : specs) {
      const GgmlTypeInfo* ti = ggml_type_info(type);
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      std::vector<uint8_t> b(static_cast<size_t>(numel / ti->block * ti->block_bytes));
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 37 + 11);
      storage.push_back(std::move(b));
    }
    for (size_t i = 0; i < storage.size(); ++i) {
      GgufTensor t;
      t.name = "t" + std::to_string(i);
      t.type = specs[i].first;
      t.shape = specs[i].second;
      t.bytes = storage[i];
      g.tensors.push_back(t);
    }
    put(out / "gguf", "all_types", encode_gguf(g));
    g.alignment = 16;
    g.version = 2;
    g.metadata.emplace_back("general.alignment", GgufValue::of_int(GgufType::kU32, 16));
    put(out / "gguf", "v2_align16", encode_gguf(g));
    put(out / "gguf", "empty", encode_gguf(Gguf{}));
  }

  // npy
  for (DType dt : {DType::kF32, DType::kF16, DType::kI8}) {
    put(out / "npy", "m" + std::to_string(n++), encode_npy(matrix24(dt, {3, 8})));
    put(out / "npy", "v" + std::to_string(n++), encode_npy(matrix24(dt, {5})));
  }

  // compressed file: int8 with fp32 scales (per 4, 8 positions and per row)
  for (int64_t group : {4, 8, 12}) {
    const Compressed c = quantize_int8(compress(matrix24(DType::kF32, {3, 12})), group);
    put(out / "compressed_file", "int8_scaled_" + std::to_string(group), encode_compressed(c));
    Checkpoint ck;  // the sparse24 checkpoint layout's scaled int8 layer
    ck.tensors.push_back({"layer.weight", {}, c});
    put(out / "bitmask24", "int8_scaled_" + std::to_string(group) + "_s24",
        encode_safetensors(encode_checkpoint(ck, CheckpointFormat::kSparse24)));
    CheckpointTensor table{"embed.weight", StTensor{"I8", {3, 12}, std::vector<uint8_t>(36, 0xfb)}, {}};
    table.scale_group = group == 12 ? 64 : group;  // (dense: a group past a short row, one scale per row)
    table.scales.assign(static_cast<size_t>(3 * ((12 + table.scale_group - 1) / table.scale_group)), 0.25f);
    ck.tensors.push_back(std::move(table));
    put(out / "bitmask24", "int8_table_" + std::to_string(group) + "_s24",
        encode_safetensors(encode_checkpoint(ck, CheckpointFormat::kSparse24)));
  }

  // sparse24 checkpoints with int8 layers in the kernels' layout (whole entries, and padded rows and columns)
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{8, 64}, {9, 70}}) {
    Checkpoint ck;
    const Compressed f32 = compress(matrix24(DType::kF32, {rows, cols}));
    for (Compressed c : {quantize_int8(f32, 64), to_bf16(f32), f32}) {
      CheckpointTensor t{"layer" + std::to_string(ck.tensors.size()) + ".weight", {}, std::move(c)};
      t.lanes_kb = 64;
      ck.tensors.push_back(std::move(t));
    }
    put(out / "bitmask24", "lanes_" + std::to_string(rows) + "x" + std::to_string(cols) + "_s24",
        encode_safetensors(encode_checkpoint(ck, CheckpointFormat::kSparse24)));
  }

  // compressed file, sparse24 and bitmask checkpoints, metadata decoder inputs
  for (DType dt : dtypes) {
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{4, 8}, {3, 12}, {2, 6}, {4, 4, 1, 1}, {2, 2, 8}}) {
      const Compressed c = compress(matrix24(dt, shape));
      const std::string name = std::string(dtype_name(dt)) + "_" + std::to_string(n++);
      put(out / "compressed_file", name, encode_compressed(c));
      Checkpoint ck;
      ck.metadata = {{"format", "pt"}};
      ck.tensors.push_back({"layer.weight", {}, c});
      ck.tensors.push_back({"norm.weight", to_st(matrix24(dt, {8})), std::nullopt});
      put(out / "bitmask24", name + "_s24",
          encode_safetensors(encode_checkpoint(ck, CheckpointFormat::kSparse24)));
      put(out / "bitmask24", name + "_bm",
          encode_safetensors(encode_checkpoint(ck, CheckpointFormat::kBitmask24)));
      if (shape.size() == 2 && shape[0] <= 9 && shape[1] <= 33) {
        std::vector<uint8_t> seed = {static_cast<uint8_t>(dt),
                                     1,
                                     static_cast<uint8_t>(shape[0] - 1),
                                     static_cast<uint8_t>(shape[1] - 1),
                                     0,
                                     0,
                                     1};
        seed.insert(seed.end(), c.metadata.begin(), c.metadata.end());
        seed.insert(seed.end(), c.values.begin(), c.values.end());
        put(out / "metadata", name, seed);
      }
    }
  }
  SparsityConfig sc;
  sc.targets = {"layer"};
  const std::string config = with_sparsity_config(R"({"hidden_size": 8})", sc, "config");
  put(out / "bitmask24", "config.json", std::vector<uint8_t>(config.begin(), config.end()));
  // engine model exports: [2-byte JSON length][model.json][model.safetensors]; an MLP with a pruned layer
  // and a small CNN (conv + batchnorm + pool)
  auto model_seed = [&](const std::string& name, const nlohmann::json& config, const SafeTensors& weights) {
    const std::string json = config.dump();
    std::vector<uint8_t> seed = {static_cast<uint8_t>(json.size() & 0xFF),
                                 static_cast<uint8_t>(json.size() >> 8)};
    seed.insert(seed.end(), json.begin(), json.end());
    const std::vector<uint8_t> st = encode_safetensors(weights);
    seed.insert(seed.end(), st.begin(), st.end());
    put(out / "engine_model", name, seed);
  };
  {
    SafeTensors w;
    nlohmann::json pruned = nlohmann::json::object();
    const Compressed c = compress(matrix24(DType::kF32, {4, 8}));
    w.add("fc1.weight.values", StTensor{"F32", {c.rows, c.values_per_row()}, c.values});
    w.add("fc1.weight.metadata", StTensor{"U8", {c.rows, c.meta_bytes_per_row()}, c.metadata});
    pruned["fc1.weight"] = {{"shape", {4, 8}}, {"pattern", "2:4"}, {"dtype", "float32"}};
    w.add("fc1.bias", to_st(matrix24(DType::kF32, {4})));
    w.add("fc2.weight", to_st(matrix24(DType::kF32, {3, 4})));
    w.add("fc2.bias", to_st(matrix24(DType::kF32, {3})));
    const nlohmann::json layers = {{{"type", "linear"}, {"name", "fc1"}, {"in", 8}, {"out", 4}},
                                   {{"type", "relu"}},
                                   {{"type", "linear"}, {"name", "fc2"}, {"in", 4}, {"out", 3}}};
    model_seed("mlp",
               {{"format", "sparse24-model"},
                {"version", 1},
                {"model", "mlp"},
                {"input_shape", {8}},
                {"classes", 3},
                {"normalize", {{"mean", 0.5}, {"std", 0.25}}},
                {"layers", layers},
                {"weights", "model.safetensors"},
                {"pruned", pruned}},
               w);
  }
  {
    SafeTensors w;
    nlohmann::json pruned = nlohmann::json::object();
    const Compressed c = compress(matrix24(DType::kF32, {4, 4, 3, 3}));
    w.add("conv1.weight.values", StTensor{"F32", {c.rows, c.values_per_row()}, c.values});
    w.add("conv1.weight.metadata", StTensor{"U8", {c.rows, c.meta_bytes_per_row()}, c.metadata});
    pruned["conv1.weight"] = {{"shape", {4, 4, 3, 3}}, {"pattern", "2:4"}, {"dtype", "float32"}};
    w.add("conv1.bias", to_st(matrix24(DType::kF32, {4})));
    for (const char* p : {"weight", "bias", "running_mean", "running_var"})
      w.add(std::string("bn1.") + p, to_st(Tensor::from_float({1.f, 0.5f, 2.f, 1.f}, {4})));
    w.add("fc.weight", to_st(matrix24(DType::kF32, {2, 16})));
    w.add("fc.bias", to_st(matrix24(DType::kF32, {2})));
    const nlohmann::json layers = {{{"type", "conv2d"},
                                    {"name", "conv1"},
                                    {"in", 4},
                                    {"out", 4},
                                    {"kernel", 3},
                                    {"stride", 1},
                                    {"padding", 1}},
                                   {{"type", "batchnorm2d"}, {"name", "bn1"}, {"features", 4}},
                                   {{"type", "relu"}},
                                   {{"type", "maxpool2d"}, {"kernel", 2}},
                                   {{"type", "flatten"}},
                                   {{"type", "linear"}, {"name", "fc"}, {"in", 16}, {"out", 2}}};
    model_seed("cnn",
               {{"format", "sparse24-model"},
                {"version", 1},
                {"model", "cnn"},
                {"input_shape", {4, 4, 4}},
                {"classes", 2},
                {"normalize", {{"mean", 0.5}, {"std", 0.25}}},
                {"layers", layers},
                {"weights", "model.safetensors"},
                {"pruned", pruned}},
               w);
  }
  // bpe: selector byte 0 + a byte-level BPE tokenizer.json; selector byte 1 + a GGUF file with its metadata
  {
    const std::vector<std::string> tokens = {"a",
                                             "b",
                                             "c",
                                             "\xc4\xa0",
                                             "ab",
                                             "abc",
                                             "\xc4\xa0"
                                             "a",
                                             "1",
                                             "2",
                                             "<s>"};
    const std::vector<std::string> merges = {"a b", "ab c", "\xc4\xa0 a", "1 2"};
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
    // Qwen2's Split pre-tokenizer (the fuzzer mutates the pattern too: anything else is refused).
    const nlohmann::json split = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    // GPT-4o's, as its converted tokenizers write it (Removed, inverted).
    nlohmann::json o200k = split;
    o200k["pretokenizers"][0] = {{"type", "Split"},
                                 {"pattern", {{"Regex", text::bpe_detail::kO200kPattern}}},
                                 {"behavior", "Removed"},
                                 {"invert", true}};
    for (const char* kind : {"json", "json_digits", "json_split", "json_o200k"}) {
      const bool digits = std::string(kind) == "json_digits";
      nlohmann::json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
      nlohmann::json pre =
          digits ? nlohmann::json{{"type", "Sequence"},
                                  {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, bl}}}
                 : bl;
      if (std::string(kind) == "json_split") pre = split;
      if (std::string(kind) == "json_o200k") pre = o200k;
      nlohmann::json j = {{"added_tokens", {{{"id", 9}, {"content", "<s>"}, {"special", true}}}},
                          {"pre_tokenizer", pre},
                          {"post_processor",
                           {{"type", "TemplateProcessing"},
                            {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {9}}}}}}}},
                          {"decoder", {{"type", "ByteLevel"}}},
                          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
      const std::string text = j.dump();
      std::vector<uint8_t> b = {0};
      b.insert(b.end(), text.begin(), text.end());
      if (std::string(kind) == "json_split") {
        nlohmann::json k = nlohmann::json::parse(text);
        k["normalizer"] = {{"type", "NFC"}};
        const std::string t2 = k.dump();
        b.assign(1, 0);
        b.insert(b.end(), t2.begin(), t2.end());
      }
      put(out / "bpe", kind, b);
    }
    Gguf g;
    g.metadata = {
        {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
        {"tokenizer.ggml.pre", GgufValue::of_string("smollm")},
        {"tokenizer.ggml.tokens", GgufValue::of_strings(tokens)},
        {"tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, {1, 1, 1, 1, 1, 1, 1, 1, 1, 3})},
        {"tokenizer.ggml.merges", GgufValue::of_strings(merges)},
        {"tokenizer.ggml.bos_token_id", GgufValue::of_int(GgufType::kU32, 9)},
        {"tokenizer.ggml.add_bos_token", GgufValue::of_int(GgufType::kBool, 1)}};
    for (const char* pre : {"smollm", "llama-bpe"}) {
      g.metadata[1].second = GgufValue::of_string(pre);
      std::vector<uint8_t> b = {1};
      const std::vector<uint8_t> file = encode_gguf(g);
      b.insert(b.end(), file.begin(), file.end());
      put(out / "bpe", std::string("gguf_") + pre, b);
    }
    // A SentencePiece-style ("llama") vocabulary: characters, U+2581, the 256 byte tokens, scores.
    {
      std::vector<std::string> spm = {"<unk>",
                                      "<s>",
                                      "</s>",
                                      "\xe2\x96\x81",
                                      "a",
                                      "b",
                                      "\xe2\x96\x81"
                                      "a",
                                      "ab"};
      std::vector<int64_t> types = {2, 3, 3, 1, 1, 1, 1, 1};
      std::vector<double> scores = {0, 0, 0, 0, 0, 0, -1, -2};
      for (int byte = 0; byte < 256; ++byte) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "<0x%02X>", byte);
        spm.push_back(hex);
        types.push_back(6);
        scores.push_back(0);
      }
      Gguf s;
      s.metadata = {{"tokenizer.ggml.model", GgufValue::of_string("llama")},
                    {"tokenizer.ggml.tokens", GgufValue::of_strings(spm)},
                    {"tokenizer.ggml.scores", GgufValue::of_floats(GgufType::kF32, scores)},
                    {"tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, types)},
                    {"tokenizer.ggml.bos_token_id", GgufValue::of_int(GgufType::kU32, 1)}};
      std::vector<uint8_t> b = {1};
      const std::vector<uint8_t> file = encode_gguf(s);
      b.insert(b.end(), file.begin(), file.end());
      put(out / "bpe", "gguf_spm", b);
      // The same vocabulary as tokenizer.json in the Metaspace form (no normalizer, prepend_scheme first).
      nlohmann::json vocab = nlohmann::json::object();
      for (size_t i = 0; i < spm.size(); ++i) vocab[spm[i]] = i;
      const std::string sp = "\xe2\x96\x81";
      const nlohmann::json j = {
          {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}}},
          {"pre_tokenizer",
           {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}, {"split", false}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"byte_fallback", true},
            {"unk_token", "<unk>"},
            {"vocab", vocab},
            {"merges", {sp + " a", "a b"}}}}};
      const std::string text = j.dump();
      b.assign(1, 0);
      b.insert(b.end(), text.begin(), text.end());
      put(out / "bpe", "json_metaspace", b);
    }
  }

  // gguf_decoder: a tiny llama (hidden 8, 2 heads / 1 KV head of 4, FFN 8, vocab 6, 1 layer), F32 (untied
  // too)
  {
    std::vector<std::vector<uint8_t>> storage;
    Gguf g;
    g.metadata = {{"general.architecture", GgufValue::of_string("llama")},
                  {"llama.block_count", GgufValue::of_int(GgufType::kU32, 1)},
                  {"llama.context_length", GgufValue::of_int(GgufType::kU32, 16)},
                  {"llama.embedding_length", GgufValue::of_int(GgufType::kU32, 8)},
                  {"llama.feed_forward_length", GgufValue::of_int(GgufType::kU32, 8)},
                  {"llama.attention.head_count", GgufValue::of_int(GgufType::kU32, 2)},
                  {"llama.attention.head_count_kv", GgufValue::of_int(GgufType::kU32, 1)},
                  {"llama.rope.freq_base", GgufValue::of_float(GgufType::kF32, 10000.0)},
                  {"llama.attention.layer_norm_rms_epsilon", GgufValue::of_float(GgufType::kF32, 1e-5)}};
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<uint8_t> b(static_cast<size_t>(n) * 4);
      for (int64_t i = 0; i < n; ++i) {
        const float v = 0.01f * static_cast<float>(i % 17) - 0.05f;
        std::memcpy(b.data() + i * 4, &v, 4);
      }
      storage.push_back(std::move(b));
      GgufTensor t;
      t.name = name;
      t.shape = std::move(shape);
      t.type = static_cast<uint32_t>(GgmlType::kF32);
      t.bytes = storage.back();
      g.tensors.push_back(t);
    };
    add("token_embd.weight", {6, 8});
    add("output_norm.weight", {8});
    for (const char* n : {"attn_norm", "ffn_norm"}) add(std::string("blk.0.") + n + ".weight", {8});
    add("blk.0.attn_q.weight", {8, 8});
    add("blk.0.attn_k.weight", {4, 8});
    add("blk.0.attn_v.weight", {4, 8});
    add("blk.0.attn_output.weight", {8, 8});
    add("blk.0.ffn_gate.weight", {8, 8});
    add("blk.0.ffn_up.weight", {8, 8});
    add("blk.0.ffn_down.weight", {8, 8});
    put(out / "gguf_decoder", "tiny_llama", encode_gguf(g));
    {  // with a tokenizer: what GgufCheckpoint (prune-model, convert) reads beyond the model
      Gguf t = g;
      t.metadata.push_back({"tokenizer.ggml.model", GgufValue::of_string("gpt2")});
      t.metadata.push_back({"tokenizer.ggml.pre", GgufValue::of_string("smollm")});
      t.metadata.push_back(
          {"tokenizer.ggml.tokens", GgufValue::of_strings({"a", "b", "c", "d", "ab", "<s>"})});
      t.metadata.push_back(
          {"tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, {1, 1, 1, 1, 1, 3})});
      t.metadata.push_back({"tokenizer.ggml.merges", GgufValue::of_strings({"a b"})});
      put(out / "gguf_decoder", "tiny_llama_tokenizer", encode_gguf(t));
    }
    {  // Llama 3's RoPE scaling as llama.cpp's converter stores it: a divisor per frequency of a head of 4
      Gguf scaled = g;
      const float factors[2] = {1.0f, 4.0f};
      storage.emplace_back(reinterpret_cast<const uint8_t*>(factors),
                           reinterpret_cast<const uint8_t*>(factors) + sizeof factors);
      GgufTensor t;
      t.name = "rope_freqs.weight";
      t.shape = {2};
      t.type = static_cast<uint32_t>(GgmlType::kF32);
      t.bytes = storage.back();
      scaled.tensors.push_back(t);
      put(out / "gguf_decoder", "tiny_llama3_rope", encode_gguf(scaled));
    }
    {  // untied (an output.weight): its embeddings stay in the file when mapped, F32 or as F16
      Gguf untied = g;
      add("output.weight", {6, 8});  // (add appends to g)
      untied.tensors.push_back(g.tensors.back());
      g.tensors.pop_back();
      put(out / "gguf_decoder", "tiny_llama_untied", encode_gguf(untied));
      storage.emplace_back(6 * 8 * 2);
      for (int64_t i = 0; i < 6 * 8; ++i) {
        const uint16_t h = float_to_half(0.01f * static_cast<float>(i % 13) - 0.05f);
        std::memcpy(storage.back().data() + i * 2, &h, 2);
      }
      untied.tensors[0].type = static_cast<uint32_t>(GgmlType::kF16);
      untied.tensors[0].bytes = storage.back();
      put(out / "gguf_decoder", "tiny_llama_untied_f16", encode_gguf(untied));
      untied.tensors.back().type = static_cast<uint32_t>(GgmlType::kF16);  // an F16 head: run in the file
      untied.tensors.back().bytes = storage.back();
      put(out / "gguf_decoder", "tiny_llama_untied_f16_head", encode_gguf(untied));
      Gguf tied = g;  // a tied F16 table: embeddings and head in the file
      tied.tensors[0].type = static_cast<uint32_t>(GgmlType::kF16);
      tied.tensors[0].bytes = storage.back();
      put(out / "gguf_decoder", "tiny_llama_tied_f16", encode_gguf(tied));
    }
    // The same as Qwen2 (Q, K, V biases), Qwen3 (Q/K norms), Gemma 2 and 3: their ARCH.* keys and extra
    // tensors.
    const Gguf llama = g;
    for (const std::string arch : {"qwen2", "qwen3", "gemma2", "gemma3"}) {
      g = llama;
      for (auto& [key, value] : g.metadata)
        if (key.rfind("llama.", 0) == 0) key = arch + key.substr(5);
      g.metadata[0].second = GgufValue::of_string(arch);
      if (arch == "qwen2") {
        add("blk.0.attn_q.bias", {8});
        add("blk.0.attn_k.bias", {4});
        add("blk.0.attn_v.bias", {4});
      } else if (arch != "gemma2") {
        add("blk.0.attn_q_norm.weight", {4});
        add("blk.0.attn_k_norm.weight", {4});
      }
      if (arch == "gemma2")  // its score cap (the window and which layers slide: llama.cpp's defaults)
        g.metadata.push_back({"gemma2.attn_logit_softcapping", GgufValue::of_float(GgufType::kF32, 50.0)});
      if (arch.starts_with("gemma")) {  // their output norms
        add("blk.0.post_attention_norm.weight", {8});
        add("blk.0.post_ffw_norm.weight", {8});
      }
      if (arch == "gemma3") {  // its window, sliding flags and the sliding layers' RoPE base
        g.metadata.push_back({"gemma3.attention.sliding_window", GgufValue::of_int(GgufType::kU32, 4)});
        g.metadata.push_back(
            {"gemma3.attention.sliding_window_pattern", GgufValue::of_ints(GgufType::kBool, {1})});
        g.metadata.push_back({"gemma3.rope.freq_base_swa", GgufValue::of_float(GgufType::kF32, 100.0)});
      }
      put(out / "gguf_decoder", "tiny_" + arch, encode_gguf(g));
    }
  }

  // tokenizer: a small BERT-like tokenizer.json and an MPNet-like one (RobertaProcessing, lstrip <mask>)
  {
    nlohmann::json vocab = nlohmann::json::object();
    const char* tokens[] = {"[PAD]", "[UNK]", "[CLS]",  "[SEP]", "[MASK]", "hello", ",",
                            "world", "!",     "cafe",   "中",    "un",     "##aff", "##able",
                            "<s>",   "</s>",  "<mask>", "i",     "##̇",     "a"};
    for (size_t i = 0; i < std::size(tokens); ++i) vocab[tokens[i]] = i;
    auto added = [](int id, const char* content, bool lstrip) {
      return nlohmann::json{{"id", id},         {"content", content}, {"single_word", false},
                            {"lstrip", lstrip}, {"rstrip", false},    {"normalized", false},
                            {"special", true}};
    };
    nlohmann::json bert = {
        {"added_tokens", {added(0, "[PAD]", false), added(2, "[CLS]", false), added(3, "[SEP]", false)}},
        {"normalizer",
         {{"type", "BertNormalizer"},
          {"clean_text", true},
          {"handle_chinese_chars", true},
          {"strip_accents", nullptr},
          {"lowercase", true}}},
        {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single",
           {{{"SpecialToken", {{"id", "[CLS]"}}}},
            {{"Sequence", {{"id", "A"}}}},
            {{"SpecialToken", {{"id", "[SEP]"}}}}}},
          {"special_tokens",
           {{"[CLS]", {{"id", "[CLS]"}, {"ids", {2}}}}, {"[SEP]", {{"id", "[SEP]"}, {"ids", {3}}}}}}}},
        {"model",
         {{"type", "WordPiece"},
          {"unk_token", "[UNK]"},
          {"continuing_subword_prefix", "##"},
          {"max_input_chars_per_word", 10},
          {"vocab", vocab}}}};
    const std::string b = bert.dump();
    put(out / "tokenizer", "bert", std::vector<uint8_t>(b.begin(), b.end()));
    nlohmann::json mpnet = bert;
    mpnet["added_tokens"] = {added(14, "<s>", false), added(15, "</s>", false), added(16, "<mask>", true)};
    mpnet["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 15}}, {"cls", {"<s>", 14}}};
    mpnet["normalizer"] = {{"type", "Sequence"}, {"normalizers", {bert["normalizer"]}}};
    mpnet["normalizer"]["normalizers"][0]["strip_accents"] = false;
    const std::string m = mpnet.dump();
    put(out / "tokenizer", "mpnet", std::vector<uint8_t>(m.begin(), m.end()));
  }
  // hf_encoder: each file of the tiny valid directory, behind the selector byte that puts it in place.
  {
    const auto files = hf_template::files();
    for (uint8_t sel = 0; sel < 5; ++sel) {
      std::vector<uint8_t> seed{sel};
      const std::vector<uint8_t>& body = files.at(hf_template::kFiles[sel]);
      seed.insert(seed.end(), body.begin(), body.end());
      put(out / "hf_encoder", "file" + std::to_string(sel), seed);
    }
  }
  // hf_decoder: each file of the tiny valid Llama directory, behind its selector byte.
  {
    const auto files = hf_template::decoder_files();
    for (uint8_t sel = 0; sel < 3; ++sel) {
      std::vector<uint8_t> seed{sel};
      const std::vector<uint8_t>& body = files.at(hf_template::kDecoderFiles[sel]);
      seed.insert(seed.end(), body.begin(), body.end());
      put(out / "hf_decoder", "file" + std::to_string(sel), seed);
    }
  }
  // jinja: chat templates in the subset's styles (a header-per-turn one, one with a namespace and loop
  // controls, one with filters, tests and slices).
  {
    const char* templates[] = {
        "{{- bos_token }}{%- for message in messages %}{{- '<|start|>' + message['role'] + '\n' + "
        "message['content'] | trim + '<|end|>' }}{%- endfor %}{%- if add_generation_prompt "
        "%}<|start|>assistant"
        "{%- endif %}",
        "{%- set ns = namespace(s='', n=0) -%}\n{% for m in messages %}\n  {%- if m.role == 'system' -%}"
        "{%- set ns.s = m.content -%}{% continue %}{%- endif %}\n  {{ loop.index }}/{{ loop.length }} "
        "{{ m.content.strip()|upper }}{% if loop.last %}{% break %}{% endif %}\n{% endfor %}{# c #}",
        "{{ messages|length }} {{ messages[::-1][0]|tojson }} {{ 'a,b'.split(',')|join('+') }} "
        "{{ 7 // 2 ~ none }} {{ x is defined }} {{ 'y' if messages[0].role in ['system'] else "
        "raise_exception('no') }}"
        " {{ range(3)|list }} {{ {'k': [1, 2.5, true]}.get('k') }}",
    };
    int i = 0;
    for (const char* t : templates) {
      const std::string s(t);
      put(out / "jinja", "t" + std::to_string(i++), std::vector<uint8_t>(s.begin(), s.end()));
    }
  }
  return 0;
}
