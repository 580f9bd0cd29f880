// Reading tokenizer.json: the field accessors and the opening checks both tokenizers (WordPiece, BPE) share.
// Every problem is an Error "WHAT: problem" (io_detail::fail).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "io/io_util.h"

namespace sparse24::text::tokenizer_json {

using json = nlohmann::json;
using io_detail::fail;
using io_detail::printable;

// obj[key], or nullptr when it is absent or null.
inline const json* member(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

inline bool get_bool(const json& obj, const char* key, bool dflt, const std::string& what,
                     const std::string& where) {
  const json* v = member(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) fail(what, where + "." + key + " must be true or false");
  return v->get<bool>();
}

inline std::string get_string(const json& obj, const char* key, const std::string& what,
                              const std::string& where, const char* dflt = nullptr) {
  const json* v = member(obj, key);
  if (!v) {
    if (dflt) return dflt;
    fail(what, where + "." + key + " is missing");
  }
  if (!v->is_string()) fail(what, where + "." + key + " must be a string");
  return v->get<std::string>();
}

// obj's "type" (obj must be an object).
inline std::string type_of(const json& obj, const std::string& what, const std::string& where) {
  if (!obj.is_object()) fail(what, where + " must be an object");
  return get_string(obj, "type", what, where);
}

// The parsed tokenizer.json, checked to be an object whose model has type `model_type`.
inline json open(std::string_view text, const std::string& what, const std::string& model_type) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(what, "not valid JSON");
  if (!j.is_object()) fail(what, "not a JSON object");
  const json* model = member(j, "model");
  if (!model) fail(what, "model is missing");
  const std::string type = type_of(*model, what, "model");
  if (type != model_type)
    fail(what, "model type '" + printable(type) + "' is not supported (only " + model_type + ")");
  return j;
}

// model.vocab (an object) and added_tokens (an array or absent), and the bound every id must stay below:
// ids index a table, so no id may reach the number of entries (no huge sparse ids).
struct Entries {
  const json* vocab = nullptr;
  const json* added = nullptr;  // may be null
  size_t limit = 0;
};
inline Entries entries(const json& j, const json& model, const std::string& what) {
  Entries e;
  e.vocab = member(model, "vocab");
  if (!e.vocab || !e.vocab->is_object()) fail(what, "model.vocab must be an object {token: id}");
  e.added = member(j, "added_tokens");
  if (e.added && !e.added->is_array()) fail(what, "added_tokens must be an array");
  e.limit = e.vocab->size() + (e.added ? e.added->size() : 0);
  return e;
}

}  // namespace sparse24::text::tokenizer_json
