// TextEncoder: the tokenizer, the encoder model and the engine together (engine.h).
#include <algorithm>
#include <cstdio>

#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "text/wordpiece.h"

namespace sparse24::engine {

struct TextEncoder::Impl {
  TextModelInfo info;
  text::WordPiece tokenizer;
  std::optional<Plan> plan;
  std::optional<Engine> engine;
  int64_t batch = 1, dim = 0;
};

TextEncoder::TextEncoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextEncoder::TextEncoder(TextEncoder&&) noexcept = default;
TextEncoder& TextEncoder::operator=(TextEncoder&&) noexcept = default;
TextEncoder::~TextEncoder() = default;

TextEncoder TextEncoder::from_model(Model m, const TextModelInfo& info, const std::string& tokenizer_dir,
                                    const std::string& plan_dir, const Options& o) {
  if (!m.token_input) throw Error("model '" + m.name + "' is not a text encoder");
  if (o.batch < 1 || o.batch > 4096) throw Error("batch must be 1 to 4096 texts");
  auto s = std::make_unique<Impl>(Impl{info, text::WordPiece::from_dir(tokenizer_dir), {}, {}, o.batch, 0});
  if (s->tokenizer.vocab_size() > m.vocab)
    throw Error(tokenizer_dir + ": the tokenizer's vocabulary (" + std::to_string(s->tokenizer.vocab_size()) +
                ") is larger than the model's (" + std::to_string(m.vocab) + ")");
  s->info.max_tokens = std::min(s->info.max_tokens, m.max_sequence);
  const int64_t capacity = o.batch * s->info.max_tokens;
  if (o.mode == Mode::kPlan) {
    // Timed at up to 4 sequences of up to 128 tokens: the choices do not change past a few hundred tokens,
    // and the whole-model check runs the model several times.
    const int64_t n = std::min<int64_t>(o.batch, 4) * std::min<int64_t>(128, s->info.max_tokens);
    bool built = false;
    if (plan_dir.empty()) {
      s->plan = build_plan(m, n, o.threads);
      built = true;
    } else {
      s->plan = load_or_build_plan(m, plan_dir, n, o.threads, &built);
    }
    if (o.verbose)
      std::fprintf(stderr, "%s plan at %lld tokens: whole model %s\n", built ? "built" : "reused",
                   static_cast<long long>(n), s->plan->whole.c_str());
  }
  s->engine.emplace(std::move(m), capacity, o.threads, o.mode, s->plan ? &*s->plan : nullptr);
  s->dim = s->engine->output_rows();
  return TextEncoder(std::move(s));
}

TextEncoder TextEncoder::load(const std::string& dir, const Options& o) {
  TextModelInfo info;
  Model m = load_hf_encoder(dir, &info);
  set_sparse_precision(m, o.sparse_values, o.sparse_activations);
  return from_model(std::move(m), info, dir, dir, o);
}

std::vector<int32_t> TextEncoder::tokenize(const std::string& text) const {
  return impl_->tokenizer.encode(text, impl_->info.max_tokens).ids;
}

std::vector<float> TextEncoder::embed_ids(const std::vector<std::vector<int32_t>>& ids) {
  Impl& s = *impl_;
  std::vector<float> out(ids.size() * static_cast<size_t>(s.dim));
  for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(s.batch)) {
    TokenBatch tb;
    const size_t end = std::min(ids.size(), i + static_cast<size_t>(s.batch));
    for (size_t j = i; j < end; ++j) tb.add(ids[j]);
    s.engine->run_tokens(tb, out.data() + i * s.dim);
  }
  return out;
}

std::vector<float> TextEncoder::embed(const std::vector<std::string>& texts) {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(texts.size());
  for (const std::string& t : texts) ids.push_back(tokenize(t));
  return embed_ids(ids);
}

int64_t TextEncoder::dim() const { return impl_->dim; }
const TextModelInfo& TextEncoder::info() const { return impl_->info; }
Engine& TextEncoder::engine() { return *impl_->engine; }
const Plan* TextEncoder::plan() const { return impl_->plan ? &*impl_->plan : nullptr; }

}  // namespace sparse24::engine
