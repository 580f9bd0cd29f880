// `sparse24 export-gpu` end to end: a compressed file in, the CUTLASS-layout file out, read back.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/cli.h"
#include "common/seed.h"
#include "emu/emu_test_util.h"
#include "sparse24/gpu_meta.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

namespace fs = std::filesystem;

using testing::CliRun;
constexpr auto run = testing::run_cli;

class ExportGpu : public testing::TempDirTest {};

TEST_F(ExportGpu, WritesTheCutlassLayoutAndReadsBack) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(801);
  for (DType t : {DType::kF16, DType::kBF16}) {
    const Compressed c = testing::random_24(g, 64, 96, t);
    save_compressed(path("in.safetensors"), c);
    const CliRun r2 = run("export-gpu " + path("in.safetensors") + " -o " + path("out.safetensors"));
    ASSERT_EQ(r2.status, 0) << r2.out;
    EXPECT_NE(r2.out.find("cutlass"), std::string::npos) << r2.out;
    const SafeTensors st = read_safetensors(path("out.safetensors"));
    const CutlassSparse s = decode_cutlass_file(st, "out");
    EXPECT_EQ(s.meta, to_cutlass(c).meta);
    const Compressed back = from_cutlass(s);
    EXPECT_EQ(back.values, c.values);
    EXPECT_EQ(back.metadata, c.metadata);
  }
}

TEST_F(ExportGpu, Float32NeedsAnExplicitDtype) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(802);
  const Compressed c = testing::random_24(g, 32, 64, DType::kF32);
  save_compressed(path("in.safetensors"), c);
  const CliRun bad = run("export-gpu " + path("in.safetensors") + " -o " + path("out.safetensors"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("--dtype"), std::string::npos) << bad.out;
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
  const CliRun ok =
      run("export-gpu " + path("in.safetensors") + " -o " + path("out.safetensors") + " --dtype bf16");
  ASSERT_EQ(ok.status, 0) << ok.out;
  const CutlassSparse s = decode_cutlass_file(read_safetensors(path("out.safetensors")), "out");
  EXPECT_EQ(s.dtype, DType::kBF16);
  EXPECT_EQ(from_cutlass(s).metadata, c.metadata);
}

TEST_F(ExportGpu, RowsNotAMultipleOf32AreRefused) {
  auto g = testing::rng(803);
  save_compressed(path("in.safetensors"), testing::random_24(g, 48, 64, DType::kF16));
  const CliRun r = run("export-gpu " + path("in.safetensors") + " -o " + path("out.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("multiples of 32"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sparse24
