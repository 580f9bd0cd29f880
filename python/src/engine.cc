// sparse24.Engine: the inference engine from Python. A directory with config.json is a Hugging Face /
// sentence-transformers text encoder (TextEncoder: tokenizer + model + engine); any other is a workflow
// export (model.json), run on float input.
#include "sparse24/engine.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "sparse24/error.h"

namespace sparse24::py {
namespace {

using namespace sparse24::engine;

class PyEngine {
 public:
  static PyEngine load(const std::string& dir, int threads, const std::string& mode,
                       std::optional<int64_t> batch, const std::string& weights, bool bf16_activations,
                       bool int8_activations) {
    if (threads < 1 || threads > 1024)
      throw Error("threads " + std::to_string(threads) + ": expected 1 to 1024");
    if (batch && (*batch < 1 || *batch > (int64_t{1} << 20)))
      throw Error("batch " + std::to_string(*batch) + ": expected 1 to 1048576");
    const Mode m = parse_mode(mode);
    const SparseValues values = parse_sparse_values(weights);
    if (bf16_activations && values == SparseValues::kF32)
      throw Error("bf16_activations needs weights='bf16' or 'int8'");
    if (int8_activations && values != SparseValues::kInt8)
      throw Error("int8_activations needs weights='int8'");
    if (bf16_activations && int8_activations)
      throw Error("bf16_activations and int8_activations exclude each other");
    const SparseActivations act = int8_activations   ? SparseActivations::kInt8
                                  : bf16_activations ? SparseActivations::kBf16
                                                     : SparseActivations::kF32;
    PyEngine e;
    e.threads_ = threads;
    nb::gil_scoped_release unlocked;
    set_threads(threads);
    if (std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
      TextEncoder::Options o;
      o.threads = threads;
      o.mode = m;
      o.batch = batch.value_or(8);
      o.sparse_values = values;
      o.sparse_activations = act;
      e.text_.emplace(TextEncoder::load(dir, o));
    } else {
      e.model_.emplace(load_model(dir));
      set_sparse_precision(*e.model_, values, act);
      e.batch_ = batch.value_or(64);
      if (m == Mode::kPlan) {
        bool built = false;
        e.plan_.emplace(load_or_build_plan(*e.model_, dir, e.batch_, threads, &built));
      }
      e.engine_.emplace(*e.model_, e.batch_, threads, m, e.plan_ ? &*e.plan_ : nullptr);
    }
    return e;
  }

  bool is_text() const { return text_.has_value(); }

  nb::object embed(const std::vector<std::string>& texts) {
    if (!text_) throw Error("embed: this engine runs a workflow export (float input); use run()");
    std::vector<float> out;
    {
      nb::gil_scoped_release unlocked;
      const std::lock_guard<std::mutex> lock(*busy_);
      set_threads(threads_);
      out = text_->embed(texts);
    }
    return float_array(std::move(out), {texts.size(), static_cast<size_t>(text_->dim())});
  }

  nb::object embed_ids(const std::vector<std::vector<int32_t>>& ids) {
    if (!text_) throw Error("run: this engine runs a workflow export; pass a float array");
    std::vector<float> out;
    {
      nb::gil_scoped_release unlocked;
      const std::lock_guard<std::mutex> lock(*busy_);
      set_threads(threads_);
      out = text_->embed_ids(ids);
    }
    return float_array(std::move(out), {ids.size(), static_cast<size_t>(text_->dim())});
  }

  std::vector<int32_t> tokenize(const std::string& text) const {
    if (!text_) throw Error("tokenize: this engine has no tokenizer (a workflow export)");
    return text_->tokenize(text);
  }

  // x: [B, *input_shape] float32, C-contiguous; returns [B, outputs]. Runs `batch` samples at a time (the
  // last chunk padded with zeros).
  nb::object run(const AnyArray& x) {
    if (!engine_)
      throw Error("run: this engine is a text encoder; pass token ids (list of lists) or use embed()");
    const Model& m = *model_;
    if (x.ndim() != m.input_shape.size() + 1)
      throw Error("run: input " + shape_string(array_shape(x)) + ", expected [batch, " +
                  shape_string(m.input_shape).substr(1));
    for (size_t i = 0; i < m.input_shape.size(); ++i)
      if (static_cast<int64_t>(x.shape(i + 1)) != m.input_shape[i])
        throw Error("run: input " + shape_string(array_shape(x)) +
                    " does not match the model's sample shape " + shape_string(m.input_shape));
    if (x.dtype() != nb::dtype<float>()) throw Error("run: input must be float32");
    require_c_contiguous(x, "run");
    const int64_t b = static_cast<int64_t>(x.shape(0)), in = m.input_size(), out = m.output_size();
    std::vector<float> y(static_cast<size_t>(b * out));
    {
      nb::gil_scoped_release unlocked;
      const std::lock_guard<std::mutex> lock(*busy_);
      set_threads(threads_);
      const float* xp = static_cast<const float*>(x.data());
      std::vector<float> xin(static_cast<size_t>(batch_ * in)), yout(static_cast<size_t>(batch_ * out));
      for (int64_t s = 0; s < b; s += batch_) {
        const int64_t n = std::min(batch_, b - s);
        std::fill(xin.begin(), xin.end(), 0.0f);
        std::copy(xp + s * in, xp + (s + n) * in, xin.begin());
        engine_->run(xin.data(), yout.data());
        std::copy(yout.begin(), yout.begin() + n * out, y.begin() + s * out);
      }
    }
    return float_array(std::move(y), {static_cast<size_t>(b), static_cast<size_t>(out)});
  }

  Engine& engine() { return text_ ? text_->engine() : *engine_; }
  const Plan* plan() const { return text_ ? text_->plan() : (plan_ ? &*plan_ : nullptr); }
  int64_t dim() const { return text_ ? text_->dim() : model_->output_size(); }

 private:
  // The engine keeps its activations between calls: one call at a time (the GIL is released inside), so two
  // Python threads sharing an Engine wait for each other instead of racing.
  std::unique_ptr<std::mutex> busy_ = std::make_unique<std::mutex>();
  int threads_ = 1;
  int64_t batch_ = 64;
  std::optional<TextEncoder> text_;
  std::optional<Model> model_;
  std::optional<Plan> plan_;
  std::optional<Engine> engine_;
};

}  // namespace

void register_engine(nb::module_& m) {
  nb::class_<PyEngine>(m, "Engine", "The sparse24 inference engine (Engine.load(model_dir)).")
      .def_static(
          "load", &PyEngine::load, nb::arg("model_dir"), nb::arg("threads") = 1, nb::arg("mode") = "plan",
          nb::arg("batch") = nb::none(), nb::arg("weights") = "fp32", nb::arg("bf16_activations") = false,
          nb::arg("int8_activations") = false,
          "Loads a Hugging Face / sentence-transformers encoder (a directory with config.json) or a "
          "workflow export (model.json). mode: plan (per-layer timed choice, plan.json), dense or sparse. "
          "weights: fp32, bf16 or int8 (the 2:4 Linears' values; int8 with an fp32 scale per 64 positions). "
          "bf16_activations: with bf16 or int8 weights, the 2:4 kernels round their inputs to bfloat16 where "
          "sparse24.bf16_activations_supported() (AVX512_BF16 on AMD: faster at short inputs; "
          "docs/accuracy.md). int8_activations: with int8 weights, the 2:4 kernels quantise their inputs to "
          "int8 per 64 positions and multiply in integers where sparse24.int8_activations_supported() "
          "(AVX512_VNNI and AVX512_VBMI: faster at short inputs).")
      .def("embed", &PyEngine::embed, nb::arg("texts"), "One embedding per text: float32 [len(texts), dim].")
      .def("tokenize", &PyEngine::tokenize, nb::arg("text"))
      .def("run", &PyEngine::run, nb::arg("x"), "A workflow export on float input [B, *input_shape].")
      .def("run", &PyEngine::embed_ids, nb::arg("ids"), "A text encoder on token ids (one list per text).")
      .def_prop_ro("is_text", &PyEngine::is_text)
      .def_prop_ro("dim", &PyEngine::dim)
      .def_prop_ro("sparse_layers", [](PyEngine& e) { return e.engine().sparse_layers(); })
      .def_prop_ro(
          "weight_bytes", [](PyEngine& e) { return e.engine().weight_bytes(); },
          "Bytes of the weights held in memory.")
      .def_prop_ro(
          "stored_bytes", [](PyEngine& e) { return e.engine().stored_bytes(); },
          "Bytes of the tables left in the checkpoint's mapped file (a text encoder's word embeddings, "
          "read as texts use their rows).")
      .def_prop_ro("plan", [](const PyEngine& e) -> std::optional<std::string> {
        if (const Plan* p = e.plan()) return p->to_json();
        return std::nullopt;
      });
}

}  // namespace sparse24::py
