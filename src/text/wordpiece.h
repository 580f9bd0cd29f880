// BERT's WordPiece tokenizer (also MPNet's), producing the same ids as Hugging Face `tokenizers` for the
// tokenizer.json sections it supports (docs/formats.md, "tokenizer.json"):
//   normalizer      BertNormalizer, or a Sequence of them (or null)
//   pre_tokenizer   BertPreTokenizer (or null: the normalized text is one word)
//   model           WordPiece
//   post_processor  BertProcessing, RobertaProcessing, TemplateProcessing (single sequence), or null
//   added_tokens    matched in the raw text (normalized: false) or in the normalized text (normalized: true)
//                   before pre-tokenization, with lstrip/rstrip; single_word is refused
// Anything else is refused when the file is read, with one sparse24::Error line naming the file and the type.
// The file's `truncation` and `padding` sections are ignored: encode's max_length decides, padding is the
// caller's.
//
// Input text is UTF-8. Invalid bytes (what Python can never pass to HF) are each replaced by U+FFFD, which
// clean_text then drops; without clean_text the U+FFFD stays and usually becomes [UNK].
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sparse24::text {

struct Encoding {
  std::vector<int32_t> ids;  // with the special tokens ([CLS] ... [SEP] or <s> ... </s>), truncated
};

class WordPiece {
 public:
  // DIR/tokenizer.json, else DIR/vocab.txt + DIR/tokenizer_config.json (do_lower_case, strip_accents,
  // tokenize_chinese_chars, special tokens).
  static WordPiece from_dir(const std::string& dir);
  // Parses a tokenizer.json text; `what` names it in errors.
  static WordPiece from_json(std::string_view json, const std::string& what);

  // max_length: total tokens including the special ones (0 = no truncation). Truncation keeps the first
  // max_length - (number of special tokens) tokens of the text and then adds the specials, as HF's
  // enable_truncation(max_length) does for one sequence. Error if max_length is below the specials' count.
  Encoding encode(std::string_view utf8, int64_t max_length) const;
  // The normalized, pre-tokenized words (added tokens found in the text are words of their own).
  std::vector<std::string> split(std::string_view utf8) const;

  int32_t pad_id() const;  // the padding token's id ([PAD], <pad>), else 0
  int32_t unk_id() const;
  int64_t vocab_size() const;                  // 1 + the largest id
  const std::string& token(int32_t id) const;  // Error if no token has this id

  struct Impl;

 private:
  explicit WordPiece(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace sparse24::text
