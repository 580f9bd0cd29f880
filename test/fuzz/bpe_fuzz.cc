// libFuzzer harness: the byte-level BPE loaders and the tokenizer. The first byte chooses the loader: even,
// ByteBpe::from_json on the rest; odd, parse_gguf on the rest then ByteBpe::from_gguf. An accepted tokenizer
// encodes a few texts (and the input itself, usually invalid UTF-8) into ids that are tokens, decodes them,
// and truncation never lengthens the ids.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "text/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using sparse24::text::ByteBpe;
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  std::optional<ByteBpe> parsed;
  try {
    if (data[0] % 2 == 0) {
      parsed.emplace(ByteBpe::from_json(input, "fuzz"));
    } else {
      const sparse24::Gguf g = sparse24::parse_gguf(data + 1, size - 1, "fuzz");
      parsed.emplace(ByteBpe::from_gguf(g, "fuzz"));
    }
  } catch (const sparse24::Error&) {
    return 0;
  }
  const ByteBpe& t = *parsed;
  const char* texts[] = {"Hello, world! it's 2024  ab\n<s> <|im_start|>x", "", " \t\x01 ",
                         "caf\xc3\xa9 \xe4\xb8\xad 12345 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  for (std::string_view s : {std::string_view(texts[0]), std::string_view(texts[1]),
                             std::string_view(texts[2]), std::string_view(texts[3]), input.substr(0, 512)}) {
    const std::vector<int32_t> ids = t.encode(s);
    for (int32_t id : ids) t.token(id);  // throws (and fails the run) on an id without a token
    t.decode(ids);
    t.decode(ids, true);
    t.split(s);
    const std::vector<int32_t> cut = t.encode(s, 64 + static_cast<int64_t>(ids.size() % 7));
    FUZZ_CHECK(cut.size() <= ids.size());
  }
  return 0;
}
