// sparse24 inspect FILE [--json] [--pattern 2:4]: a dense .npy, a compressed .safetensors file, or a GGUF
// file (its metadata and tensors).
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/report.h"

namespace sparse24::cli {
namespace {

bool is_npy(const std::vector<uint8_t>& bytes) {
  static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  return bytes.size() >= 6 && std::equal(magic, magic + 6, bytes.begin());
}

nlohmann::json to_json(const SparsityReport& r) {
  nlohmann::json j;
  j["format"] = r.format;
  j["shape"] = r.shape;
  j["dtype"] = dtype_name(r.dtype);
  j["pattern"] = pattern_string(r.pattern);
  j["matrix"] = {r.rows, r.cols};
  j["valid"] = r.valid;
  j["groups"] = r.groups;
  j["bad_groups"] = r.bad_groups;
  if (!r.valid) j["first_bad"] = {{"row", r.first_bad_row}, {"group", r.first_bad_group}};
  j["sparsity"] = r.sparsity;
  j["kept_magnitude"] = r.kept_magnitude;
  j["compression_ratio"] = r.compression_ratio;
  if (r.format == "sparse24") j["bytes_per_weight"] = r.bytes_per_weight;
  if (r.scale_group > 0) j["scale_group"] = r.scale_group;
  return j;
}

// A metadata value for people: scalars as they are, strings quoted and cut, arrays as their type, length
// and first elements.
nlohmann::json gguf_value_json(const GgufValue& v, size_t max_items) {
  auto item = [&](size_t i) -> nlohmann::json {
    if (v.elem == GgufType::kString) return v.strings[i];
    if (v.elem == GgufType::kF32 || v.elem == GgufType::kF64) return v.floats[i];
    if (v.elem == GgufType::kBool) return v.ints[i] != 0;
    if (v.elem == GgufType::kU64) return static_cast<uint64_t>(v.ints[i]);
    return v.ints[i];
  };
  if (!v.is_array()) return item(0);
  nlohmann::json head = nlohmann::json::array();
  for (size_t i = 0; i < v.size() && i < max_items; ++i) head.push_back(item(i));
  return {{"type", std::string("ARRAY of ") + gguf_type_name(v.elem)}, {"length", v.size()}, {"head", head}};
}

void inspect_gguf(const std::string& path, bool json) {
  const MappedGguf m(path);
  const Gguf& g = m.gguf;
  int64_t params = 0;
  uint64_t bytes = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;  // tensors, parameters
  for (const GgufTensor& t : g.tensors) {
    params += t.numel();
    bytes += t.bytes.size();
    auto& [n, p] = by_type[ggml_type_name(t.type)];
    ++n;
    p += t.numel();
  }
  const GgufValue* arch = g.find("general.architecture");
  const std::string architecture =
      arch && arch->type == GgufType::kString ? arch->strings[0] : std::string("(none)");
  const double bpw = params > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
  if (json) {
    nlohmann::json j;
    j["format"] = "gguf";
    j["version"] = g.version;
    j["alignment"] = g.alignment;
    j["architecture"] = architecture;
    j["metadata"] = nlohmann::json::object();
    for (const auto& [k, v] : g.metadata) j["metadata"][k] = gguf_value_json(v, 8);
    j["tensors"] = nlohmann::json::array();
    for (const GgufTensor& t : g.tensors)
      j["tensors"].push_back({{"name", t.name},
                              {"shape", t.shape},
                              {"type", ggml_type_name(t.type)},
                              {"bytes", t.bytes.size()},
                              {"offset", g.data_offset + t.offset}});
    j["parameters"] = params;
    j["tensor_bytes"] = bytes;
    j["bits_per_weight"] = bpw;
    j["bytes_per_weight"] = bpw / 8;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("file              %s (GGUF v%u, alignment %llu)\n", path.c_str(), g.version,
              static_cast<unsigned long long>(g.alignment));
  std::printf("architecture      %s\n", architecture.c_str());
  std::printf("metadata          %zu keys\n", g.metadata.size());
  for (const auto& [k, v] : g.metadata) {
    std::string text = gguf_value_json(v, 4).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 100) text = text.substr(0, 97) + "...";
    std::printf("  %-40s %s\n", k.c_str(), text.c_str());
  }
  std::printf("tensors           %zu\n", g.tensors.size());
  for (const GgufTensor& t : g.tensors)
    std::printf("  %-40s %-16s %-6s %12zu bytes\n", t.name.c_str(), shape_string(t.shape).c_str(),
                ggml_type_name(t.type).c_str(), t.bytes.size());
  for (const auto& [type, np] : by_type)
    std::printf("type %-12s %lld tensors, %lld parameters\n", type.c_str(), static_cast<long long>(np.first),
                static_cast<long long>(np.second));
  std::printf("total             %lld parameters in %llu bytes: %.4f bits (%.4f bytes) per weight\n",
              static_cast<long long>(params), static_cast<unsigned long long>(bytes), bpw, bpw / 8);
}

}  // namespace

void register_inspect(CLI::App& app) {
  struct Opts {
    std::string file, pattern = "2:4";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "Report a matrix's shape, pattern validity, sparsity and compression");
  cmd->add_option("file", o->file, "dense .npy, compressed .safetensors, or .gguf")->required();
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_option("--pattern", o->pattern, "pattern to check a dense matrix against")->capture_default_str();
  cmd->callback([o] {
    if (is_gguf_file(o->file)) return inspect_gguf(o->file, o->json);
    const std::vector<uint8_t> bytes = read_file(o->file);
    const SparsityReport r =
        is_npy(bytes)
            ? inspect_dense(parse_npy(bytes.data(), bytes.size(), o->file), parse_pattern(o->pattern))
            : inspect_compressed(parse_compressed(bytes.data(), bytes.size(), o->file));
    if (o->json) {
      std::printf("%s\n", to_json(r).dump().c_str());
      return;
    }
    std::printf("file              %s (%s)\n", o->file.c_str(), r.format.c_str());
    std::printf("shape             %s %s, as matrix [%lld, %lld]\n", shape_string(r.shape).c_str(),
                dtype_name(r.dtype), static_cast<long long>(r.rows), static_cast<long long>(r.cols));
    std::printf("pattern %-9s %s", pattern_string(r.pattern).c_str(), r.valid ? "valid" : "NOT valid");
    if (!r.valid)
      std::printf(": %lld of %lld groups too dense, first at row %lld group %lld",
                  static_cast<long long>(r.bad_groups), static_cast<long long>(r.groups),
                  static_cast<long long>(r.first_bad_row), static_cast<long long>(r.first_bad_group));
    std::printf("\nsparsity          %.4f\n", r.sparsity);
    std::printf("kept magnitude    %.4f (of sum |w|, by a magnitude prune to %s)\n", r.kept_magnitude,
                pattern_string(r.pattern).c_str());
    std::printf("compression       %.5f of dense bytes (2:4 values + 4-bit metadata%s)\n",
                r.compression_ratio, r.scale_group > 0 ? " + fp32 scales" : "");
    if (r.format == "sparse24") {
      std::printf("bytes per weight  %.4f", r.bytes_per_weight);
      if (r.scale_group > 0)
        std::printf(" (int8, one fp32 scale per %lld positions of a row)",
                    static_cast<long long>(r.scale_group));
      std::printf("\n");
    }
  });
}

}  // namespace sparse24::cli
