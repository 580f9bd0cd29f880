// sparse24 prune IN.npy -o OUT.npy [--pattern 2:4] [--method magnitude|transposable] [--search exact|greedy]
#include <cstdio>

#include "commands.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"

namespace sparse24::cli {

void register_prune(CLI::App& app) {
  struct Opts {
    std::string in, out, pattern = "2:4", method = "magnitude", search = "exact";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("prune", "Prune a dense .npy matrix to an N:M pattern (writes dense .npy)");
  cmd->add_option("input", o->in, "dense matrix (.npy: float32, float16 or int8)")->required();
  cmd->add_option("-o,--output", o->out, "pruned dense matrix (.npy)")->required();
  cmd->add_option("--pattern", o->pattern, "N:M pattern: 2:4, 1:2 or 4:8")->capture_default_str();
  cmd->add_option("--method", o->method, "magnitude (1D groups) or transposable (2:4 in W and W^T)")
      ->check(CLI::IsMember({"magnitude", "transposable"}))
      ->capture_default_str();
  cmd->add_option("--search", o->search, "transposable search: exact (best of 90 patterns) or greedy")
      ->check(CLI::IsMember({"exact", "greedy"}))
      ->capture_default_str();
  cmd->callback([o] {
    const Pattern p = parse_pattern(o->pattern);
    if (o->method == "transposable" && !(p == kPattern24))
      throw Error("--method transposable needs --pattern 2:4");
    Tensor t = read_npy(o->in);
    const MatrixView v = matrix_view(t.shape);
    std::vector<float> w = gather_matrix(t.to_float(), t.shape);
    const Mask mask = o->method == "magnitude"
                          ? magnitude_mask(w.data(), v.rows, v.cols, p)
                          : transposable_mask(w.data(), v.rows, v.cols,
                                              o->search == "exact" ? TransposableMethod::kExact
                                                                   : TransposableMethod::kGreedy);
    const double kept = kept_magnitude(w.data(), mask);
    apply_mask(w.data(), mask);
    // Zero the pruned elements in the tensor's own dtype, so kept values keep their exact bits.
    const std::vector<int64_t> to_tensor = matrix_to_tensor_index(t.shape);
    const size_t es = dtype_size(t.dtype);
    for (size_t i = 0; i < mask.size(); ++i)
      if (!mask[i]) std::fill_n(t.bytes.begin() + static_cast<ptrdiff_t>(to_tensor[i] * es), es, uint8_t{0});
    write_npy(o->out, t);
    std::printf("pruned %s %s to %s (%s): kept %.4f of the magnitude -> %s\n", shape_string(t.shape).c_str(),
                dtype_name(t.dtype), pattern_string(p).c_str(), o->method.c_str(), kept, o->out.c_str());
  });
}

}  // namespace sparse24::cli
