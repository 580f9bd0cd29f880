// Chat templates' internals (jinja.h): the parsed tree, shared by the parser (jinja_parse.cc) and the
// renderer (jinja.cc), and the values the renderer computes with (jinja_values.cc).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sparse24::text::jinja {

using json = nlohmann::ordered_json;  // objects keep their keys' order, as Python dicts do

constexpr size_t kMaxOutput = size_t{16} << 20;
constexpr int64_t kMaxIterations = 1000000;
constexpr int kMaxDepth = 200;

// Error "chat template line N: msg".
[[noreturn]] void fail(int line, const std::string& msg);

// ---- the tree --------------------------------------------------------------------------------------------

struct Expr {
  enum class K {
    kLit,
    kName,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNot,
    kNeg,
    kBin,
    kList,
    kDict,
    kCond
  } k;
  json lit;
  std::string name;                      // kName, kAttr, kFilter, kTest (its name), kBin (the operator)
  bool negate = false;                   // kTest: `is not`
  std::vector<std::unique_ptr<Expr>> a;  // operands; kCall / kFilter: the callee or subject first
  std::vector<std::string> kw;           // kCall / kFilter: keyword names of the last kw.size() arguments
  int depth = 1;                         // of the tree below (bounded: its destructor recurses)
};
using P = std::unique_ptr<Expr>;

struct Node {
  enum class K { kText, kOut, kIf, kFor, kSet, kBreak, kContinue } k;
  int line = 0;
  std::string text;      // kText
  std::vector<P> exprs;  // kOut: 1; kIf: the conditions; kFor: iterable (+ filter); kSet: value
  std::vector<std::vector<Node>> bodies;  // kIf: one per condition (+ else); kFor: body (+ else)
  std::vector<std::string> targets;       // kFor: loop variables; kSet: name (and attribute)
};

// The template as a tree (an Error naming the line on anything outside the subset).
std::vector<Node> parse(const std::string& source);

// ---- values ----------------------------------------------------------------------------------------------

struct Value {
  enum class K { kUndefined, kJson, kNamespace } k = K::kUndefined;
  json j;
  std::shared_ptr<json> ns;  // a namespace's attributes, shared by every copy of it
  static Value of(json v) {
    Value r;
    r.k = K::kJson;
    r.j = std::move(v);
    return r;
  }
  bool undefined() const { return k == K::kUndefined; }
};

bool truthy(const Value& v);  // jinja2's truth: undefined, none, 0, '' and empty lists and dicts are false
// Python's text of a value, as jinja2 prints it: str of strings and numbers, repr inside lists and dicts.
std::string to_text(const Value& v);
// JSON as Python's json.dumps writes it (ensure_ascii=False, separators ", " and ": "): what tojson gives.
void dump_py_json(const json& j, std::string& out);
std::vector<std::string> chars(const std::string& s);  // UTF-8 code points
std::string strip(const std::string& s, const std::string& set, bool left, bool right);
std::string case_map(std::string s, int how);  // ASCII: 0 lower, 1 upper, 2 capitalize, 3 title
std::string replace_all(std::string s, const std::string& from, const std::string& to);

}  // namespace sparse24::text::jinja
