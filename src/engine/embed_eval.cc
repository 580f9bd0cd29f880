// Embedding agreement metrics (embed_eval.h).
#include "sparse24/embed_eval.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "sparse24/error.h"

namespace sparse24::engine {
namespace {

// Rows scaled to unit length.
std::vector<float> normalized(const std::vector<float>& e, int64_t n, int64_t dim, const char* which) {
  std::vector<float> out(e.size());
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const float v = e[static_cast<size_t>(i * dim + j)];
      if (!std::isfinite(v))
        throw Error(std::string(which) + " embedding " + std::to_string(i) + " is not finite");
      s += static_cast<double>(v) * v;
    }
    if (s == 0) throw Error(std::string(which) + " embedding " + std::to_string(i) + " is zero");
    const double inv = 1 / std::sqrt(s);
    for (int64_t j = 0; j < dim; ++j)
      out[static_cast<size_t>(i * dim + j)] = static_cast<float>(e[static_cast<size_t>(i * dim + j)] * inv);
  }
  return out;
}

// Row i's dot product of two sets of unit rows.
std::vector<double> unit_row_dots(const std::vector<float>& ea, const std::vector<float>& eb, int64_t n,
                                  int64_t dim) {
  std::vector<double> d(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j)
      d[i] +=
          static_cast<double>(ea[static_cast<size_t>(i * dim + j)]) * eb[static_cast<size_t>(i * dim + j)];
  return d;
}

// S = E E^T, [n, n] (float products, double-free: the rows are unit vectors).
std::vector<float> similarities(const std::vector<float>& e, int64_t n, int64_t dim) {
  std::vector<float> s(static_cast<size_t>(n * n));
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) {
    const float* a = e.data() + i * dim;
    for (int64_t j = i; j < n; ++j) {
      const float* b = e.data() + j * dim;
      float d = 0;
      for (int64_t t = 0; t < dim; ++t) d += a[t] * b[t];
      s[static_cast<size_t>(i * n + j)] = d;
      s[static_cast<size_t>(j * n + i)] = d;
    }
  }
  return s;
}

// Indices of row i's k largest similarities, itself excluded (ties: lower index first).
std::vector<int64_t> top_k(const float* row, int64_t n, int64_t self, int k) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(n - 1));
  for (int64_t j = 0; j < n; ++j)
    if (j != self) idx.push_back(j);
  auto better = [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<double> ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    const double avg = (static_cast<double>(i) + static_cast<double>(j)) / 2 + 1;
    for (size_t t = i; t <= j; ++t) r[order[t]] = avg;
    i = j + 1;
  }
  return r;
}

}  // namespace

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) throw Error("Spearman needs two series of the same length >= 2");
  const std::vector<double> rx = ranks(x), ry = ranks(y);
  const double mean = (static_cast<double>(x.size()) + 1) / 2;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = rx[i] - mean, b = ry[i] - mean;
    sxy += a * b;
    sxx += a * a;
    syy += b * b;
  }
  if (sxx == 0 || syy == 0) return 0;
  return sxy / std::sqrt(sxx * syy);
}

std::vector<double> row_cosines(const std::vector<float>& a, const std::vector<float>& b, int64_t n,
                                int64_t dim) {
  if (n < 1 || dim < 1) throw Error("no embeddings to compare");
  if (a.size() != static_cast<size_t>(n * dim) || b.size() != a.size())
    throw Error("the two sets of embeddings have different shapes");
  return unit_row_dots(normalized(a, n, dim, "model"), normalized(b, n, dim, "reference"), n, dim);
}

EmbeddingAgreement compare_embeddings(const std::vector<float>& a, const std::vector<float>& b, int64_t n,
                                      int64_t dim, int k, int64_t max_pairs, uint64_t seed) {
  if (n < 1 || dim < 1) throw Error("no embeddings to compare");
  if (a.size() != static_cast<size_t>(n * dim) || b.size() != a.size())
    throw Error("the two sets of embeddings have different shapes");
  if (k < 1 || n < k + 1)
    throw Error("recall@" + std::to_string(k) + " needs at least " + std::to_string(k + 1) + " texts, got " +
                std::to_string(n));
  if (max_pairs < 1) throw Error("max_pairs must be at least 1");
  const std::vector<float> ea = normalized(a, n, dim, "model"), eb = normalized(b, n, dim, "reference");
  EmbeddingAgreement r;
  r.texts = n;
  r.k = k;
  const std::vector<double> cos = unit_row_dots(ea, eb, n, dim);
  r.min_cosine = *std::min_element(cos.begin(), cos.end());
  r.mean_cosine = std::accumulate(cos.begin(), cos.end(), 0.0) / static_cast<double>(n);

  const std::vector<float> sa = similarities(ea, n, dim), sb = similarities(eb, n, dim);
  std::vector<double> x, y;
  const int64_t all = n * (n - 1) / 2;
  if (all <= max_pairs) {
    x.reserve(static_cast<size_t>(all));
    y.reserve(static_cast<size_t>(all));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) {
        x.push_back(sa[static_cast<size_t>(i * n + j)]);
        y.push_back(sb[static_cast<size_t>(i * n + j)]);
      }
  } else {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    while (static_cast<int64_t>(x.size()) < max_pairs) {
      const int64_t i = pick(rng), j = pick(rng);
      if (i == j) continue;
      x.push_back(sa[static_cast<size_t>(i * n + j)]);
      y.push_back(sb[static_cast<size_t>(i * n + j)]);
    }
  }
  r.pairs = static_cast<int64_t>(x.size());
  r.spearman = r.pairs >= 2 ? spearman(x, y) : 0;

  double recall = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> ta = top_k(sa.data() + i * n, n, i, k), tb = top_k(sb.data() + i * n, n, i, k);
    std::vector<int64_t> both;
    std::set_intersection(ta.begin(), ta.end(), tb.begin(), tb.end(), std::back_inserter(both));
    recall += static_cast<double>(both.size()) / k;
  }
  r.recall_at_k = recall / static_cast<double>(n);
  return r;
}

}  // namespace sparse24::engine
