// sparse24.Decoder: decoder language models (Llama family; a Hugging Face directory or a GGUF file) at
// batch 1 from Python, over engine::Decoder and the model's byte-level BPE: logits for a sequence kept in
// a KV cache, greedy or sampled generation, perplexity, the model's chat template.
#include "sparse24/decoder.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common.h"
#include "sparse24/error.h"
#include "text/bpe.h"
#include "text/jinja.h"

namespace sparse24::py {
namespace {

// Chat messages: one user message as a str, or a list of {"role": ..., "content": ...} dicts (str values,
// kept in the dicts' order).
using Messages = std::variant<std::string, nb::list>;

nlohmann::ordered_json messages_json(const Messages& m) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (const std::string* s = std::get_if<std::string>(&m)) {
    out.push_back({{"role", "user"}, {"content", *s}});
    return out;
  }
  for (nb::handle item : std::get<nb::list>(m)) {
    if (!nb::isinstance<nb::dict>(item)) throw Error("chat messages must be dicts");
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (auto [k, v] : nb::borrow<nb::dict>(item)) {
      if (!nb::isinstance<nb::str>(k) || !nb::isinstance<nb::str>(v))
        throw Error("chat message keys and values must be str");
      o[nb::cast<std::string>(k)] = nb::cast<std::string>(v);
    }
    out.push_back(std::move(o));
  }
  return out;
}

using namespace sparse24::engine;

using TextOrIds = std::variant<std::string, std::vector<int32_t>>;

class PyDecoder {
 public:
  static PyDecoder load(const std::string& model, const std::string& weights, const std::string& mode,
                        int threads, int64_t max_context, bool prune, bool prefill_layout,
                        const std::string& kv, bool bf16_activations, bool int8_activations) {
    if (threads < 1 || threads > 1024)
      throw Error("threads " + std::to_string(threads) + ": expected 1 to 1024");
    if (max_context < 1) throw Error("max_context " + std::to_string(max_context) + ": expected at least 1");
    DecoderOptions o;
    o.threads = threads;
    o.mode = parse_mode(mode);
    o.prefill_layout = prefill_layout;
    o.bf16_activations = bf16_activations;
    o.int8_activations = int8_activations;
    if (bf16_activations && int8_activations)
      throw Error("bf16_activations and int8_activations exclude each other");
    const SparseValues values = parse_sparse_values(weights);  // the encoders' names (engine.h)
    o.bf16_weights = values == SparseValues::kBf16;
    o.int8_weights = values == SparseValues::kInt8;
    if (kv != "f32" && kv != "f16") throw Error("kv '" + kv + "': expected f32 or f16");
    o.kv_half = kv == "f16";
    PyDecoder d;
    d.threads_ = threads;
    nb::gil_scoped_release unlocked;
    set_threads(threads);
    d.bpe_ = std::make_unique<text::ByteBpe>(text::ByteBpe::from_model(model));
    try {
      d.template_ = text::chat_template_of(model);
    } catch (const Error& e) {  // a model without one loads; chat() then says why
      d.template_error_ = e.what();
    }
    // Pruned (and with int8 or bf16 weights on the 2:4 kernels, narrowed) layer by layer as it is read.
    DecoderLoadOptions lo;
    lo.prune = prune;
    lo.int8 = o.int8_weights && o.mode != Mode::kDense;
    lo.bf16 = o.bf16_weights && o.mode != Mode::kDense;
    lo.threads = threads;
    o.max_context = max_context;  // (at most the model's max_positions)
    // The weights in memory once, each layer's Linears packed as the next is read.
    d.dec_ = std::make_unique<Decoder>(model, lo, o);
    d.vocab_ = d.dec_->config().vocab;
    return d;
  }

  std::vector<int32_t> tokenize(const std::string& text) const { return bpe_->encode(text); }
  std::string detokenize(const std::vector<int32_t>& ids, bool skip_special) const {
    return bpe_->decode(ids, skip_special);
  }

  // Appends ids to the sequence: the last token's logits [vocab], or with all every new token's [n, vocab].
  nb::object forward(const std::vector<int32_t>& ids, bool all) {
    if (ids.empty()) throw Error("forward: no token ids");
    const size_t n = ids.size(), v = static_cast<size_t>(vocab_);
    std::vector<float> out(all ? n * v : v);
    {
      nb::gil_scoped_release unlocked;
      const std::lock_guard<std::mutex> lock(*busy_);
      set_threads(threads_);
      streaming_ = false;
      dec_->forward(ids.data(), static_cast<int64_t>(n), out.data(), all);
    }
    return all ? float_array(std::move(out), {n, v}) : float_array(std::move(out), {v});
  }

  // The prompt (text or ids) continued by up to max_tokens tokens from a fresh sequence, stopping at the
  // model's end-of-sequence token: the new text, or the new ids when the prompt was ids.
  nb::object generate(const TextOrIds& prompt, int64_t max_tokens, float temperature, float top_p,
                      uint64_t seed) {
    const std::vector<int32_t> out = sample(ids_of(prompt), false, max_tokens, temperature, top_p, seed);
    if (std::holds_alternative<std::string>(prompt))
      return nb::cast(bpe_->decode(out, /*skip_special=*/true));
    return nb::cast(out);
  }

  // The model's chat template applied to messages (the text, or its ids without added specials).
  nb::object apply_chat_template(const Messages& messages, bool add_generation_prompt, bool tokenize) const {
    if (template_.empty()) throw Error(template_error_);
    const nlohmann::ordered_json m = messages_json(messages);
    if (tokenize) return nb::cast(text::chat_prompt(template_, *bpe_, m, add_generation_prompt));
    return nb::cast(text::chat_text(template_, *bpe_, m, add_generation_prompt));
  }

  // The assistant's reply to messages, as text: the chat template's prompt fed after the longest prefix of
  // it the KV cache already holds (a conversation's earlier turns, when the last call was its chat).
  std::string chat(const Messages& messages, int64_t max_tokens, float temperature, float top_p,
                   uint64_t seed) {
    const std::vector<int32_t> ids =
        nb::cast<std::vector<int32_t>>(apply_chat_template(messages, true, true));
    return bpe_->decode(sample(ids, true, max_tokens, temperature, top_p, seed), /*skip_special=*/true);
  }

  // Perplexity of the text (or ids) over windows of ctx tokens (engine::perplexity), from a fresh sequence.
  nb::dict perplexity(const TextOrIds& input, int64_t ctx) {
    const std::vector<int32_t> ids = ids_of(input);
    Perplexity p;
    {
      nb::gil_scoped_release unlocked;
      const std::lock_guard<std::mutex> lock(*busy_);
      set_threads(threads_);
      dec_->reset();
      streaming_ = false;
      p = engine::perplexity(*dec_, ids, ctx);
      dec_->reset();
    }
    nb::dict d;
    d["perplexity"] = p.perplexity;
    d["mean_nll"] = p.mean_nll;
    d["windows"] = p.windows;
    d["scored"] = p.scored;
    return d;
  }

  void reset() {
    const std::lock_guard<std::mutex> lock(*busy_);
    dec_->reset();
    streaming_ = false;
  }
  const Decoder& decoder() const { return *dec_; }
  const text::ByteBpe& bpe() const { return *bpe_; }

 private:
  static void check_sampling(int64_t max_tokens, float temperature, float top_p) {
    if (max_tokens < 0) throw Error("max_tokens " + std::to_string(max_tokens) + ": expected >= 0");
    if (!(temperature >= 0)) throw Error("temperature must be >= 0");
    if (!(top_p > 0 && top_p <= 1)) throw Error("top_p must be in (0, 1]");
  }

  // Feeds ids after the longest prefix of them the cache holds (reuse) or from a fresh sequence; logits_
  // then holds the last position's. With busy_ held.
  void prefill(const std::vector<int32_t>& ids, bool reuse) {
    if (ids.empty()) throw Error("generate: an empty prompt");
    streaming_ = false;
    set_threads(threads_);
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t common = reuse ? dec_->reuse_prefix(ids.data(), n) : 0;
    if (!reuse) dec_->reset();
    logits_.resize(static_cast<size_t>(vocab_));
    dec_->forward(ids.data() + common, n - common, logits_.data());
  }

  // A token sampled from logits_, or -1 for end-of-sequence; fed back (logits_ then the next position's)
  // when `feed` and the cache has room, which the return's second says. With busy_ held.
  std::pair<int32_t, bool> next_token(float temperature, float top_p, uint64_t& state, bool feed) {
    int32_t next = sample_token(logits_.data(), vocab_, temperature, top_p, state);
    if (bpe_->ends_reply(next)) return {-1, false};
    if (!feed || dec_->position() >= dec_->capacity()) return {next, false};
    dec_->forward(&next, 1, logits_.data());
    return {next, true};
  }

  // ids fed (prefill), then up to max_tokens tokens sampled, stopping at end-of-sequence or a full cache.
  std::vector<int32_t> sample(const std::vector<int32_t>& ids, bool reuse, int64_t max_tokens,
                              float temperature, float top_p, uint64_t seed) {
    check_sampling(max_tokens, temperature, top_p);
    std::vector<int32_t> out;
    nb::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(*busy_);
    prefill(ids, reuse);
    uint64_t state = seed;
    for (int64_t i = 0; i < max_tokens; ++i) {
      const auto [next, fed] = next_token(temperature, top_p, state, i + 1 < max_tokens);
      if (next < 0) break;
      out.push_back(next);
      if (!fed) break;
    }
    return out;
  }

 public:
  // Streaming (stream() in sparse24/__init__.py): begin() feeds the prompt, each step() samples one token
  // and feeds it back; -1 ends the stream (end-of-sequence, or a full cache). Any other call ends it too.
  void begin(const std::vector<int32_t>& ids, bool reuse, float temperature, float top_p, uint64_t seed) {
    check_sampling(0, temperature, top_p);
    nb::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(*busy_);
    prefill(ids, reuse);
    stream_temperature_ = temperature;
    stream_top_p_ = top_p;
    stream_state_ = seed;
    streaming_ = true;
  }
  int32_t step() {
    nb::gil_scoped_release unlocked;
    const std::lock_guard<std::mutex> lock(*busy_);
    if (!streaming_) return -1;
    const auto [next, fed] = next_token(stream_temperature_, stream_top_p_, stream_state_, true);
    streaming_ = fed;
    return next;
  }

 private:
  std::vector<int32_t> ids_of(const TextOrIds& t) const {
    if (const std::string* s = std::get_if<std::string>(&t)) return bpe_->encode(*s);
    return std::get<std::vector<int32_t>>(t);
  }

  // The decoder keeps the sequence between calls: one call at a time (the GIL is released inside).
  std::unique_ptr<std::mutex> busy_ = std::make_unique<std::mutex>();
  std::vector<float> logits_;  // the last fed position's
  bool streaming_ = false;     // begin() called and the stream not ended since
  float stream_temperature_ = 0, stream_top_p_ = 1;
  uint64_t stream_state_ = 0;
  int threads_ = 1;
  int64_t vocab_ = 0;
  std::unique_ptr<text::ByteBpe> bpe_;
  std::string template_, template_error_;  // the chat template, or why the model has none
  std::unique_ptr<Decoder> dec_;
};

}  // namespace

void register_decoder(nb::module_& m) {
  nb::class_<PyDecoder>(m, "Decoder", "A decoder language model at batch 1 (Decoder.load(model)).")
      .def_static(
          "load", &PyDecoder::load, nb::arg("model"), nb::arg("weights") = "fp32", nb::arg("mode") = "sparse",
          nb::arg("threads") = 1, nb::arg("max_context") = 2048, nb::arg("prune") = false,
          nb::arg("prefill_layout") = false, nb::arg("kv") = "f32", nb::arg("bf16_activations") = false,
          nb::arg("int8_activations") = false,
          "Loads a Hugging Face decoder directory or a GGUF file. weights: fp32, bf16 or int8 (the 2:4 "
          "Linears' values and the output head's; a checkpoint stored in bfloat16 runs its 2:4 values, "
          "embeddings and head as stored, bf16, unless int8 is asked for: weight_bytes tells). mode: sparse "
          "(2:4 Linears on "
          "the 2:4 kernels) or dense. prune: magnitude-prune every Linear 2:4 as its layer is read (with "
          "weights='int8' never more than a layer in fp32: Llama 3.1 8B's shape peaks at 11.4 GB). "
          "max_context: the KV cache's tokens (at most the model's). prefill_layout: also pack the 2:4 "
          "Linears for many tokens at once (faster long prompts and perplexity, more memory). kv: the KV "
          "cache's type, f32 or f16 (IEEE half, llama.cpp's default: faster at long contexts). "
          "bf16_activations: with bf16 or int8 weights, the 2:4 Linears round their inputs to bfloat16 where "
          "sparse24.bf16_activations_supported() (AVX512_BF16 on AMD: faster). int8_activations: with int8 "
          "weights, the 2:4 Linears quantise their inputs to int8 per 64 positions and multiply in integers "
          "where sparse24.int8_activations_supported() (AVX512_VNNI and AVX512_VBMI: faster; as llama.cpp's "
          "Q8_0).")
      .def("tokenize", &PyDecoder::tokenize, nb::arg("text"), "Token ids, with the model's special tokens.")
      .def("detokenize", &PyDecoder::detokenize, nb::arg("ids"), nb::arg("skip_special") = true)
      .def("forward", &PyDecoder::forward, nb::arg("ids"), nb::arg("all") = false,
           "Appends ids to the sequence in the KV cache: the last token's logits float32 [vocab], or with "
           "all=True every new token's [len(ids), vocab].")
      .def("generate", &PyDecoder::generate, nb::arg("prompt"), nb::arg("max_tokens") = 64,
           nb::arg("temperature") = 0.0f, nb::arg("top_p") = 1.0f, nb::arg("seed") = 1,
           "From a fresh sequence: the prompt (str or token ids) continued by up to max_tokens tokens "
           "(greedy at temperature 0), stopping at end-of-sequence or a full KV cache; the new text, or the "
           "new ids for ids.")
      .def("perplexity", &PyDecoder::perplexity, nb::arg("text"), nb::arg("ctx") = 512,
           "Perplexity of a text (or ids) over non-overlapping windows of ctx tokens: a dict with "
           "perplexity, mean_nll, windows, scored.")
      .def("apply_chat_template", &PyDecoder::apply_chat_template, nb::arg("messages"),
           nb::arg("add_generation_prompt") = true, nb::arg("tokenize") = false,
           "The model's chat template applied to messages (a str: one user message; or a list of "
           "{'role', 'content'} dicts), as transformers' apply_chat_template: the text, or with "
           "tokenize=True its token ids.")
      .def("chat", &PyDecoder::chat, nb::arg("messages"), nb::arg("max_tokens") = 256,
           nb::arg("temperature") = 0.0f, nb::arg("top_p") = 1.0f, nb::arg("seed") = 1,
           "The assistant's reply to messages (as apply_chat_template takes them). The KV cache keeps what "
           "the last call left: a conversation's next turn feeds only what follows its earlier turns.")
      .def("_begin", &PyDecoder::begin, nb::arg("ids"), nb::arg("reuse"), nb::arg("temperature"),
           nb::arg("top_p"), nb::arg("seed"))
      .def("_step", &PyDecoder::step)
      .def("reset", &PyDecoder::reset, "Forgets the sequence.")
      .def_prop_ro("position", [](const PyDecoder& d) { return d.decoder().position(); })
      .def_prop_ro("capacity", [](const PyDecoder& d) { return d.decoder().capacity(); })
      .def_prop_ro("vocab", [](const PyDecoder& d) { return d.decoder().config().vocab; })
      .def_prop_ro("eos_id", [](const PyDecoder& d) { return d.bpe().eos_id(); })
      .def_prop_ro("sparse_linears", [](const PyDecoder& d) { return d.decoder().sparse_linears(); })
      .def_prop_ro("weight_bytes", [](const PyDecoder& d) { return d.decoder().weight_bytes(); })
      .def_prop_ro("stored_bytes", [](const PyDecoder& d) { return d.decoder().stored_bytes(); })
      .def_prop_ro("cache_bytes", [](const PyDecoder& d) { return d.decoder().cache_bytes(); });
  m.def(
      "render_chat_template",
      [](const std::string& source, const Messages& messages, bool add_generation_prompt,
         const std::string& bos, const std::string& eos) {
        return text::apply_chat_template(source, messages_json(messages), add_generation_prompt, bos, eos);
      },
      nb::arg("template"), nb::arg("messages"), nb::arg("add_generation_prompt") = true,
      nb::arg("bos_token") = "", nb::arg("eos_token") = "",
      "A chat template (Jinja2, the subset chat templates use: src/text/jinja.h) applied to messages, as "
      "transformers' apply_chat_template renders it.");
}

}  // namespace sparse24::py
