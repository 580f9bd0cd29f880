// The NumPy API's array functions: masks, compress/decompress, inspect, pack and the multiply.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/mask.h"
#include "sparse24/pattern.h"
#include "sparse24/report.h"
#include "sparse24/spmm.h"

namespace sparse24::py {
namespace {

namespace dl = nb::dlpack;

// The 0/1 mask of `w` in the tensor's own element order (matrix_view decides the groups).
nb::object mask_of(const AnyArray& w, const std::string& pattern, const std::string& method,
                   const std::string& search) {
  const Pattern p = parse_pattern(pattern);
  if (method != "magnitude" && method != "transposable")
    throw Error("method '" + method + "': expected magnitude or transposable");
  if (search != "exact" && search != "greedy")
    throw Error("search '" + search + "': expected exact or greedy");
  if (method == "transposable" && !(p == kPattern24)) throw Error("method transposable needs pattern 2:4");
  Tensor t = tensor_from_array(w, "prune");
  if (t.shape.empty() || t.shape.size() > 4)
    throw Error("prune: expected 1 to 4 dimensions, got " + shape_string(t.shape));
  Mask tensor_mask;
  {
    nb::gil_scoped_release unlocked;
    const MatrixView v = matrix_view(t.shape);
    const std::vector<float> m = gather_matrix(t.to_float(), t.shape);
    const Mask mask =
        method == "magnitude"
            ? magnitude_mask(m.data(), v.rows, v.cols, p)
            : transposable_mask(m.data(), v.rows, v.cols,
                                search == "exact" ? TransposableMethod::kExact : TransposableMethod::kGreedy);
    const std::vector<int64_t> to_tensor = matrix_to_tensor_index(t.shape);
    tensor_mask.assign(mask.size(), 0);
    for (size_t i = 0; i < mask.size(); ++i) tensor_mask[static_cast<size_t>(to_tensor[i])] = mask[i];
  }
  Tensor out;
  out.dtype = DType::kI8;  // 0/1 bytes; returned as uint8 below
  out.shape = t.shape;
  out.bytes = std::move(tensor_mask);
  nb::object a = to_numpy(std::move(out));
  return a.attr("view")("uint8");
}

nb::object compressed_view(nb::handle self, bool values) {
  const Compressed& c = *nb::inst_ptr<Compressed>(self);
  const size_t rows = static_cast<size_t>(c.rows);
  dl::dtype t{static_cast<uint8_t>(dl::dtype_code::UInt), 8, 1};
  size_t cols = static_cast<size_t>(c.meta_bytes_per_row());
  const void* data = c.metadata.data();
  if (values) {
    cols = static_cast<size_t>(c.values_per_row());
    data = c.values.data();
    switch (c.dtype) {
      case DType::kF32:
        t = nb::dtype<float>();
        break;
      case DType::kF16:
        t = {static_cast<uint8_t>(dl::dtype_code::Float), 16, 1};
        break;
      case DType::kI8:
        t = nb::dtype<int8_t>();
        break;
      case DType::kBF16:
        t = nb::dtype<uint16_t>();
        break;  // the raw bfloat16 bits
    }
  }
  const size_t shape[2] = {rows, cols};
  // A read-only view of the object's own buffer: the array keeps `self` alive, no copy.
  return nb::cast(nb::ndarray<nb::numpy, nb::ro>(data, 2, shape, self, nullptr, t));
}

nb::dict report_dict(const SparsityReport& r) {
  nb::dict d;
  d["format"] = r.format;
  d["shape"] = nb::tuple(nb::cast(r.shape));
  d["dtype"] = dtype_name(r.dtype);
  d["pattern"] = pattern_string(r.pattern);
  d["matrix"] = nb::make_tuple(r.rows, r.cols);
  d["valid"] = r.valid;
  d["groups"] = r.groups;
  d["bad_groups"] = r.bad_groups;
  d["first_bad"] = r.valid ? nb::none() : nb::object(nb::make_tuple(r.first_bad_row, r.first_bad_group));
  d["sparsity"] = r.sparsity;
  d["kept_magnitude"] = r.kept_magnitude;
  d["compression_ratio"] = r.compression_ratio;
  return d;
}

Epilogue parse_epilogue(const std::optional<std::string>& e) {
  if (!e || *e == "none") return Epilogue::kNone;
  if (*e == "relu") return Epilogue::kRelu;
  if (*e == "gelu") return Epilogue::kGelu;
  throw Error("epilogue '" + *e + "': expected None, 'relu' or 'gelu'");
}

int parse_threads(std::optional<int> threads) {
  if (!threads) return 1;
  if (*threads < 1 || *threads > 1024)
    throw Error("threads " + std::to_string(*threads) + ": expected 1 to 1024");
  return *threads;
}

const float* bias_of(const std::optional<AnyArray>& bias, int64_t m) {
  if (!bias) return nullptr;
  if (bias->ndim() != 1 || static_cast<int64_t>(bias->shape(0)) != m)
    throw Error("bias: expected shape (" + std::to_string(m) + ",), got " + shape_string(array_shape(*bias)));
  require_f32_rows(*bias, "bias");
  return static_cast<const float*>(bias->data());
}

// Y = epilogue(W X + bias): x [K] or [K, N] float32 (rows contiguous, any row stride); returns [M] or [M, N].
nb::object spmm_numpy(const PackedMatrix& w, const AnyArray& x, const std::optional<AnyArray>& bias,
                      const std::optional<std::string>& epilogue, std::optional<int> threads) {
  const int64_t ldx = require_f32_rows(x, "x");
  const int64_t k = static_cast<int64_t>(x.shape(0));
  if (k != w.cols())
    throw Error("x: " + shape_string(array_shape(x)) + " does not match the matrix [" +
                std::to_string(w.rows()) + ", " + std::to_string(w.cols()) + "] (x must be [K] or [K, N])");
  const int64_t n = x.ndim() == 1 ? 1 : static_cast<int64_t>(x.shape(1));
  const int64_t ld = x.ndim() == 1 ? 1 : ldx;
  const float* b = bias_of(bias, w.rows());
  const Epilogue ep = parse_epilogue(epilogue);
  const int t = parse_threads(threads);
  std::vector<float> y(static_cast<size_t>(w.rows() * n));
  if (n > 0) {
    nb::gil_scoped_release unlocked;
    spmm(w, static_cast<const float*>(x.data()), n, ld, y.data(), n, b, ep, t);
  }
  if (x.ndim() == 1) return float_array(std::move(y), {static_cast<size_t>(w.rows())});
  return float_array(std::move(y), {static_cast<size_t>(w.rows()), static_cast<size_t>(n)});
}

// The torch layout: out[T, M] = x[T, K] W^T + bias (x and out row-major; torch's Linear convention): the
// kernels' token-major entry (spmm_tokens), which reads x and writes out in this layout itself.
void linear_rows(const PackedMatrix& w, const AnyArray& x, const nb::ndarray<nb::device::cpu>& out_array,
                 const std::optional<AnyArray>& bias, int threads) {
  const AnyArray out(out_array);
  if (x.ndim() != 2 || out.ndim() != 2) throw Error("linear: x and out must be 2-D");
  const int64_t ldx = require_f32_rows(x, "x"), ldo = require_f32_rows(out, "out");
  const int64_t t = static_cast<int64_t>(x.shape(0));
  if (static_cast<int64_t>(x.shape(1)) != w.cols() || static_cast<int64_t>(out.shape(1)) != w.rows() ||
      static_cast<int64_t>(out.shape(0)) != t)
    throw Error("linear: x " + shape_string(array_shape(x)) + " and out " + shape_string(array_shape(out)) +
                " do not fit the weight [" + std::to_string(w.rows()) + ", " + std::to_string(w.cols()) +
                "]");
  const float* b = bias_of(bias, w.rows());
  if (threads < 1 || threads > 1024) throw Error("threads: expected 1 to 1024");
  if (t == 0) return;
  nb::gil_scoped_release unlocked;
  spmm_tokens(w, static_cast<const float*>(x.data()), t, t == 1 ? w.cols() : ldx,
              static_cast<float*>(out_array.data()), t == 1 ? w.rows() : ldo, b, Epilogue::kNone, threads);
}

}  // namespace

void register_arrays(nb::module_& m) {
  nb::class_<Compressed>(m, "Compressed",
                         "A compressed 2:4 matrix: values, metadata, the dense shape and dtype.")
      .def_prop_ro(
          "values", [](nb::handle self) { return compressed_view(self, true); },
          "The kept values, [rows, 2 * ceil(K / 4)], a read-only view (bfloat16 as uint16 bits).")
      .def_prop_ro(
          "metadata", [](nb::handle self) { return compressed_view(self, false); },
          "4-bit position codes, two per byte, [rows, ceil(K / 8)] uint8, a read-only view.")
      .def_prop_ro("shape", [](const Compressed& c) { return nb::tuple(nb::cast(c.shape)); })
      .def_prop_ro("dtype", [](const Compressed& c) { return std::string(dtype_name(c.dtype)); })
      .def_prop_ro("rows", [](const Compressed& c) { return c.rows; })
      .def_prop_ro("cols", [](const Compressed& c) { return c.cols; })
      .def_prop_ro("compression_ratio", &Compressed::compression_ratio)
      .def("__repr__", [](const Compressed& c) {
        return "sparse24.Compressed(shape=" + shape_string(c.shape) + ", dtype=" + dtype_name(c.dtype) + ")";
      });

  nb::class_<PackedMatrix>(m, "Packed", "A 2:4 float32 matrix prepared for the kernels of one ISA (pack()).")
      .def_prop_ro("rows", &PackedMatrix::rows)
      .def_prop_ro("cols", &PackedMatrix::cols)
      .def_prop_ro("shape", [](const PackedMatrix& p) { return nb::make_tuple(p.rows(), p.cols()); })
      .def_prop_ro("isa", [](const PackedMatrix& p) { return std::string(isa_name(p.isa())); })
      .def_prop_ro("nbytes", &PackedMatrix::bytes)
      .def("__repr__", [](const PackedMatrix& p) {
        return "sparse24.Packed(shape=[" + std::to_string(p.rows()) + ", " + std::to_string(p.cols()) +
               "], isa=" + isa_name(p.isa()) + ")";
      });

  m.def("_mask", &mask_of, nb::arg("w"), nb::arg("pattern"), nb::arg("method"), nb::arg("search"));
  m.def(
      "_compress",
      [](const AnyArray& w, bool prune) {
        Tensor t = tensor_from_array(w, "compress");
        nb::gil_scoped_release unlocked;
        return compress(t, prune);
      },
      nb::arg("w"), nb::arg("prune"));
  m.def("_decompress", [](const Compressed& c) {
    Tensor t;
    {
      nb::gil_scoped_release unlocked;
      t = decompress(c);
    }
    return to_numpy(std::move(t));
  });
  m.def("_inspect_dense", [](const AnyArray& w, const std::string& pattern) {
    const Tensor t = tensor_from_array(w, "inspect");
    return report_dict(inspect_dense(t, parse_pattern(pattern)));
  });
  m.def("_inspect_compressed", [](const Compressed& c) { return report_dict(inspect_compressed(c)); });
  m.def(
      "_pack",
      [](const Compressed& c, bool bf16, bool bf16_activations, bool int8_activations) {
        PackOptions o;
        o.bf16_weights = bf16;
        o.bf16_activations = bf16_activations;
        o.int8_activations = int8_activations;
        nb::gil_scoped_release unlocked;
        return pack(c, o);
      },
      nb::arg("c"), nb::arg("bf16") = false, nb::arg("bf16_activations") = false,
      nb::arg("int8_activations") = false);
  m.def("bf16_activations_supported", &bf16_activations_supported,
        "True if bf16_activations takes effect here: AVX512_BF16 on a CPU whose bf16-activation kernels "
        "are picked (AMD; on Intel's cores fp32 activations measured faster and run instead).");
  m.def("int8_activations_supported", &int8_activations_supported,
        "True if int8_activations takes effect here: AVX512_VNNI and AVX512_VBMI (Intel from Ice Lake, AMD "
        "from Zen 4).");
  m.def("spmm", &spmm_numpy, nb::arg("packed"), nb::arg("x"), nb::arg("bias") = nb::none(),
        nb::arg("epilogue") = nb::none(), nb::arg("threads") = nb::none(),
        "Y = epilogue(W X + bias) for x [K] or [K, N] float32; returns [M] or [M, N] float32.");
  m.def("_linear", &linear_rows, nb::arg("packed"), nb::arg("x"), nb::arg("out"), nb::arg("bias").none(),
        nb::arg("threads"));
  // The same multiply timed in a C++ loop (seconds per call, best of `rounds`): the baseline that the Python
  // call overhead is measured against (python/bench/bench_overhead.py).
  m.def(
      "_time_spmm",
      [](const PackedMatrix& w, const AnyArray& x, int reps, int rounds) {
        const int64_t ldx = require_f32_rows(x, "x");
        if (static_cast<int64_t>(x.shape(0)) != w.cols()) throw Error("x does not match the matrix");
        const int64_t n = x.ndim() == 1 ? 1 : static_cast<int64_t>(x.shape(1));
        const int64_t ld = x.ndim() == 1 ? 1 : ldx;
        std::vector<float> y(static_cast<size_t>(w.rows() * n));
        nb::gil_scoped_release unlocked;
        double best = 1e30;
        for (int r = 0; r < rounds; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < reps; ++i)
            spmm(w, static_cast<const float*>(x.data()), n, ld, y.data(), n, nullptr, Epilogue::kNone, 1);
          best = std::min(
              best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
        }
        return best;
      },
      nb::arg("packed"), nb::arg("x"), nb::arg("reps"), nb::arg("rounds"));
  m.def(
      "isa", [] { return std::string(isa_name(active_isa())); },
      "The kernel ISA in use (avx512, avx2, ref).");
}

}  // namespace sparse24::py
