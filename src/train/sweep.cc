// sparse24 sweep: one dense model, then per configuration (unstructured magnitude at each density, and 2:4)
// the accuracy right after pruning and after retraining with the mask fixed (same epochs and schedule).
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sparse24/error.h"
#include "sparse24/io.h"
#include "train/cpu_env.h"
#include "train/masks.h"
#include "train/net.h"
#include "train/trainer.h"
#include "train/workflow.h"

namespace sparse24::train {
namespace {

struct Row {
  std::string name;
  double density = 1;  // kept fraction of the pruned layers' weights
  double oneshot = 0, retrained = 0;
};

double kept_fraction(const MaskSet& m) {
  double kept = 0, total = 0;
  for (const LayerMask& l : m.layers()) {
    if (!l.pruned) continue;
    kept += l.mask.sum().item<double>();
    total += static_cast<double>(l.mask.numel());
  }
  return total > 0 ? kept / total : 1.0;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// DIR/sweep.png with gnuplot's pngcairo terminal; false when gnuplot is not installed or fails.
bool plot(const std::string& dir, const std::vector<Row>& rows, double dense, const std::string& title) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return false;
  std::string dat;
  for (const Row& r : rows)
    if (r.name != "2:4")
      dat += std::to_string(100 * r.density) + " " + std::to_string(100 * r.oneshot) + " " +
             std::to_string(100 * r.retrained) + "\n";
  std::string dat24;
  for (const Row& r : rows)
    if (r.name == "2:4")
      dat24 += std::to_string(100 * r.density) + " " + std::to_string(100 * r.oneshot) + " " +
               std::to_string(100 * r.retrained) + "\n";
  write_file_atomic(dir + "/sweep_unstructured.dat", dat);
  write_file_atomic(dir + "/sweep_24.dat", dat24);
  const std::string gp =
      "set terminal pngcairo size 800,500\nset output 'sweep.png'\nset title '" + title +
      "'\nset xlabel 'density of pruned layers (%)'\nset ylabel 'test accuracy (%)'\nset key bottom right\n"
      "set grid\nset xrange [0:105]\nset yrange [*:*]\n"
      "plot " +
      std::to_string(100 * dense) +
      " title 'dense' with lines dashtype 2 lc rgb 'gray', "
      "'sweep_unstructured.dat' using 1:2 title 'unstructured, one-shot' with linespoints lc rgb 'orange', "
      "'sweep_unstructured.dat' using 1:3 title 'unstructured, retrained' with linespoints lc rgb 'red', "
      "'sweep_24.dat' using 1:2 title '2:4, one-shot' with points pt 9 ps 2 lc rgb 'cyan', "
      "'sweep_24.dat' using 1:3 title '2:4, retrained' with points pt 5 ps 2 lc rgb 'blue'\n";
  write_file_atomic(dir + "/sweep.gp", gp);
  return std::system(("cd " + quote(dir) + " && gnuplot sweep.gp >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace

void run_sweep(const SweepOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.dataset != "fashion-mnist")
    throw Error("unknown dataset '" + o.dataset + "' (expected fashion-mnist)");
  const NetSpec spec = builtin_spec(o.model);
  TrainOptions to = model_defaults(o.model);
  if (o.epochs > 0) to.epochs = o.epochs;
  if (o.batch > 0) to.batch = o.batch;
  if (o.lr > 0) to.lr = o.lr;
  to.seed = o.seed;
  to.log = o.log;
  const int threads = o.threads > 0 ? o.threads : usable_cores();
  keep_freed_memory();
  torch::set_num_threads(threads);
  Data train_data, test_data;
  load_fashion_mnist(o.data_dir, o.limit, spec.mean, spec.std, train_data, test_data);
  std::filesystem::create_directories(o.out);
  std::fprintf(o.log, "sweep: %s on %s, %lld training images, %d epochs per phase, %d threads\n",
               o.model.c_str(), o.dataset.c_str(), static_cast<long long>(train_data.size()), to.epochs,
               threads);

  torch::manual_seed(o.seed);
  Net dense(spec);
  to.label = "dense";
  train(dense, train_data, &test_data, to, nullptr);
  const double dense_accuracy = accuracy(predict(dense, test_data), test_data);
  const std::string dense_path = o.out + "/dense.pt";
  torch::save(dense, dense_path);

  std::vector<std::pair<std::string, MaskOptions>> configs;
  for (double d : o.densities) {
    MaskOptions m;
    m.kind = MaskKind::kUnstructured;
    m.density = d;
    m.allow = o.allow;
    m.deny = o.deny;
    char name[64];
    std::snprintf(name, sizeof name, "unstructured %.0f%%", 100 * d);
    configs.emplace_back(name, m);
  }
  MaskOptions m24;
  m24.allow = o.allow;
  m24.deny = o.deny;
  configs.emplace_back("2:4", m24);

  std::vector<Row> rows;
  for (const auto& [name, mo] : configs) {
    Net net(spec);
    torch::load(net, dense_path);
    MaskSet masks = MaskSet::prune(*net, mo);
    Row r;
    r.name = name;
    r.density = kept_fraction(masks);
    r.oneshot = accuracy(predict(net, test_data), test_data);
    to.label = "retrain " + name;
    train(net, train_data, &test_data, to, &masks);
    r.retrained = accuracy(predict(net, test_data), test_data);
    std::fprintf(o.log, "%s: density %.1f%%, one-shot %.2f%%, retrained %.2f%%\n", name.c_str(),
                 100 * r.density, 100 * r.oneshot, 100 * r.retrained);
    rows.push_back(r);
  }

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool plotted =
      plot(o.out, rows, dense_accuracy, o.model + " on " + o.dataset + ": accuracy vs density");
  nlohmann::json jrows = nlohmann::json::array();
  for (const Row& r : rows)
    jrows.push_back({{"mask", r.name},
                     {"density", r.density},
                     {"oneshot_accuracy", r.oneshot},
                     {"retrained_accuracy", r.retrained}});
  const nlohmann::json report = {{"dataset", o.dataset},
                                 {"model", o.model},
                                 {"seed", o.seed},
                                 {"epochs", to.epochs},
                                 {"train_images", train_data.size()},
                                 {"dense_accuracy", dense_accuracy},
                                 {"seconds", seconds},
                                 {"threads", threads},
                                 {"rows", jrows},
                                 {"plot", plotted ? "sweep.png" : ""}};
  write_file_atomic(o.out + "/sweep.json", report.dump(2) + "\n");

  std::string md = "# sparse24 sweep: " + o.model + " on " + o.dataset + "\n\n";
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "%lld training images, %d epochs dense and %d per retraining (mask fixed), seed %llu, %d threads, "
      "%.0f s. Dense test accuracy %.2f%%. Density is that of the pruned layers (every Linear and "
      "Conv2d whose K fits; unstructured masks keep the largest |w| of each layer).\n\n",
      static_cast<long long>(train_data.size()), to.epochs, to.epochs,
      static_cast<unsigned long long>(o.seed), threads, seconds, 100 * dense_accuracy);
  md += buf;
  md += "| mask | density | one-shot | retrained | retrained - dense |\n|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    std::snprintf(buf, sizeof buf, "| %s | %.1f%% | %.2f%% | %.2f%% | %+.2f points |\n", r.name.c_str(),
                  100 * r.density, 100 * r.oneshot, 100 * r.retrained, 100 * (r.retrained - dense_accuracy));
    md += buf;
  }
  md += plotted ? "\n![accuracy vs density](sweep.png)\n" : "\n(no plot: gnuplot is not installed)\n";
  write_file_atomic(o.out + "/sweep.md", md);
  std::fprintf(o.log, "wrote %s/sweep.md, sweep.json%s (%.0f s)\n", o.out.c_str(),
               plotted ? ", sweep.png" : "", seconds);
}

}  // namespace sparse24::train
