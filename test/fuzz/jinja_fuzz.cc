// libFuzzer harness: chat templates (src/text/jinja.h). The input is a template, rendered with a small chat
// (three messages, a namespace-friendly context); any outcome but a sparse24::Error (or an output) fails
// the run, as do crashes, leaks and timeouts: hostile templates (deep nesting, endless loops, huge output)
// must end in an Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "sparse24/error.h"
#include "text/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
          {"role": "assistant", "content": " Hello! "}])");
  try {
    sparse24::text::apply_chat_template(source, messages, true, "<s>", "</s>");
  } catch (const sparse24::Error&) {
  }
  return 0;
}
