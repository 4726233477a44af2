// string.find, string.match, string.gmatch and string.gsub as Lua 5.4's (their arguments, anchors,
// empty matches, replacements), over PatternMatcher (harness/lua_matcher.h), which counts steps.
// Lua errors longjmp over the frames here, so nothing on them needs a destructor.
#include "harness/lua_patterns.h"

#include <cctype>
#include <cstddef>
#include <cstring>
#include <lua.hpp>
#include <new>

#include "harness/lua_matcher.h"

namespace mw::harness {

namespace {

constexpr char kEsc = '%';
constexpr ptrdiff_t kPosition = PatternMatcher::kPosition;

unsigned char byte(char c) { return static_cast<unsigned char>(c); }

const PatternLimits& limitsOf(lua_State* L) {
  return *static_cast<const PatternLimits*>(lua_touserdata(L, lua_upvalueindex(1)));
}

// Argument `arg`, a 1-based position that may count from the end, as a 0-based offset; past the
// end stays past it.
size_t startOf(lua_State* L, int arg, size_t len) {
  const lua_Integer pos = luaL_optinteger(L, arg, 1);
  if (pos > 0) return static_cast<size_t>(pos) - 1;
  if (pos == 0 || pos < -static_cast<lua_Integer>(len)) return 0;
  return len - static_cast<size_t>(-pos);
}

bool hasSpecials(const char* p, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    if (p[i] != '\0' && std::strchr("^$*+?.([%-", p[i]) != nullptr) return true;
  }
  return false;
}

// find with plain text: memmem is linear, no budget needed.
int findPlain(lua_State* L, const char* s, size_t len, size_t init, const char* p, size_t plen) {
  const void* at = plen == 0 ? s + init : ::memmem(s + init, len - init, p, plen);
  if (at == nullptr) {
    luaL_pushfail(L);
    return 1;
  }
  const lua_Integer from = static_cast<const char*>(at) - s;
  lua_pushinteger(L, from + 1);
  lua_pushinteger(L, from + static_cast<lua_Integer>(plen));
  return 2;
}

int findOrMatch(lua_State* L, bool find) {
  size_t len = 0, plen = 0;
  const char* s = luaL_checklstring(L, 1, &len);
  const char* p = luaL_checklstring(L, 2, &plen);
  const size_t init = startOf(L, 3, len);
  if (init > len) {
    luaL_pushfail(L);
    return 1;
  }
  if (find && (lua_toboolean(L, 4) || !hasSpecials(p, plen))) {
    return findPlain(L, s, len, init, p, plen);
  }
  const bool anchored = plen > 0 && *p == '^';
  if (anchored) ++p, --plen;
  PatternMatcher m(L, limitsOf(L), find ? "find" : "match", s, len, p, plen);
  const char* from = s + init;
  do {
    if (const char* e = m.matchAt(from, p)) {
      if (!find) return m.pushCaptures(from, e);
      lua_pushinteger(L, from - s + 1);
      lua_pushinteger(L, e - s);
      return m.pushCaptures(nullptr, nullptr) + 2;
    }
  } while (from++ < s + len && !anchored);
  luaL_pushfail(L);
  return 1;
}

int strFind(lua_State* L) { return findOrMatch(L, true); }
int strMatch(lua_State* L) { return findOrMatch(L, false); }

// Where a gmatch iterator is; upvalues: limits, subject, pattern, this.
struct Gmatch {
  size_t from;              // where the next search starts
  ptrdiff_t last_end = -1;  // where the last match ended: an empty match there does not count
};

int gmatchNext(lua_State* L) {
  size_t len = 0, plen = 0;
  const char* s = lua_tolstring(L, lua_upvalueindex(2), &len);
  const char* p = lua_tolstring(L, lua_upvalueindex(3), &plen);
  auto* g = static_cast<Gmatch*>(lua_touserdata(L, lua_upvalueindex(4)));
  PatternMatcher m(L, limitsOf(L), "gmatch", s, len, p, plen);
  for (; g->from <= len; ++g->from) {
    const char* e = m.matchAt(s + g->from, p);
    if (e != nullptr && e - s != g->last_end) {
      const char* start = s + g->from;
      g->from = static_cast<size_t>(e - s);
      g->last_end = e - s;
      return m.pushCaptures(start, e);
    }
  }
  return 0;
}

int strGmatch(lua_State* L) {
  size_t len = 0;
  luaL_checklstring(L, 1, &len);
  luaL_checklstring(L, 2, nullptr);
  size_t init = startOf(L, 3, len);
  if (init > len) init = len + 1;
  lua_settop(L, 2);
  new (lua_newuserdatauv(L, sizeof(Gmatch), 0)) Gmatch{init};
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_pushcclosure(L, gmatchNext, 4);
  return 1;
}

// gsub's replacement string for the match [s, e): %0 to %9 and %% stand for what they name.
void addTemplate(PatternMatcher& m, luaL_Buffer* b, const char* s, const char* e) {
  lua_State* L = m.state();
  size_t len = 0;
  const char* r = lua_tolstring(L, 3, &len);
  const char* end = r + len;
  while (const auto* esc = static_cast<const char*>(std::memchr(r, kEsc, end - r))) {
    luaL_addlstring(b, r, esc - r);
    m.step();  // a long template of empty captures adds nothing, but takes time
    const char c = esc + 1 < end ? esc[1] : '\0';
    if (c == kEsc) {
      luaL_addchar(b, kEsc);
    } else if (c == '0') {
      luaL_addlstring(b, s, e - s);
    } else if (std::isdigit(byte(c))) {
      const char* at = nullptr;
      const ptrdiff_t n = m.capture(c - '1', s, e, &at);
      if (n == kPosition) {
        luaL_addvalue(b);
      } else {
        luaL_addlstring(b, at, static_cast<size_t>(n));
      }
    } else {
      luaL_error(L, "invalid use of '%c' in replacement string", kEsc);
    }
    r = esc + 2;
  }
  luaL_addlstring(b, r, end - r);
}

// Adds the replacement of the match [s, e) to b; false when it kept the match's text (a function
// or table gave nil or false).
bool addReplacement(PatternMatcher& m, luaL_Buffer* b, const char* s, const char* e, int type) {
  lua_State* L = m.state();
  if (type == LUA_TFUNCTION) {
    lua_pushvalue(L, 3);
    lua_call(L, m.pushCaptures(s, e), 1);
  } else if (type == LUA_TTABLE) {
    m.pushCapture(0, s, e);
    lua_gettable(L, 3);
  } else {
    addTemplate(m, b, s, e);
    return true;
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, s, e - s);
    return false;
  }
  if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  }
  luaL_addvalue(b);
  return true;
}

int strGsub(lua_State* L) {
  size_t len = 0, plen = 0;
  const char* src = luaL_checklstring(L, 1, &len);
  const char* p = luaL_checklstring(L, 2, &plen);
  const int type = lua_type(L, 3);
  const lua_Integer max_n = luaL_optinteger(L, 4, static_cast<lua_Integer>(len) + 1);
  luaL_argexpected(
      L, type == LUA_TNUMBER || type == LUA_TSTRING || type == LUA_TFUNCTION || type == LUA_TTABLE,
      3, "string/function/table");
  const bool anchored = plen > 0 && *p == '^';
  if (anchored) ++p, --plen;
  PatternMatcher m(L, limitsOf(L), "gsub", src, len, p, plen);
  luaL_Buffer b;  // in Lua's memory: the sandbox's cap applies to the result
  luaL_buffinit(L, &b);
  const char* s = src;
  const char* end = src + len;
  const char* last = nullptr;  // where the last match ended: an empty match there does not count
  lua_Integer n = 0;
  bool changed = false;
  while (n < max_n) {
    const char* e = m.matchAt(s, p);
    if (e != nullptr && e != last) {
      ++n;
      changed = addReplacement(m, &b, s, e, type) || changed;
      s = last = e;
    } else if (s < end) {
      luaL_addchar(&b, *s++);
    } else {
      break;
    }
    if (anchored) break;
  }
  if (changed) {
    luaL_addlstring(&b, s, end - s);
    luaL_pushresult(&b);
  } else {
    lua_pushvalue(L, 1);
  }
  lua_pushinteger(L, n);
  return 2;
}

}  // namespace

void openGuardedPatterns(lua_State* L, int table, const PatternLimits& limits) {
  table = lua_absindex(L, table);
  new (lua_newuserdatauv(L, sizeof(PatternLimits), 0)) PatternLimits(limits);
  const struct {
    const char* name;
    lua_CFunction f;
  } functions[] = {
      {"find", strFind}, {"match", strMatch}, {"gmatch", strGmatch}, {"gsub", strGsub}};
  for (const auto& fn : functions) {
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, fn.f, 1);
    lua_setfield(L, table, fn.name);
  }
  lua_pop(L, 1);
}

}  // namespace mw::harness
