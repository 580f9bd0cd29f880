// The WordPiece pipeline of Hugging Face `tokenizers` (Tokenizer::encode for one sequence):
//   1. added tokens with normalized: false are found in the raw text (leftmost-longest, lstrip/rstrip);
//   2. every other piece is normalized (BertNormalizer: clean, CJK spacing, NFD + drop Mn, lowercase), then
//      added tokens with normalized: true are found in it;
//   3. the remaining pieces are pre-tokenized (BertPreTokenizer: split on whitespace, isolate punctuation);
//   4. each word goes through WordPiece (greedy longest match from the left, "##" continuations, [UNK] for
//      the whole word when a piece is missing or the word is longer than max_input_chars_per_word chars);
//   5. truncation to max_length - specials, then the post-processor's specials around the sequence.
// Character classes follow what HF's crates compute (unicode.cc), not just the current Unicode tables.
#include "wordpiece.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "sparse24/error.h"
#include "sparse24/io.h"
#include "tokenizer_json.h"
#include "unicode.h"

namespace sparse24::text {

namespace {

using json = nlohmann::json;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// One BertNormalizer (a Sequence is several).
struct BertNorm {
  bool clean_text = true;
  bool chinese = true;
  bool strip_accents = true;
  bool lowercase = true;
};

struct AddedToken {
  std::string content;  // for normalized tokens: the content after normalization
  int32_t id = 0;
  bool lstrip = false, rstrip = false, normalized = false, special = false;
};

// A piece of text after added-token matching: an added token's id, or a range of text (id < 0).
struct Split {
  int32_t id;
  size_t begin, end;
};

}  // namespace

struct WordPiece::Impl {
  std::string what;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
  std::vector<std::string> tokens;  // id -> token ("" = no token; see has_token)
  std::vector<bool> has_token;
  std::string unk_token = "[UNK]";
  int32_t unk = -1;
  int32_t pad = -1;  // settled by finish()
  std::string prefix = "##";
  int64_t max_chars = 100;
  std::vector<BertNorm> normalizers;
  bool bert_pretokenizer = true;
  std::vector<AddedToken> raw_added, normalized_added;
  std::vector<int32_t> head, tail;  // the post-processor's specials before and after the sequence

  // Normalizes a UTF-8 piece into `out` (UTF-8), with `cps` as scratch.
  void normalize(std::string_view in, std::string& out, std::u32string& cps, std::u32string& tmp) const {
    decode_utf8(in, cps);
    for (const BertNorm& n : normalizers) {
      if (n.clean_text) clean_text(cps);
      if (n.chinese) space_cjk(cps, tmp);
      if (n.strip_accents) nfd_drop_mn(cps, tmp);
      if (n.lowercase) lowercase(cps, tmp);
    }
    out.clear();
    for (char32_t c : cps) append_utf8(out, c);
  }

  // Calls word(string_view) for each pre-tokenized word of a normalized piece.
  template <class Word>
  void pre_tokenize(std::string_view s, Word&& word) const {
    if (!bert_pretokenizer) {
      if (!s.empty()) word(s);
      return;
    }
    size_t start = 0, i = 0;
    while (i < s.size()) {
      char32_t c;
      const size_t n = next_char(s, i, c);
      if (is_rust_whitespace(c)) {
        if (start < i) word(s.substr(start, i - start));
        start = i + n;
      } else if (is_bert_punctuation(c)) {
        if (start < i) word(s.substr(start, i - start));
        word(s.substr(i, n));
        start = i + n;
      }
      i += n;
    }
    if (start < s.size()) word(s.substr(start));
  }

  // HF's AddedVocabulary::find_matches: leftmost-longest matches, each widened by lstrip/rstrip.
  static void find_matches(std::string_view s, const std::vector<AddedToken>& added,
                           std::vector<Split>& out) {
    out.clear();
    size_t offset = 0, i = 0;
    while (i < s.size() && !added.empty()) {
      const AddedToken* best = nullptr;
      for (const AddedToken& t : added)
        if (s.compare(i, t.content.size(), t.content) == 0 &&
            (!best || t.content.size() > best->content.size()))
          best = &t;
      if (!best) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + best->content.size();
      if (best->lstrip) start = std::max(whitespace_suffix_start(s.substr(0, start)), offset);
      if (best->rstrip) stop += whitespace_prefix_length(s.substr(stop));
      if (offset < start) out.push_back({-1, offset, start});
      out.push_back({best->id, start, stop});
      offset = stop;
      i += best->content.size();
    }
    if (offset != s.size()) out.push_back({-1, offset, s.size()});
  }

  // The whole pipeline up to the model: calls added(id) for added tokens and word(string_view) for words.
  template <class Added, class Word>
  void run(std::string_view text, Added&& added, Word&& word) const {
    std::vector<Split> raw, inner;
    std::string norm;
    std::u32string cps, tmp;
    find_matches(text, raw_added, raw);
    for (const Split& r : raw) {
      if (r.id >= 0) {
        added(r.id);
        continue;
      }
      normalize(text.substr(r.begin, r.end - r.begin), norm, cps, tmp);
      find_matches(norm, normalized_added, inner);
      for (const Split& p : inner) {
        if (p.id >= 0)
          added(p.id);
        else
          pre_tokenize(std::string_view(norm).substr(p.begin, p.end - p.begin), word);
      }
    }
  }

  // WordPiece on one word, appending ids.
  void word_pieces(std::string_view w, std::string& key, std::vector<int32_t>& ids) const {
    if (static_cast<int64_t>(count_chars(w)) > max_chars) {
      ids.push_back(unk);
      return;
    }
    const size_t first = ids.size();
    size_t start = 0;
    while (start < w.size()) {
      size_t end = w.size();
      int32_t found = -1;
      while (start < end) {
        std::string_view piece = w.substr(start, end - start);
        if (start > 0) {
          key.assign(prefix);
          key.append(piece);
          piece = key;
        }
        const auto it = vocab.find(piece);
        if (it != vocab.end()) {
          found = it->second;
          break;
        }
        do --end;  // back to the previous character boundary
        while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        ids.resize(first);
        ids.push_back(unk);
        return;
      }
      ids.push_back(found);
      start = end;
    }
  }
};

namespace {

using tokenizer_json::fail;
using tokenizer_json::get_bool;
using tokenizer_json::get_string;
using tokenizer_json::member;
using tokenizer_json::type_of;

int32_t to_id(const json& v, const std::string& what, const std::string& where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    fail(what, where + " must be an id (an integer from 0 to 2^31-1)");
  return static_cast<int32_t>(v.get<int64_t>());
}

BertNorm parse_bert_normalizer(const json& n, const std::string& what, const std::string& where) {
  BertNorm b;
  b.clean_text = get_bool(n, "clean_text", true, what, where);
  b.chinese = get_bool(n, "handle_chinese_chars", true, what, where);
  b.lowercase = get_bool(n, "lowercase", true, what, where);
  b.strip_accents = get_bool(n, "strip_accents", b.lowercase, what, where);  // null: same as lowercase
  return b;
}

void parse_normalizer(const json& n, WordPiece::Impl& m, const std::string& where) {
  const std::string type = type_of(n, m.what, where);
  if (type == "BertNormalizer") {
    m.normalizers.push_back(parse_bert_normalizer(n, m.what, where));
  } else if (type == "Sequence") {
    const json* list = member(n, "normalizers");
    if (!list || !list->is_array()) fail(m.what, where + ".normalizers must be an array");
    for (size_t i = 0; i < list->size(); ++i)
      parse_normalizer((*list)[i], m, where + ".normalizers[" + std::to_string(i) + "]");
  } else {
    fail(m.what, where + " type '" + type + "' is not supported (only BertNormalizer and Sequence)");
  }
}

// [token, id] as BertProcessing and RobertaProcessing write cls and sep.
int32_t special_pair(const json& p, const char* key, const WordPiece::Impl& m) {
  const json* v = member(p, key);
  const std::string where = std::string("post_processor.") + key;
  if (!v || !v->is_array() || v->size() != 2 || !(*v)[0].is_string())
    fail(m.what, where + " must be [token, id]");
  return to_id((*v)[1], m.what, where + "[1]");
}

void parse_post_processor(const json& p, WordPiece::Impl& m) {
  const std::string type = type_of(p, m.what, "post_processor");
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    m.head = {special_pair(p, "cls", m)};
    m.tail = {special_pair(p, "sep", m)};
    return;
  }
  if (type != "TemplateProcessing")
    fail(m.what, "post_processor type '" + type +
                     "' is not supported (only BertProcessing, RobertaProcessing, TemplateProcessing)");
  const json* single = member(p, "single");
  const json* specials = member(p, "special_tokens");
  if (!single || !single->is_array()) fail(m.what, "post_processor.single must be an array");
  if (!specials || !specials->is_object()) fail(m.what, "post_processor.special_tokens must be an object");
  int sequences = 0;
  for (const json& piece : *single) {
    const json* seq = piece.is_object() ? member(piece, "Sequence") : nullptr;
    const json* tok = piece.is_object() ? member(piece, "SpecialToken") : nullptr;
    if (seq && seq->is_object()) {
      if (get_string(*seq, "id", m.what, "post_processor.single.Sequence") != "A")
        fail(m.what, "post_processor.single may only hold sequence A");
      ++sequences;
    } else if (tok && tok->is_object()) {
      const std::string name = get_string(*tok, "id", m.what, "post_processor.single.SpecialToken");
      const json* st = member(*specials, name.c_str());
      const json* ids = st && st->is_object() ? member(*st, "ids") : nullptr;
      if (!ids || !ids->is_array())
        fail(m.what, "post_processor.special_tokens['" + name + "'].ids must be an array");
      for (const json& id : *ids)
        (sequences ? m.tail : m.head).push_back(to_id(id, m.what, "post_processor.special_tokens ids"));
    } else {
      fail(m.what, "post_processor.single entries must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (sequences != 1) fail(m.what, "post_processor.single must hold sequence A exactly once");
}

void add_token(WordPiece::Impl& m, int32_t id, const std::string& token) {
  if (static_cast<size_t>(id) >= m.tokens.size()) {
    m.tokens.resize(static_cast<size_t>(id) + 1);
    m.has_token.resize(static_cast<size_t>(id) + 1, false);
  }
  m.tokens[static_cast<size_t>(id)] = token;
  m.has_token[static_cast<size_t>(id)] = true;
}

// Settles what depends on everything else: unk, pad, normalized added tokens' patterns, id checks.
void finish(WordPiece::Impl& m) {
  const auto unk = m.vocab.find(m.unk_token);
  if (unk == m.vocab.end()) fail(m.what, "unk_token '" + m.unk_token + "' is not in the vocabulary");
  m.unk = unk->second;
  // The pad id: as set (padding section, tokenizer_config's pad_token), else a special [PAD] or <pad>
  // added token, else the vocabulary's.
  if (m.pad < 0) {
    for (const AddedToken& t : m.raw_added)
      if (m.pad < 0 && t.special && (t.content == "[PAD]" || t.content == "<pad>")) m.pad = t.id;
  }
  for (const char* pad : {"[PAD]", "<pad>"}) {
    const auto it = m.vocab.find(std::string_view(pad));
    if (m.pad < 0 && it != m.vocab.end()) m.pad = it->second;
  }
  if (m.pad < 0) m.pad = 0;
  std::string norm;
  std::u32string cps, tmp;
  for (AddedToken& t : m.normalized_added) {
    m.normalize(t.content, norm, cps, tmp);
    t.content = norm;
  }
  auto empty = [](const AddedToken& t) { return t.content.empty(); };  // HF never matches an empty pattern
  std::erase_if(m.raw_added, empty);
  std::erase_if(m.normalized_added, empty);
  for (int32_t id : m.head) {
    if (static_cast<size_t>(id) >= m.tokens.size() || !m.has_token[static_cast<size_t>(id)])
      fail(m.what, "post_processor special id " + std::to_string(id) + " is not in the vocabulary");
  }
  for (int32_t id : m.tail) {
    if (static_cast<size_t>(id) >= m.tokens.size() || !m.has_token[static_cast<size_t>(id)])
      fail(m.what, "post_processor special id " + std::to_string(id) + " is not in the vocabulary");
  }
}

}  // namespace

WordPiece WordPiece::from_json(std::string_view text, const std::string& what) {
  auto m = std::make_shared<Impl>();
  m->what = what;
  const json j = tokenizer_json::open(text, what, "WordPiece");
  const json* model = member(j, "model");
  m->unk_token = get_string(*model, "unk_token", what, "model", "[UNK]");
  m->prefix = get_string(*model, "continuing_subword_prefix", what, "model", "##");
  if (const json* mc = member(*model, "max_input_chars_per_word")) {
    if (!mc->is_number_unsigned())
      fail(what, "model.max_input_chars_per_word must be a non-negative integer");
    m->max_chars = static_cast<int64_t>(std::min<uint64_t>(mc->get<uint64_t>(), INT64_MAX));
  }
  const auto [vocab, added, limit] = tokenizer_json::entries(j, *model, what);
  m->vocab.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    const int32_t id = to_id(id_json, what, "model.vocab['" + token + "']");
    if (static_cast<size_t>(id) >= limit)
      fail(what, "model.vocab['" + token + "'] = " + std::to_string(id) + " is beyond the vocabulary size");
    if (static_cast<size_t>(id) < m->has_token.size() && m->has_token[static_cast<size_t>(id)])
      fail(what, "model.vocab: id " + std::to_string(id) + " is used twice");
    m->vocab.emplace(token, id);
    add_token(*m, id, token);
  }

  if (added) {
    for (size_t i = 0; i < added->size(); ++i) {
      const json& a = (*added)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) fail(what, where + " must be an object");
      AddedToken t;
      const json* id = member(a, "id");
      if (!id) fail(what, where + ".id is missing");
      t.id = to_id(*id, what, where + ".id");
      if (static_cast<size_t>(t.id) >= limit) fail(what, where + ".id is beyond the vocabulary size");
      t.content = get_string(a, "content", what, where);
      t.special = get_bool(a, "special", false, what, where);
      t.lstrip = get_bool(a, "lstrip", false, what, where);
      t.rstrip = get_bool(a, "rstrip", false, what, where);
      t.normalized = get_bool(a, "normalized", !t.special, what, where);
      if (get_bool(a, "single_word", false, what, where))
        fail(what, where + " ('" + t.content + "'): single_word is not supported");
      add_token(*m, t.id, t.content);
      (t.normalized ? m->normalized_added : m->raw_added).push_back(std::move(t));
    }
  }

  if (const json* n = member(j, "normalizer")) parse_normalizer(*n, *m, "normalizer");
  if (const json* p = member(j, "pre_tokenizer")) {
    const std::string type = type_of(*p, what, "pre_tokenizer");
    if (type != "BertPreTokenizer")
      fail(what, "pre_tokenizer type '" + type + "' is not supported (only BertPreTokenizer)");
  } else {
    m->bert_pretokenizer = false;
  }
  if (const json* p = member(j, "post_processor")) parse_post_processor(*p, *m);
  if (const json* pad = member(j, "padding")) {  // only its pad id is used
    if (!pad->is_object()) fail(what, "padding must be an object or null");
    if (const json* id = member(*pad, "pad_id")) m->pad = to_id(*id, what, "padding.pad_id");
  }
  finish(*m);
  return WordPiece(std::move(m));
}

namespace {

// A special token named in tokenizer_config.json: "x" or {"content": "x", "lstrip": ..., ...}.
bool config_token(const json& cfg, const char* key, const char* dflt, AddedToken& t,
                  const std::string& what) {
  const json* v = member(cfg, key);
  if (!v) {
    if (!dflt) return false;
    t.content = dflt;
    return true;
  }
  if (v->is_string()) {
    t.content = v->get<std::string>();
  } else if (v->is_object()) {
    t.content = get_string(*v, "content", what, key);
    t.lstrip = get_bool(*v, "lstrip", false, what, key);
    t.rstrip = get_bool(*v, "rstrip", false, what, key);
  } else {
    fail(what, std::string(key) + " must be a string or an object with content");
  }
  return true;
}

}  // namespace

WordPiece WordPiece::from_dir(const std::string& dir) {
  const std::string tj = dir + "/tokenizer.json";
  if (std::filesystem::exists(tj)) {
    const std::vector<uint8_t> bytes = read_file(tj);
    return from_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), tj);
  }
  // vocab.txt: one token per line, the id is the line number (HF trims trailing whitespace).
  auto m = std::make_shared<Impl>();
  const std::string vpath = dir + "/vocab.txt", cpath = dir + "/tokenizer_config.json";
  m->what = vpath;
  const std::vector<uint8_t> vbytes = read_file(vpath);
  const std::string_view v(reinterpret_cast<const char*>(vbytes.data()), vbytes.size());
  int32_t line = 0;
  for (size_t pos = 0; pos < v.size(); ++line) {
    if (line == INT32_MAX) fail(vpath, "too many lines");
    size_t eol = v.find('\n', pos);
    if (eol == std::string_view::npos) eol = v.size();
    std::string_view tok = v.substr(pos, eol - pos);
    while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\t' || tok.back() == '\r'))
      tok.remove_suffix(1);
    m->vocab.insert_or_assign(std::string(tok), line);
    add_token(*m, line, std::string(tok));
    pos = eol + 1;
  }
  json cfg = json::object();
  if (std::filesystem::exists(cpath)) {
    const std::vector<uint8_t> cbytes = read_file(cpath);
    cfg = json::parse(cbytes.begin(), cbytes.end(), nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) fail(cpath, "not a JSON object");
  }
  BertNorm n;
  n.lowercase = get_bool(cfg, "do_lower_case", true, cpath, "config");
  n.strip_accents = get_bool(cfg, "strip_accents", n.lowercase, cpath, "config");
  n.chinese = get_bool(cfg, "tokenize_chinese_chars", true, cpath, "config");
  m->normalizers = {n};
  AddedToken unk, cls, sep;
  config_token(cfg, "unk_token", "[UNK]", unk, cpath);
  config_token(cfg, "cls_token", "[CLS]", cls, cpath);
  config_token(cfg, "sep_token", "[SEP]", sep, cpath);
  m->unk_token = unk.content;
  // BertTokenizer's defaults; a default missing from vocab.txt is skipped, a named one is an error.
  const std::pair<const char*, const char*> keys[] = {
      {"unk_token", "[UNK]"},   {"cls_token", "[CLS]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"},
      {"mask_token", "[MASK]"}, {"bos_token", nullptr}, {"eos_token", nullptr}};
  for (const auto& [key, dflt] : keys) {
    AddedToken t;
    if (!config_token(cfg, key, dflt, t, cpath)) continue;
    const auto it = m->vocab.find(t.content);
    if (it == m->vocab.end() && !member(cfg, key)) continue;
    if (it == m->vocab.end()) fail(cpath, std::string(key) + " '" + t.content + "' is not in vocab.txt");
    t.id = it->second;
    t.special = true;
    if (std::string_view(key) == "pad_token") m->pad = t.id;
    m->raw_added.push_back(t);
  }
  for (const AddedToken* t : {&cls, &sep}) {
    const auto it = m->vocab.find(t->content);
    if (it == m->vocab.end()) fail(cpath, "'" + t->content + "' is not in vocab.txt");
    (t == &cls ? m->head : m->tail) = {it->second};
  }
  finish(*m);
  return WordPiece(std::move(m));
}

Encoding WordPiece::encode(std::string_view utf8, int64_t max_length) const {
  const Impl& m = *impl_;
  const int64_t specials = static_cast<int64_t>(m.head.size() + m.tail.size());
  if (max_length < 0 || (max_length > 0 && max_length < specials))
    throw Error("tokenize: max_length " + std::to_string(max_length) + " is below the " +
                std::to_string(specials) + " special tokens");
  Encoding e;
  e.ids = m.head;
  std::string key;
  m.run(
      utf8, [&](int32_t id) { e.ids.push_back(id); },
      [&](std::string_view word) { m.word_pieces(word, key, e.ids); });
  if (max_length > 0 && static_cast<int64_t>(e.ids.size()) > max_length - static_cast<int64_t>(m.tail.size()))
    e.ids.resize(static_cast<size_t>(max_length) - m.tail.size());
  e.ids.insert(e.ids.end(), m.tail.begin(), m.tail.end());
  return e;
}

std::vector<std::string> WordPiece::split(std::string_view utf8) const {
  std::vector<std::string> words;
  impl_->run(
      utf8, [&](int32_t id) { words.push_back(impl_->tokens[static_cast<size_t>(id)]); },
      [&](std::string_view word) { words.emplace_back(word); });
  return words;
}

int32_t WordPiece::pad_id() const { return impl_->pad; }
int32_t WordPiece::unk_id() const { return impl_->unk; }
int64_t WordPiece::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

const std::string& WordPiece::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->tokens.size() || !impl_->has_token[static_cast<size_t>(id)])
    throw Error(impl_->what + ": no token has id " + std::to_string(id));
  return impl_->tokens[static_cast<size_t>(id)];
}

}  // namespace sparse24::text
