// sparse24 generate, perplexity, bench-decode, logits: decoder language models (Hugging Face llama
// directories, dense or 2:4) at batch 1 through the engine's Decoder.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "commands.h"
#include "sparse24/compressed.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "sparse24/spmm.h"
#include "text/bpe.h"
#include "text/jinja.h"

namespace sparse24::cli {
namespace {

namespace fs = std::filesystem;
using engine::Decoder;
using engine::DecoderModel;
using engine::DecoderOptions;

// Token ids written as integers separated by commas or white space.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  std::string tok;
  auto flush = [&] {
    if (tok.empty()) return;
    char* end = nullptr;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > (1ll << 30)) throw Error(what + ": '" + tok + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    tok.clear();
  };
  for (char ch : text) {
    if (ch == ',' || std::isspace(static_cast<unsigned char>(ch)))
      flush();
    else
      tok += ch;
  }
  flush();
  return ids;
}

std::vector<int32_t> read_ids_file(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  return parse_ids(std::string(b.begin(), b.end()), path);
}

// The line a read model is reported by: `what` ("loaded", ...) in ms.
void report_load(const char* what, const std::string& dir, const engine::DecoderConfig& c,
                 const engine::DecoderLoadOptions& lo, double ms) {
  std::fprintf(stderr, "%s %s: %lld layers, hidden %lld, %lld/%lld heads, vocab %lld in %.1f s%s%s\n", what,
               dir.c_str(), static_cast<long long>(c.layers), static_cast<long long>(c.hidden),
               static_cast<long long>(c.heads), static_cast<long long>(c.kv_heads),
               static_cast<long long>(c.vocab), ms / 1000, lo.prune ? " (2:4 by magnitude as read)" : "",
               lo.int8   ? " (int8 as read)"
               : lo.bf16 ? " (bf16 as read)"
                         : "");
}

DecoderModel load(const std::string& dir, const engine::DecoderLoadOptions& lo = {}) {
  const auto t0 = Clock::now();
  DecoderModel m = engine::load_decoder(dir, lo);
  report_load("loaded", dir, m.config, lo, ms_since(t0));
  return m;
}

// The model read and handed to its Decoder (which keeps it: the weights in memory once), its Linears packed
// as the layers are read.
Decoder open_decoder(const std::string& dir, const engine::DecoderLoadOptions& lo, const DecoderOptions& d) {
  const auto t0 = Clock::now();
  Decoder dec(dir, lo, d);
  report_load("loaded and packed", dir, dec.config(), lo, ms_since(t0));
  return dec;
}

bool model_is_pruned(const DecoderModel& m) {
  for (const engine::DecoderLayer& l : m.layers)
    if (l.qkv.pruned || l.o.pruned || l.gate_up.pruned || l.down.pruned) return true;
  return false;
}

// The weight types of a decoder's 2:4 Linears (fp32 without a flag), whether a dense model is pruned as it
// is read, and the KV cache's type, which every decoder command takes.
struct WeightFlags {
  bool bf16 = false, int8 = false, prune = false, bf16_act = false, int8_act = false, prefill_layout = false;
  std::string kv = "f32";
  void add_to(CLI::App* cmd) {
    cmd->add_flag("--prune", prune,
                  "magnitude-prune the dense Linears 2:4 as each layer is read (one-shot, no calibration; "
                  "with --int8 never more than a layer in fp32)");
    CLI::Option* b =
        cmd->add_flag("--bf16", bf16,
                      "2:4 weights and the output head held as bfloat16 (a bf16 checkpoint's 2:4 "
                      "weights are, without it: exactly its values)");
    cmd->add_flag("--int8", int8,
                  "2:4 weights and the output head held as int8 with an fp32 scale per 64 positions")
        ->excludes(b);
    CLI::Option* xb = cmd->add_flag(
        "--bf16-activations", bf16_act,
        "with --bf16 or --int8 (or a bf16 or int8 checkpoint): the 2:4 Linears round their inputs to "
        "bfloat16 on AMD CPUs with AVX512_BF16 (faster; not on Intel's, where fp32 ones are; "
        "docs/accuracy.md)");
    cmd->add_flag("--int8-activations", int8_act,
                  "with --int8 (or an int8 checkpoint): the 2:4 Linears quantise their inputs to int8 per 64 "
                  "positions and multiply in integers on CPUs with AVX512_VNNI and AVX512_VBMI, as "
                  "llama.cpp's Q8_0 (faster; docs/accuracy.md)")
        ->excludes(xb);
    cmd->add_option("--kv", kv, "KV cache type: f32, or f16 (IEEE half, llama.cpp's default: half the bytes)")
        ->check(CLI::IsMember({"f32", "f16"}))
        ->capture_default_str();
    cmd->add_flag("--prefill-layout", prefill_layout,
                  "the 2:4 Linears also pack the compute-bound layout, which runs prompts of more than 16 "
                  "tokens faster (about twice the 2:4 weights' memory)");
  }
  void apply(DecoderOptions& d) const {
    d.bf16_weights = bf16;
    d.int8_weights = int8;
    d.bf16_activations = bf16_act;
    d.int8_activations = int8_act;
    d.kv_half = kv == "f16";
    d.prefill_layout = prefill_layout;
  }
  const char* name() const { return bf16 ? "bf16" : int8 ? "int8" : "fp32"; }
  // How the model is read: pruned (--prune), its 2:4 values int8 or bf16 as read when the 2:4 kernels run
  // them.
  engine::DecoderLoadOptions load_options(const std::string& mode, int threads) const {
    engine::DecoderLoadOptions lo;
    lo.prune = prune;
    lo.int8 = int8 && engine::parse_mode(mode) != engine::Mode::kDense;
    lo.bf16 = bf16 && engine::parse_mode(mode) != engine::Mode::kDense;
    lo.threads = threads;
    return lo;
  }
};

// ---- generate ------------------------------------------------------------------------------------------

struct GenerateOptions {
  std::string model, prompt, prompt_ids, mode = "sparse", system;
  bool chat = false;
  int64_t max_tokens = 64, max_context = 2048;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 1;
  int threads = 1;
  WeightFlags weights;
};

// The model o names, read as o's flags say, as its Decoder.
Decoder make_decoder(const GenerateOptions& o, int64_t max_context) {
  DecoderOptions d;
  d.threads = o.threads;
  d.mode = engine::parse_mode(o.mode);
  o.weights.apply(d);
  d.max_context = max_context;
  return open_decoder(o.model, o.weights.load_options(o.mode, o.threads), d);
}

// Samples up to o.max_tokens tokens after `logits` (the last position's), stopping at an end-of-reply id,
// feeding each kept token back but one that ends the reply at max_tokens; streams the text (holding back a
// trailing U+FFFD: a character cut between tokens), or without a tokenizer the ids, to stdout.
std::vector<int32_t> stream_reply(Decoder& dec, std::vector<float>& logits, const text::ByteBpe* bpe,
                                  const GenerateOptions& o, uint64_t& state) {
  std::vector<int32_t> out;
  size_t shown = 0;  // bytes of the decoded text already printed
  const int64_t vocab = static_cast<int64_t>(logits.size());
  for (int64_t i = 0; i < o.max_tokens; ++i) {
    int32_t next = engine::sample_token(logits.data(), vocab, o.temperature, o.top_p, state);
    if (bpe && bpe->ends_reply(next)) break;
    out.push_back(next);
    if (bpe) {
      std::string t = bpe->decode(out, /*skip_special=*/true);
      size_t end = t.size();
      if (end >= 3 && t.compare(end - 3, 3, "\xEF\xBF\xBD") == 0) end -= 3;
      if (end > shown) std::fwrite(t.data() + shown, 1, end - shown, stdout);
      shown = std::max(shown, end);
    } else {
      std::printf("%s%d", i ? " " : "", next);
    }
    std::fflush(stdout);
    if (i + 1 < o.max_tokens) dec.forward(&next, 1, logits.data());
  }
  return out;
}

void cmd_generate(const GenerateOptions& o) {
  if (o.prompt.empty() == o.prompt_ids.empty()) throw Error("give one of --prompt and --prompt-ids");
  if ((o.chat || !o.system.empty()) && o.prompt.empty()) throw Error("--chat and --system take a --prompt");
  std::optional<text::ByteBpe> bpe;
  if (!o.prompt.empty()) bpe = text::ByteBpe::from_model(o.model);
  std::vector<int32_t> prompt;
  if (o.chat || !o.system.empty()) {  // the prompt as the user's turn in the model's chat template
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", o.prompt}});
    prompt = text::chat_prompt(text::chat_template_of(o.model), *bpe, messages);
  } else {
    prompt = bpe ? bpe->encode(o.prompt) : parse_ids(o.prompt_ids, "--prompt-ids");
  }
  if (prompt.empty()) throw Error("an empty prompt");
  if (o.max_tokens < 0 || o.threads < 1) throw Error("bad --max-tokens or --threads");
  Decoder dec = make_decoder(o, static_cast<int64_t>(prompt.size()) + o.max_tokens);
  std::vector<float> logits(static_cast<size_t>(dec.config().vocab));
  uint64_t state = o.seed;
  const auto t0 = Clock::now();
  dec.forward(prompt.data(), static_cast<int64_t>(prompt.size()), logits.data());
  const double prefill_ms = ms_since(t0);
  if (bpe && !o.chat && o.system.empty()) {  // a chat prints the reply only
    std::printf("%s", o.prompt.c_str());
    std::fflush(stdout);
  }
  const auto t1 = Clock::now();
  const int64_t generated =
      static_cast<int64_t>(stream_reply(dec, logits, bpe ? &*bpe : nullptr, o, state).size());
  const double gen_ms = ms_since(t1);
  std::printf("\n");
  std::fflush(stdout);
  const std::string stored = dec.stored_bytes() > 0
                                 ? "; " + std::to_string(static_cast<int64_t>(dec.stored_bytes() / 1e6)) +
                                       " MB of tables left in the file"
                                 : "";
  std::fprintf(stderr,
               "prompt: %zu tokens, %.1f tokens/s; generation: %lld tokens, %.1f tokens/s (%d of %zu "
               "Linears 2:4, %.0f MB of weights%s, %s kernels)\n",
               prompt.size(), prompt.size() / (prefill_ms / 1000), static_cast<long long>(generated),
               generated / std::max(gen_ms / 1000, 1e-9), dec.sparse_linears(), 4 * dec.config().layers,
               dec.weight_bytes() / 1e6, stored.c_str(), isa_name(active_isa()));
}

// ---- chat ----------------------------------------------------------------------------------------------

// A conversation on stdin, one user message per line, each reply streamed to stdout on its own line. Each
// turn renders the whole conversation in the model's chat template and feeds the decoder only what
// follows the longest prefix its KV cache already holds (Decoder::reuse_prefix: the earlier turns).
void cmd_chat(const GenerateOptions& o) {
  if (o.max_tokens < 1 || o.threads < 1 || o.max_context < 2)
    throw Error("bad --max-tokens, --threads or --max-context");
  const text::ByteBpe bpe = text::ByteBpe::from_model(o.model);
  const std::string tmpl = text::chat_template_of(o.model);
  Decoder dec = make_decoder(o, o.max_context);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  std::vector<float> logits(static_cast<size_t>(dec.config().vocab));
  uint64_t state = o.seed;
  const bool tty = ::isatty(0) != 0;
  std::string line;
  for (;;) {
    if (tty) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    const std::vector<int32_t> ids = text::chat_prompt(tmpl, bpe, messages);
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n + o.max_tokens > dec.capacity())
      throw Error("the conversation (" + std::to_string(n) + " tokens) and a reply of --max-tokens " +
                  std::to_string(o.max_tokens) + " pass the context of " + std::to_string(dec.capacity()) +
                  " tokens (--max-context)");
    const int64_t common = dec.reuse_prefix(ids.data(), n);
    const auto t0 = Clock::now();
    dec.forward(ids.data() + common, n - common, logits.data());
    const double prefill_ms = ms_since(t0);
    const auto t1 = Clock::now();
    const std::vector<int32_t> reply = stream_reply(dec, logits, &bpe, o, state);
    const double gen_ms = ms_since(t1);
    std::printf("\n");
    std::fflush(stdout);
    messages.push_back({{"role", "assistant"}, {"content", bpe.decode(reply, /*skip_special=*/true)}});
    std::fprintf(stderr,
                 "turn %zu: %lld prompt tokens (%lld from the cache) in %.0f ms; %zu tokens, %.1f tokens/s\n",
                 messages.size() / 2, static_cast<long long>(n), static_cast<long long>(common), prefill_ms,
                 reply.size(), reply.size() / std::max(gen_ms / 1000, 1e-9));
  }
}

// ---- perplexity ----------------------------------------------------------------------------------------

struct PerplexityOptions {
  std::string model, input, input_ids, json_out, mode = "sparse";
  int64_t ctx = 512;
  int threads = 1;
  WeightFlags weights;
};

void cmd_perplexity(const PerplexityOptions& o) {
  if (o.ctx < 2) throw Error("--ctx must be at least 2");
  if (o.input.empty() == o.input_ids.empty()) throw Error("give one of --input and --input-ids");
  std::vector<int32_t> ids;
  if (!o.input.empty()) {
    const std::vector<uint8_t> b = read_file(o.input);
    ids = text::ByteBpe::from_model(o.model).encode(
        std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  } else {
    ids = read_ids_file(o.input_ids);
  }
  const std::string input = o.input.empty() ? o.input_ids : o.input;
  if (static_cast<int64_t>(ids.size()) < o.ctx)
    throw Error(input + ": " + std::to_string(ids.size()) + " tokens, fewer than one --ctx window");
  DecoderOptions d;
  d.threads = o.threads;
  d.mode = engine::parse_mode(o.mode);
  o.weights.apply(d);
  d.max_context = o.ctx;
  // Windows through the compute-bound layout (fp32 activations), except with bf16 or int8 activations: then
  // the memory-bound layout alone, in chunks of 16 tokens, so that the windows compute as generation does
  // (unless --prefill-layout asks for the compute-bound one).
  d.prefill_layout = d.prefill_layout || (!d.bf16_activations && !d.int8_activations);
  Decoder dec = open_decoder(o.model, o.weights.load_options(o.mode, o.threads), d);
  const auto t0 = Clock::now();
  const engine::Perplexity p = engine::perplexity(dec, ids, o.ctx);
  const double ms = ms_since(t0), ppl = p.perplexity;
  const int64_t windows = p.windows, scored = p.scored;
  std::printf("perplexity %.4f over %lld tokens (%lld windows of %lld), %.1f tokens/s\n", ppl,
              static_cast<long long>(scored), static_cast<long long>(windows), static_cast<long long>(o.ctx),
              windows * o.ctx / (ms / 1000));
  if (!o.json_out.empty()) {
    const nlohmann::json j = {{"model", o.model},
                              {"input", input},
                              {"ctx", o.ctx},
                              {"windows", windows},
                              {"tokens_scored", scored},
                              {"perplexity", ppl},
                              {"mean_nll", p.mean_nll},
                              {"mode", o.mode},
                              {"weights", o.weights.name()},
                              {"bf16_activations", d.bf16_activations && bf16_activations_supported()},
                              {"int8_activations", d.int8_activations && int8_activations_supported()},
                              {"kv_cache", o.weights.kv}};
    write_file_atomic(o.json_out, j.dump(2) + "\n");
  }
}

// ---- logits (for the tests against transformers) -------------------------------------------------------

struct LogitsOptions {
  std::string model, ids, out, mode = "sparse";
  int64_t prefill = 0;  // > 0: that many tokens in one pass, then the rest one at a time
  int threads = 1;
  WeightFlags weights;
};

void cmd_logits(const LogitsOptions& o) {
  // One sequence per line; each starts from an empty cache.
  std::vector<std::vector<int32_t>> seqs;
  int64_t total = 0, longest = 0;
  {
    const std::vector<uint8_t> b = read_file(o.ids);
    std::istringstream in(std::string(b.begin(), b.end()));
    std::string line;
    while (std::getline(in, line)) {
      std::vector<int32_t> ids = parse_ids(line, o.ids);
      if (ids.empty()) continue;
      total += static_cast<int64_t>(ids.size());
      longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
      seqs.push_back(std::move(ids));
    }
  }
  if (seqs.empty()) throw Error(o.ids + ": no token ids");
  DecoderOptions d;
  d.threads = o.threads;
  d.mode = engine::parse_mode(o.mode);
  o.weights.apply(d);
  d.max_context = longest;
  Decoder dec = open_decoder(o.model, o.weights.load_options(o.mode, o.threads), d);
  const int64_t V = dec.config().vocab;
  std::vector<float> logits(static_cast<size_t>(total * V));
  float* at = logits.data();
  for (const std::vector<int32_t>& ids : seqs) {
    const int64_t n = static_cast<int64_t>(ids.size());
    dec.reset();
    if (o.prefill <= 0 || o.prefill >= n) {
      dec.forward(ids.data(), n, at, true);
    } else {
      dec.forward(ids.data(), o.prefill, at, true);
      for (int64_t j = o.prefill; j < n; ++j) dec.forward(&ids[j], 1, at + j * V);
    }
    at += n * V;
  }
  write_npy(o.out, Tensor::from_float(logits, {total, V}));
}

// ---- bench-decode --------------------------------------------------------------------------------------

struct BenchDecodeOptions {
  std::string model, json_out, python, gguf, kv = "f32";
  // sparse24's rows; bf16x, int8x: bf16 activations, int8q: int8 activations (skipped where they would not
  // take effect).
  std::vector<std::string> runs = {"dense", "fp32", "bf16", "int8", "bf16x", "int8x", "int8q"};
  std::string peers = "F32,F16,Q8_0,Q4_K_M";  // decode_llamacpp.py's --kinds
  int threads = 1;
  int64_t prompt = 128, generate = 128;
  bool no_peers = false, prefill_layout = false;
};

struct Run {
  std::string name;
  double prompt_tps = 0, gen_tps = 0;
  size_t weight_bytes = 0;
  double first_token_s = 0;  // setup (reading the file, pruning, packing) and the prompt's first pass
};

// Fixed prompt ids (no special tokens), the same for every runtime.
std::vector<int32_t> bench_prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint32_t s = 12345;
  for (int32_t& id : ids) {
    s = s * 1664525u + 1013904223u;
    id = static_cast<int32_t>(100 + (s >> 8) % static_cast<uint32_t>(std::max<int64_t>(vocab - 100, 1)));
  }
  return ids;
}

// `setup_ms`: what it took from the file to `dec` (the first token's time adds the prompt's first pass).
Run time_decoder(const std::string& name, Decoder dec, const std::vector<int32_t>& prompt, int64_t gen,
                 double setup_ms) {
  std::vector<float> logits(static_cast<size_t>(dec.config().vocab));
  Run r;
  r.name = name;
  r.weight_bytes = dec.weight_bytes();
  double best_prompt = 1e300, best_gen = 1e300;
  for (int rep = 0; rep < 2; ++rep) {  // the first pass warms caches and pages
    dec.reset();
    auto t0 = Clock::now();
    dec.forward(prompt.data(), static_cast<int64_t>(prompt.size()), logits.data());
    const double prompt_ms = ms_since(t0);
    if (rep == 0) r.first_token_s = (setup_ms + prompt_ms) / 1000;
    best_prompt = std::min(best_prompt, prompt_ms);
    t0 = Clock::now();
    for (int64_t i = 0; i < gen; ++i) {
      const int32_t next =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      dec.forward(&next, 1, logits.data());
    }
    best_gen = std::min(best_gen, ms_since(t0));
  }
  r.prompt_tps = static_cast<double>(prompt.size()) / (best_prompt / 1000);
  r.gen_tps = static_cast<double>(gen) / (best_gen / 1000);
  std::fprintf(
      stderr,
      "  %-22s prompt %8.1f tokens/s, generation %7.2f tokens/s, weights %.1f MB, first token %.2f s\n",
      name.c_str(), r.prompt_tps, r.gen_tps, r.weight_bytes / 1e6, r.first_token_s);
  return r;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Single-thread read bandwidth (GB/s): the best of three sums over 512 MiB, far beyond any cache here.
double read_bandwidth() {
  std::vector<float> a(size_t{128} << 20, 1.0f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    float acc[8] = {};
    for (size_t i = 0; i < a.size(); i += 8)
      for (int l = 0; l < 8; ++l) acc[l] += a[i + l];
    const double s = ms_since(t0) / 1000;
    if (acc[0] + acc[7] < 0) std::printf(" ");  // keeps the loop
    best = std::max(best, a.size() * sizeof(float) / s / 1e9);
  }
  return best;
}

void cmd_bench_decode(const BenchDecodeOptions& o) {
  if (o.threads < 1 || o.prompt < 1 || o.generate < 1) throw Error("bad --threads, --prompt or --generate");
  const std::set<std::string> rows(o.runs.begin(), o.runs.end());
  if (rows.empty()) throw Error("--runs: no runs");
  // Without the dense row the model is pruned as it is read, and with int8 (bf16) rows alone quantized
  // (rounded) too: never more than a layer of it in fp32 (an 8B model's 32 GB).
  engine::DecoderLoadOptions lo;
  lo.prune = !rows.count("dense");
  const auto only = [&](std::initializer_list<const char*> names) {
    size_t n = 0;
    for (const char* r : names) n += rows.count(r);
    return n == rows.size();
  };
  lo.int8 = only({"int8", "int8x", "int8q"});
  lo.bf16 = only({"bf16", "bf16x"});
  lo.threads = o.threads;
  DecoderOptions d;
  d.threads = o.threads;
  d.max_context = o.prompt + o.generate + 1;
  d.kv_half = o.kv == "f16";
  d.prefill_layout = o.prefill_layout;
  // A 2:4 row's weights and activations in d, or why it does not run on this CPU.
  const auto row_options = [&](const std::string& r) -> const char* {
    d.bf16_activations = r.back() == 'x';
    d.int8_activations = r.back() == 'q';
    d.bf16_weights = r.rfind("bf16", 0) == 0;
    d.int8_weights = r.rfind("int8", 0) == 0;
    return d.bf16_activations && !bf16_activations_supported()
               ? "bf16 activations do not run on this CPU (no AVX512_BF16, or an Intel core, where "
                 "fp32 activations are faster)"
           : d.int8_activations && !int8_activations_supported()
               ? "int8 activations do not run on this CPU (no AVX512_VNNI and AVX512_VBMI)"
               : nullptr;
  };
  // One 2:4 row alone: its Decoder reads the model itself (packing each layer as the next is read), which
  // its first token counts; several share one load, which each row's first token counts with its own
  // Decoder (packing) and, for the 2:4 rows after the dense one, the pruning.
  const bool one = rows.size() == 1 && !rows.count("dense") && row_options(*rows.begin()) == nullptr;
  DecoderModel m;
  double load_ms = 0;
  if (!one) {
    const auto t_load = Clock::now();
    m = load(o.model, lo);
    load_ms = ms_since(t_load);
  }
  const bool was_pruned = !one && model_is_pruned(m);
  std::vector<int32_t> prompt;  // (one row's: once its Decoder has the vocabulary)
  if (!one) prompt = bench_prompt(o.prompt, m.config.vocab);
  const double bw = read_bandwidth();
  std::fprintf(stderr, "single-thread read bandwidth %.1f GB/s (512 MiB)\n", bw);
  std::vector<Run> runs;
  std::fprintf(
      stderr,
      "bench-decode: %lld-token prompt, %lld generated, batch 1, %d thread(s), %s kernels, %s KV cache%s, "
      "load %s\n",
      static_cast<long long>(o.prompt), static_cast<long long>(o.generate), o.threads, isa_name(active_isa()),
      o.kv.c_str(), o.prefill_layout ? ", 2:4 prompts on the compute-bound layout" : "",
      load_average().c_str());
  std::map<std::string, double> tps;  // decode tokens/s by row
  if (rows.count("dense")) {
    d.mode = engine::Mode::kDense;
    auto t0 = Clock::now();
    Decoder dense(m, d);
    runs.push_back(
        time_decoder("sparse24 dense fp32", std::move(dense), prompt, o.generate, load_ms + ms_since(t0)));
    tps["dense"] = runs.back().gen_tps;
    t0 = Clock::now();
    if (!was_pruned) m.prune_magnitude(o.threads);
    load_ms += ms_since(t0);
  }
  d.mode = engine::Mode::kSparse;
  auto t_f32 = Clock::now();
  // A bf16 or int8 checkpoint's 2:4 values would run as stored (bf16 or int8 weights): fp32 ones for this row
  // (int8 ones dequantized), which the later rows round again.
  const auto to_fp32 = [](engine::DecoderLayer& L) {
    for (engine::Gemm* g : {&L.qkv, &L.o, &L.gate_up, &L.down})
      if (g->pruned && g->sparse.dtype != DType::kF32) g->sparse = to_f32(std::move(g->sparse));
  };
  if (rows.count("fp32")) {
    if (one)
      lo.on_layer = [&](DecoderModel&, engine::DecoderLayer& L, int64_t) { to_fp32(L); };
    else
      for (engine::DecoderLayer& L : m.layers) to_fp32(L);
  }
  load_ms += ms_since(t_f32);
  for (const char* row : {"fp32", "bf16", "int8", "bf16x", "int8x", "int8q"}) {
    if (!rows.count(row)) continue;
    const std::string r = row;
    if (const char* skip = row_options(r)) {
      std::fprintf(stderr, "bench-decode: row %s skipped: %s\n", row, skip);
      continue;
    }
    const auto t0 = Clock::now();
    Decoder dec = one ? open_decoder(o.model, lo, d) : Decoder(m, d);
    const double setup_ms = load_ms + ms_since(t0);
    if (prompt.empty()) prompt = bench_prompt(o.prompt, dec.config().vocab);
    runs.push_back(time_decoder("sparse24 2:4 " + r.substr(0, 4) +
                                    (d.bf16_activations   ? " x bf16"
                                     : d.int8_activations ? " x int8"
                                                          : ""),
                                std::move(dec), prompt, o.generate, setup_ms));
    tps[row] = runs.back().gen_tps;
  }

  nlohmann::json peers = nlohmann::json::object();
  std::string peer_note;
  if (!o.no_peers) {
    std::string gguf = o.gguf;
    if (gguf.empty() && is_gguf_file(o.model)) gguf = o.model;
    if (gguf.empty()) {  // models/X-hf beside models/X/model.gguf (scripts/setup.sh)
      std::string base = fs::path(o.model).lexically_normal().string();
      while (!base.empty() && base.back() == '/') base.pop_back();
      if (base.size() > 3 && base.compare(base.size() - 3, 3, "-hf") == 0)
        gguf = base.substr(0, base.size() - 3) + "/model.gguf";
    }
    if (gguf.empty() || !fs::exists(gguf)) {
      peer_note = "llama.cpp skipped: no GGUF source (--gguf)";
      std::fprintf(stderr, "%s\n", peer_note.c_str());
    } else {
      const fs::path tmp =
          fs::temp_directory_path() / ("sparse24_bench_decode_" + std::to_string(::getpid()));
      fs::create_directories(tmp);
      std::string ids;
      for (int32_t id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
      write_file_atomic((tmp / "prompt.txt").string(), ids + "\n");
      const std::string python = o.python.empty() ? default_python() : o.python;
      const std::string cmd = "'" + python + "' '" + source_dir() +
                              "/bench/peers/decode_llamacpp.py' --gguf '" + gguf + "' --prompt-ids '" +
                              (tmp / "prompt.txt").string() + "' --generate " + std::to_string(o.generate) +
                              " --threads " + std::to_string(o.threads) + " --kinds '" + o.peers +
                              "' --json '" + (tmp / "peers.json").string() + "'";
      std::fprintf(stderr, "peers: %s\n", cmd.c_str());
      std::fflush(stderr);
      const int rc = std::system(cmd.c_str());
      if (rc != 0) {
        peer_note = "llama.cpp failed (exit " + std::to_string(rc) + ")";
        std::fprintf(stderr, "%s\n", peer_note.c_str());
      } else {
        const std::vector<uint8_t> pj = read_file((tmp / "peers.json").string());
        peers = nlohmann::json::parse(pj.begin(), pj.end());
      }
      fs::remove_all(tmp);
    }
  }

  nlohmann::json out = {{"model", o.model},
                        {"threads", o.threads},
                        {"prompt_tokens", o.prompt},
                        {"generated_tokens", o.generate},
                        {"isa", isa_name(active_isa())},
                        {"load_average", load_average()},
                        // (unknown when the model was pruned as it was read)
                        {"model_was_pruned", lo.prune ? nlohmann::json(nullptr) : nlohmann::json(was_pruned)},
                        {"pruned_as_read", lo.prune},
                        {"kv_cache", o.kv},
                        {"prefill_layout", o.prefill_layout},
                        {"read_bandwidth_gb_s", bw}};
  nlohmann::json rt = nlohmann::json::object();
  std::printf("%-24s %12s %14s %12s %15s\n", "runtime", "prompt tok/s", "decode tok/s", "weights MB",
              "first token s");
  for (const Run& r : runs) {
    rt[r.name] = {{"tokens_per_s", r.gen_tps},
                  {"prompt_tokens_per_s", r.prompt_tps},
                  {"weight_bytes", r.weight_bytes},
                  {"first_token_s", r.first_token_s}};
    std::printf("%-24s %12.1f %14.2f %12.1f %15.2f\n", r.name.c_str(), r.prompt_tps, r.gen_tps,
                r.weight_bytes / 1e6, r.first_token_s);
  }
  for (auto it = peers.begin(); it != peers.end(); ++it) {
    rt[it.key()] = it.value();
    const std::string note = it.value().value("note", std::string());
    std::printf("%-24s %12.1f %14.2f %12.1f %15.2f%s\n", it.key().c_str(),
                it.value().value("prompt_tokens_per_s", 0.0), it.value().value("tokens_per_s", 0.0),
                it.value().value("weight_bytes", 0.0) / 1e6, it.value().value("first_token_s", 0.0),
                note.empty() ? "" : ("  (" + note + ")").c_str());
  }
  out["runtimes"] = rt;
  if (!peer_note.empty()) out["note"] = peer_note;
  // Each 2:4 row against the dense row and the llama.cpp file of the closest weight type.
  std::string ratios;
  const auto ratio = [&](const std::string& row, const std::string& label, double base) {
    if (!tps.count(row) || base <= 0) return;
    char x[32];
    std::snprintf(x, sizeof x, "%.2fx", tps[row] / base);
    ratios += (ratios.empty() ? "" : "; ") + label + ": " + x;
  };
  ratio("fp32", "2:4 fp32 / dense fp32", tps.count("dense") ? tps["dense"] : 0);
  for (const auto& [row, kind] : {std::pair{"fp32", "F32"},
                                  {"bf16", "F16"},
                                  {"int8", "Q8_0"},
                                  {"int8", "Q4_K_M"},
                                  {"bf16x", "F16"},
                                  {"int8x", "Q8_0"},
                                  {"int8x", "Q4_K_M"},
                                  {"int8q", "Q8_0"},
                                  {"int8q", "Q4_K_M"}})
    if (peers.contains(std::string("llama.cpp ") + kind))
      ratio(row, std::string("2:4 ") + row + " / llama.cpp " + kind,
            peers[std::string("llama.cpp ") + kind]["tokens_per_s"].get<double>());
  std::printf("%s%s(load %s)\n", ratios.c_str(), ratios.empty() ? "" : " ", load_average().c_str());
  if (!o.json_out.empty()) write_file_atomic(o.json_out, out.dump(2) + "\n");
}

}  // namespace

void register_decode_commands(CLI::App& app) {
  {
    auto o = std::make_shared<GenerateOptions>();
    CLI::App* cmd = app.add_subcommand(
        "generate", "Generate text with a decoder LM (a Hugging Face llama directory or a GGUF file)");
    cmd->add_option("model", o->model, "model directory or GGUF file")->required();
    cmd->add_option("--prompt", o->prompt, "prompt text");
    cmd->add_option("--prompt-ids", o->prompt_ids, "prompt token ids, comma-separated");
    cmd->add_flag("--chat", o->chat,
                  "the prompt is a user's message in the model's chat template; prints the reply");
    cmd->add_option("--system", o->system, "a system message before it (implies --chat)");
    cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate")->capture_default_str();
    cmd->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
    cmd->add_option("--top-p", o->top_p, "nucleus sampling mass")->capture_default_str();
    cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
    cmd->add_option("--threads", o->threads)->capture_default_str();
    cmd->add_option("--mode", o->mode, "dense or sparse (2:4 weights through the 2:4 kernel)")
        ->capture_default_str();
    o->weights.add_to(cmd);
    cmd->callback([o] { cmd_generate(*o); });
  }
  {
    auto o = std::make_shared<GenerateOptions>();
    o->max_tokens = 256;
    CLI::App* cmd = app.add_subcommand(
        "chat",
        "Chat with a decoder LM in its chat template: a user message per line of stdin, the reply on stdout");
    cmd->add_option("model", o->model, "model directory or GGUF file")->required();
    cmd->add_option("--system", o->system, "a system message first");
    cmd->add_option("--max-tokens", o->max_tokens, "the longest reply, in tokens")->capture_default_str();
    cmd->add_option("--max-context", o->max_context, "the conversation's tokens (the KV cache)")
        ->capture_default_str();
    cmd->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
    cmd->add_option("--top-p", o->top_p, "nucleus sampling mass")->capture_default_str();
    cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
    cmd->add_option("--threads", o->threads)->capture_default_str();
    cmd->add_option("--mode", o->mode, "dense or sparse")->capture_default_str();
    o->weights.add_to(cmd);
    cmd->callback([o] { cmd_chat(*o); });
  }
  {
    auto o = std::make_shared<PerplexityOptions>();
    CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a decoder LM on a text");
    cmd->add_option("model", o->model, "model directory or GGUF file")->required();
    cmd->add_option("--input", o->input, "text file (tokenized with MODEL/tokenizer.json)");
    cmd->add_option("--input-ids", o->input_ids, "or: token ids of the text (white-space separated)");
    cmd->add_option("--ctx", o->ctx, "tokens per window")->capture_default_str();
    cmd->add_option("--json", o->json_out, "write the result as JSON");
    cmd->add_option("--threads", o->threads)->capture_default_str();
    cmd->add_option("--mode", o->mode, "dense or sparse")->capture_default_str();
    o->weights.add_to(cmd);
    cmd->callback([o] { cmd_perplexity(*o); });
  }
  {
    auto o = std::make_shared<LogitsOptions>();
    CLI::App* cmd =
        app.add_subcommand("logits", "A decoder LM's logits for token ids, as .npy [tokens, vocab]");
    cmd->add_option("model", o->model, "model directory or GGUF file")->required();
    cmd->add_option("--ids", o->ids, "file of token ids, one sequence per line")->required();
    cmd->add_option("-o,--output", o->out, ".npy file")->required();
    cmd->add_option("--prefill", o->prefill,
                    "prefill this many tokens, then decode one at a time (0: all at once)");
    cmd->add_option("--threads", o->threads)->capture_default_str();
    cmd->add_option("--mode", o->mode, "dense or sparse")->capture_default_str();
    o->weights.add_to(cmd);
    cmd->callback([o] { cmd_logits(*o); });
  }
  {
    auto o = std::make_shared<BenchDecodeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "bench-decode",
        "Batch-1 decoding speed: sparse24 dense fp32, 2:4 fp32, 2:4 bf16, 2:4 int8 and llama.cpp");
    cmd->add_option("model", o->model,
                    "model directory or GGUF file (dense: pruned 2:4 by magnitude in memory)")
        ->required();
    cmd->add_option("--threads", o->threads)->capture_default_str();
    cmd->add_option("--json", o->json_out, "write the results as JSON");
    cmd->add_option("--prompt", o->prompt, "prompt tokens")->capture_default_str();
    cmd->add_option("--generate", o->generate, "generated tokens")->capture_default_str();
    cmd->add_option("--gguf", o->gguf,
                    "GGUF file llama.cpp's F32/F16/Q8_0/Q4_K_M files are made from (default: "
                    "MODEL without -hf, /model.gguf)");
    cmd->add_option("--python", o->python, "the Python that runs llama.cpp (default: the project's .venv)");
    cmd->add_option("--kv", o->kv, "sparse24's KV cache type: f32, or f16 (llama.cpp's default)")
        ->check(CLI::IsMember({"f32", "f16"}))
        ->capture_default_str();
    cmd->add_flag("--no-peers", o->no_peers, "sparse24 only");
    cmd->add_flag("--prefill-layout", o->prefill_layout,
                  "2:4 rows also pack the compute-bound layout, which runs the prompt (twice the weights' "
                  "memory; the Decoder's prefill_layout)");
    cmd->add_option(
           "--runs", o->runs,
           "sparse24's rows: dense, fp32, bf16, int8 (2:4 fp32/bf16/int8), bf16x, int8x (2:4 bf16/int8 "
           "with bf16 activations, where they take effect: AMD with AVX512_BF16), int8q (2:4 int8 with int8 "
           "activations: AVX512_VNNI and AVX512_VBMI); without dense the model is pruned as it is read, and "
           "with one int8 row alone quantized too (an 8B model in 24 GB)")
        ->delimiter(',')
        ->check(CLI::IsMember({"dense", "fp32", "bf16", "int8", "bf16x", "int8x", "int8q"}))
        ->capture_default_str();
    cmd->add_option("--peers", o->peers,
                    "llama.cpp's files: F32, F16, Q8_0 (made from the GGUF source), any llama-quantize type "
                    "(Q4_K_M, ...; made from the F32 file), or 'file': the source file itself")
        ->capture_default_str();
    cmd->callback([o] { cmd_bench_decode(*o); });
  }
}

}  // namespace sparse24::cli
