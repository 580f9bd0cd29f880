// The WordPiece tokenizer on a tiny hand-written vocabulary: every normalizer and pre-tokenizer step, the
// model's ## pieces and [UNK] rules, added tokens, the post-processors, truncation, and hostile files.
// (The comparison with Hugging Face on real models and real text is compare_tokenizer.py, label `real`.)
#include "text/wordpiece.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sparse24/error.h"

namespace {

using sparse24::Error;
using sparse24::text::WordPiece;
using json = nlohmann::json;

const std::vector<std::string> kVocab = {
    "[PAD]", "[UNK]", "[CLS]",  "[SEP]", "[MASK]", "hello", ",", "world", "!",      "cafe", "中", "文",
    "un",    "##aff", "##able", "a",     "b",      "ab",    "i", "##̇",    "<mask>", ".",    "x"};

int32_t id(const std::string& t) {
  return static_cast<int32_t>(std::find(kVocab.begin(), kVocab.end(), t) - kVocab.begin());
}

json tokenizer_json() {
  json vocab = json::object();
  for (size_t i = 0; i < kVocab.size(); ++i) vocab[kVocab[i]] = i;
  json added = json::array();
  for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    added.push_back({{"id", id(t)},
                     {"content", t},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer",
           {{"type", "BertNormalizer"},
            {"clean_text", true},
            {"handle_chinese_chars", true},
            {"strip_accents", nullptr},
            {"lowercase", true}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor",
           {{"type", "BertProcessing"}, {"sep", {"[SEP]", id("[SEP]")}}, {"cls", {"[CLS]", id("[CLS]")}}}},
          {"decoder", nullptr},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 100},
            {"vocab", vocab}}}};
}

WordPiece make(const json& j = tokenizer_json()) { return WordPiece::from_json(j.dump(), "test.json"); }

std::vector<int32_t> ids(std::initializer_list<const char*> tokens) {
  std::vector<int32_t> v;
  for (const char* t : tokens) v.push_back(id(t));
  return v;
}

TEST(WordPiece, PunctuationLowercaseAndSpecials) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.encode("Hello, WORLD!", 0).ids, ids({"[CLS]", "hello", ",", "world", "!", "[SEP]"}));
  EXPECT_EQ(wp.split("Hello,world!!"), (std::vector<std::string>{"hello", ",", "world", "!", "!"}));
  EXPECT_EQ(wp.vocab_size(), static_cast<int64_t>(kVocab.size()));
  EXPECT_EQ(wp.unk_id(), id("[UNK]"));
  EXPECT_EQ(wp.pad_id(), id("[PAD]"));
  EXPECT_EQ(wp.token(id("world")), "world");
  EXPECT_THROW(wp.token(-1), Error);
  EXPECT_THROW(wp.token(1000), Error);
}

TEST(WordPiece, AccentsInBothForms) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.encode("Café", 0).ids, ids({"[CLS]", "cafe", "[SEP]"}));
  EXPECT_EQ(wp.encode("Cafe\u0301", 0).ids, ids({"[CLS]", "cafe", "[SEP]"}));
  EXPECT_EQ(wp.encode("\u0301", 0).ids, ids({"[CLS]", "[SEP]"}));  // a lone mark vanishes
}

TEST(WordPiece, ChineseCharactersAreWords) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.split("x中文x"), (std::vector<std::string>{"x", "中", "文", "x"}));
  EXPECT_EQ(wp.encode("中文", 0).ids, ids({"[CLS]", "中", "文", "[SEP]"}));
}

TEST(WordPiece, ContinuationPiecesAndUnknownWords) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.encode("unaffable", 0).ids, ids({"[CLS]", "un", "##aff", "##able", "[SEP]"}));
  EXPECT_EQ(wp.encode("unaffablex ab", 0).ids, ids({"[CLS]", "[UNK]", "ab", "[SEP]"}));  // whole word unk
  EXPECT_EQ(wp.encode("zzz", 0).ids, ids({"[CLS]", "[UNK]", "[SEP]"}));
}

TEST(WordPiece, MaxInputCharsCountsCharactersNotBytes) {
  json j = tokenizer_json();
  j["model"]["max_input_chars_per_word"] = 3;
  j["model"]["vocab"]["éé"] = kVocab.size();
  j["normalizer"]["strip_accents"] = false;
  const WordPiece wp = make(j);
  EXPECT_EQ(wp.encode("éé", 0).ids, (std::vector<int32_t>{id("[CLS]"), static_cast<int32_t>(kVocab.size()),
                                                          id("[SEP]")}));  // 4 bytes, 2 chars
  EXPECT_EQ(wp.encode("abab", 0).ids, ids({"[CLS]", "[UNK]", "[SEP]"}));
}

TEST(WordPiece, CapitalDottedIWithoutAccentStripping) {
  json j = tokenizer_json();
  j["normalizer"]["strip_accents"] = false;
  // Rust's char::to_lowercase('İ') is "i\u0307" (two characters).
  EXPECT_EQ(make(j).split("İ"), (std::vector<std::string>{"i\u0307"}));
  EXPECT_EQ(make(j).encode("İ", 0).ids, ids({"[CLS]", "i", "##̇", "[SEP]"}));
  EXPECT_EQ(make().split("İ"), (std::vector<std::string>{"i"}));  // stripped first, then lowercased
}

TEST(WordPiece, CleanTextDropsControlsAndMapsWhitespace) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.split(std::string("a\x01") + "b\tab\u00a0a\u200bb\ufffdb" + std::string(1, '\0') + "a"),
            (std::vector<std::string>{"ab", "ab", "abba"}));
  EXPECT_EQ(wp.split("a\xff\xfe b"),
            (std::vector<std::string>{"a", "b"}));  // invalid UTF-8 -> U+FFFD -> dropped
}

TEST(WordPiece, EmptyAndBlankText) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.encode("", 0).ids, ids({"[CLS]", "[SEP]"}));
  EXPECT_EQ(wp.encode(" \t\n ", 0).ids, ids({"[CLS]", "[SEP]"}));
  EXPECT_TRUE(wp.split("").empty());
}

TEST(WordPiece, Truncation) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.encode("a b ab a", 4).ids, ids({"[CLS]", "a", "b", "[SEP]"}));
  EXPECT_EQ(wp.encode("a b", 2).ids, ids({"[CLS]", "[SEP]"}));
  EXPECT_EQ(wp.encode("a b", 100).ids, ids({"[CLS]", "a", "b", "[SEP]"}));
  EXPECT_EQ(wp.encode("unaffable", 3).ids, ids({"[CLS]", "un", "[SEP]"}));  // cuts inside a word
  EXPECT_THROW(wp.encode("a", 1), Error);
  EXPECT_THROW(wp.encode("a", -1), Error);
}

TEST(WordPiece, AddedTokensTypedInText) {
  const WordPiece wp = make();
  EXPECT_EQ(wp.encode("a[MASK]b [CLS]", 0).ids, ids({"[CLS]", "a", "[MASK]", "b", "[CLS]", "[SEP]"}));
  EXPECT_EQ(wp.encode("[mask]", 0).ids,
            ids({"[CLS]", "[UNK]", "[UNK]", "[UNK]", "[SEP]"}));  // case-sensitive: '[' 'mask' ']'
  EXPECT_EQ(wp.split("[mask]").size(), 3u);
}

TEST(WordPiece, LstripAddedTokenAndTemplateProcessing) {
  json j = tokenizer_json();
  j["added_tokens"].push_back({{"id", id("<mask>")},
                               {"content", "<mask>"},
                               {"lstrip", true},
                               {"special", true},
                               {"normalized", false}});
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "[CLS]"}}}},
                           {{"Sequence", {{"id", "A"}}}},
                           {{"SpecialToken", {{"id", "E"}}}}}},
                         {"special_tokens",
                          {{"[CLS]", {{"id", "[CLS]"}, {"ids", {id("[CLS]")}}}},
                           {"E", {{"id", "E"}, {"ids", {id("."), id("[SEP]")}}}}}}};
  const WordPiece wp = make(j);
  EXPECT_EQ(wp.split("a   <mask>b"), (std::vector<std::string>{"a", "<mask>", "b"}));
  EXPECT_EQ(wp.encode("a <mask>", 0).ids, ids({"[CLS]", "a", "<mask>", ".", "[SEP]"}));
  EXPECT_EQ(wp.encode("a b x", 4).ids, ids({"[CLS]", "a", ".", "[SEP]"}));  // three specials kept
}

TEST(WordPiece, RobertaProcessingAndPadFromPaddingSection) {
  json j = tokenizer_json();
  j["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"x", id("x")}}, {"cls", {"a", id("a")}}};
  j["padding"] = {{"pad_id", id("b")}};
  const WordPiece wp = make(j);
  EXPECT_EQ(wp.encode("hello", 0).ids, ids({"a", "hello", "x"}));
  EXPECT_EQ(wp.pad_id(), id("b"));
}

TEST(WordPiece, FromDirWithVocabTxt) {
  const auto dir = std::filesystem::temp_directory_path() / ("wp_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream v(dir / "vocab.txt");
    for (const std::string& t : kVocab) v << t << "\r\n";
    std::ofstream c(dir / "tokenizer_config.json");
    c << R"({"do_lower_case": true, "mask_token": {"content": "<mask>", "lstrip": true}})";
  }
  const WordPiece wp = WordPiece::from_dir(dir.string());
  EXPECT_EQ(wp.encode("Hello <mask>  [SEP]", 0).ids, ids({"[CLS]", "hello", "<mask>", "[SEP]", "[SEP]"}));
  std::filesystem::remove_all(dir);
  EXPECT_THROW(WordPiece::from_dir(dir.string()), Error);
}

// Every hostile file is refused with one line that names the file and the problem.
TEST(WordPiece, HostileTokenizerJson) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      WordPiece::from_json(text, "bad.json");
      ADD_FAILURE() << "accepted: " << text.substr(0, 200);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_EQ(what.rfind("bad.json: ", 0), 0u) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what << " (wanted '" << needle << "')";
    }
  };
  auto with = [](const std::string& ptr, const json& v) {
    json j = tokenizer_json();
    j[json::json_pointer(ptr)] = v;
    return j.dump();
  };
  expect_error("", "not valid JSON");
  expect_error("{", "not valid JSON");
  expect_error("[1]", "not a JSON object");
  expect_error("{}", "model is missing");
  expect_error(with("/model/type", "BPE"), "'BPE' is not supported");
  expect_error(with("/model/vocab", json::array()), "model.vocab");
  expect_error(with("/model/vocab/hello", "5"), "model.vocab['hello']");
  expect_error(with("/model/vocab/hello", -1), "model.vocab['hello']");
  expect_error(with("/model/vocab/hello", 1u << 30), "beyond the vocabulary size");
  expect_error(with("/model/vocab/hello", 0), "used twice");
  expect_error(with("/model/unk_token", "<nope>"), "unk_token '<nope>'");
  expect_error(with("/model/unk_token", 3), "model.unk_token must be a string");
  expect_error(with("/model/max_input_chars_per_word", -3), "max_input_chars_per_word");
  expect_error(with("/normalizer/type", "NFKC"), "normalizer type 'NFKC' is not supported");
  expect_error(with("/normalizer", json::object()), "normalizer.type is missing");
  expect_error(with("/normalizer/lowercase", "yes"), "normalizer.lowercase must be true or false");
  expect_error(with("/normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Replace"}}}}}),
               "'Replace' is not supported");
  expect_error(with("/pre_tokenizer/type", "Whitespace"), "pre_tokenizer type 'Whitespace'");
  expect_error(with("/post_processor/type", "ByteLevel"), "post_processor type 'ByteLevel'");
  expect_error(with("/post_processor/cls", "[CLS]"), "post_processor.cls must be [token, id]");
  expect_error(with("/post_processor/cls", {"[CLS]", 999}), "special id 999");
  expect_error(with("/added_tokens", json::object()), "added_tokens must be an array");
  expect_error(with("/added_tokens/0/single_word", true), "single_word is not supported");
  expect_error(with("/added_tokens/0/content", nullptr), "added_tokens[0].content is missing");
  expect_error(with("/added_tokens/0/id", "0"), "added_tokens[0].id");
}

}  // namespace
