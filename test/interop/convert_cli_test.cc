// `sparse24 convert` end to end: whole checkpoints with their config.json, real files, real exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/seed.h"
#include "interop/reference_writer.h"
#include "io/io_test_util.h"
#include "sparse24/bitmask24.h"
#include "sparse24/checkpoint.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

namespace ref = testing::reference;
using ref::RawTensor;

using testing::CliRun;
constexpr auto run = testing::run_cli;

std::vector<uint8_t> bytes_of(const std::string& path) { return read_file(path); }
std::string text_of(const std::string& path) {
  const auto b = read_file(path);
  return std::string(b.begin(), b.end());
}

const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16})";

// A reference sparse-24-bitmask checkpoint in <dir>/in with its config.json.
std::vector<uint8_t> write_reference_checkpoint(const testing::TempDir& dir, std::mt19937_64& g) {
  std::filesystem::create_directories(dir.file("in"));
  std::vector<RawTensor> tensors;
  for (auto [prefix, rows, cols] :
       {std::tuple{"model.layers.0.mlp.up_proj", 16, 32}, std::tuple{"model.layers.0.mlp.down_proj", 32, 16},
        std::tuple{"model.layers.0.self_attn.q_proj", 16, 16}}) {
    const auto dense = ref::random_24_matrix("BF16", rows, cols, g);
    for (auto& t : ref::bitmask24_layer(prefix, "BF16", rows, cols, dense, g)) tensors.push_back(t);
  }
  tensors.push_back(RawTensor{"model.embed_tokens.weight", "BF16", {10, 16}, testing::random_bytes(g, 320)});
  tensors.push_back(RawTensor{"model.norm.weight", "F32", {16}, testing::random_bytes(g, 64)});
  const auto file = ref::write_safetensors_file(tensors, {{"format", "pt"}});
  write_file_atomic(dir.file("in/model.safetensors"), std::string(file.begin(), file.end()));
  nlohmann::json config = nlohmann::json::parse(kConfig);
  config["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                   {"sparsity_config",
                                    {{"format", "sparse-24-bitmask"},
                                     {"sparsity_structure", "2:4"},
                                     {"targets", {"Linear"}},
                                     {"ignore", {"lm_head"}},
                                     {"global_sparsity", 0.4}}}};
  write_file_atomic(dir.file("in/config.json"), config.dump(2));
  return file;
}

TEST(ConvertCli, BitmaskToSparse24AndBackIsBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(620);
  testing::TempDir dir;
  const std::vector<uint8_t> original = write_reference_checkpoint(dir, g);
  std::filesystem::create_directories(dir.file("s24"));
  std::filesystem::create_directories(dir.file("back"));

  CliRun r = run("convert " + dir.file("in/model.safetensors") + " " + dir.file("s24/model.safetensors") +
                 " --to sparse24");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("3 compressed 2:4"), std::string::npos) << r.out;
  const Checkpoint s24 = load_checkpoint(dir.file("s24/model.safetensors"));
  EXPECT_EQ(s24.sparse_count(), 3);
  // The sparse24 config has no sparsity_config (the file is not in that layout), the rest is kept.
  const auto s24_config = nlohmann::json::parse(text_of(dir.file("s24/config.json")));
  EXPECT_FALSE(s24_config.contains("quantization_config"));
  EXPECT_EQ(s24_config["hidden_size"], 16);

  r = run("convert " + dir.file("s24/model.safetensors") + " " + dir.file("back/model.safetensors") +
          " --to sparse-24-bitmask");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(bytes_of(dir.file("back/model.safetensors")) == original) << "the round trip changed the file";
  const auto sc = parse_sparsity_config(text_of(dir.file("back/config.json")), "config.json");
  ASSERT_TRUE(sc);
  EXPECT_EQ(sc->format, "sparse-24-bitmask");
  EXPECT_EQ(sc->sparsity_structure, "2:4");
  EXPECT_EQ(sc->targets.size(), 3u);
  EXPECT_GT(sc->global_sparsity, 0.0);
  EXPECT_LT(sc->global_sparsity, 1.0);
}

// `inspect` of a checkpoint (the reference sparse-24-bitmask file, its directory, and its sparse24
// conversion): every tensor with its layout, type and stored bytes; the parameters in 2:4 weights; the
// directory's sparsity config. A shard is not read whole to tell it from a matrix file.
TEST(ConvertCli, InspectReportsACheckpointAndItsDirectory) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(623);
  testing::TempDir dir;
  write_reference_checkpoint(dir, g);
  // 16x32 + 32x16 + 16x16 in 2:4 (bf16: 2 bytes per kept value, a 4-bit code per group), 10x16 + 16 dense.
  const int64_t sparse = 16 * 32 + 32 * 16 + 16 * 16, all = sparse + 10 * 16 + 16;
  const uint64_t sparse_bytes = sparse / 2 * 2 + sparse / 8;
  for (const std::string& what : {dir.file("in"), dir.file("in/model.safetensors")}) {
    CliRun r = run("inspect --json " + what);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["format"], "checkpoint");
    EXPECT_EQ(j["tensors"].size(), 5u);
    EXPECT_EQ(j["sparse_tensors"], 3);
    EXPECT_EQ(j["parameters"], all);
    EXPECT_EQ(j["sparse_parameters"], sparse);
    EXPECT_DOUBLE_EQ(j["sparse_bytes_per_weight"].get<double>(), static_cast<double>(sparse_bytes) / sparse);
    for (const auto& t : j["tensors"]) {
      EXPECT_EQ(t["sparse"], t["name"] != "model.embed_tokens.weight" && t["name"] != "model.norm.weight")
          << t.dump();
      if (t["name"] == "model.layers.0.mlp.up_proj.weight") {
        EXPECT_EQ(t["shape"], nlohmann::json({16, 32}));
        EXPECT_EQ(t["dtype"], "BF16");
      }
    }
    EXPECT_EQ(j["sparsity_config"],
              what == dir.file("in") ? nlohmann::json("sparse-24-bitmask") : nlohmann::json());
    r = run("inspect " + what);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("tensors           5: 3 2:4 (BF16 3), 2 dense (BF16 1, F32 1)"), std::string::npos)
        << r.out;
  }
  CliRun r = run("convert " + dir.file("in") + " " + dir.file("s24") + " --to sparse24");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("inspect --json " + dir.file("s24"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sparse_parameters"], sparse);
  EXPECT_TRUE(j["sparsity_config"].is_null());
}

TEST(ConvertCli, DenseToSparseAndBackWithPruneAndTargets) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(621);
  testing::TempDir dir;
  SafeTensors dense;
  const std::vector<float> w = testing::random_floats(g, 16 * 32);
  std::vector<float> w24 = w;
  for (size_t i = 0; i < w24.size(); ++i)
    if (i % 4 == 1 || i % 4 == 2) w24[i] = 0;
  dense.add("a.weight", to_st(Tensor::from_float(w24, {16, 32}, DType::kF16)));
  dense.add("b.weight", to_st(Tensor::from_float(w, {16, 32}, DType::kF32)));
  dense.add("emb.weight", to_st(Tensor::from_float(w, {32, 16}, DType::kF32)));
  dense.add("norm.weight", to_st(Tensor::from_float(std::vector<float>(16, 1.f), {16})));
  write_safetensors(dir.file("dense.safetensors"), dense);

  // Already-2:4 weights only.
  CliRun r =
      run("convert " + dir.file("dense.safetensors") + " " + dir.file("s.safetensors") + " --to sparse24");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("left dense: b.weight: not 2:4"), std::string::npos) << r.out;
  Checkpoint ck = load_checkpoint(dir.file("s.safetensors"));
  EXPECT_EQ(ck.sparse_count(), 1);
  EXPECT_TRUE(ck.find("a.weight")->sparse);
  EXPECT_FALSE(std::filesystem::exists(dir.file("config.json")));  // none in, none out

  // --prune with --targets: b is pruned, emb is not selected.
  r = run("convert " + dir.file("dense.safetensors") + " " + dir.file("p.safetensors") +
          " --to sparse-24-bitmask --prune --targets '^(a|b)\\.' --config-out " + dir.file("p.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  ck = load_checkpoint(dir.file("p.safetensors"));
  EXPECT_EQ(ck.sparse_count(), 2);
  EXPECT_FALSE(ck.find("emb.weight")->sparse);
  const SafeTensors p = read_safetensors(dir.file("p.safetensors"));
  EXPECT_TRUE(p.find("b.bitmask") && p.find("b.compressed") && p.find("b.shape"));
  EXPECT_EQ(parse_sparsity_config(text_of(dir.file("p.json")), "p.json")->targets,
            (std::vector<std::string>{"a", "b"}));

  // Back to dense: a comes back bit for bit; b is its pruned self.
  r = run("convert " + dir.file("s.safetensors") + " " + dir.file("d.safetensors") + " --to dense");
  ASSERT_EQ(r.status, 0) << r.out;
  const SafeTensors d = read_safetensors(dir.file("d.safetensors"));
  ASSERT_EQ(d.tensors.size(), 4u);
  for (const auto& [name, t] : dense.tensors) {
    ASSERT_TRUE(d.find(name)) << name;
    EXPECT_EQ(d.at(name).bytes, t.bytes) << name;
    EXPECT_EQ(d.at(name).dtype, t.dtype) << name;
    EXPECT_EQ(d.at(name).shape, t.shape) << name;
  }
  r = run("convert " + dir.file("p.safetensors") + " " + dir.file("pd.safetensors") +
          " --to dense --config " + dir.file("p.json") + " --config-out " + dir.file("pd.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  const Tensor b = from_st(read_safetensors(dir.file("pd.safetensors")).at("b.weight"), "b");
  const std::vector<float> bf = b.to_float();
  for (size_t i = 0; i < bf.size(); i += 4)
    EXPECT_LE((bf[i] != 0) + (bf[i + 1] != 0) + (bf[i + 2] != 0) + (bf[i + 3] != 0), 2);
  EXPECT_FALSE(parse_sparsity_config(text_of(dir.file("pd.json")), "pd.json"));
}

TEST(ConvertCli, RefusesBadInputsWithAClearMessageAndWritesNothing) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(622);
  testing::TempDir dir;
  std::vector<uint8_t> file = write_reference_checkpoint(dir, g);
  const std::string in = dir.file("in/model.safetensors");

  // Output config would overwrite the input's.
  CliRun r = run("convert " + in + " " + dir.file("in/out.safetensors") + " --to sparse24");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is the input's config.json"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("in/out.safetensors")));

  // A config that says another format.
  write_file_atomic(
      dir.file("other.json"),
      std::string(R"({"quantization_config": {"sparsity_config": {"format": "sparse-bitmask"}}})"));
  r = run("convert " + in + " " + dir.file("o.safetensors") + " --to dense --config " +
          dir.file("other.json"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("sparsity_config says format 'sparse-bitmask'"), std::string::npos) << r.out;

  // A bitmask with 3 bits set in a group: find the first bitmask byte and set a third bit in group 0.
  const SafeTensorsView v = parse_safetensors_view(file.data(), file.size(), "x");
  const StTensorView* mask = v.find("model.layers.0.mlp.up_proj.bitmask");
  ASSERT_TRUE(mask);
  const size_t at = static_cast<size_t>(mask->bytes.data() - file.data());
  const uint8_t nibble = file[at] & 0xF;
  file[at] = static_cast<uint8_t>(file[at] | (~nibble & 0xF & -(~nibble & 0xF)));  // lowest clear bit
  write_file_atomic(dir.file("bad.safetensors"), std::string(file.begin(), file.end()));
  r = run("convert " + dir.file("bad.safetensors") + " " + dir.file("o.safetensors") + " --to sparse24");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(
                "sparse24: error: " + dir.file("bad.safetensors") +
                ": tensor 'model.layers.0.mlp.up_proj.bitmask' row 0, group 0 (columns 0..3) has 3 bits set"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.safetensors")));

  r = run("convert " + dir.file("missing.safetensors") + " " + dir.file("o.safetensors") + " --to sparse24");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("No such file or directory"), std::string::npos) << r.out;
  r = run("convert " + in + " " + dir.file("o.safetensors") + " --to bitmask");
  EXPECT_NE(r.status, 0);
}

}  // namespace
}  // namespace sparse24
