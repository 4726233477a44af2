// The sandboxed Lua state of scenario code: memory cap, time budget per entry, trimmed library.
//
// The time budget is a count hook that compares the clock with the entry's deadline (and looks at
// the interrupt flag) every kHookEvery instructions. Past it, the hook raises an error, and from
// then on it runs before every instruction and raises again: code that catches the error with pcall
// cannot execute a single instruction more, so it unwinds to the harness.
//
// Lua runs no hook in C code, in a __gc finalizer, or in a message handler called for an error
// that a hook raised. So what could loop there is taken away or replaced: finalizers are refused;
// xpcall runs its handler after the error has unwound; and the library functions whose C loops a
// script can make endless (string.rep of empty strings; table.insert, table.remove and table.move
// under a __len or with huge bounds) are replaced by ones that look at the deadline as they go;
// pattern matching, which can backtrack for ages, by one that counts its steps
// (harness/lua_patterns.h) and looks at the deadline every 1024 of them.
#include "harness/lua_sandbox.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <lua.hpp>

#include "harness/lua_patterns.h"

namespace mw::harness {

namespace {

constexpr int kHookEvery = 1000;          // instructions between two looks at the clock
constexpr lua_Integer kLoopEvery = 1024;  // steps of a C loop between two looks

int panic(lua_State* L) {
  const char* msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
  std::fprintf(stderr, "mwchaos: unprotected error in a Lua call: %s\n", msg);
  std::fflush(stderr);
  return 0;  // Lua aborts
}

void loopStep(lua_State* L, lua_Integer step) {
  if (step % kLoopEvery == 0) LuaSandbox::checkLimits(L);
}

// string.rep: Lua's own copies n empty pieces one by one, an endless loop in C for a huge n.
int stringRep(lua_State* L) {
  size_t len = 0, sep_len = 0;
  luaL_checklstring(L, 1, &len);
  const lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &sep_len);
  if (n > 0 && len == 0 && sep_len == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

// setmetatable, refusing finalizers: Lua runs them with hooks off, where no budget can stop them.
int baseSetmetatable(lua_State* L) {
  const int t = lua_type(L, 2);
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
  if (t == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL) {
      return luaL_error(L,
                        "setmetatable: a metatable with __gc is not allowed in scenarios (Lua runs "
                        "finalizers where no time budget can stop them)");
    }
    lua_pop(L, 1);
  }
  if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL) {
    return luaL_error(L, "cannot change a protected metatable");
  }
  lua_settop(L, 2);
  lua_setmetatable(L, 1);
  return 1;
}

// load, for text chunks only: mutated bytecode can crash the Lua VM.
int baseLoad(lua_State* L) {
  const bool env = lua_gettop(L) >= 4;  // given, even as nil: the chunk gets that environment
  lua_settop(L, 4);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushliteral(L, "t");
  if (env) lua_pushvalue(L, 4);
  lua_call(L, env ? 4 : 3, LUA_MULTRET);
  return lua_gettop(L) - 4;
}

// xpcall, running the message handler once the error has unwound rather than where it was
// raised: for an error raised by the time budget's hook, Lua would run it with hooks off, where an
// endless handler could not be stopped. (Without the debug library, a handler cannot look at the
// stack anyway.) A handler that fails gives its own error, where Lua's gives "error in error
// handling".
int baseXpcall(lua_State* L) {
  const int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  luaL_checkstack(L, n, "too many arguments");
  lua_pushvalue(L, 1);
  for (int i = 3; i <= n; ++i) lua_pushvalue(L, i);
  const int status = lua_pcall(L, n - 2, LUA_MULTRET, 0);
  if (status == LUA_OK) {
    lua_pushboolean(L, 1);
    lua_rotate(L, n + 1, 1);
    return lua_gettop(L) - n;
  }
  if (status != LUA_ERRMEM) {  // Lua calls no handler for a memory error
    lua_pushvalue(L, 2);
    lua_insert(L, -2);
    lua_pcall(L, 1, 1, 0);
  }
  lua_pushboolean(L, 0);
  lua_insert(L, -2);
  return 2;
}

// table.insert, table.remove and table.move as in Lua 5.4's ltablib.c, with a look at the
// deadline every kLoopEvery steps of their loops.
constexpr int kTabR = 1, kTabW = 2, kTabL = 4;

bool hasField(lua_State* L, const char* key, int n) {
  lua_pushstring(L, key);
  return lua_rawget(L, -n) != LUA_TNIL;
}

void checkTable(lua_State* L, int arg, int what) {
  if (lua_type(L, arg) == LUA_TTABLE) return;
  int n = 1;
  if (lua_getmetatable(L, arg) && (!(what & kTabR) || hasField(L, "__index", ++n)) &&
      (!(what & kTabW) || hasField(L, "__newindex", ++n)) &&
      (!(what & kTabL) || hasField(L, "__len", ++n))) {
    lua_pop(L, n);
  } else {
    luaL_checktype(L, arg, LUA_TTABLE);
  }
}

lua_Integer length(lua_State* L, int arg, int what) {
  checkTable(L, arg, what | kTabL);
  return luaL_len(L, arg);
}

int tableInsert(lua_State* L) {
  const lua_Integer e = static_cast<lua_Integer>(
      static_cast<lua_Unsigned>(length(L, 1, kTabR | kTabW)) + 1u);  // first empty element
  lua_Integer pos = e;
  switch (lua_gettop(L)) {
    case 2:
      break;
    case 3: {
      pos = luaL_checkinteger(L, 2);
      luaL_argcheck(L, static_cast<lua_Unsigned>(pos) - 1u < static_cast<lua_Unsigned>(e), 2,
                    "position out of bounds");
      lua_Integer step = 0;
      for (lua_Integer i = e; i > pos; i--) {
        loopStep(L, ++step);
        lua_geti(L, 1, i - 1);
        lua_seti(L, 1, i);
      }
      break;
    }
    default:
      return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

int tableRemove(lua_State* L) {
  const lua_Integer size = length(L, 1, kTabR | kTabW);
  lua_Integer pos = luaL_optinteger(L, 2, size);
  if (pos != size) {
    luaL_argcheck(L, static_cast<lua_Unsigned>(pos) - 1u <= static_cast<lua_Unsigned>(size), 2,
                  "position out of bounds");
  }
  lua_geti(L, 1, pos);
  for (lua_Integer step = 0; pos < size; pos++) {
    loopStep(L, ++step);
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

int tableMove(lua_State* L) {
  const lua_Integer f = luaL_checkinteger(L, 2);
  const lua_Integer e = luaL_checkinteger(L, 3);
  const lua_Integer t = luaL_checkinteger(L, 4);
  const int tt = !lua_isnoneornil(L, 5) ? 5 : 1;  // destination table
  checkTable(L, 1, kTabR);
  checkTable(L, tt, kTabW);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    const lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    if (t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
      for (lua_Integer i = 0; i < n; i++) {
        loopStep(L, i + 1);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    } else {
      for (lua_Integer i = n - 1; i >= 0; i--) {
        loopStep(L, n - i);
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
      }
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

// Sets field `name` of the table at the top to a C closure over the field's old value.
void replace(lua_State* L, const char* name, lua_CFunction f) {
  lua_pushstring(L, name);
  lua_rawget(L, -2);
  lua_pushcclosure(L, f, 1);
  lua_pushstring(L, name);
  lua_insert(L, -2);
  lua_rawset(L, -3);
}

void clear(lua_State* L, const char* name) {
  lua_pushstring(L, name);
  lua_pushnil(L);
  lua_rawset(L, -3);
}

// Run in protected mode by seal().
int sealState(lua_State* L) {
  lua_pushglobaltable(L);
  for (const char* name : {"debug", "os", "io", "package", "require", "dofile", "loadfile"}) {
    clear(L, name);
  }
  replace(L, "load", baseLoad);
  replace(L, "setmetatable", baseSetmetatable);
  replace(L, "xpcall", baseXpcall);
  lua_pushliteral(L, "string");
  lua_rawget(L, -2);
  clear(L, "dump");  // bytecode can be neither made nor loaded
  replace(L, "rep", stringRep);
  void* box = nullptr;
  lua_getallocf(L, &box);
  PatternLimits patterns;
  patterns.max_steps = static_cast<LuaSandbox*>(box)->limits().pattern_steps;
  patterns.poll = &LuaSandbox::checkLimits;
  openGuardedPatterns(L, -1, patterns);
  lua_pop(L, 1);
  lua_pushliteral(L, "table");
  lua_rawget(L, -2);
  replace(L, "insert", tableInsert);
  replace(L, "remove", tableRemove);
  replace(L, "move", tableMove);
  lua_pop(L, 2);
  return 0;
}

}  // namespace

LuaSandbox::LuaSandbox(const LuaLimits& limits) : limits_(limits) {
  time_message_ = "scenario code exceeded its time budget of " +
                  std::to_string(limits_.time_budget.count()) +
                  " ms (mwchaos --lua-time-budget-ms N changes it)";
  L_ = lua_newstate(&LuaSandbox::allocate, this);
  if (L_ == nullptr) return;
  lua_atpanic(L_, panic);
  Uncapped uncapped(*this);
  luaL_requiref(L_, "_G", luaopen_base, 1);
  luaL_requiref(L_, LUA_STRLIBNAME, luaopen_string, 1);
  luaL_requiref(L_, LUA_TABLIBNAME, luaopen_table, 1);
  luaL_requiref(L_, LUA_MATHLIBNAME, luaopen_math, 1);
  luaL_requiref(L_, LUA_DBLIBNAME, luaopen_debug, 1);
  lua_settop(L_, 0);
  beginEntry();
}

LuaSandbox::~LuaSandbox() {
  if (L_ == nullptr) return;
  beginEntry();  // no finalizer can run (seal), but closing stays under a budget all the same
  lua_close(L_);
}

std::optional<std::string> LuaSandbox::seal() {
  lua_pushcfunction(L_, sealState);
  return call(0, 0);
}

void LuaSandbox::beginEntry() {
  deadline_ = std::chrono::steady_clock::now() + limits_.time_budget;
  stop_ = Stop::kNone;
  refused_ = false;
  lua_sethook(L_, &LuaSandbox::hook, LUA_MASKCOUNT, kHookEvery);
}

std::optional<std::string> LuaSandbox::call(int nargs, int nresults) {
  const int status = lua_pcall(L_, nargs, nresults, 0);
  if (status == LUA_OK) return std::nullopt;
  std::string msg;
  {
    Uncapped uncapped(*this);  // a number is turned into a string in place
    const int t = lua_type(L_, -1);
    if (t == LUA_TSTRING || t == LUA_TNUMBER) {
      msg = lua_tostring(L_, -1);
    } else {
      msg = std::string("(error object is a ") + luaL_typename(L_, -1) + " value)";
    }
  }
  lua_pop(L_, 1);
  if (status == LUA_ERRMEM || (refused_ && msg == "not enough memory")) return memoryMessage();
  if (stop_ != Stop::kNone && msg.find(stopMessage()) == std::string::npos) return stopMessage();
  return msg;
}

const char* LuaSandbox::stopMessage() const {
  return stop_ == Stop::kInterrupted ? interruptMessage() : time_message_.c_str();
}

std::string LuaSandbox::memoryMessage() const {
  return "scenario code exceeded its memory cap of " + std::to_string(limits_.memory_bytes >> 20) +
         " MiB (mwchaos --lua-memory-mb N changes it)";
}

void* LuaSandbox::allocate(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* box = static_cast<LuaSandbox*>(ud);
  const size_t old = ptr != nullptr ? osize : 0;  // without ptr, osize is the kind of object
  if (nsize == 0) {
    std::free(ptr);
    box->used_ -= old;
    return nullptr;
  }
  if (nsize > old && box->capped_) {
    const size_t cap = box->limits_.memory_bytes;
    const size_t used = box->used_ < cap ? box->used_ : cap;
    if (nsize - old > cap - used) {
      box->refused_ = true;
      return nullptr;  // Lua raises "not enough memory" (LUA_ERRMEM)
    }
  }
  void* p = std::realloc(ptr, nsize);
  if (p == nullptr) return nullptr;
  box->used_ = box->used_ - old + nsize;
  return p;
}

void LuaSandbox::hook(lua_State* L, lua_Debug*) { checkLimits(L); }

void LuaSandbox::checkLimits(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  auto* box = static_cast<LuaSandbox*>(ud);
  if (box->stop_ == Stop::kNone) {
    const std::atomic<bool>* interrupted = box->limits_.interrupted;
    if (interrupted != nullptr && interrupted->load(std::memory_order_relaxed)) {
      box->stop_ = Stop::kInterrupted;
    } else if (std::chrono::steady_clock::now() >= box->deadline_) {
      box->stop_ = Stop::kExpired;
    } else {
      return;
    }
    // From now on before every instruction: code that catches the error cannot run on.
    lua_sethook(L, &LuaSandbox::hook, LUA_MASKCOUNT, 1);
  }
  // The message names the innermost line of scenario code (the harness's chunks are "=mw ...").
  lua_Debug frame;
  for (int level = 0; level < 64 && lua_getstack(L, level, &frame) != 0; ++level) {
    lua_getinfo(L, "Sl", &frame);
    if (frame.currentline > 0 && std::strncmp(frame.source, "=mw ", 4) != 0) {
      lua_pushfstring(L, "%s:%d: %s", frame.short_src, frame.currentline, box->stopMessage());
      lua_error(L);
    }
  }
  lua_pushstring(L, box->stopMessage());
  lua_error(L);
}

}  // namespace mw::harness
