// Presenting rows: the text table `sparse24 bench` prints and the JSON it writes.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "harness.h"

namespace sparse24::bench {

// The dense methods in table order, with their column labels.
struct MethodColumn {
  const char* name;
  const char* label;
};
const std::vector<MethodColumn>& dense_columns();

// Column legend and header line of the table.
std::string table_legend();
std::string table_header();
// One line per row: dense-equivalent GFLOP/s of every method ("-" not run, "WRONG" failed its check).
std::string table_line(const Row& r);
// Extra lines under a row: failed checks, a disturbed machine, weight bandwidth of cold rows.
// stream_read_gbps > 0: the machine's measured read bandwidth, printed beside the cold rows' weight GB/s.
std::string row_notes(const Row& r, double stream_read_gbps = 0);

// {m, k, n, threads, cold, best_dense_lib, best_dense_gflops, sparse_gflops, speedup, ...}; speedup and
// sparse_gflops are null when sparse24 failed its check.
nlohmann::json row_json(const Row& r);
// Writes to a temporary file in the same directory, then renames it over `path`. Throws Error.
void write_json_atomic(const std::string& path, const nlohmann::json& j);

}  // namespace sparse24::bench
