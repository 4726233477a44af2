// The scenario loader's view of Lua values: what scenario { ... } was given, converted from the Lua
// stack into a plain tree (tables keyed by string, in order; functions kept as registry refs), so
// that validation never touches the Lua state.
#pragma once

#include <lua.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace mw::harness::loader {

struct LVField;

// A Lua value, converted.
struct LV {
  enum class T { kNil, kBool, kNum, kStr, kTable, kFunc } t = T::kNil;
  bool b = false;
  double n = 0;
  std::string s;  // the whole string, NUL bytes included
  // String keys, sorted. (A pair<string, LV> member would need LV complete, which only GCC's
  // library lets pass; LVField is that pair.)
  std::vector<LVField> fields;
  std::vector<LV> items;  // 1..n
  int func_ref = LUA_NOREF;

  const LV* get(const std::string& k) const;
  std::string kindTag() const {
    const LV* k = get("__kind");
    return k && k->t == T::kStr ? k->s : "";
  }
  std::string whereTag(const std::string& fallback) const {
    const LV* w = get("__where");
    return w && w->t == T::kStr ? w->s : fallback;
  }
  std::string typeName() const {
    switch (t) {
      case T::kNil:
        return "nil";
      case T::kBool:
        return "a boolean";
      case T::kNum:
        return "a number";
      case T::kStr:
        return "a string";
      case T::kTable:
        return "a table";
      case T::kFunc:
        return "a function";
    }
    return "?";
  }
  std::string show() const {
    switch (t) {
      case T::kStr:
        return "\"" + s + "\"";
      case T::kNum: {
        std::ostringstream o;
        o << n;
        return o.str();
      }
      case T::kBool:
        return b ? "true" : "false";
      default:
        return typeName();
    }
  }
};

struct LVField {
  std::string first;
  LV second;
};

// Converts the value at `idx`. Errors (non-string keys, cycles, depth) go to `err`. `open`: the
// tables being converted on the way here (a table met again among them contains itself).
LV convert(lua_State* L, int idx, int depth, std::string* err, std::vector<const void*>* open);

}  // namespace mw::harness::loader
