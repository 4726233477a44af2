#include "harness/lua_value.h"

#include <algorithm>
#include <sstream>

namespace mw::harness::loader {

const LV* LV::get(const std::string& k) const {
  for (const auto& [key, v] : fields) {
    if (key == k) return &v;
  }
  return nullptr;
}

// Converts the value at `idx`. Errors (non-string keys, cycles, depth) go to `err`. `open`: the
// tables being converted on the way here (a table met again among them contains itself).
LV convert(lua_State* L, int idx, int depth, std::string* err, std::vector<const void*>* open) {
  LV v;
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return v;
    case LUA_TBOOLEAN:
      v.t = LV::T::kBool;
      v.b = lua_toboolean(L, idx) != 0;
      return v;
    case LUA_TNUMBER:
      v.t = LV::T::kNum;
      v.n = lua_tonumber(L, idx);
      return v;
    case LUA_TSTRING: {
      // All of it: a NUL inside is the validator's to refuse (Validator::str), not to cut at.
      size_t len = 0;
      const char* s = lua_tolstring(L, idx, &len);
      v.t = LV::T::kStr;
      v.s.assign(s, len);
      return v;
    }
    case LUA_TFUNCTION:
      v.t = LV::T::kFunc;
      lua_pushvalue(L, idx);
      v.func_ref = luaL_ref(L, LUA_REGISTRYINDEX);
      return v;
    case LUA_TTABLE:
      break;
    default:
      if (err->empty()) *err = std::string("unsupported value of type ") + luaL_typename(L, idx);
      return v;
  }
  v.t = LV::T::kTable;
  const void* self = lua_topointer(L, idx);
  if (std::find(open->begin(), open->end(), self) != open->end()) {
    if (err->empty()) *err = "a table contains itself (a cycle): scenario tables must be trees";
    return v;
  }
  // Each level holds a key and a value on the Lua stack: without room, Lua writes past its end.
  if (depth > 32 || !lua_checkstack(L, 4)) {
    if (err->empty()) *err = "tables nested more than 32 deep";
    return v;
  }
  open->push_back(self);
  lua_Integer len = static_cast<lua_Integer>(lua_rawlen(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      size_t len = 0;
      const char* k = lua_tolstring(L, -2, &len);
      std::string key(k, len);
      v.fields.push_back(LVField{key, convert(L, -1, depth + 1, err, open)});
    } else if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= len) {
      // sequence part: collected in order below
    } else if (err->empty()) {
      *err = "a table key must be a string or a position 1..n";
    }
    lua_pop(L, 1);
  }
  for (lua_Integer i = 1; i <= len; ++i) {
    lua_rawgeti(L, idx, i);
    v.items.push_back(convert(L, -1, depth + 1, err, open));
    lua_pop(L, 1);
  }
  open->pop_back();
  std::sort(v.fields.begin(), v.fields.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return v;
}

}  // namespace mw::harness::loader
