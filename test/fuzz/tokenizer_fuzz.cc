// libFuzzer harness: WordPiece::from_json on the input, then encode and split of a few texts (and of the
// input itself, as text, which is usually invalid UTF-8). An accepted tokenizer must give ids that are
// tokens, never exceed max_length, and change nothing when nothing needs cutting.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include "sparse24/error.h"
#include "text/wordpiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using sparse24::text::WordPiece;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const char* texts[] = {"Hello, WORLD! café Cafe\u0301 中文 İ ß [CLS] <mask> <s>", "", " \t\x01",
                         "unaffable aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  std::optional<WordPiece> parsed;
  try {
    parsed.emplace(WordPiece::from_json(input, "fuzz"));
  } catch (const sparse24::Error&) {
    return 0;
  }
  const WordPiece& wp = *parsed;
  {  // every Error below this point escapes and fails the run
    for (std::string_view t :
         {std::string_view(texts[0]), std::string_view(texts[1]), std::string_view(texts[2]),
          std::string_view(texts[3]), input.substr(0, 512)}) {
      const std::vector<int32_t> all = wp.encode(t, 0).ids;
      for (int32_t id : all) wp.token(id);  // throws (and fails the run) on an id without a token
      for (int64_t max_length : {int64_t{8}, int64_t{64}}) {
        std::vector<int32_t> cut;
        try {
          cut = wp.encode(t, max_length).ids;
        } catch (const sparse24::Error&) {
          continue;  // fewer than the specials
        }
        FUZZ_CHECK(static_cast<int64_t>(cut.size()) <= max_length);
        FUZZ_CHECK(cut.size() <= all.size());
        if (all.size() <= static_cast<size_t>(max_length)) FUZZ_CHECK(cut == all);  // nothing to cut
      }
      wp.split(t);
    }
  }
  return 0;
}
