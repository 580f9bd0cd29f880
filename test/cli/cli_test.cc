// End-to-end tests of the sparse24 command: real files in a temporary directory, real exit codes.
#include "common/cli.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/seed.h"
#include "sparse24/compressed.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"

namespace sparse24 {
namespace {

namespace fs = std::filesystem;
using testing::random_floats;
using testing::rng;

using testing::CliRun;
constexpr auto run = testing::run_cli;

class Cli : public testing::TempDirTest {
 protected:
  // Files in the directory other than the ones named: nothing half-written may be left behind.
  std::vector<std::string> files() const {
    std::vector<std::string> f;
    for (const auto& e : fs::directory_iterator(dir_)) f.push_back(e.path().filename().string());
    std::sort(f.begin(), f.end());
    return f;
  }
};

TEST_F(Cli, CompressPruneThenInspectReportsRatios) {
  SPARSE24_SEED_TRACE();
  auto g = rng(40);
  const std::vector<float> w = random_floats(g, 64 * 128);
  for (auto [dt, ratio] :
       {std::pair{DType::kF32, 0.53125}, std::pair{DType::kF16, 0.5625}, std::pair{DType::kI8, 0.625}}) {
    std::vector<float> v = w;
    if (dt == DType::kI8)
      for (auto& x : v) x = std::round(x * 100);
    write_npy(path("w.npy"), Tensor::from_float(v, {64, 128}, dt));
    CliRun r = run("compress " + path("w.npy") + " -o " + path("w.safetensors") + " --prune");
    ASSERT_EQ(r.status, 0) << r.out;
    r = run("inspect --json " + path("w.safetensors"));
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["compression_ratio"].get<double>(), ratio) << dtype_name(dt);
    EXPECT_TRUE(j["valid"].get<bool>());
    EXPECT_EQ(j["dtype"], dtype_name(dt));
    EXPECT_EQ(j["shape"], (std::vector<int64_t>{64, 128}));
    EXPECT_EQ(j["pattern"], "2:4");
    EXPECT_DOUBLE_EQ(j["kept_magnitude"].get<double>(), 1.0);
    EXPECT_GE(j["sparsity"].get<double>(), 0.5);
  }
}

// compress --dtype int8: int8 values with fp32 scales per 64 positions (0.6875 bytes per weight, reported by
// inspect); decompress gives the dequantised float32 matrix, within half a quantisation step.
TEST_F(Cli, CompressInt8CarriesScales) {
  SPARSE24_SEED_TRACE();
  auto g = rng(41);
  const std::vector<float> w = random_floats(g, 16 * 128);
  write_npy(path("w.npy"), Tensor::from_float(w, {16, 128}));
  CliRun r = run("compress " + path("w.npy") + " -o " + path("q.safetensors") + " --prune --dtype int8");
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("inspect --json " + path("q.safetensors"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["dtype"], "int8");
  EXPECT_EQ(j["scale_group"].get<int64_t>(), 64);
  EXPECT_DOUBLE_EQ(j["bytes_per_weight"].get<double>(), 0.6875);
  r = run("decompress " + path("q.safetensors") + " -o " + path("d.npy"));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<float> d = read_npy(path("d.npy")).to_float();
  ASSERT_EQ(d.size(), w.size());
  int kept = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (d[i] != 0.f) {
      ++kept;
      EXPECT_NEAR(d[i], w[i], 0.5f / 127.f + 1e-6f) << i;  // |w| < 1: scale <= 1/127
    }
  EXPECT_GT(kept, 900);
  r = run("compress " + path("w.npy") + " -o " + path("q.safetensors") +
          " --prune --dtype int8 --scale-group 6");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("multiple of 4"), std::string::npos) << r.out;
}

TEST_F(Cli, InspectDenseReportsViolationsAndKeptMagnitude) {
  write_npy(path("d.npy"), Tensor::from_float({1, 2, 3, 4, 0, 0, 5, 6}, {2, 4}));
  CliRun r = run("inspect --json " + path("d.npy"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["valid"].get<bool>());
  EXPECT_EQ(j["bad_groups"], 1);
  EXPECT_EQ(j["first_bad"]["row"], 0);
  EXPECT_NEAR(j["kept_magnitude"].get<double>(), (3 + 4 + 5 + 6) / 21.0, 1e-12);
  EXPECT_EQ(j["sparsity"], 0.25);
}

TEST_F(Cli, PruneCompressDecompressRoundTrip) {
  SPARSE24_SEED_TRACE();
  auto g = rng(41);
  const Tensor t = Tensor::from_float(random_floats(g, 3 * 8 * 3 * 3), {3, 8, 3, 3});  // a conv weight
  write_npy(path("w.npy"), t);
  for (const char* method : {"magnitude", "transposable"}) {
    CliRun r = run(std::string("prune ") + path("w.npy") + " -o " + path("p.npy") + " --method " + method);
    ASSERT_EQ(r.status, 0) << r.out;
    const Tensor p = read_npy(path("p.npy"));
    ASSERT_EQ(p.shape, t.shape);
    ASSERT_EQ(run("compress " + path("p.npy") + " -o " + path("p.safetensors")).status, 0);
    r = run("decompress " + path("p.safetensors") + " -o " + path("back.npy"));
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(read_npy(path("back.npy")).bytes, p.bytes) << method;
  }
  CliRun r = run("prune " + path("w.npy") + " -o " + path("p48.npy") + " --pattern 4:8");
  ASSERT_EQ(r.status, 0) << r.out;
}

// Bad input: non-zero exit, one line naming the problem, no output file left behind.
TEST_F(Cli, BadInputFailsCleanly) {
  write_npy(path("dense.npy"), Tensor::from_float(std::vector<float>(16, 1.f), {2, 8}));
  write_npy(path("empty_k.npy"), Tensor::zeros(DType::kF32, {3, 0}));
  write_file_atomic(path("junk.npy"), std::string("\x93NUMPY\x01\x00garbage", 14));
  write_file_atomic(path("junk.safetensors"), std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  const std::vector<std::string> before = files();
  const std::pair<std::string, std::string> cases[] = {
      {"compress " + path("missing.npy") + " -o " + path("o.safetensors"), "No such file"},
      {"compress " + path("dense.npy") + " -o " + path("o.safetensors"), "not 2:4 sparse: row 0, group 0"},
      {"compress " + path("empty_k.npy") + " -o " + path("o.safetensors"), "K = 0"},
      {"compress " + path("junk.npy") + " -o " + path("o.safetensors"), "junk.npy"},
      {"decompress " + path("junk.safetensors") + " -o " + path("o.npy"), "header"},
      {"decompress " + path("dense.npy") + " -o " + path("o.npy"), "dense.npy"},
      {"inspect " + path("junk.safetensors"), "junk.safetensors"},
      {"prune " + path("dense.npy") + " -o " + path("o.npy") + " --pattern 3:4", "3:4"},
      {"compress " + path("dense.npy") + " -o " + path("no/such/dir/o.safetensors") + " --prune",
       "no/such/dir"},
      {"embed " + path("no_model") + " --text a --int8-activations", "--int8-activations needs --int8"},
  };
  for (const auto& [args, phrase] : cases) {
    const CliRun r = run(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find(phrase), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line expected: " << r.out;
    EXPECT_EQ(files(), before) << args;
  }
}

// A small GGUF file with a tokenizer: inspect reports it, tokenize uses its vocabulary; a truncated copy and
// an unknown pre-tokenizer fail with one line and a non-zero exit.
TEST_F(Cli, InspectAndTokenizeGguf) {
  Gguf g;
  const std::vector<std::string> tokens = {"a", "b", "\xc4\xa0", "ab", "<s>"};
  g.metadata = {{"general.architecture", GgufValue::of_string("llama")},
                {"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
                {"tokenizer.ggml.pre", GgufValue::of_string("smollm")},
                {"tokenizer.ggml.tokens", GgufValue::of_strings(tokens)},
                {"tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, {1, 1, 1, 1, 3})},
                {"tokenizer.ggml.merges", GgufValue::of_strings({"a b"})}};
  std::vector<uint8_t> w(24), q(20);
  GgufTensor t;
  t.name = "w";
  t.shape = {2, 3};
  t.type = 0;
  t.bytes = w;
  g.tensors.push_back(t);
  t.name = "q";
  t.shape = {1, 32};
  t.type = 3;
  t.bytes = q;
  g.tensors.push_back(t);
  const std::vector<uint8_t> bytes = encode_gguf(g);
  write_file_atomic(path("m.gguf"), bytes);

  CliRun r = run("inspect --json " + path("m.gguf"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["parameters"], 38);
  EXPECT_EQ(j["tensor_bytes"], 44);
  EXPECT_EQ(j["tensors"][1]["type"], "Q4_1");
  EXPECT_EQ(j["tensors"][1]["shape"], (std::vector<int64_t>{1, 32}));
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["length"], 5);
  r = run("inspect " + path("m.gguf"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("architecture      llama"), std::string::npos) << r.out;

  r = run("tokenize " + path("m.gguf") + " --text 'ab b<s>a'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "[3,2,1,4,0]\n");
  // A text written like a list is one text (CLI11 splits "[x, y]" for options of several values).
  r = run("tokenize " + path("m.gguf") + " --text '[ab, b]' a");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "[3,2,1]\n[0]\n");

  write_file_atomic(path("cut.gguf"), std::string(bytes.begin(), bytes.begin() + 100));
  r = run("inspect " + path("cut.gguf"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("sparse24: error: " + path("cut.gguf") + ": "), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  g.metadata[2].second = GgufValue::of_string("chatglm-bpe");
  const std::vector<uint8_t> other = encode_gguf(g);
  write_file_atomic(path("glm.gguf"), other);
  r = run("tokenize " + path("glm.gguf") + " --text x");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("tokenizer.ggml.pre 'chatglm-bpe' is not supported"), std::string::npos) << r.out;
}

TEST_F(Cli, DemoRuns) {
  const CliRun r = run("demo --rows 64 --cols 96 -n 16");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("0.53125"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.56250"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sparse24
