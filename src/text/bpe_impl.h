// The byte-level / SentencePiece-style BPE tokenizer's state (bpe.h), shared by its algorithm (bpe.cc) and
// its readers and writers (bpe_load.cc: tokenizer.json, GGUF metadata).
#pragma once
#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpe.h"
#include "bpe_split.h"
#include "io/io_util.h"
#include "sparse24/error.h"
#include "unicode.h"

namespace sparse24::text {

namespace bpe_detail {

using io_detail::fail;
using io_detail::printable;
using json = nlohmann::json;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
};

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for themselves, the other 68 bytes (controls,
// space, DEL, NBSP, soft hyphen...) for U+0100 onwards in byte order, so every byte is a visible character.
struct ByteMap {
  char32_t to_char[256];
  std::string to_utf8[256];
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteMap() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_char[b] = keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_utf8(to_utf8[b], to_char[b]);
      to_byte.emplace(to_char[b], static_cast<uint8_t>(b));
    }
  }
};
inline const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

struct MergeKeyHash {
  size_t operator()(uint64_t k) const { return std::hash<uint64_t>{}(k * 0x9E3779B97F4A7C15ull); }
};
inline uint64_t pair_key(int32_t a, int32_t b) {
  return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
}

}  // namespace bpe_detail

struct ByteBpe::Impl {
  using AddedToken = bpe_detail::AddedToken;
  std::string what;
  std::unordered_map<std::string, int32_t, bpe_detail::StringHash, std::equal_to<>> vocab;
  std::vector<std::string> tokens;  // id -> token
  std::vector<bool> has_token;
  std::vector<bool> special;  // id -> skipped by decode(skip_special)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>, bpe_detail::MergeKeyHash>
      merges;            // (a, b) -> (rank, id)
  int32_t byte_id[256];  // the token of each single byte (-1 if the vocabulary lacks it: the byte is dropped)
  std::vector<int16_t> byte_of;  // SentencePiece-style: id -> the byte its <0xXX> token stands for, or -1
  std::vector<AddedToken> added;
  std::vector<std::vector<size_t>> added_by_first_byte = std::vector<std::vector<size_t>>(256);
  enum class Regex { kGpt2, kLlama3, kQwen2, kO200k } regex = Regex::kGpt2;  // GPT-2's, or a Split's pattern
  bool nfc = false;                                                          // the NFC normalizer
  // SentencePiece-style BPE (Llama 2, Mistral, TinyLlama; GGUF tokenizer.ggml.model "llama"): no
  // byte-level alphabet; spaces become U+2581, the symbols are characters, a character without a token
  // falls back to its bytes' <0xXX> tokens. Where a U+2581 is put in front of a text piece (one between
  // added tokens): kEvery in front of every piece (Llama 2's Prepend normalizer, llama.cpp's
  // add_space_prefix); a Metaspace pre-tokenizer's prepend_scheme "always" in front of every piece that does
  // not start with a space, "first" only in front of the text's start if it does not; kNone nowhere.
  enum class SpmPrefix { kNone, kEvery, kAlways, kFirst };
  bool spm = false;
  SpmPrefix spm_prefix = SpmPrefix::kEvery;
  bool spm_split = false;         // Metaspace's split: every U+2581 starts a new word
  bool spm_strip = true;          // the decoder's Strip(" ", 1, 0): one leading space of the text removed
  bool digits = false;            // Digits(individual_digits) before the regex
  bool add_prefix_space = false;  // ByteLevel.add_prefix_space
  bool ignore_merges = false;     // a word that is a token is not merged from its bytes
  std::vector<int32_t> prefix, suffix;  // the post-processor's specials around the sequence
  int32_t bos = -1, eos = -1;
  std::vector<int32_t> stops;  // besides eos, ids that end a generated reply (stops())

  void add_token(int32_t id, std::string tok) {
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(static_cast<size_t>(id) + 1);
      has_token.resize(static_cast<size_t>(id) + 1, false);
      special.resize(static_cast<size_t>(id) + 1, false);
    }
    tokens[static_cast<size_t>(id)] = std::move(tok);
    has_token[static_cast<size_t>(id)] = true;
  }

  void add_merge(const std::string& a, const std::string& b, int32_t rank, const std::string& where) {
    auto ia = vocab.find(a), ib = vocab.find(b), ic = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || ic == vocab.end())
      bpe_detail::fail(what, where + " '" + bpe_detail::printable(a) + " " + bpe_detail::printable(b) +
                                 "' uses a token not in the vocabulary");
    merges.try_emplace(bpe_detail::pair_key(ia->second, ib->second), rank,
                       ic->second);  // the first rank of a pair counts
  }

  // After the vocabulary and added tokens are in place.
  void finish() {
    const bpe_detail::ByteMap& bm = bpe_detail::byte_map();
    byte_of.assign(tokens.size(), -1);
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      auto it = vocab.find(spm ? std::string(hex) : bm.to_utf8[b]);
      // SentencePiece-style byte fallback needs every byte's token (no unknown token stands in).
      if (spm && it == vocab.end())
        bpe_detail::fail(what, std::string("SentencePiece-style BPE without the byte token ") + hex);
      byte_id[b] = it == vocab.end() ? -1 : it->second;
      if (spm) byte_of[static_cast<size_t>(it->second)] = static_cast<int16_t>(b);
    }
    for (size_t i = 0; i < added.size(); ++i) {
      if (added[i].content.empty())
        bpe_detail::fail(what, "added token " + std::to_string(added[i].id) + " is empty");
      added_by_first_byte[static_cast<uint8_t>(added[i].content[0])].push_back(i);
      if (added[i].special) special[static_cast<size_t>(added[i].id)] = true;
    }
    for (auto& v : added_by_first_byte)
      std::stable_sort(v.begin(), v.end(),
                       [&](size_t x, size_t y) { return added[x].content.size() > added[y].content.size(); });
  }

  // Leftmost-longest added-token matches: (begin, end, id) with id < 0 for the text between them.
  struct Segment {
    size_t begin, end;
    int32_t id;
  };
  void segments(std::string_view s, std::vector<Segment>& out) const {
    out.clear();
    size_t text_start = 0;
    for (size_t i = 0; i < s.size();) {
      const AddedToken* hit = nullptr;
      for (size_t k : added_by_first_byte[static_cast<uint8_t>(s[i])]) {
        const std::string& c = added[k].content;
        if (s.size() - i >= c.size() && s.compare(i, c.size(), c) == 0) {
          hit = &added[k];
          break;  // the longest first
        }
      }
      if (!hit) {
        ++i;
        continue;
      }
      if (i > text_start) out.push_back({text_start, i, -1});
      out.push_back({i, i + hit->content.size(), hit->id});
      i += hit->content.size();
      text_start = i;
    }
    if (text_start < s.size()) out.push_back({text_start, s.size(), -1});
  }

  // The pre-tokenized words of a text piece, as byte ranges of `s` (`at_start`: the piece begins the text).
  void words(std::string_view s, bool at_start, std::vector<std::string>& out) const {
    if (spm) {  // U+2581 for each space, one in front (spm_prefix), then one word or a word per U+2581
      static const std::string kSpace = "\xE2\x96\x81";
      const bool space_first = !s.empty() && s[0] == ' ';
      const bool lead = spm_prefix == SpmPrefix::kEvery ||
                        (spm_prefix == SpmPrefix::kAlways && !space_first) ||
                        (spm_prefix == SpmPrefix::kFirst && at_start && !space_first);
      std::string w = lead ? kSpace : "";
      for (char c : s) {
        if (c == ' ' && spm_split && !w.empty()) out.push_back(std::exchange(w, std::string()));
        w += c == ' ' ? kSpace : std::string(1, c);
      }
      if (!w.empty()) out.push_back(std::move(w));
      return;
    }
    std::string normalized;
    if (nfc) {  // invalid UTF-8 (which Python strings never hold) is left as it is
      const std::string text(s);
      if (utf8proc_uint8_t* n = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()))) {
        normalized = reinterpret_cast<const char*>(n);
        std::free(n);
        s = normalized;
      }
    }
    std::vector<bpe_detail::Char> ch;
    std::vector<std::pair<size_t, size_t>> ranges;
    auto regex_piece = [&](std::string_view piece) {
      std::string prefixed;
      if (add_prefix_space && !piece.empty() && piece[0] != ' ') {
        prefixed = " " + std::string(piece);
        piece = prefixed;
      }
      bpe_detail::chars_of(piece, ch);
      ranges.clear();
      if (regex == Regex::kGpt2)
        bpe_detail::gpt2_split(ch, 0, ch.size(), ranges);
      else if (regex == Regex::kO200k)
        bpe_detail::o200k_split(ch, 0, ch.size(), ranges);
      else
        bpe_detail::pattern_split(ch, 0, ch.size(), regex == Regex::kLlama3 ? 3 : 1, ranges);
      for (const auto& [a, b] : ranges)
        out.emplace_back(piece.substr(ch[a].begin, ch[b - 1].end - ch[a].begin));
    };
    if (!digits) return regex_piece(s);
    // Digits(individual_digits): each numeric character alone, the runs between them as they are.
    std::vector<bpe_detail::Char> all;
    bpe_detail::chars_of(s, all);
    size_t run = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i].digit) continue;
      if (i > run) regex_piece(s.substr(all[run].begin, all[i].begin - all[run].begin));
      regex_piece(s.substr(all[i].begin, all[i].end - all[i].begin));
      run = i + 1;
    }
    if (run < all.size()) regex_piece(s.substr(all[run].begin));
  }

  // BPE on one word (raw bytes): appends its ids.
  void bpe(std::string_view word, std::vector<int32_t>& ids) const {
    const bpe_detail::ByteMap& bm = bpe_detail::byte_map();
    if (ignore_merges) {
      std::string mapped;
      for (char c : word) mapped += bm.to_utf8[static_cast<uint8_t>(c)];
      if (auto it = vocab.find(mapped); it != vocab.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    struct Sym {
      int32_t id;
      int32_t prev, next;
      bool alive;
    };
    std::vector<Sym> sym;
    sym.reserve(word.size());
    auto push_sym = [&](int32_t id) {
      if (id < 0) return;  // no token for this byte (and no unknown token): dropped, as HF does
      const auto n = static_cast<int32_t>(sym.size());
      sym.push_back({id, n - 1, n + 1, true});
    };
    if (spm) {  // characters; one without a token becomes its bytes' tokens (byte fallback)
      for (size_t i = 0; i < word.size();) {
        utf8proc_int32_t cp = -1;
        const utf8proc_ssize_t n =
            utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(word.data() + i),
                             static_cast<utf8proc_ssize_t>(word.size() - i), &cp);
        const size_t len = n > 0 && cp >= 0 ? static_cast<size_t>(n) : 1;
        const auto it = vocab.find(word.substr(i, len));
        if (it != vocab.end() && n > 0 && cp >= 0) {
          push_sym(it->second);
        } else {
          for (size_t k = i; k < i + len; ++k) push_sym(byte_id[static_cast<uint8_t>(word[k])]);
        }
        i += len;
      }
    } else {
      for (char c : word) push_sym(byte_id[static_cast<uint8_t>(c)]);
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    struct Cand {
      int32_t rank, pos, id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
    auto push = [&](int32_t pos) {
      if (pos < 0 || sym[static_cast<size_t>(pos)].next < 0) return;
      const Sym& l = sym[static_cast<size_t>(pos)];
      auto it = merges.find(bpe_detail::pair_key(l.id, sym[static_cast<size_t>(l.next)].id));
      if (it != merges.end()) queue.push({it->second.first, pos, it->second.second});
    };
    for (int32_t p = 0; p + 1 < static_cast<int32_t>(sym.size()); ++p) push(p);
    while (!queue.empty()) {
      const Cand top = queue.top();
      queue.pop();
      Sym& l = sym[static_cast<size_t>(top.pos)];
      if (!l.alive || l.next < 0) continue;
      Sym& r = sym[static_cast<size_t>(l.next)];
      auto it = merges.find(bpe_detail::pair_key(l.id, r.id));
      if (it == merges.end() || it->second.second != top.id) continue;  // stale: the pair changed
      l.id = top.id;
      r.alive = false;
      l.next = r.next;
      if (l.next >= 0) sym[static_cast<size_t>(l.next)].prev = top.pos;
      push(l.prev);
      push(top.pos);
    }
    for (int32_t p = 0; p >= 0; p = sym[static_cast<size_t>(p)].next)
      ids.push_back(sym[static_cast<size_t>(p)].id);
  }
};

}  // namespace sparse24::text
