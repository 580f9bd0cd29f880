// The decoder's model-side code, which the loaders call: pruning and int8 quantization of a model's
// Linears (as it is read, DecoderLoadOptions, or afterwards, prune_magnitude) and RoPE's frequencies
// (config -> inverse frequencies; llama.cpp's rope_freqs.weight -> config). No kernels (but the row
// conversions of kernels/convert.h) and no oneDNN: the fuzz harnesses link it with the loaders
// (test/fuzz/run.sh).
#include <algorithm>
#include <cmath>
#include <exception>

#include "kernels/convert.h"
#include "kernels/huge_pages.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"

namespace sparse24::engine {
namespace detail {
namespace {

// The values a Linear pruned with these options holds: int8 if asked (bf16 too), else bf16 if asked.
DType pruned_dtype(const DecoderLoadOptions& o) {
  return o.int8 ? DType::kI8 : o.bf16 ? DType::kBF16 : DType::kF32;
}

}  // namespace

void prepare_linears(const std::vector<Gemm*>& linears, const DecoderLoadOptions& o) {
  std::exception_ptr error;
#pragma omp parallel for num_threads(o.threads) schedule(dynamic, 1) if (o.threads > 1)
  for (size_t i = 0; i < linears.size(); ++i) {
    try {
      Gemm& g = *linears[i];
      if (!g.lanes.empty()) continue;  // (int8, run in place)
      if (o.prune && !g.pruned) {      // (int8 or bf16 values straight from each pruned row)
        g.sparse = pruned_layout(g.m, g.k, pruned_dtype(o), kInt8ScaleGroup);
        prune_rows(g.sparse, 0, g.dense.data(), g.m);
        g.pruned = true;
        g.dense.clear();
        g.dense.shrink_to_fit();
      }
      if (o.int8 && g.pruned && g.sparse.dtype != DType::kI8)
        g.sparse = quantize_int8(g.sparse, kInt8ScaleGroup);
      if (o.bf16 && g.pruned && (g.sparse.dtype == DType::kF32 || g.sparse.dtype == DType::kF16))
        g.sparse = to_bf16(std::move(g.sparse));
    } catch (...) {
#pragma omp critical(sparse24_prepare_linears)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void RowSource::read(int64_t r0, int64_t r1, float* out) const {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t from = r;
    if (rope_heads > 0) {  // row h d + s d/2 + i of the head is llama.cpp's row h d + 2 i + s
      const int64_t half = rope_dim / 2, in_head = r % rope_dim;
      from = r - in_head + 2 * (in_head % half) + in_head / half;
    }
    stored.row(from, out + (r - r0) * stored.cols);
  }
  if (!kernels::all_finite(out, (r1 - r0) * stored.cols)) throw Error(what + " holds a non-finite value");
}

Compressed prune_as_read(const std::vector<RowSource>& parts, int64_t cols, const DecoderLoadOptions& o) {
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 16) / cols);  // rows of 256 KB in fp32
  struct Block {
    const RowSource* part;
    int64_t first, rows, at;  // its rows in the part, and where the first goes in the Linear
  };
  std::vector<Block> blocks;
  int64_t rows = 0;
  for (const RowSource& p : parts) {
    if (p.stored.cols != cols)
      throw Error(p.what + " has " + std::to_string(p.stored.cols) + " columns, not " + std::to_string(cols));
    for (int64_t r = 0; r < p.stored.rows; r += block)
      blocks.push_back({&p, r, std::min(block, p.stored.rows - r), rows + r});
    rows += p.stored.rows;
  }
  Compressed c = pruned_layout(rows, cols, pruned_dtype(o), kInt8ScaleGroup);
  std::vector<std::exception_ptr> errors(blocks.size());
#pragma omp parallel num_threads(o.threads) if (o.threads > 1)
  {
    std::vector<float> w(static_cast<size_t>(block * cols));
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Block& b = blocks[i];
      try {
        b.part->read(b.first, b.first + b.rows, w.data());
        prune_rows(c, b.at, w.data(), b.rows);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return c;
}

WeightTable int8_table(const std::vector<float>& w, int64_t rows, int64_t cols) {
  if (static_cast<int64_t>(w.size()) != rows * cols)
    throw Error("int8_table: the weights are not rows x cols");
  WeightTable t;
  kernels::resize_huge(t.i8, w.size());
  kernels::resize_huge(
      t.scales, static_cast<size_t>(rows * ((cols + kernels::kGemvI8Group - 1) / kernels::kGemvI8Group)));
  kernels::quantize_gemv_i8(w.data(), rows, cols, t.i8.data(), t.scales.data());
  return t;
}

WeightTable bf16_table(const std::vector<float>& w) {
  WeightTable t;
  kernels::resize_huge(t.bf16, w.size());
  kernels::floats_to_bf16(w.data(), static_cast<int64_t>(w.size()), t.bf16.data());
  return t;
}

WeightTable int8_table(const WeightTable& bf16, int64_t rows, int64_t cols) {
  if (!bf16.i8.empty() || static_cast<int64_t>(bf16.bf16.size()) != rows * cols)
    throw Error("int8_table: the bf16 weights are not rows x cols");
  StoredRows t;  // the bf16 rows as a table of rows, widened a block at a time (not the whole table in fp32)
  t.data = reinterpret_cast<const uint8_t*>(bf16.bf16.data());
  t.type = DType::kBF16;
  t.rows = rows;
  t.cols = cols;
  return narrowed_table(t, true);
}

namespace {

// A [rows, cols] table as int8 or bf16 from fp32 rows that read(r0, r1, out) gives, kRows at a time on
// `threads`; the first failing block's error is rethrown (whichever thread met it).
template <class Read>
WeightTable narrow_rows(int64_t rows, int64_t cols, bool int8, int threads, const Read& read,
                        const RowsInOrder& in_order = {}) {
  WeightTable out;
  const int64_t groups = (cols + kernels::kGemvI8Group - 1) / kernels::kGemvI8Group;
  const auto size = static_cast<size_t>(rows * cols);
  if (int8) {
    kernels::resize_huge(out.i8, size);
    kernels::resize_huge(out.scales, static_cast<size_t>(rows * groups));
  } else {
    kernels::resize_huge(out.bf16, size);
  }
  constexpr int64_t kRows = 64;
  const int64_t blocks = (rows + kRows - 1) / kRows;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(blocks));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<float> block(static_cast<size_t>(std::min(rows, kRows) * cols));
#pragma omp for schedule(dynamic, 1) ordered
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r = b * kRows, n = std::min(kRows, rows - r);
      try {
        read(r, r + n, block.data());
        if (int8)
          kernels::quantize_gemv_i8(block.data(), n, cols, out.i8.data() + r * cols,
                                    out.scales.data() + r * groups);
        else
          kernels::floats_to_bf16(block.data(), n * cols, out.bf16.data() + r * cols);
      } catch (...) {
        errors[static_cast<size_t>(b)] = std::current_exception();
      }
#pragma omp ordered
      if (in_order) {  // (the rows just read: still in this core's cache)
        try {
          in_order(r, r + n);
        } catch (...) {
          if (!errors[static_cast<size_t>(b)]) errors[static_cast<size_t>(b)] = std::current_exception();
        }
      }
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace

WeightTable narrowed_table(const StoredRows& t, bool int8, int threads) {
  return narrow_rows(t.rows, t.cols, int8, threads, [&](int64_t r0, int64_t r1, float* out) {
    for (int64_t r = r0; r < r1; ++r) t.row(r, out + (r - r0) * t.cols);
  });
}

WeightTable narrowed_table(const RowSource& t, bool int8, int threads, const RowsInOrder& in_order) {
  return narrow_rows(
      t.stored.rows, t.stored.cols, int8, threads,
      [&](int64_t r0, int64_t r1, float* out) { t.read(r0, r1, out); }, in_order);
}

bool head_runs_stored(uint32_t ggml_type, bool int8, bool bf16) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ8_0:
      return true;
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ6_K:
      return !int8;
    case GgmlType::kF32:
      return !int8 && !bf16;
    default:
      return false;
  }
}

void table_row(const WeightTable& t, int64_t row, int64_t cols, float* out) {
  if (t.i8_size() != 0) {
    const float* scale = t.scales_data() + row * ((cols + kernels::kGemvI8Group - 1) / kernels::kGemvI8Group);
    const int8_t* q = t.i8_data() + row * cols;
    for (int64_t r = 0; r < cols; ++r) out[r] = static_cast<float>(q[r]) * scale[r / kernels::kGemvI8Group];
  } else {
    const uint16_t* b = t.bf16.data() + row * cols;
    for (int64_t r = 0; r < cols; ++r) out[r] = bf16_to_float(b[r]);
  }
}

std::vector<float> rope_inv_freq(const RopeConfig& r, int64_t dim, bool long_factors) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)  // fp32 as transformers computes it
    inv[i] =
        1.0f / std::pow(static_cast<float>(r.theta), static_cast<float>(2 * i) / static_cast<float>(dim));
  if (r.type == "default") return inv;
  if (r.type == "longrope") {  // 1 / (factor_i * theta^(2i/dim)), in fp32
    const std::vector<double>& f = long_factors ? r.long_factor : r.short_factor;
    if (f.size() != inv.size())
      throw Error("rope: longrope has " + std::to_string(f.size()) + " factors for " +
                  std::to_string(inv.size()) + " frequencies");
    for (size_t i = 0; i < inv.size(); ++i)
      inv[i] =
          1.0f / (static_cast<float>(f[i]) *
                  std::pow(static_cast<float>(r.theta), static_cast<float>(2 * i) / static_cast<float>(dim)));
    return inv;
  }
  if (r.type == "linear") {  // positions divided by factor (transformers divides inv_freq)
    for (float& f : inv) f = static_cast<float>(f / r.factor);
    return inv;
  }
  if (r.type != "llama3")
    throw Error("rope type '" + r.type + "' is not supported (default, linear, llama3, longrope)");
  // Llama 3.1: wavelengths shorter than original / high_freq_factor are kept, longer than original /
  // low_freq_factor divided by factor, and those between interpolated.
  const double orig = static_cast<double>(r.original_max_positions);
  const double low_wavelen = orig / r.low_freq_factor, high_wavelen = orig / r.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / r.factor);
      continue;
    }
    const double smooth = (orig / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    f = static_cast<float>((1.0 - smooth) * f / r.factor + smooth * f);
  }
  return inv;
}

RopeConfig rope_from_factors(double theta, int64_t dim, const std::vector<float>& factors,
                             const std::string& what) {
  RopeConfig r;
  r.theta = theta;
  const auto n = static_cast<size_t>(dim / 2);
  if (n == 0 || factors.size() != n)
    throw Error(what + ": rope_freqs.weight has " + std::to_string(factors.size()) + " factors for " +
                std::to_string(n) + " RoPE frequencies");
  for (float f : factors)
    if (!(f >= 1.0f && f <= 1e6f))
      throw Error(what + ": rope_freqs.weight holds " + std::to_string(f) +
                  " (Llama 3's factors are 1 .. 1e6)");
  const auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-4 * std::max(1.0, std::fabs(b)); };
  const std::vector<float> plain = rope_inv_freq(r, dim);  // r is still the unscaled RoPE
  const double factor = factors[n - 1];                    // the longest wavelength's: the whole factor
  if (!near(factor, 1.0)) {
    // Wavelengths grow with i: the divisors are 1, then in between (smooth = a / wavelength + b, falling
    // from 1 to 0), then `factor`.
    std::vector<double> x, s;  // 1 / wavelength and smooth of the divisors strictly between 1 and factor
    size_t last_one = 0, first_full = n;  // one past the last 1, the first `factor`
    for (size_t i = 0; i < n; ++i) {
      if (near(factors[i], 1.0)) last_one = i + 1;
      if (first_full == n && near(factors[i], factor)) first_full = i;
      if (!near(factors[i], 1.0) && !near(factors[i], factor)) {
        x.push_back(plain[i] / (2.0 * M_PI));
        s.push_back((1.0 / factors[i] - 1.0 / factor) / (1.0 - 1.0 / factor));
      }
    }
    // The boundaries in 1 / wavelength: smooth reaches 1 at x1 (high_freq_factor / original) and 0 at x0.
    const auto xw = [&](size_t i) { return plain[i] / (2.0 * M_PI); };
    double x0 = 0, x1 = 0;
    if (x.size() >= 2) {  // a line through the first and last
      const double a = (s.back() - s.front()) / (x.back() - x.front()), b = s.front() - a * x.front();
      x0 = -b / a;
      x1 = (1.0 - b) / a;
    } else if (x.size() == 1) {  // any line through it that keeps its neighbours outside: s = 1 at x1 below
      // the last 1's x (x_one), s = 0 at x0 above the first factor's (x_full); x0 > x_full holds while
      // x1 < x1_max.
      const double x_one = last_one > 0 ? xw(last_one - 1) : INFINITY,
                   x_full = first_full < n ? xw(first_full) : 0;
      const double x1_max = (x[0] - (1.0 - s[0]) * x_full) / s[0];
      x1 = (x[0] + std::min(x_one, x1_max)) / 2;
      x0 = (x[0] - s[0] * x1) / (1.0 - s[0]);
    } else if (x.empty() && last_one > 0 && first_full < n) {  // no frequency in between
      x0 = std::cbrt(xw(last_one - 1) * xw(first_full) * xw(first_full));
      x1 = std::cbrt(xw(last_one - 1) * xw(last_one - 1) * xw(first_full));
    }
    r.type = "llama3";
    r.factor = factor;
    r.original_max_positions = 8192;
    r.low_freq_factor = 8192.0 * x0;
    r.high_freq_factor = 8192.0 * x1;
    if (!(x0 > 0 && x1 > x0 && std::isfinite(x1)))
      throw Error(what +
                  ": rope_freqs.weight is not Llama 3's RoPE scaling (factors 1, then falling "
                  "smoothly, then one factor)");
  }
  // The divisors the parameters give, against the file's.
  const std::vector<float> scaled = rope_inv_freq(r, dim);
  for (size_t i = 0; i < n; ++i)
    if (!near(static_cast<double>(plain[i]) / scaled[i], factors[i]))
      throw Error(what + ": rope_freqs.weight is not Llama 3's RoPE scaling (factor " + std::to_string(i) +
                  " is " + std::to_string(factors[i]) + ", the fit gives " +
                  std::to_string(static_cast<double>(plain[i]) / scaled[i]) + ")");
  return r;
}

}  // namespace detail

void DecoderModel::embedding(int32_t id, float* out) const {
  const int64_t H = config.hidden;
  if (id < 0 || id >= config.vocab) throw Error("token id " + std::to_string(id) + " outside the vocabulary");
  if (!embed_stored.empty()) {
    if (embed_stored.rows != config.vocab || embed_stored.cols != H)
      throw Error("decoder: the embedding table is not vocab x hidden");
    embed_stored.row(id, out);
    return;
  }
  if (!embed_table.empty()) {
    if (embed_table.bf16.size() + embed_table.i8_size() != static_cast<size_t>(config.vocab * H))
      throw Error("decoder: the embedding table is not vocab x hidden");
    detail::table_row(embed_table, id, H, out);
    return;
  }
  if (embed.size() != static_cast<size_t>(config.vocab * H))
    throw Error("decoder: the embedding table is not vocab x hidden");
  std::copy(embed.begin() + id * H, embed.begin() + (id + 1) * H, out);
}

void DecoderModel::release_tables() {
  std::vector<float>().swap(embed);
  head = Gemm{};
  embed_table = WeightTable{};
  head_table = WeightTable{};
  embed_stored = StoredRows{};
  head_stored = StoredRows{};
}

void DecoderModel::prune_magnitude(int threads) {
  std::vector<Gemm*> todo;
  for (DecoderLayer& l : layers)
    for (Gemm* g : {&l.qkv, &l.o, &l.gate_up, &l.down})
      if (!g->pruned) todo.push_back(g);
  DecoderLoadOptions o;
  o.prune = true;
  o.threads = threads;
  detail::prepare_linears(todo, o);
  fingerprint += "-magnitude24";
}

}  // namespace sparse24::engine
