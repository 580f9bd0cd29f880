// sparse24 inspect FILE [--json] [--pattern 2:4]: a dense .npy or a compressed .safetensors file.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
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

}  // namespace

void register_inspect(CLI::App& app) {
  struct Opts {
    std::string file, pattern = "2:4";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "Report a matrix's shape, pattern validity, sparsity and compression");
  cmd->add_option("file", o->file, "dense .npy or compressed .safetensors")->required();
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_option("--pattern", o->pattern, "pattern to check a dense matrix against")->capture_default_str();
  cmd->callback([o] {
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
