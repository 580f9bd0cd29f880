// Channel permutation search for 2:4 (the idea of NVIDIA ASP / Pool & Yu 2021, our own implementation).
//
// State: `perm` assigns original columns to positions; positions 4s..4s+3 form stripe s. The value of a set
// of 4 columns is sum over rows of the top-2 |w| among them (what 2:4 magnitude keeps), so the kept total is
// the sum of the stripes' values. A "combo" is a group of k stripes (k = 2: 8 columns; k = 3: 12 columns);
// its best gain is the best way to re-split its 4k columns into k stripes, minus its current value. We keep
// every combo's best gain, apply the best one, and recompute only the combos that share a stripe with it.
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <random>
#include <string>

#include "sparse24/error.h"
#include "sparse24/prune.h"

namespace sparse24 {
namespace {

using Clock = std::chrono::steady_clock;
// Columns moved in one random cycle by an escape (3 or more: a cycle through 2 stripes is one exchange, which
// the next descent simply undoes). 4 measured best on random 128x64 and 64x128 matrices (docs/accuracy.md).
constexpr int kPerturbColumns = 4;
// Stripes per window in kAuto's search of wide layers.
constexpr int64_t kWindowStripes = 32;

void check_matrix(const float* w, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 4 || cols % 4 != 0) {
    throw Error("channel permutations need rows >= 1 and cols a positive multiple of 4, got [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  reject_nan(w, rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    if (std::isinf(w[i])) {
      throw Error("infinite weight at row " + std::to_string(i / cols) + ", column " +
                  std::to_string(i % cols));
    }
}

void check_permutation(const std::vector<int64_t>& perm, int64_t n, const char* what) {
  if (static_cast<int64_t>(perm.size()) != n) {
    throw Error(std::string("permutation of ") + what + " has length " + std::to_string(perm.size()) +
                ", expected " + std::to_string(n));
  }
  std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = perm[static_cast<size_t>(i)];
    if (p < 0 || p >= n || seen[static_cast<size_t>(p)]) {
      throw Error(std::string("not a permutation of ") + what + ": entry " + std::to_string(i) + " is " +
                  std::to_string(p) + (p >= 0 && p < n ? " (repeated)" : " (out of range)"));
    }
    seen[static_cast<size_t>(p)] = 1;
  }
}

// Sum over rows of the top-2 of four columns (column-major |w|, rows padded to a multiple of 8 with zeros).
// Float lanes over 64-row chunks, double across chunks: the gains compared below are sums of these.
// Compiled for AVX-512, AVX2 and baseline x86-64, picked at load time (GCC function multiversioning).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) double top2_sum(
    const float* a, const float* b, const float* c, const float* d, int64_t rows_padded) {
  double total = 0;
  for (int64_t r0 = 0; r0 < rows_padded; r0 += 64) {
    const int64_t r1 = std::min<int64_t>(r0 + 64, rows_padded);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t r = r0; r < r1; r += 8) {
      for (int l = 0; l < 8; ++l) {
        const float hi1 = std::max(a[r + l], b[r + l]), lo1 = std::min(a[r + l], b[r + l]);
        const float hi2 = std::max(c[r + l], d[r + l]), lo2 = std::min(c[r + l], d[r + l]);
        acc[l] += std::max(hi1, hi2) + std::max(std::min(hi1, hi2), std::max(lo1, lo2));
      }
    }
    total += static_cast<double>((acc[0] + acc[1]) + (acc[2] + acc[3])) +
             static_cast<double>((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  return total;
}

// Ways to split 4k columns (bits 0..4k-1; stripe i of the combo = bits 4i..4i+3) into k groups of 4.
struct SplitTable {
  int k = 2;
  std::vector<std::array<uint16_t, 3>> splits;  // the k group masks of each split
  std::vector<uint16_t> subsets;                // every group mask any split uses (values computed once)
};

void enumerate_splits(uint16_t remaining, int k_left, std::array<uint16_t, 3>& cur, int depth,
                      std::vector<std::array<uint16_t, 3>>& out) {
  if (k_left == 0 || depth >= 3) {
    out.push_back(cur);
    return;
  }
  // The next group always takes the lowest remaining column, so each unordered split appears once.
  const uint16_t low = remaining & static_cast<uint16_t>(-remaining);
  const uint16_t rest = remaining & ~low;
  for (uint32_t sub = rest; sub; sub = (sub - 1) & rest) {
    if (std::popcount(sub) != 3) continue;
    cur[static_cast<size_t>(depth)] = static_cast<uint16_t>(low | sub);
    enumerate_splits(static_cast<uint16_t>(rest & ~sub), k_left - 1, cur, depth + 1, out);
  }
}

SplitTable make_splits(int k, bool swaps_only) {
  SplitTable t;
  t.k = k;
  std::array<uint16_t, 3> cur{};
  std::vector<std::array<uint16_t, 3>> all;
  enumerate_splits(static_cast<uint16_t>((1u << (4 * k)) - 1), k, cur, 0, all);
  for (const auto& s : all) {
    if (swaps_only) {  // k = 2: identity or one column exchanged between the two stripes
      const int in_first = std::popcount(static_cast<unsigned>(s[0] & 0xF));
      if (in_first == 2) continue;
    }
    t.splits.push_back(s);
  }
  std::vector<uint8_t> used(1u << 12, 0);
  for (const auto& s : t.splits)
    for (int g = 0; g < k; ++g) used[s[static_cast<size_t>(g)]] = 1;
  for (uint32_t m = 0; m < used.size(); ++m)
    if (used[m]) t.subsets.push_back(static_cast<uint16_t>(m));
  return t;
}

class Search {
 public:
  Search(const float* w, int64_t rows, int64_t cols, Clock::time_point deadline, uint64_t max_evaluations)
      : cols_(cols),
        stripes_(cols / 4),
        rows_padded_((rows + 7) / 8 * 8),
        deadline_(deadline),
        max_evaluations_(max_evaluations) {
    abs_.assign(static_cast<size_t>(cols * rows_padded_), 0.f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        abs_[static_cast<size_t>(c * rows_padded_ + r)] = std::fabs(w[r * cols + c]);
    perm_.resize(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) perm_[static_cast<size_t>(c)] = c;
    stripe_value_.resize(static_cast<size_t>(stripes_));
    for (int64_t s = 0; s < stripes_; ++s) stripe_value_[static_cast<size_t>(s)] = stripe_value(s);
  }

  const std::vector<int64_t>& perm() const { return perm_; }
  // Checked at points fixed by the search's course alone, so a work budget stops it alike everywhere.
  bool out_of_budget() {
    if (!stopped_ && ((max_evaluations_ > 0 && evaluations_ >= max_evaluations_) || Clock::now() > deadline_))
      stopped_ = true;
    return stopped_;
  }
  bool stopped() const { return stopped_; }
  uint64_t evaluations() const { return evaluations_; }
  double total() const {
    double t = 0;
    for (double v : stripe_value_) t += v;
    return t;
  }

  // Prepares the combos of k stripes and their best gains under `table`. False if the budget ran out.
  // `window` lists the stripes the search may change (sorted, distinct); the others stay as they are.
  bool prepare(const SplitTable& table, const std::vector<int32_t>& window) {
    table_ = &table;
    window_ = window;
    const int k = table.k;
    const size_t n = window.size();
    combos_.clear();
    if (static_cast<int>(n) < k) return true;
    if (k == 2) {
      for (size_t i = 0; i < n; ++i)
        for (size_t j = i + 1; j < n; ++j) combos_.push_back({window[i], window[j], -1});
    } else {
      for (size_t i = 0; i < n; ++i)
        for (size_t j = i + 1; j < n; ++j)
          for (size_t l = j + 1; l < n; ++l) combos_.push_back({window[i], window[j], window[l]});
    }
    by_stripe_.assign(static_cast<size_t>(stripes_), {});
    for (size_t i = 0; i < combos_.size(); ++i)
      for (int g = 0; g < k; ++g)
        by_stripe_[static_cast<size_t>(combos_[i][static_cast<size_t>(g)])].push_back(
            static_cast<int32_t>(i));
    gain_.assign(combos_.size(), 0);
    best_split_.assign(combos_.size(), 0);
    for (size_t i = 0; i < combos_.size(); ++i) {
      evaluate(i);
      if ((i & 63) == 63 && out_of_budget()) return false;
    }
    return true;
  }

  // Applies the best gain until none is left (or the budget runs out). Returns the number of steps.
  int64_t descend() {
    int64_t steps = 0;
    while (!combos_.empty()) {
      size_t best = 0;
      for (size_t i = 1; i < gain_.size(); ++i)
        if (gain_[i] > gain_[best]) best = i;
      if (!(gain_[best] > 0)) break;
      apply(best);
      ++steps;
      if (out_of_budget()) break;
    }
    return steps;
  }

  // Moves `columns` random columns in a random cycle through as many distinct random stripes (a regression,
  // usually). A cycle through 3 or more stripes is not undone by a single stripe-pair move.
  void perturb(std::mt19937_64& g, int columns) {
    std::uniform_int_distribution<size_t> pick(0, window_.size() - 1);
    auto stripe = [&](std::mt19937_64& gen) { return static_cast<int64_t>(window_[pick(gen)]); };
    std::uniform_int_distribution<int> lane(0, 3);
    columns = static_cast<int>(std::min<size_t>(static_cast<size_t>(columns), window_.size()));
    if (columns < 2) return;
    std::array<int64_t, 12> s{};
    for (int i = 0; i < columns; ++i) {
      bool again = true;
      while (again) {
        s[static_cast<size_t>(i)] = stripe(g);
        again = std::find(s.begin(), s.begin() + i, s[static_cast<size_t>(i)]) != s.begin() + i;
      }
    }
    std::array<size_t, 12> pos{};
    for (int i = 0; i < columns; ++i)
      pos[static_cast<size_t>(i)] = static_cast<size_t>(4 * s[static_cast<size_t>(i)] + lane(g));
    const int64_t first = perm_[pos[0]];
    for (int i = 0; i + 1 < columns; ++i)
      perm_[pos[static_cast<size_t>(i)]] = perm_[pos[static_cast<size_t>(i + 1)]];
    perm_[pos[static_cast<size_t>(columns - 1)]] = first;
    for (int i = 0; i < columns; i += 3)
      changed({s[static_cast<size_t>(i)], i + 1 < columns ? s[static_cast<size_t>(i + 1)] : -1,
               i + 2 < columns ? s[static_cast<size_t>(i + 2)] : -1});
  }

  void set_perm(const std::vector<int64_t>& p) {
    perm_ = p;
    for (int64_t s = 0; s < stripes_; ++s) stripe_value_[static_cast<size_t>(s)] = stripe_value(s);
  }

 private:
  const float* column(int64_t original) const { return abs_.data() + original * rows_padded_; }

  double stripe_value(int64_t s) const {
    const int64_t* p = perm_.data() + 4 * s;
    return top2_sum(column(p[0]), column(p[1]), column(p[2]), column(p[3]), rows_padded_);
  }

  // Best split of combo i and its gain over the current split.
  void evaluate(size_t i) {
    ++evaluations_;
    const SplitTable& t = *table_;
    const int k = t.k;
    const float* col[12];
    double current = 0;
    for (int g = 0; g < k; ++g) {
      const int64_t s = combos_[i][static_cast<size_t>(g)];
      current += stripe_value_[static_cast<size_t>(s)];
      for (int l = 0; l < 4; ++l) col[4 * g + l] = column(perm_[static_cast<size_t>(4 * s + l)]);
    }
    // Values of every group of 4 the splits use (each computed once, indexed by its bit mask).
    for (uint16_t m : t.subsets) {
      const float* q[4];
      int n = 0;
      for (uint32_t b = m; b; b &= b - 1) q[n++] = col[std::countr_zero(b)];
      subset_value_[m] = top2_sum(q[0], q[1], q[2], q[3], rows_padded_);
    }
    double best = -1;
    uint32_t best_split = 0;
    for (uint32_t j = 0; j < t.splits.size(); ++j) {
      double v = 0;
      for (int g = 0; g < k; ++g) v += subset_value_[t.splits[j][static_cast<size_t>(g)]];
      if (v > best) best = v, best_split = j;
    }
    // Float rounding must not make a no-op look like a gain (that could cycle): require a clear margin.
    const double gain = best - current;
    gain_[i] = gain > 1e-6 * current ? gain : 0;
    best_split_[i] = best_split;
  }

  void apply(size_t i) {
    const SplitTable& t = *table_;
    const int k = t.k;
    int64_t old_cols[12];
    for (int g = 0; g < k; ++g)
      for (int l = 0; l < 4; ++l)
        old_cols[4 * g + l] = perm_[static_cast<size_t>(4 * combos_[i][static_cast<size_t>(g)] + l)];
    const auto& split = t.splits[best_split_[i]];
    std::array<int64_t, 3> touched{-1, -1, -1};
    for (int g = 0; g < k; ++g) {
      const int64_t s = combos_[i][static_cast<size_t>(g)];
      int l = 0;
      for (uint32_t b = split[static_cast<size_t>(g)]; b; b &= b - 1)
        perm_[static_cast<size_t>(4 * s + l++)] = old_cols[std::countr_zero(b)];
      touched[static_cast<size_t>(g)] = s;
    }
    changed(touched);
  }

  // Stripes whose columns changed: refresh their values and every combo that contains one of them.
  void changed(const std::array<int64_t, 3>& stripes) {
    for (int64_t s : stripes)
      if (s >= 0) stripe_value_[static_cast<size_t>(s)] = stripe_value(s);
    if (combos_.empty()) return;
    ++epoch_;
    if (seen_.size() != combos_.size()) seen_.assign(combos_.size(), 0);
    for (int64_t s : stripes) {
      if (s < 0) continue;
      for (int32_t c : by_stripe_[static_cast<size_t>(s)]) {
        if (seen_[static_cast<size_t>(c)] == epoch_) continue;
        seen_[static_cast<size_t>(c)] = epoch_;
        evaluate(static_cast<size_t>(c));
      }
    }
  }

  int64_t cols_, stripes_, rows_padded_;
  Clock::time_point deadline_;
  uint64_t max_evaluations_, evaluations_ = 0;
  bool stopped_ = false;
  std::vector<float> abs_;  // |w| column-major [cols][rows_padded]
  std::vector<int64_t> perm_;
  std::vector<double> stripe_value_;
  const SplitTable* table_ = nullptr;
  std::vector<int32_t> window_;
  std::vector<std::array<int32_t, 3>> combos_;
  std::vector<std::vector<int32_t>> by_stripe_;
  std::vector<double> gain_;
  std::vector<uint32_t> best_split_;
  std::vector<uint32_t> seen_;
  uint32_t epoch_ = 0;
  std::array<double, 1u << 12> subset_value_{};
};

// The per-row bound: each row keeps its largest cols/2 magnitudes.
double kept_rows_half(const float* w, int64_t rows, int64_t cols) {
  std::vector<float> a(static_cast<size_t>(cols));
  double kept = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) a[static_cast<size_t>(c)] = std::fabs(w[r * cols + c]);
    std::nth_element(a.begin(), a.begin() + cols / 2, a.end(), std::greater<float>());
    for (int64_t c = 0; c < cols / 2; ++c) kept += a[static_cast<size_t>(c)];
  }
  return kept;
}

}  // namespace

double PermutationResult::recovered() const {
  const double gap = kept_unstructured - kept_identity;
  return gap > 0 ? (kept_permuted - kept_identity) / gap : 0.0;
}

double kept_after_permutation(const float* w, int64_t rows, int64_t cols, const std::vector<int64_t>& perm) {
  check_matrix(w, rows, cols);
  check_permutation(perm, cols, "columns");
  double kept = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    for (int64_t g = 0; g < cols; g += 4) {
      std::array<float, 4> a;
      for (int l = 0; l < 4; ++l)
        a[static_cast<size_t>(l)] = std::fabs(row[perm[static_cast<size_t>(g + l)]]);
      std::sort(a.begin(), a.end(), std::greater<float>());
      kept += static_cast<double>(a[0]) + static_cast<double>(a[1]);
    }
  }
  return kept;
}

PermutationResult search_permutation(const float* w, int64_t rows, int64_t cols,
                                     const PermutationOptions& options) {
  const auto t0 = Clock::now();
  check_matrix(w, rows, cols);
  if (options.stripe_group != 8 && options.stripe_group != 12)
    throw Error("stripe_group must be 8 or 12, got " + std::to_string(options.stripe_group));
  if (!(options.max_seconds > 0)) throw Error("max_seconds must be positive");
  if (options.escape_attempts < 0) throw Error("escape_attempts must be >= 0");

  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.max_seconds));
  Search search(w, rows, cols, deadline, options.max_evaluations);
  const bool swap = options.method == PermutationMethod::kSwap;
  const SplitTable table = make_splits(swap ? 2 : options.stripe_group / 4, swap);

  std::vector<int64_t> best = search.perm();
  std::vector<int32_t> all(static_cast<size_t>(cols / 4));
  for (size_t s = 0; s < all.size(); ++s) all[s] = static_cast<int32_t>(s);
  std::mt19937_64 g(options.seed);
  // Random exchanges leave a local optimum; descend again and keep the best state seen. We continue from
  // wherever the descent ends (a random walk over nearby local optima), and return to the best at the end.
  auto escape = [&](int attempts) {
    double best_total = search.total();
    for (int e = 0; e < attempts && !search.out_of_budget(); ++e) {
      search.perturb(g, kPerturbColumns);
      search.descend();
      const double t = search.total();
      if (t > best_total * (1 + 1e-9)) best_total = t, best = search.perm();
    }
    search.set_perm(best);
  };
  if (options.method != PermutationMethod::kAuto || static_cast<int64_t>(all.size()) <= kWindowStripes) {
    if (search.prepare(table, all)) {
      search.descend();
      best = search.perm();
      if (options.method == PermutationMethod::kAuto) escape(options.escape_attempts);
    }
  } else {
    // Wide layers (kAuto): the all-pairs search costs (cols/4)^2/2 * 35 group evaluations before its first
    // step. Instead, search windows of kWindowStripes random stripes, one after another (every finished step
    // is kept, so the budget never loses work), with fresh random windows each round, until a round gains
    // nothing or the budget runs out.
    for (int round = 0; !search.out_of_budget(); ++round) {
      const double before = search.total();
      std::shuffle(all.begin(), all.end(), g);
      for (size_t w0 = 0; w0 < all.size() && !search.out_of_budget(); w0 += kWindowStripes) {
        std::vector<int32_t> window(
            all.begin() + static_cast<int64_t>(w0),
            all.begin() + static_cast<int64_t>(std::min(all.size(), w0 + kWindowStripes)));
        std::sort(window.begin(), window.end());
        if (!search.prepare(table, window)) break;
        search.descend();
        best = search.perm();
        escape(options.escape_attempts * static_cast<int>(window.size()) / static_cast<int>(all.size()) + 1);
      }
      if (!(search.total() > before * (1 + 1e-9))) break;
    }
  }

  PermutationResult r;
  r.perm = best;
  r.kept_identity = kept_after_permutation(w, rows, cols, [&] {
    std::vector<int64_t> id(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) id[static_cast<size_t>(c)] = c;
    return id;
  }());
  r.kept_permuted = kept_after_permutation(w, rows, cols, best);
  if (r.kept_permuted < r.kept_identity) {  // cannot happen by construction; never return a regression
    for (int64_t c = 0; c < cols; ++c) r.perm[static_cast<size_t>(c)] = c;
    r.kept_permuted = r.kept_identity;
  }
  r.kept_unstructured = kept_rows_half(w, rows, cols);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.evaluations = search.evaluations();
  r.stopped_early = search.stopped();
  return r;
}

void permute_columns(float* w, int64_t rows, int64_t cols, const std::vector<int64_t>& perm) {
  if (rows < 0 || cols < 1)
    throw Error("invalid matrix [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  check_permutation(perm, cols, "columns");
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = w + r * cols;
    for (int64_t c = 0; c < cols; ++c) tmp[static_cast<size_t>(c)] = row[perm[static_cast<size_t>(c)]];
    std::copy(tmp.begin(), tmp.end(), row);
  }
}

void permute_rows(float* w, int64_t rows, int64_t cols, const std::vector<int64_t>& perm) {
  if (rows < 1 || cols < 0)
    throw Error("invalid matrix [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  check_permutation(perm, rows, "rows");
  std::vector<float> tmp(w, w + rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(tmp.begin() + perm[static_cast<size_t>(r)] * cols,
              tmp.begin() + (perm[static_cast<size_t>(r)] + 1) * cols, w + r * cols);
}

}  // namespace sparse24
