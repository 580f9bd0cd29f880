#include "train/lm_model.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

#include "sparse24/error.h"
#include "sparse24/io.h"
#include "train/masks.h"
#include "train/progress.h"

namespace sparse24::train {
namespace {

constexpr int kValidModulus = 11, kValidRemainder = 9;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

void check_perm(const std::vector<int64_t>& p, int64_t n, const std::string& what) {
  if (static_cast<int64_t>(p.size()) != n)
    throw Error(what + ": permutation has length " + std::to_string(p.size()) + ", expected " +
                std::to_string(n));
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (int64_t v : p) {
    if (v < 0 || v >= n || seen[static_cast<size_t>(v)]) throw Error(what + ": not a permutation");
    seen[static_cast<size_t>(v)] = 1;
  }
}

torch::Tensor index_of(const std::vector<int64_t>& p) {
  return torch::tensor(torch::ArrayRef<int64_t>(p), torch::kInt64);
}

// param = param.index_select(dim, idx), in place (the parameter object, and so optimizer references, stay).
void select_(torch::Tensor& param, int64_t dim, const torch::Tensor& idx) {
  param.copy_(param.index_select(dim, idx));
}

}  // namespace

void LmConfig::validate() const {
  if (vocab < 2 || d_model < 4 || layers < 1 || heads < 1 || d_ff < 4 || context < 2)
    throw Error("language model: every size must be positive (vocab >= 2, context >= 2)");
  if (d_model % 4 != 0 || d_ff % 4 != 0)
    throw Error("language model: d_model and d_ff must be multiples of 4 (2:4 along in_features)");
  if (d_model % (4 * heads) != 0)
    throw Error("language model: d_model must be a multiple of 4 * heads (2:4 groups within a head)");
}

// ---- Data ------------------------------------------------------------------------------------------------

KjvSplit split_kjv(const std::string& raw) {
  KjvSplit s;
  std::string book;
  int64_t index = -1;
  size_t line_no = 0;
  for (size_t pos = 0; pos < raw.size();) {
    size_t end = raw.find('\n', pos);
    if (end == std::string::npos) end = raw.size();
    const std::string line = raw.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    // <Book><chapter>:<verse> <text>
    size_t i = 0;
    if (i < line.size() && line[i] >= '1' && line[i] <= '3') ++i;
    while (i < line.size() && is_alpha(line[i])) ++i;
    const size_t name_end = i;
    const size_t chapter_start = i;
    while (i < line.size() && is_digit(line[i])) ++i;
    const bool chapter_ok = i > chapter_start;
    const bool colon = i < line.size() && line[i] == ':';
    if (colon) ++i;
    const size_t verse_start = i;
    while (i < line.size() && is_digit(line[i])) ++i;
    const bool ok = name_end > 0 && is_alpha(line[name_end - 1]) && chapter_ok && colon && i > verse_start &&
                    i < line.size() && line[i] == ' ';
    if (!ok)
      throw Error("King James Bible text: line " + std::to_string(line_no) +
                  " is not '<Book><chapter>:<verse> <text>'");
    const std::string name = line.substr(0, name_end);
    if (name != book) {
      book = name;
      ++index;
      (index % kValidModulus == kValidRemainder ? s.valid_books : s.train_books).push_back(name);
    }
    std::string& dst = index % kValidModulus == kValidRemainder ? s.valid : s.train;
    dst.append(line, i + 1, std::string::npos);
    dst.push_back('\n');
    ++s.verses;
  }
  if (s.verses == 0) throw Error("King James Bible text: no verses");
  if (s.valid.empty()) throw Error("King James Bible text: no validation book (fewer than 10 books)");
  return s;
}

std::string read_kjv(const std::string& program, const std::string& file) {
  if (!file.empty()) {
    const std::vector<uint8_t> bytes = read_file(file);
    return std::string(bytes.begin(), bytes.end());
  }
  for (char c : program)
    if (!(is_alpha(c) || is_digit(c) || c == '/' || c == '-' || c == '_' || c == '.'))
      throw Error("bible program '" + program + "': unexpected character in the path");
  const std::string cmd = program + " -f Gen1:1-Rev22:21 2>/dev/null";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) throw Error("cannot run '" + program + "' (install Debian's bible-kjv)");
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = pclose(p);
  if (status != 0 || text.empty())
    throw Error("'" + program +
                " -f Gen1:1-Rev22:21' failed (install Debian's bible-kjv and bible-kjv-text)");
  return text;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// ---- Model -----------------------------------------------------------------------------------------------

LmBlockImpl::LmBlockImpl(const LmConfig& c) : heads(c.heads) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  qkv = register_module("qkv", torch::nn::Linear(c.d_model, 3 * c.d_model));
  proj = register_module("proj", torch::nn::Linear(c.d_model, c.d_model));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  up = register_module("up", torch::nn::Linear(c.d_model, c.d_ff));
  down = register_module("down", torch::nn::Linear(c.d_ff, c.d_model));
}

torch::Tensor LmBlockImpl::forward(const torch::Tensor& x, BlockInputs* inputs) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
  auto keep = [&](torch::Tensor& dst, const torch::Tensor& v) {
    if (inputs) dst = v.detach().reshape({-1, v.size(-1)}).contiguous();
  };
  const torch::Tensor h = ln1(x);
  if (inputs) keep(inputs->qkv, h);
  const torch::Tensor qkv_out = qkv(h).view({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});  // [3,b,H,t,hd]
  const torch::Tensor q = qkv_out[0], k = qkv_out[1], v = qkv_out[2];
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  const torch::Tensor causal = torch::ones({t, t}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(causal, -std::numeric_limits<float>::infinity()), -1);
  const torch::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({b, t, d});
  if (inputs) keep(inputs->proj, y);
  torch::Tensor out = x + proj(y);
  const torch::Tensor h2 = ln2(out);
  if (inputs) keep(inputs->up, h2);
  const torch::Tensor a = torch::gelu(up(h2));
  if (inputs) keep(inputs->down, a);
  return out + down(a);
}

LmImpl::LmImpl(const LmConfig& c) : config(c) {
  c.validate();
  tok = register_module("tok", torch::nn::Embedding(c.vocab + (c.bos ? 1 : 0), c.d_model));
  pos = register_parameter("pos", torch::zeros({c.context, c.d_model}));
  torch::nn::ModuleList list;  // submodule names may not contain '.', so the blocks live in a list
  for (int64_t i = 0; i < c.layers; ++i) {
    blocks.push_back(LmBlock(c));
    list->push_back(blocks.back());
  }
  register_module("blocks", list);
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  head = register_module("head", torch::nn::Linear(c.d_model, c.vocab));
  // GPT-2 initialisation: N(0, 0.02), residual-writing layers scaled by 1/sqrt(2 * layers), zero biases.
  torch::NoGradGuard no_grad;
  const double resid = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  tok->weight.normal_(0, 0.02);
  pos.normal_(0, 0.02);
  for (LmBlock& blk : blocks) {
    for (torch::nn::Linear* l : {&blk->qkv, &blk->up}) (*l)->weight.normal_(0, 0.02);
    for (torch::nn::Linear* l : {&blk->proj, &blk->down}) (*l)->weight.normal_(0, resid);
    for (torch::nn::Linear* l : {&blk->qkv, &blk->proj, &blk->up, &blk->down}) (*l)->bias.zero_();
  }
  head->weight.normal_(0, 0.02);
  head->bias.zero_();
}

torch::Tensor LmImpl::embed(const torch::Tensor& tokens) {
  return tok(tokens) + pos.slice(0, 0, tokens.size(1)).unsqueeze(0);
}

torch::Tensor LmImpl::head_logits(const torch::Tensor& x) { return head(ln_f(x)); }

torch::Tensor LmImpl::forward(const torch::Tensor& tokens) {
  torch::Tensor x = embed(tokens);
  for (LmBlock& blk : blocks) x = blk->forward(x);
  return head_logits(x);
}

std::vector<std::string> prunable_layers(const LmConfig& c) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < c.layers; ++i)
    for (const char* l : kLmLayerKinds) names.push_back("blocks." + std::to_string(i) + "." + l);
  return names;
}

int64_t window_bytes(const LmConfig& c) { return c.bos ? c.context : c.context + 1; }

void split_window(const LmConfig& c, const torch::Tensor& w, torch::Tensor& inputs, torch::Tensor& targets) {
  const int64_t n = w.size(1);
  if (c.bos) {
    inputs = torch::cat({torch::full({w.size(0), 1}, c.vocab, torch::kInt64), w.slice(1, 0, n - 1)}, 1);
    targets = w;
  } else {
    inputs = w.slice(1, 0, n - 1);
    targets = w.slice(1, 1, n);
  }
}

// ---- Training and evaluation -----------------------------------------------------------------------------

void set_lm_threads(int threads) {
  using SetThreads = void (*)(int);
  if (void* f = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) reinterpret_cast<SetThreads>(f)(1);
  torch::set_num_threads(threads);  // after: OpenBLAS's setter also sets the OpenMP thread count
}

torch::Tensor to_tokens(const std::string& text) {
  torch::Tensor bytes = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  return bytes.to(torch::kInt64);
}

torch::Tensor sample_windows(const torch::Tensor& tokens, int64_t count, int64_t len, uint64_t seed,
                             uint64_t stream) {
  const int64_t n = tokens.size(0);
  if (n < len) throw Error("text of " + std::to_string(n) + " bytes is shorter than a window");
  uint64_t state = seed * 0x2545F4914F6CDD1Dull ^ (stream * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  std::vector<int64_t> starts(static_cast<size_t>(count));
  for (int64_t& s : starts) s = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(n - len + 1));
  const torch::Tensor idx = index_of(starts).unsqueeze(1) + torch::arange(len, torch::kInt64).unsqueeze(0);
  return tokens.index_select(0, idx.reshape({-1})).reshape({count, len});
}

double train_lm(Lm& lm, const torch::Tensor& train_tokens, const LmTrainOptions& o, MaskSet* masks) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : lm->named_parameters()) {
    const std::string& name = item.key();
    const bool linear_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
                               name.find(".ln") == std::string::npos && name.rfind("ln_f", 0) != 0 &&
                               name.rfind("tok", 0) != 0;
    (linear_weight ? decay : no_decay).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay,
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(o.lr).betas({0.9, 0.99}).weight_decay(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(o.lr).betas({0.9, 0.99}).weight_decay(0)));
  torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(o.lr));
  const int64_t warmup = o.warmup > 0 ? o.warmup : std::max<int64_t>(1, o.steps / 20);
  const int64_t every = o.log_every > 0 ? o.log_every : std::max<int64_t>(1, o.steps / 10);
  lm->train();
  double last_mean = 0;
  for (int64_t start = 0; start < o.steps; start += every) {
    const int64_t chunk = std::min(every, o.steps - start);
    Progress bar(o.label + " " + std::to_string(start + chunk) + "/" + std::to_string(o.steps), chunk, o.log);
    double loss_sum = 0, correct = 0, seen = 0;
    for (int64_t i = 0; i < chunk; ++i) {
      const int64_t step = start + i;
      double lr = o.lr;
      if (step < warmup) {
        lr = o.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
      } else {
        const double t = static_cast<double>(step - warmup) / std::max<double>(1.0, double(o.steps - warmup));
        lr = o.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * t)));
      }
      for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
      const torch::Tensor w = sample_windows(train_tokens, o.batch, window_bytes(lm->config), o.seed,
                                             static_cast<uint64_t>(step));
      torch::Tensor x, y;
      split_window(lm->config, w, x, y);
      opt.zero_grad();
      const torch::Tensor logits = lm->forward(x);
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
      loss.backward();
      if (masks) masks->mask_gradients();
      torch::nn::utils::clip_grad_norm_(lm->parameters(), o.clip);
      opt.step();
      if (masks) masks->apply();
      loss_sum += loss.item<double>();
      correct += logits.argmax(-1).eq(y).sum().item<double>();
      seen += static_cast<double>(y.numel());
      bar.update(i + 1, loss_sum / static_cast<double>(i + 1), correct / seen);
    }
    last_mean = loss_sum / static_cast<double>(chunk);
    std::string extra;
    if (o.valid) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "valid ppl %.3f (first 16 windows)", perplexity(lm, *o.valid, 16));
      extra = buf;
      lm->train();
    }
    bar.finish(extra);
  }
  return last_mean;
}

double perplexity(Lm& lm, const torch::Tensor& tokens, int64_t max_windows) {
  torch::NoGradGuard no_grad;
  lm->eval();
  const LmConfig& c = lm->config;
  // Without BOS a window of T + 1 bytes predicts its last T (the text's first byte is never predicted);
  // with BOS a window of T bytes predicts all T (each window's first byte from BOS alone).
  const int64_t ctx = c.context, wb = window_bytes(c);
  const int64_t n = tokens.size(0) - (wb - ctx);  // predicted tokens
  int64_t windows = (n + ctx - 1) / ctx;
  if (max_windows > 0) windows = std::min(windows, max_windows);
  double nll = 0;
  int64_t count = 0;
  const int64_t full = std::min(windows, n / ctx);
  constexpr int64_t kBatch = 32;
  auto add = [&](const torch::Tensor& w) {  // w: [nb, wb + partial]
    torch::Tensor x, y;
    split_window(c, w, x, y);
    const torch::Tensor logits = lm->forward(x);
    nll += torch::nn::functional::cross_entropy(
               logits.reshape({-1, logits.size(-1)}), y.reshape({-1}),
               torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
               .item<double>();
    count += y.numel();
  };
  for (int64_t w = 0; w < full; w += kBatch) {
    const int64_t nb = std::min(kBatch, full - w);
    // Window i covers tokens [i*ctx, i*ctx + wb).
    const torch::Tensor idx = (torch::arange(nb, torch::kInt64) * ctx + w * ctx).unsqueeze(1) +
                              torch::arange(wb, torch::kInt64).unsqueeze(0);
    add(tokens.index_select(0, idx.reshape({-1})).reshape({nb, wb}));
  }
  if (windows > full) {  // the last, partial window
    const int64_t s = full * ctx, len = n - s;
    add(tokens.slice(0, s, s + len + (wb - ctx)).unsqueeze(0));
  }
  if (count == 0) throw Error("perplexity: no tokens to predict");
  return std::exp(nll / static_cast<double>(count));
}

// ---- Permutations ----------------------------------------------------------------------------------------

void permute_lm(Lm& lm, const LmPermutation& p) {
  const LmConfig& c = lm->config;
  const auto layers = static_cast<size_t>(c.layers);
  if (!p.ffn.empty() && p.ffn.size() != layers) throw Error("permutation: one FFN permutation per block");
  if (!p.head.empty() && p.head.size() != layers) throw Error("permutation: one head permutation per block");
  torch::NoGradGuard no_grad;
  if (!p.residual.empty()) {
    check_perm(p.residual, c.d_model, "residual stream");
    const torch::Tensor idx = index_of(p.residual);
    select_(lm->tok->weight, 1, idx);
    select_(lm->pos, 1, idx);
    select_(lm->head->weight, 1, idx);
    select_(lm->ln_f->weight, 0, idx);
    select_(lm->ln_f->bias, 0, idx);
    for (LmBlock& b : lm->blocks) {
      for (torch::nn::LayerNorm* ln : {&b->ln1, &b->ln2}) {
        select_((*ln)->weight, 0, idx);
        select_((*ln)->bias, 0, idx);
      }
      select_(b->qkv->weight, 1, idx);
      select_(b->up->weight, 1, idx);
      for (torch::nn::Linear* l : {&b->proj, &b->down}) {
        select_((*l)->weight, 0, idx);
        select_((*l)->bias, 0, idx);
      }
    }
  }
  for (size_t i = 0; i < p.ffn.size(); ++i) {
    if (p.ffn[i].empty()) continue;
    check_perm(p.ffn[i], c.d_ff, "FFN of block " + std::to_string(i));
    const torch::Tensor idx = index_of(p.ffn[i]);
    LmBlock& b = lm->blocks[i];
    select_(b->up->weight, 0, idx);
    select_(b->up->bias, 0, idx);
    select_(b->down->weight, 1, idx);
  }
  const int64_t hd = c.d_model / c.heads;
  for (size_t i = 0; i < p.head.size(); ++i) {
    if (p.head[i].empty()) continue;
    const std::string what = "attention heads of block " + std::to_string(i);
    check_perm(p.head[i], c.d_model, what);
    for (int64_t j = 0; j < c.d_model; ++j)
      if (p.head[i][static_cast<size_t>(j)] / hd != j / hd) throw Error(what + ": a channel leaves its head");
    // qkv rows: q and k unchanged, v rows permuted like proj's columns.
    std::vector<int64_t> rows(static_cast<size_t>(3 * c.d_model));
    std::iota(rows.begin(), rows.end(), int64_t{0});
    for (int64_t j = 0; j < c.d_model; ++j)
      rows[static_cast<size_t>(2 * c.d_model + j)] = 2 * c.d_model + p.head[i][static_cast<size_t>(j)];
    LmBlock& b = lm->blocks[i];
    const torch::Tensor ridx = index_of(rows);
    select_(b->qkv->weight, 0, ridx);
    select_(b->qkv->bias, 0, ridx);
    select_(b->proj->weight, 1, index_of(p.head[i]));
  }
}

}  // namespace sparse24::train
