// Reading and writing the BPE tokenizer (bpe.h): tokenizer.json (with tokenizer_config.json and the ids that
// end a reply), GGUF tokenizer.ggml.* metadata, and tokenizer.json written back.
#include <filesystem>

#include "bpe_impl.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "tokenizer_json.h"

namespace sparse24::text {

using namespace bpe_detail;  // NOLINT: the tokenizer's own helpers (bpe_impl.h)
using tokenizer_json::get_bool;
using tokenizer_json::member;
using tokenizer_json::type_of;

namespace {

int32_t to_id(const json& v, const std::string& what, const std::string& where, size_t limit) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) >= limit)
    fail(what, where + " must be an id in [0, " + std::to_string(limit) + ")");
  return static_cast<int32_t>(v.get<int64_t>());
}

// ByteLevel settings: use_regex must be true (the regex is the pre-tokenizer).
void byte_level(const json& p, ByteBpe::Impl& m, const std::string& where) {
  m.add_prefix_space = get_bool(p, "add_prefix_space", true, m.what, where);
  if (!get_bool(p, "use_regex", true, m.what, where))
    fail(m.what, where + ".use_regex false is not supported");
}

// Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)]: Llama 3's, Qwen2's or GPT-4o's pattern,
// nothing else. Behavior Removed with invert true keeps the matches as Isolated does (these patterns match
// every character), the form GPT-4o's converted tokenizers (Phi-4-mini's) have.
void split_pretokenizer(const json& split, const json& bl, ByteBpe::Impl& m) {
  const std::string where = "pre_tokenizer.pretokenizers[0]";
  const json* pattern = member(split, "pattern");
  const json* regex = pattern && pattern->is_object() ? member(*pattern, "Regex") : nullptr;
  if (!regex || !regex->is_string()) fail(m.what, where + ".pattern must be {\"Regex\": ...}");
  const std::string& p = regex->get_ref<const std::string&>();
  if (p == kLlama3Pattern)
    m.regex = ByteBpe::Impl::Regex::kLlama3;
  else if (p == kQwen2Pattern)
    m.regex = ByteBpe::Impl::Regex::kQwen2;
  else if (p == kO200kPattern)
    m.regex = ByteBpe::Impl::Regex::kO200k;
  else
    fail(m.what,
         where + ".pattern '" + printable(p) + "' is not supported (Llama 3's, Qwen2's and GPT-4o's are)");
  const json* behavior = member(split, "behavior");
  const bool invert = get_bool(split, "invert", false, m.what, where);
  if (!behavior || !((*behavior == "Isolated" && !invert) || (*behavior == "Removed" && invert)))
    fail(m.what, where + " must have behavior Isolated (or Removed with invert true)");
  const std::string bwhere = "pre_tokenizer.pretokenizers[1]";
  if (type_of(bl, m.what, bwhere) != "ByteLevel")
    fail(m.what, "pre_tokenizer Sequence[Split, ...] must end with ByteLevel");
  if (get_bool(bl, "use_regex", true, m.what, bwhere) ||
      get_bool(bl, "add_prefix_space", true, m.what, bwhere))
    fail(m.what, bwhere + " after a Split must have use_regex and add_prefix_space false");
}

}  // namespace

namespace {

// SentencePiece-style BPE in tokenizer.json, in one of its two forms: Llama 2's, Mistral v0.1's and
// TinyLlama's (normalizer Sequence[Prepend("\u2581"), Replace(" ", "\u2581")] or the Replace alone, no
// pre-tokenizer), or the one transformers writes for a non-legacy tokenizer and newer Mistral releases ship
// (no normalizer, a Metaspace("\u2581") pre-tokenizer with its prepend_scheme and split); Gemma's is the
// first without the Prepend (its Replace alone, not in a Sequence, and a Split on " " after it, which finds
// no space left: nothing to split). The byte-fallback decoders, with or without the Strip that removes the
// prepended space; every <0xXX> byte token present.
void sentencepiece_style(const json& j, ByteBpe::Impl& m) {
  using Prefix = ByteBpe::Impl::SpmPrefix;
  static const std::string kSpace = "\xE2\x96\x81";
  const json* n = member(j, "normalizer");
  const json* pre = member(j, "pre_tokenizer");
  const json* list = n && n->is_object() ? member(*n, "normalizers") : nullptr;
  auto string_pattern = [](const json& r, const char* type, const char* text) {
    const json* pattern = r.is_object() ? member(r, "pattern") : nullptr;
    return r.is_object() && member(r, "type") && r["type"] == type && pattern && pattern->is_object() &&
           member(*pattern, "String") && (*pattern)["String"] == text;
  };
  auto is_replace = [&](const json& r) {
    return string_pattern(r, "Replace", " ") && member(r, "content") && r["content"] == kSpace;
  };
  bool ok = false;
  if (n && is_replace(*n)) {  // Gemma's: the Replace alone, then (optionally) a Split on the gone spaces
    if (pre && !string_pattern(*pre, "Split", " "))
      fail(m.what, "after the Replace normalizer the pre_tokenizer must be none or a Split on \" \"");
    ok = true, m.spm_prefix = Prefix::kNone;
  } else if (pre) {  // the Metaspace form
    const std::string where = "pre_tokenizer";
    if (n) fail(m.what, "with a Metaspace pre-tokenizer there must be no normalizer");
    if (type_of(*pre, m.what, where) != "Metaspace")
      fail(m.what,
           "with byte_fallback the pre_tokenizer must be Metaspace (or none, with Llama 2's normalizer)");
    const json* r = member(*pre, "replacement");
    if (!r || *r != kSpace) fail(m.what, "pre_tokenizer Metaspace's replacement must be \"\u2581\"");
    // Before tokenizers 0.19 a Metaspace always split, and add_prefix_space said always or never.
    m.spm_split = get_bool(*pre, "split", true, m.what, where);
    std::string scheme = get_bool(*pre, "add_prefix_space", true, m.what, where) ? "always" : "never";
    if (const json* p = member(*pre, "prepend_scheme")) {
      if (!p->is_string()) fail(m.what, "pre_tokenizer Metaspace's prepend_scheme is not a string");
      scheme = p->get<std::string>();
    }
    if (scheme == "first")
      m.spm_prefix = Prefix::kFirst;
    else if (scheme == "always")
      m.spm_prefix = Prefix::kAlways;
    else if (scheme == "never")
      m.spm_prefix = Prefix::kNone;
    else
      fail(m.what, "pre_tokenizer Metaspace's prepend_scheme '" + printable(scheme) +
                       "' is not supported (first, always, never)");
    ok = true;
  } else if (list && list->is_array() && type_of(*n, m.what, "normalizer") == "Sequence") {
    if (list->size() == 2 && (*list)[0].is_object() && member((*list)[0], "type") &&
        (*list)[0]["type"] == "Prepend" && member((*list)[0], "prepend") && (*list)[0]["prepend"] == kSpace &&
        is_replace((*list)[1]))
      ok = true, m.spm_prefix = Prefix::kEvery;
    else if (list->size() == 1 && is_replace((*list)[0]))
      ok = true, m.spm_prefix = Prefix::kNone;
  }
  if (!ok)
    fail(m.what,
         "with byte_fallback the normalizer must be Sequence[Prepend(\"\u2581\"), Replace(\" \", "
         "\"\u2581\")] or the pre_tokenizer Metaspace(\"\u2581\") (SentencePiece-style BPE)");
  if (const json* d = member(j, "decoder")) {
    const json* ds = d->is_object() ? member(*d, "decoders") : nullptr;
    std::string types;
    for (const json& x : ds && ds->is_array() ? *ds : json::array())
      types += (types.empty() ? "" : ",") + type_of(x, m.what, "decoder.decoders");
    if (type_of(*d, m.what, "decoder") != "Sequence" ||
        (types != "Replace,ByteFallback,Fuse,Strip" && types != "Replace,ByteFallback,Fuse"))
      fail(m.what, "with byte_fallback the decoder must be Sequence[Replace, ByteFallback, Fuse(, Strip)]");
    m.spm_strip = types == "Replace,ByteFallback,Fuse,Strip";
  }
}

std::shared_ptr<ByteBpe::Impl> parse_json(std::string_view text, const std::string& what) {
  using Impl = ByteBpe::Impl;
  auto m = std::make_shared<Impl>();
  m->what = what;
  const json j = tokenizer_json::open(text, what, "BPE");
  const json* model = member(j, "model");
  // byte_fallback: SentencePiece-style BPE (Llama 2's tokenizer.json), checked with its normalizer below.
  m->spm = get_bool(*model, "byte_fallback", false, what, "model");
  if (member(*model, "dropout")) fail(what, "model.dropout is not supported");
  if (member(*model, "unk_token") && !m->spm) fail(what, "model.unk_token is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* v = member(*model, key); v && !(v->is_string() && v->get<std::string>().empty()))
      fail(what, std::string("model.") + key + " is not supported");
  get_bool(*model, "fuse_unk", false, what, "model");
  m->ignore_merges = get_bool(*model, "ignore_merges", false, what, "model");

  const auto [vocab, added, limit] = tokenizer_json::entries(j, *model, what);
  m->vocab.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    const int32_t id = to_id(id_json, what, "model.vocab['" + printable(token) + "']", limit);
    if (static_cast<size_t>(id) < m->has_token.size() && m->has_token[static_cast<size_t>(id)])
      fail(what, "model.vocab: id " + std::to_string(id) + " is used twice");
    m->vocab.emplace(token, id);
    m->add_token(id, token);
  }
  const json* merges = member(*model, "merges");
  if (!merges || !merges->is_array()) fail(what, "model.merges must be an array");
  int32_t rank = 0;
  for (const json& mj : *merges) {
    const std::string where = "model.merges[" + std::to_string(rank) + "]";
    std::string a, b;
    if (mj.is_string()) {
      const std::string& s = mj.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail(what, where + " '" + printable(s) + "' is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      a = mj[0].get<std::string>();
      b = mj[1].get<std::string>();
    } else {
      fail(what, where + " must be \"a b\" or [\"a\", \"b\"]");
    }
    m->add_merge(a, b, rank++, where);
  }

  if (added) {
    for (size_t i = 0; i < added->size(); ++i) {
      const json& t = (*added)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!t.is_object()) fail(what, where + " must be an object");
      const json* content = member(t, "content");
      if (!content || !content->is_string()) fail(what, where + ".content must be a string");
      const json* id = member(t, "id");
      if (!id) fail(what, where + ".id is missing");
      AddedToken a;
      a.content = content->get<std::string>();
      a.id = to_id(*id, what, where + ".id", limit);
      a.special = get_bool(t, "special", false, what, where);
      for (const char* key : {"single_word", "lstrip", "rstrip"})
        if (get_bool(t, key, false, what, where)) fail(what, where + "." + key + " is not supported");
      get_bool(t, "normalized", false, what, where);  // no normalizer: the same either way
      m->vocab.try_emplace(a.content, a.id);
      m->add_token(a.id, a.content);
      m->added.push_back(std::move(a));
    }
  }

  if (m->spm) {
    sentencepiece_style(j, *m);
  } else {
    if (const json* n = member(j, "normalizer")) {
      if (type_of(*n, what, "normalizer") != "NFC")
        fail(what,
             "normalizer '" + printable(type_of(*n, what, "normalizer")) + "' is not supported (null, NFC)");
      m->nfc = true;
    }
    const json* pre = member(j, "pre_tokenizer");
    if (!pre) fail(what, "pre_tokenizer is missing (ByteLevel is required)");
    const std::string ptype = type_of(*pre, what, "pre_tokenizer");
    if (ptype == "ByteLevel") {
      byte_level(*pre, *m, "pre_tokenizer");
    } else if (const json* list = member(*pre, "pretokenizers");
               ptype == "Sequence" && list && list->is_array() && list->size() == 2 &&
               type_of((*list)[0], what, "pre_tokenizer.pretokenizers[0]") == "Split") {
      split_pretokenizer((*list)[0], (*list)[1], *m);
    } else if (ptype == "Sequence") {
      if (!list || !list->is_array() || list->size() != 2 ||
          type_of((*list)[0], what, "pre_tokenizer.pretokenizers[0]") != "Digits" ||
          type_of((*list)[1], what, "pre_tokenizer.pretokenizers[1]") != "ByteLevel")
        fail(what, "pre_tokenizer Sequence is supported only as [Digits, ByteLevel] or [Split, ByteLevel]");
      if (!get_bool((*list)[0], "individual_digits", false, what, "pre_tokenizer.pretokenizers[0]"))
        fail(what, "pre_tokenizer Digits is supported only with individual_digits true");
      m->digits = true;
      byte_level((*list)[1], *m, "pre_tokenizer.pretokenizers[1]");
    } else {
      fail(what,
           "pre_tokenizer '" + printable(ptype) +
               "' is not supported (ByteLevel, Sequence[Digits, ByteLevel], Sequence[Split, ByteLevel])");
    }
    if (const json* d = member(j, "decoder"); d && type_of(*d, what, "decoder") != "ByteLevel")
      fail(what,
           "decoder '" + printable(type_of(*d, what, "decoder")) + "' is not supported (only ByteLevel)");
  }

  if (const json* post = member(j, "post_processor")) {
    const std::string type = type_of(*post, what, "post_processor");
    if (type == "TemplateProcessing") {
      const json* single = member(*post, "single");
      if (!single || !single->is_array()) fail(what, "post_processor.single must be an array");
      const json* specials = member(*post, "special_tokens");
      bool seen_a = false;
      for (const json& piece : *single) {
        if (const json* seq = piece.is_object() ? member(piece, "Sequence") : nullptr) {
          const json* id = seq->is_object() ? member(*seq, "id") : nullptr;
          if (!id || *id != "A" || seen_a) fail(what, "post_processor.single must hold sequence A once");
          seen_a = true;
        } else if (const json* sp = piece.is_object() ? member(piece, "SpecialToken") : nullptr) {
          const json* id = sp->is_object() ? member(*sp, "id") : nullptr;
          if (!id || !id->is_string()) fail(what, "post_processor.single: a SpecialToken without an id");
          const std::string name = id->get<std::string>();
          const json* entry = specials && specials->is_object() ? member(*specials, name.c_str()) : nullptr;
          const json* ids = entry && entry->is_object() ? member(*entry, "ids") : nullptr;
          if (!ids || !ids->is_array())
            fail(what, "post_processor.special_tokens['" + printable(name) + "'] has no ids");
          for (const json& x : *ids)
            (seen_a ? m->suffix : m->prefix)
                .push_back(to_id(x, what, "post_processor special token id", limit));
        } else {
          fail(what, "post_processor.single holds an unknown piece");
        }
      }
      if (!seen_a) fail(what, "post_processor.single must hold sequence A once");
    } else if (type != "ByteLevel") {
      fail(what, "post_processor '" + printable(type) + "' is not supported (TemplateProcessing, ByteLevel)");
    }
  }
  for (int32_t id : m->prefix)
    if (static_cast<size_t>(id) >= m->has_token.size() || !m->has_token[static_cast<size_t>(id)])
      fail(what, "post_processor special token id " + std::to_string(id) + " is not in the vocabulary");
  for (int32_t id : m->suffix)
    if (static_cast<size_t>(id) >= m->has_token.size() || !m->has_token[static_cast<size_t>(id)])
      fail(what, "post_processor special token id " + std::to_string(id) + " is not in the vocabulary");
  m->finish();
  return m;
}

// A special token named in tokenizer_config.json: "<s>" or {"content": "<s>", ...}; -1 when absent.
int32_t config_token(const json& cfg, const char* key, const ByteBpe::Impl& m, const std::string& what) {
  const json* v = member(cfg, key);
  if (!v) return -1;
  const json* content = v->is_object() ? member(*v, "content") : v;
  if (!content || !content->is_string()) fail(what, std::string(key) + " must be a string");
  auto it = m.vocab.find(content->get<std::string>());
  if (it == m.vocab.end())
    fail(what,
         std::string(key) + " '" + printable(content->get<std::string>()) + "' is not in the vocabulary");
  return it->second;
}

}  // namespace

ByteBpe ByteBpe::from_json(std::string_view text, const std::string& what) {
  return ByteBpe(parse_json(text, what));
}

ByteBpe ByteBpe::from_dir(const std::string& dir) {
  const std::string tj = dir + "/tokenizer.json", cpath = dir + "/tokenizer_config.json";
  const std::vector<uint8_t> bytes = read_file(tj);
  auto m = parse_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), tj);
  if (std::filesystem::exists(cpath)) {
    const std::vector<uint8_t> cbytes = read_file(cpath);
    const json cfg = json::parse(cbytes.begin(), cbytes.end(), nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) fail(cpath, "not a JSON object");
    m->bos = config_token(cfg, "bos_token", *m, cpath);
    m->eos = config_token(cfg, "eos_token", *m, cpath);
  }
  // What transformers' generate stops at: eos_token_id, an id or a list, of generation_config.json (Llama 3
  // Instruct: end_of_text, eom, eot) and config.json.
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) continue;
    const std::vector<uint8_t> cbytes = read_file(path);
    const json cfg = json::parse(cbytes.begin(), cbytes.end(), nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) fail(path, "not a JSON object");
    const json* ids = member(cfg, "eos_token_id");
    if (!ids) continue;
    for (const json& id : ids->is_array() ? *ids : json::array({*ids}))
      m->stops.push_back(to_id(id, path, "eos_token_id", m->tokens.size()));
  }
  return ByteBpe(m);
}

ByteBpe ByteBpe::from_gguf(const Gguf& g, const std::string& what) {
  auto m = std::make_shared<Impl>();
  m->what = what;
  try {
    const std::string& model = g.get_string("tokenizer.ggml.model");
    if (model != "gpt2" && model != "llama")
      fail(what, "tokenizer.ggml.model '" + printable(model) +
                     "' is not supported (gpt2: byte-level BPE; llama: SentencePiece-style BPE)");
    m->spm = model == "llama";
    const GgufValue* pre_v = g.find("tokenizer.ggml.pre");
    if (!pre_v && !m->spm) fail(what, "tokenizer.ggml.pre is missing (the pre-tokenizer is unknown)");
    const std::string pre = m->spm ? "gpt-2" : g.get_string("tokenizer.ggml.pre");  // llama: none
    // llama.cpp's names for the pre-tokenizers built here (llama-vocab.cpp); llama-bpe also ignores merges.
    if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
      m->digits = true;
    } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
      m->regex = Impl::Regex::kLlama3;
      m->ignore_merges = true;
    } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
      m->regex = Impl::Regex::kQwen2;  // without the NFC of Qwen2's tokenizer.json, as llama.cpp
    } else if (pre == "gpt-4o") {
      m->regex = Impl::Regex::kO200k;  // HF's regex (llama.cpp's approximates its letter cases by ASCII's)
    } else if (pre != "gpt-2") {
      fail(what, "tokenizer.ggml.pre '" + printable(pre) +
                     "' is not supported (smollm, starcoder, refact, gpt-2, llama-bpe, llama3, qwen2, "
                     "deepseek-r1-qwen, gpt-4o)");
    }
    const std::vector<std::string>& tokens = g.get_strings("tokenizer.ggml.tokens");
    if (tokens.size() > static_cast<size_t>(INT32_MAX)) fail(what, "too many tokens");
    const std::vector<int64_t>* types = nullptr;
    if (g.find("tokenizer.ggml.token_type")) {
      types = &g.get_ints("tokenizer.ggml.token_type");
      if (types->size() != tokens.size())
        fail(what, "tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries for " +
                       std::to_string(tokens.size()) + " tokens");
    }
    m->vocab.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto id = static_cast<int32_t>(i);
      m->vocab.try_emplace(tokens[i], id);  // a repeated token keeps its first id
      m->add_token(id, tokens[i]);
      const int64_t type = types ? (*types)[i] : 1;
      // UNKNOWN, CONTROL, USER_DEFINED: matched in the raw text like HF's added tokens (llama.cpp's special
      // tokens)
      if (type == 2 || type == 3 || type == 4) {
        if (tokens[i].empty()) continue;  // an empty token can never match
        m->added.push_back({tokens[i], id, type != 4});
      }
    }
    if (g.find("tokenizer.ggml.merges")) {
      const std::vector<std::string>& merges = g.get_strings("tokenizer.ggml.merges");
      for (size_t r = 0; r < merges.size(); ++r) {
        const std::string& s = merges[r];
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail(what, "tokenizer.ggml.merges[" + std::to_string(r) + "] '" + printable(s) +
                         "' is not two tokens separated by one space");
        m->add_merge(s.substr(0, sp), s.substr(sp + 1), static_cast<int32_t>(r),
                     "tokenizer.ggml.merges[" + std::to_string(r) + "]");
      }
    }
    if (m->spm) {
      // llama.cpp merges the adjacent pair whose joined text is the token of highest score (the leftmost of
      // equal scores): every split of every normal token into two tokens is a merge, ranked by that score.
      const GgufValue* sv = g.find("tokenizer.ggml.scores");
      if (!sv || !sv->is_array() || (sv->elem != GgufType::kF32 && sv->elem != GgufType::kF64))
        fail(what,
             "tokenizer.ggml.scores is missing or not an ARRAY of floats (a llama vocabulary needs it)");
      const std::vector<double>& scores = sv->floats;
      if (scores.size() != tokens.size())
        fail(what, "tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                       std::to_string(tokens.size()) + " tokens");
      std::vector<double> distinct(scores);
      std::sort(distinct.begin(), distinct.end(), std::greater<>());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (types && (*types)[i] != 1) continue;  // NORMAL tokens only
        const std::string& t = tokens[i];
        const auto rank = static_cast<int32_t>(
            std::lower_bound(distinct.begin(), distinct.end(), scores[i], std::greater<>()) -
            distinct.begin());
        for (size_t cut = 1; cut < t.size(); ++cut) {
          if ((static_cast<uint8_t>(t[cut]) & 0xC0) == 0x80) continue;  // inside a character
          const auto a = m->vocab.find(std::string_view(t).substr(0, cut));
          const auto b = m->vocab.find(std::string_view(t).substr(cut));
          if (a != m->vocab.end() && b != m->vocab.end())
            m->merges.try_emplace(pair_key(a->second, b->second), rank, static_cast<int32_t>(i));
        }
      }
      const bool prefix =
          g.find("tokenizer.ggml.add_space_prefix") ? g.get_bool("tokenizer.ggml.add_space_prefix") : true;
      m->spm_prefix = prefix ? Impl::SpmPrefix::kEvery : Impl::SpmPrefix::kNone;
      m->spm_strip = prefix;  // llama.cpp removes a leading space in decoding only where it put one
    }
    auto id_of = [&](const char* key) -> int32_t {
      if (!g.find(key)) return -1;
      const int64_t id = g.get_int(key);
      if (id < 0 || static_cast<size_t>(id) >= tokens.size())
        fail(what, std::string(key) + " " + std::to_string(id) + " is not a token id");
      return static_cast<int32_t>(id);
    };
    m->bos = id_of("tokenizer.ggml.bos_token_id");
    m->eos = id_of("tokenizer.ggml.eos_token_id");
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})  // as llama.cpp
      if (const int32_t id = id_of(key); id >= 0) m->stops.push_back(id);
    // Absent: false, but a llama (SentencePiece) vocabulary adds BOS unless told not to, as llama.cpp.
    auto flag = [&](const char* key) {
      return g.find(key) ? g.get_bool(key) : m->spm && std::string(key) == "tokenizer.ggml.add_bos_token";
    };
    if (flag("tokenizer.ggml.add_bos_token")) {
      if (m->bos < 0) fail(what, "tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
      m->prefix.push_back(m->bos);
    }
    if (flag("tokenizer.ggml.add_eos_token")) {
      if (m->eos < 0) fail(what, "tokenizer.ggml.add_eos_token is true but there is no eos_token_id");
      m->suffix.push_back(m->eos);
    }
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(what + ": ", 0) == 0) throw;
    fail(what, msg);
  }
  m->finish();
  return ByteBpe(m);
}

std::string ByteBpe::to_json() const {
  const Impl& m = *impl_;
  json vocab = json::object();
  for (size_t id = 0; id < m.tokens.size(); ++id) {
    if (!m.has_token[id]) continue;
    const std::string& t = m.tokens[id];
    if (!is_valid_utf8(t))
      fail(m.what, "token " + std::to_string(id) + " ('" + printable(t) +
                       "') is not valid UTF-8: a tokenizer.json vocabulary cannot hold it");
    if (vocab.contains(t))
      fail(m.what, "token '" + printable(t) + "' has ids " + std::to_string(vocab[t].get<int32_t>()) +
                       " and " + std::to_string(id) + ": a tokenizer.json vocabulary cannot hold both");
    vocab[t] = static_cast<int32_t>(id);
  }
  std::vector<std::pair<int32_t, uint64_t>> ranked;  // (rank, pair key)
  ranked.reserve(m.merges.size());
  for (const auto& [key, rank_id] : m.merges) ranked.emplace_back(rank_id.first, key);
  std::sort(ranked.begin(), ranked.end());
  json merges = json::array();
  for (const auto& [rank, key] : ranked)
    merges.push_back(m.tokens[static_cast<size_t>(key >> 32)] + " " +
                     m.tokens[static_cast<size_t>(key & 0xFFFFFFFFu)]);
  json added = json::array();
  for (const AddedToken& a : m.added)
    added.push_back({{"id", a.id},
                     {"content", a.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", a.special}});
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", m.add_prefix_space},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  json pre = byte_level;
  if (m.regex != Impl::Regex::kGpt2)
    pre = {{"type", "Sequence"},
           {"pretokenizers", json::array({{{"type", "Split"},
                                           {"pattern",
                                            {{"Regex", m.regex == Impl::Regex::kLlama3  ? kLlama3Pattern
                                                       : m.regex == Impl::Regex::kQwen2 ? kQwen2Pattern
                                                                                        : kO200kPattern}}},
                                           {"behavior", "Isolated"},
                                           {"invert", false}},
                                          {{"type", "ByteLevel"},
                                           {"add_prefix_space", false},
                                           {"trim_offsets", false},
                                           {"use_regex", false}}})}};
  else if (m.digits)
    pre = {{"type", "Sequence"},
           {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  json post = byte_level;
  if (!m.prefix.empty() || !m.suffix.empty()) {
    json single = json::array(), pair = json::array(), specials = json::object();
    auto special = [&](int32_t id, json& out, int type_id) {
      const std::string& t = m.tokens[static_cast<size_t>(id)];
      out.push_back({{"SpecialToken", {{"id", t}, {"type_id", type_id}}}});
      specials[t] = {{"id", t}, {"ids", json::array({id})}, {"tokens", json::array({t})}};
    };
    for (int32_t id : m.prefix) special(id, single, 0);
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    for (int32_t id : m.suffix) special(id, single, 0);
    pair = single;
    for (int32_t id : m.prefix) special(id, pair, 1);
    pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    for (int32_t id : m.suffix) special(id, pair, 1);
    post = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
  }
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", m.nfc ? json{{"type", "NFC"}} : json(nullptr)},
            {"pre_tokenizer", pre},
            {"post_processor", post},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", m.ignore_merges},
              {"vocab", vocab},
              {"merges", merges}}}};
  if (m.spm) {  // SentencePiece-style: Llama 2's form, or the Metaspace one (sentencepiece_style)
    using Prefix = Impl::SpmPrefix;
    const std::string space = "\xE2\x96\x81";
    const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
    if (m.spm_prefix == Prefix::kEvery || (m.spm_prefix == Prefix::kNone && !m.spm_split)) {
      j["normalizer"] = {
          {"type", "Sequence"},
          {"normalizers", m.spm_prefix == Prefix::kEvery
                              ? json::array({{{"type", "Prepend"}, {"prepend", space}}, replace})
                              : json::array({replace})}};
      j["pre_tokenizer"] = nullptr;
    } else {
      j["normalizer"] = nullptr;
      j["pre_tokenizer"] = {{"type", "Metaspace"},
                            {"replacement", space},
                            {"prepend_scheme", m.spm_prefix == Prefix::kFirst    ? "first"
                                               : m.spm_prefix == Prefix::kAlways ? "always"
                                                                                 : "never"},
                            {"split", m.spm_split}};
    }
    json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}}});
    if (m.spm_strip) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    j["model"]["byte_fallback"] = true;
    j["model"]["fuse_unk"] = true;
  }
  return j.dump(1);
}

std::string ByteBpe::config_json() const {
  const Impl& m = *impl_;
  json j = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (m.bos >= 0) j["bos_token"] = m.tokens[static_cast<size_t>(m.bos)];
  if (m.eos >= 0) j["eos_token"] = m.tokens[static_cast<size_t>(m.eos)];
  return j.dump(1);
}

}  // namespace sparse24::text
