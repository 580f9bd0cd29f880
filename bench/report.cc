#include "report.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "sparse24/error.h"

namespace sparse24::bench {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

std::string cell(const MethodResult* m) {
  if (!m) return "-";
  if (!m->ok) return "WRONG";
  return fmt("%.1f", m->gflops);
}

constexpr size_t kCol = 10;

}  // namespace

const std::vector<MethodColumn>& dense_columns() {
  static const std::vector<MethodColumn> cols = {
      {"openblas_sgemm_nn", "ob_nn"}, {"openblas_sgemm_nt", "ob_nt"}, {"openblas_sgemv", "ob_gemv"},
      {"onednn_sgemm", "dnnl_gemm"},  {"onednn_matmul", "dnnl_mm"},   {"onednn_matmul_packed", "dnnl_mmpk"},
  };
  return cols;
}

std::string table_legend() {
  return "GFLOP/s are dense-equivalent (2*M*N*K / time) for every method; s24_nz = sparse24's nonzero rate\n"
         "(M*N*K / time). ob_nn/ob_nt = OpenBLAS cblas_sgemm W*X / X^T*W^T, ob_gemv = cblas_sgemv,\n"
         "dnnl_gemm = dnnl_sgemm, dnnl_mm = oneDNN matmul (plain), dnnl_mmpk = oneDNN matmul with prepacked\n"
         "weights (Linear form). speedup = sparse24 / fastest dense. N <= 16: s24_bf16 = sparse24 with bf16\n"
         "weights, s24_i8 with int8 weights and fp32 scales per 64 positions, bf16_x / i8_x = their rate /\n"
         "fastest dense (fp32); bf16xb_x / i8xb_x the same with bf16 activations, i8xi8_x int8 weights with\n"
         "int8 activations (where dispatch picks those kernels). Best of interleaved rounds.\n";
}

std::string table_header() {
  std::string s = pad("m", 6) + pad("k", 6) + pad("n", 5) + pad("thr", 4) + pad("cold", 5);
  for (const MethodColumn& c : dense_columns()) s += pad(c.label, kCol);
  s += pad("sparse24", kCol) + pad("s24_nz", 8) + "  " + "best_dense           " + pad("speedup", 8) +
       pad("s24_bf16", 9) + pad("bf16_x", 7) + pad("s24_i8", 8) + pad("i8_x", 7) + pad("bf16xb_x", 9) +
       pad("i8xb_x", 7) + pad("i8xi8_x", 8);
  return s;
}

std::string table_line(const Row& r) {
  std::string s = pad(std::to_string(r.shape.m), 6) + pad(std::to_string(r.shape.k), 6) +
                  pad(std::to_string(r.shape.n), 5) + pad(std::to_string(r.threads), 4) +
                  pad(r.shape.cold ? "yes" : "no", 5);
  for (const MethodColumn& c : dense_columns()) s += pad(cell(r.find(c.name)), kCol);
  const MethodResult* sp = r.find("sparse24");
  s += pad(cell(sp), kCol);
  s += pad(sp && sp->ok ? fmt("%.1f", r.sparse_nonzero_gflops) : "-", 8);
  std::string best = r.best_dense_lib.empty() ? "-" : r.best_dense_lib;
  best.resize(std::max<size_t>(best.size(), 21), ' ');
  s += "  " + best;
  s += pad(r.speedup > 0 ? fmt("%.2fx", r.speedup) : (sp && !sp->ok ? "WRONG" : "-"), 8);
  s += pad(cell(r.find("sparse24_bf16")), 9);
  s += pad(r.bf16_speedup > 0 ? fmt("%.2fx", r.bf16_speedup) : "-", 7);
  s += pad(cell(r.find("sparse24_int8")), 8);
  s += pad(r.int8_speedup > 0 ? fmt("%.2fx", r.int8_speedup) : "-", 7);
  s += pad(r.bf16_xbf16_speedup > 0 ? fmt("%.2fx", r.bf16_xbf16_speedup) : "-", 9);
  s += pad(r.int8_xbf16_speedup > 0 ? fmt("%.2fx", r.int8_xbf16_speedup) : "-", 7);
  s += pad(r.int8_xi8_speedup > 0 ? fmt("%.2fx", r.int8_xi8_speedup) : "-", 8);
  if (r.disturbed || r.gate_timeouts > 0) s += "  (disturbed)";
  return s;
}

std::string row_notes(const Row& r, double stream_read_gbps) {
  std::string s;
  for (const MethodResult& m : r.methods)
    if (!m.ok) s += "  !! " + m.name + " gave a WRONG result, not timed: " + m.error + "\n";
  if (r.gate_timeouts > 0)
    s += "  !! machine busy: " + std::to_string(r.gate_timeouts) +
         " measurement(s) started although other tasks were running or the FMA probe ran slow\n";
  for (const MethodResult& m : r.methods)
    if (m.all_disturbed)
      s += "  !! " + m.name + ": every measurement was preempted (" + std::to_string(m.disturbed) +
           "): its number is unreliable\n";
  std::string calls;
  for (const MethodResult& m : r.methods)
    if (!m.calls.empty()) calls += (calls.empty() ? "" : "; ") + m.name + " " + m.calls;
  if (!calls.empty()) s += "  kernel calls: " + calls + "\n";
  if (r.shape.cold) {
    s += "  weight GB/s (format bytes: fp32 dense, 2:4 values in the method's type + metadata (+ scales for "
         "int8); copies x MB";
    if (stream_read_gbps > 0) s += "; stream read " + fmt("%.1f", stream_read_gbps) + " GB/s";
    s += "):";
    for (const MethodResult& m : r.methods)
      if (m.ok)
        s += " " + m.name + " " + fmt("%.1f", m.weight_gbps) + " (" + std::to_string(m.copies) + "x" +
             fmt("%.0f", m.weight_bytes / 1e6) + " MB)";
    s += "\n";
  }
  return s;
}

nlohmann::json row_json(const Row& r) {
  nlohmann::json j;
  j["m"] = r.shape.m;
  j["k"] = r.shape.k;
  j["n"] = r.shape.n;
  j["threads"] = r.threads;
  j["cold"] = r.shape.cold;
  j["best_dense_lib"] = r.best_dense_lib.empty() ? nlohmann::json() : nlohmann::json(r.best_dense_lib);
  j["best_dense_gflops"] = r.best_dense_gflops > 0 ? nlohmann::json(r.best_dense_gflops) : nlohmann::json();
  j["sparse_ok"] = r.sparse_ok;
  j["sparse_gflops"] = r.sparse_ok ? nlohmann::json(r.sparse_gflops) : nlohmann::json();
  j["sparse_nonzero_gflops"] = r.sparse_ok ? nlohmann::json(r.sparse_nonzero_gflops) : nlohmann::json();
  j["speedup"] = r.speedup > 0 ? nlohmann::json(r.speedup) : nlohmann::json();
  j["bf16_gflops"] = r.bf16_gflops > 0 ? nlohmann::json(r.bf16_gflops) : nlohmann::json();
  j["bf16_speedup"] = r.bf16_speedup > 0 ? nlohmann::json(r.bf16_speedup) : nlohmann::json();
  j["int8_gflops"] = r.int8_gflops > 0 ? nlohmann::json(r.int8_gflops) : nlohmann::json();
  j["int8_speedup"] = r.int8_speedup > 0 ? nlohmann::json(r.int8_speedup) : nlohmann::json();
  j["bf16_xbf16_speedup"] =
      r.bf16_xbf16_speedup > 0 ? nlohmann::json(r.bf16_xbf16_speedup) : nlohmann::json();
  j["int8_xbf16_speedup"] =
      r.int8_xbf16_speedup > 0 ? nlohmann::json(r.int8_xbf16_speedup) : nlohmann::json();
  j["int8_xi8_speedup"] = r.int8_xi8_speedup > 0 ? nlohmann::json(r.int8_xi8_speedup) : nlohmann::json();
  j["sparse_isa"] = r.isa;
  nlohmann::json gflops = nlohmann::json::object(), methods = nlohmann::json::object();
  for (const MethodResult& m : r.methods) {
    gflops[m.name] = m.ok ? nlohmann::json(m.gflops) : nlohmann::json();
    nlohmann::json d;
    d["lib"] = m.lib;
    d["weights"] = weights_name(m.weights);
    d["activations"] = xact_name(m.x_act);
    d["ok"] = m.ok;
    if (!m.ok) d["error"] = m.error;
    d["max_rel_err"] = m.max_err;
    d["seconds"] = m.ok ? nlohmann::json(m.seconds) : nlohmann::json();
    d["gflops"] = m.ok ? nlohmann::json(m.gflops) : nlohmann::json();
    d["weight_bytes"] = m.weight_bytes;
    d["layout_bytes"] = m.layout_bytes;
    d["weight_gbps"] = m.ok ? nlohmann::json(m.weight_gbps) : nlohmann::json();
    d["copies"] = m.copies;
    d["measurements"] = m.measurements;
    d["disturbed_measurements"] = m.disturbed;
    d["all_disturbed"] = m.all_disturbed;
    if (!m.calls.empty()) d["kernel_calls"] = m.calls;
    methods[m.name] = d;
  }
  j["gflops"] = gflops;
  j["methods"] = methods;
  j["rounds"] = r.rounds;
  j["gate_waits"] = r.gate_waits;
  j["gate_timeouts"] = r.gate_timeouts;
  j["disturbed"] = r.disturbed;
  j["wall_seconds"] = r.wall_s;
  return j;
}

void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write " + tmp);
    out << j.dump(2) << "\n";
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error("cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + path);
  }
}

}  // namespace sparse24::bench
