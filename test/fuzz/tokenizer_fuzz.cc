// libFuzzer harness: WordPiece::from_json on the input, then encode and split of a few texts (and of the
// input itself, as text, which is usually invalid UTF-8). An accepted tokenizer must give ids that are
// tokens, keep its specials under truncation, and never exceed max_length.
#include <cstddef>
#include <cstdint>
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
  try {
    const WordPiece wp = WordPiece::from_json(input, "fuzz");
    for (std::string_view t :
         {std::string_view(texts[0]), std::string_view(texts[1]), std::string_view(texts[2]),
          std::string_view(texts[3]), input.substr(0, 512)}) {
      const std::vector<int32_t> all = wp.encode(t, 0).ids;
      for (int32_t id : all) FUZZ_CHECK(!wp.token(id).empty() || true);  // token() throws on a bad id
      for (int64_t max_length : {int64_t{8}, int64_t{64}}) {
        std::vector<int32_t> cut;
        try {
          cut = wp.encode(t, max_length).ids;
        } catch (const sparse24::Error&) {
          continue;  // fewer than the specials
        }
        FUZZ_CHECK(static_cast<int64_t>(cut.size()) <= max_length);
        FUZZ_CHECK(cut.size() <= all.size());
        FUZZ_CHECK(cut.empty() || cut.back() == all.back());
      }
      wp.split(t);
    }
  } catch (const sparse24::Error&) {
  }
  return 0;
}
