#include "train/engine_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "sparse24/engine.h"
#include "sparse24/error.h"

namespace sparse24::train {

torch::Tensor logits(Net& net, const Data& data, int64_t batch) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < data.size(); i += batch)
    parts.push_back(net->forward(data.x.slice(0, i, std::min(data.size(), i + batch))));
  return torch::cat(parts);
}

EngineCheck check_engine(const std::string& dir, const Data& data, const torch::Tensor& torch_logits,
                         int64_t batch, int threads) {
  const engine::Model m = engine::load_model(dir);
  const engine::Plan plan = engine::load_or_build_plan(m, dir, batch, threads, nullptr);
  engine::Engine e(m, batch, threads, engine::Mode::kPlan, &plan);
  const torch::Tensor x = data.x.to(torch::kFloat32).contiguous();
  const torch::Tensor ref = torch_logits.to(torch::kFloat32).contiguous();
  const int64_t n = data.size(), in = m.input_size(), out = m.output_size();
  if (x.numel() != n * in || ref.numel() != n * out)
    throw Error("engine check: data does not match the model");
  const float* xp = x.data_ptr<float>();
  const float* rp = ref.data_ptr<float>();
  const torch::Tensor labels = data.y.to(torch::kInt64).contiguous();
  const int64_t* lp = labels.data_ptr<int64_t>();
  std::vector<float> chunk_in(batch * in), chunk_out(batch * out);
  EngineCheck c;
  c.images = n;
  int64_t agree = 0, correct = 0;
  double seconds = 0;
  for (int64_t s = 0; s < n; s += batch) {
    const int64_t k = std::min(batch, n - s);
    std::fill(chunk_in.begin(), chunk_in.end(), 0.0f);
    std::copy(xp + s * in, xp + (s + k) * in, chunk_in.begin());
    const auto t0 = std::chrono::steady_clock::now();
    e.run(chunk_in.data(), chunk_out.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int64_t i = 0; i < k; ++i) {
      const float* y = &chunk_out[i * out];
      const float* r = rp + (s + i) * out;
      const int64_t a = std::max_element(y, y + out) - y, b = std::max_element(r, r + out) - r;
      agree += a == b;
      correct += a == lp[s + i];
      for (int64_t j = 0; j < out; ++j)
        c.max_logit_diff = std::max(c.max_logit_diff, double(std::fabs(y[j] - r[j])));
    }
  }
  c.agreement = static_cast<double>(agree) / static_cast<double>(n);
  c.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  c.ms_per_image = 1e3 * seconds / static_cast<double>(n);
  for (bool sp : e.sparse_layers()) c.sparse_layers += sp;
  c.layers = static_cast<int>(m.gemms.size());
  return c;
}

}  // namespace sparse24::train
