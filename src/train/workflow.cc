#include "train/workflow.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/mask.h"
#include "sparse24/pattern.h"
#include "train/cpu_env.h"
#include "train/density_png.h"
#ifdef SPARSE24_TRAIN_HAVE_ENGINE
#include "train/engine_check.h"
#endif
#include "train/export.h"
#include "train/masks.h"
#include "train/net.h"
#include "train/trainer.h"

namespace sparse24::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string pct(double a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * a);
  return buf;
}

struct Setup {
  NetSpec spec;
  TrainOptions train;
  int threads = 1;
  Data train_data, test_data;
};

Setup setup(const WorkflowOptions& o) {
  if (o.dataset != "fashion-mnist")
    throw Error("unknown dataset '" + o.dataset + "' (expected fashion-mnist)");
  Setup s;
  s.spec = builtin_spec(o.model);
  const TrainOptions d = model_defaults(o.model);
  s.train.epochs = o.epochs > 0 ? o.epochs : d.epochs;
  s.train.batch = o.batch > 0 ? o.batch : d.batch;
  s.train.lr = o.lr > 0 ? o.lr : d.lr;
  s.train.seed = o.seed;
  s.train.log = o.log;
  s.threads = o.threads > 0 ? o.threads : usable_cores();
  keep_freed_memory();
  torch::set_num_threads(s.threads);
  load_fashion_mnist(o.data_dir, o.limit, s.spec.mean, s.spec.std, s.train_data, s.test_data);
  std::filesystem::create_directories(o.out);
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::fprintf(o.log,
               "%s: %s on %s, %lld training / %lld test images, %d epochs, batch %lld, lr %g, seed %llu, "
               "%d threads, OPENBLAS_CORETYPE=%s\n",
               o.out.c_str(), o.model.c_str(), o.dataset.c_str(), static_cast<long long>(s.train_data.size()),
               static_cast<long long>(s.test_data.size()), s.train.epochs,
               static_cast<long long>(s.train.batch), s.train.lr, static_cast<unsigned long long>(o.seed),
               s.threads, core ? core : "(unset)");
  return s;
}

nlohmann::json history(const std::vector<EpochLog>& logs) {
  nlohmann::json h = nlohmann::json::array();
  for (const EpochLog& l : logs)
    h.push_back({{"loss", l.loss},
                 {"train_accuracy", l.train_accuracy},
                 {"test_accuracy", l.test_accuracy},
                 {"seconds", l.seconds}});
  return h;
}

double seconds_of(const std::vector<EpochLog>& logs) {
  double s = 0;
  for (const EpochLog& l : logs) s += l.seconds;
  return s;
}

// Pruned positions are exactly zero and every pruned weight is 2:4 (the masks held through retraining).
void check_masks_held(const MaskSet& masks, bool two_four) {
  for (const LayerMask& l : masks.layers()) {
    if (!l.pruned) continue;
    if ((l.weight.detach() * (1 - l.mask)).abs().max().item<float>() != 0.f)
      throw Error("layer '" + l.name + "': a pruned weight became nonzero during retraining");
    if (two_four) {
      const std::vector<float> w = weight_matrix(l.weight);
      const MatrixView v = matrix_view(l.shape);
      if (!check_pattern(w.data(), v.rows, v.cols).valid)
        throw Error("layer '" + l.name + "': weight is not 2:4 after retraining");
    }
  }
}

}  // namespace

WorkflowResult run_workflow(const WorkflowOptions& o) {
  const auto t0 = Clock::now();
  Setup s = setup(o);
  namespace fs = std::filesystem;
  fs::create_directories(o.out + "/maps");
  fs::create_directories(o.out + "/export");

  // 1. Dense.
  torch::manual_seed(o.seed);
  Net net(s.spec);
  s.train.label = "dense";
  const std::vector<EpochLog> dense_logs = train(net, s.train_data, &s.test_data, s.train, nullptr);
  WorkflowResult r;
  r.dense_accuracy = accuracy(predict(net, s.test_data), s.test_data);
  torch::save(net, o.out + "/dense.pt");

  // 2. Prune 2:4 once, by magnitude.
  MaskOptions mo;
  mo.kind = o.transposable ? MaskKind::kTransposable24 : MaskKind::kMagnitude24;
  mo.allow = o.allow;
  mo.deny = o.deny;
  std::map<std::string, std::vector<float>> before;
  for (const LayerMask& l : MaskSet::candidates(*net, mo))
    if (l.reason.empty()) before[l.name] = weight_matrix(l.weight);
  MaskSet masks = MaskSet::prune(*net, mo);
  r.oneshot_accuracy = accuracy(predict(net, s.test_data), s.test_data);
  std::fprintf(o.log, "dense %s, one-shot 2:4 %s\n", pct(r.dense_accuracy).c_str(),
               pct(r.oneshot_accuracy).c_str());
  std::map<std::string, std::vector<float>> oneshot;
  for (const LayerMask& l : masks.layers())
    if (l.pruned) oneshot[l.name] = weight_matrix(l.weight);

  // 3. Retrain with the mask fixed: same epochs, schedule, data order.
  s.train.label = "retrain";
  const std::vector<EpochLog> retrain_logs = train(net, s.train_data, &s.test_data, s.train, &masks);
  check_masks_held(masks, /*two_four=*/true);
  const torch::Tensor predictions = predict(net, s.test_data);
  r.retrained_accuracy = accuracy(predictions, s.test_data);
  masks.save_checkpoint(*net, o.out + "/retrained.pt");

  // 4. Export, reload, compare predictions on the whole test set.
  export_model(net, masks, o.out + "/export");
  Net reloaded = load_exported(o.out + "/export");
  const torch::Tensor reload_predictions = predict(reloaded, s.test_data);
  r.reload_identical = reload_predictions.equal(predictions);
  r.reload_accuracy = accuracy(reload_predictions, s.test_data);
  std::fprintf(o.log, "retrained %s; export reloads with %s predictions\n", pct(r.retrained_accuracy).c_str(),
               r.reload_identical ? "identical" : "DIFFERENT");
  nlohmann::json engine_report;  // the inference engine on the export, against libtorch (issue 5)
#ifdef SPARSE24_TRAIN_HAVE_ENGINE
  {
    const EngineCheck ec =
        check_engine(o.out + "/export", s.test_data, logits(net, s.test_data), 100, s.threads);
    engine_report = {{"images", ec.images},
                     {"agreement", ec.agreement},
                     {"accuracy", ec.accuracy},
                     {"torch_accuracy", r.retrained_accuracy},
                     {"max_logit_diff", ec.max_logit_diff},
                     {"ms_per_image", ec.ms_per_image},
                     {"sparse_layers", ec.sparse_layers},
                     {"layers", ec.layers},
                     {"plan", "export/plan.json"}};
    std::fprintf(o.log, "engine: %.2f%% of argmax identical to libtorch's, accuracy %s (libtorch %s)\n",
                 100 * ec.agreement, pct(ec.accuracy).c_str(), pct(r.retrained_accuracy).c_str());
  }
#endif

  // 5. Density maps and the report.
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerMask& l : masks.layers()) {
    nlohmann::json jl = {
        {"name", l.name}, {"shape", l.shape}, {"pruned", l.pruned}, {"kept_magnitude", l.kept_magnitude}};
    if (!l.pruned) jl["reason"] = l.reason;
    if (l.pruned) {
      const MatrixView v = matrix_view(l.shape);
      const std::string base = "maps/" + l.name;
      write_density_png(o.out + "/" + base + "_dense.png", before[l.name].data(), v.rows, v.cols);
      write_density_png(o.out + "/" + base + "_pruned.png", oneshot[l.name].data(), v.rows, v.cols);
      const std::vector<float> w = weight_matrix(l.weight);
      write_density_png(o.out + "/" + base + "_retrained.png", w.data(), v.rows, v.cols);
      jl["matrix"] = {v.rows, v.cols};
      jl["maps"] = {{"dense", base + "_dense.png"},
                    {"pruned", base + "_pruned.png"},
                    {"retrained", base + "_retrained.png"}};
    }
    layers.push_back(jl);
  }
  const auto export_bytes = fs::file_size(o.out + "/export/model.safetensors");
  r.seconds = since(t0);
  nlohmann::json report = {
      {"dataset", o.dataset},
      {"model", o.model},
      {"seed", o.seed},
      {"epochs", s.train.epochs},
      {"batch", s.train.batch},
      {"lr", s.train.lr},
      {"optimizer", "SGD, Nesterov momentum 0.9, weight decay 5e-4, warm-up then cosine decay per step"},
      {"mask", o.transposable ? "transposable 2:4" : "magnitude 2:4"},
      {"threads", s.threads},
      {"train_images", s.train_data.size()},
      {"test_images", s.test_data.size()},
      {"dense_accuracy", r.dense_accuracy},
      {"oneshot_accuracy", r.oneshot_accuracy},
      {"retrained_accuracy", r.retrained_accuracy},
      {"reload_accuracy", r.reload_accuracy},
      {"reload_identical", r.reload_identical},
      {"seconds", r.seconds},
      {"seconds_dense_training", seconds_of(dense_logs)},
      {"seconds_retraining", seconds_of(retrain_logs)},
      {"export",
       {{"config", "export/model.json"}, {"weights", "export/model.safetensors"}, {"bytes", export_bytes}}},
      {"layers", layers},
      {"history", {{"dense", history(dense_logs)}, {"retrain", history(retrain_logs)}}},
  };
  if (!engine_report.is_null()) report["engine"] = engine_report;
  write_file_atomic(o.out + "/report.json", report.dump(2) + "\n");

  std::string md = "# sparse24 workflow: " + o.model + " on " + o.dataset + "\n\n";
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "%lld training / %lld test images; epochs: %d dense + %d retraining with the mask fixed; batch "
      "%lld, lr %g, seed %llu, %d threads, %s masks; %.0f s in all.\n\n",
      static_cast<long long>(s.train_data.size()), static_cast<long long>(s.test_data.size()), s.train.epochs,
      s.train.epochs, static_cast<long long>(s.train.batch), s.train.lr,
      static_cast<unsigned long long>(o.seed), s.threads,
      o.transposable ? "transposable 2:4" : "magnitude 2:4", r.seconds);
  md += buf;
  md += "| stage | test accuracy | change from dense |\n|---|---|---|\n";
  auto row = [&](const char* stage, double a) {
    std::snprintf(buf, sizeof buf, "| %s | %.2f%% | %+.2f points |\n", stage, 100 * a,
                  100 * (a - r.dense_accuracy));
    md += buf;
  };
  row("dense", r.dense_accuracy);
  row("2:4 one-shot (no retraining)", r.oneshot_accuracy);
  row("2:4 retrained, mask fixed", r.retrained_accuracy);
  row("exported and reloaded", r.reload_accuracy);
  md += std::string("\nExport (`export/model.safetensors` + `export/model.json`, ") +
        std::to_string(export_bytes) + " bytes) reloads with " +
        (r.reload_identical ? "identical" : "**different**") + " predictions on all " +
        std::to_string(s.test_data.size()) + " test images.\n\n";
  if (!engine_report.is_null()) {
    std::snprintf(
        buf, sizeof buf,
        "Inference engine (`sparse24 run`, no libtorch; plan `export/plan.json`, %d of %d layers "
        "sparse): argmax identical to libtorch's on %.2f%% of the %lld test images, accuracy %.2f%% "
        "(libtorch %.2f%%), max logit difference %.2g, %.4f ms per image.\n\n",
        engine_report["sparse_layers"].get<int>(), engine_report["layers"].get<int>(),
        100 * engine_report["agreement"].get<double>(),
        static_cast<long long>(engine_report["images"].get<int64_t>()),
        100 * engine_report["accuracy"].get<double>(), 100 * r.retrained_accuracy,
        engine_report["max_logit_diff"].get<double>(), engine_report["ms_per_image"].get<double>());
    md += buf;
  }
  md +=
      "## Layers\n\n| layer | shape | pruned | kept magnitude | density maps (dense / pruned / retrained) |\n"
      "|---|---|---|---|---|\n";
  for (const auto& jl : layers) {
    const std::string name = jl["name"];
    std::string maps = jl.value("reason", "");
    if (jl["pruned"]) {
      maps = "[dense](" + jl["maps"]["dense"].get<std::string>() + ") / [pruned](" +
             jl["maps"]["pruned"].get<std::string>() + ") / [retrained](" +
             jl["maps"]["retrained"].get<std::string>() + ")";
    }
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %.4f | ", name.c_str(),
                  shape_string(jl["shape"].get<std::vector<int64_t>>()).c_str(), jl["pruned"] ? "yes" : "no",
                  jl["kept_magnitude"].get<double>());
    md += buf + maps + " |\n";
  }
  md +=
      "\nDensity maps show each weight matrix as pruned (`[rows, K]`, conv weights as `[out*kh*kw, in]`): "
      "positive red, negative blue, zero black.\n\n";
  for (const auto& jl : layers) {
    if (!jl["pruned"]) continue;
    const std::string name = jl["name"];
    md += "### " + name + "\n\n![" + name + " dense](" + jl["maps"]["dense"].get<std::string>() + ") ![" +
          name + " pruned](" + jl["maps"]["pruned"].get<std::string>() + ")\n\n";
  }
  md +=
      "## Per epoch\n\n| epoch | dense loss | dense test | retrain loss | retrain test "
      "|\n|---|---|---|---|---|\n";
  for (size_t e = 0; e < dense_logs.size(); ++e) {
    std::snprintf(buf, sizeof buf, "| %zu | %.4f | %.2f%% | %.4f | %.2f%% |\n", e + 1, dense_logs[e].loss,
                  100 * dense_logs[e].test_accuracy, retrain_logs[e].loss,
                  100 * retrain_logs[e].test_accuracy);
    md += buf;
  }
  write_file_atomic(o.out + "/report.md", md);
  std::fprintf(o.log, "wrote %s/report.md and report.json (%.0f s)\n", o.out.c_str(), r.seconds);
  if (!r.reload_identical) throw Error("the exported model's predictions differ from the retrained model's");
  return r;
}

}  // namespace sparse24::train
