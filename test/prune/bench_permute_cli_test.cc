// sparse24 bench-permute through the real binary: the table, the JSON list, and bad arguments.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/cli.h"

namespace sparse24 {
namespace {

using testing::CliRun;
using testing::run_cli;
using BenchPermuteCli = testing::TempDirTest;

TEST_F(BenchPermuteCli, WritesTableAndJson) {
  const CliRun r = run_cli("bench-permute --rows 8 --cols 32 --trials 2 --seed 3 --json " + path("p.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* m : {"swap", "exhaustive", "auto"}) EXPECT_NE(r.out.find(m), std::string::npos) << r.out;
  std::ifstream f(path("p.json"));
  const auto j = nlohmann::json::parse(f);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 6u);  // 2 trials x 3 methods
  for (const auto& e : j) {
    for (const char* k : {"trial", "method", "rows", "cols", "seed", "recovered", "seconds", "kept_identity",
                          "kept_permuted", "kept_bound"})
      EXPECT_TRUE(e.contains(k)) << k;
    EXPECT_EQ(e["rows"], 8);
    EXPECT_EQ(e["cols"], 32);
    EXPECT_GE(e["recovered"].get<double>(), 0.0);
    EXPECT_LE(e["recovered"].get<double>(), 1.0);
    EXPECT_GE(e["kept_permuted"].get<double>(), e["kept_identity"].get<double>());
    EXPECT_LE(e["kept_permuted"].get<double>(), e["kept_bound"].get<double>() * (1 + 1e-12));
  }
  EXPECT_EQ(j[0]["seed"], 3);
  EXPECT_EQ(j[3]["seed"], 4);
}

// ASP's permutation_test.py matrix for seed 1 (NumPy's rand(128, 64)): the same sums as its README table.
TEST_F(BenchPermuteCli, AspMatrixMatchesItsPublishedSums) {
  const CliRun r = run_cli("bench-permute --rows 128 --cols 64 --trials 1 --dist asp");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("sum |w| 4083.169, 2:4 kept 2852.377, per-row 50% bound 3042.332"), std::string::npos)
      << r.out;
}

TEST_F(BenchPermuteCli, BadArgumentsExitOne) {
  for (const char* args : {"--cols 30", "--rows 0", "--trials 0", "--dist cauchy", "--max-seconds 0"}) {
    const CliRun r = run_cli(std::string("bench-permute ") + args + " --json " + path("x.json"));
    EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("sparse24: error:"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(path("x.json")));
  }
}

}  // namespace
}  // namespace sparse24
