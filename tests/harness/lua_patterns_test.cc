// The guarded pattern functions (harness/lua_patterns.h) against Lua 5.4's own: the same results
// and the same error messages for hand-picked and random calls; and, where Lua's would run for
// ages, an error about the budget, the time budget or an interrupt, quickly.
#include "harness/lua_patterns.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <lua.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/lua_sandbox.h"

namespace mw::harness {
namespace {

using Clock = std::chrono::steady_clock;

// Serializes every value a call returns, and collects what a gmatch iterator gives.
constexpr const char* kHelpers = R"lua(
function ser(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) ~= "table" then return tostring(v) end  -- tells 1 from 1.0
  local parts = {}
  for i = 1, v.n or #v do parts[#parts + 1] = ser(v[i]) end
  return "{" .. table.concat(parts, ",") .. "}"
end
function collect(it)
  local all = {}
  for _ = 1, 100 do
    local v = table.pack(it())
    if v[1] == nil then break end
    all[#all + 1] = v
  end
  return all
end
function wrap(...) return "<" .. table.concat({ ... }, "|") .. ">" end
function odd(c) if c == "a" then return nil end return c == "b" and false or "[" .. c .. "]" end
T = { a = "A", b = false, ab = 7, [1] = "one", [2] = true }
)lua";

// A Lua state with the standard libraries and, when `limits` is given, the guarded patterns.
class State {
 public:
  explicit State(const PatternLimits* limits) : L_(luaL_newstate()) {
    luaL_openlibs(L_);
    if (limits != nullptr) {
      lua_getglobal(L_, "string");
      openGuardedPatterns(L_, -1, *limits);
      lua_pop(L_, 1);
    }
    REQUIRE(luaL_dostring(L_, kHelpers) == LUA_OK);
  }
  ~State() { lua_close(L_); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  void set(const char* name, const std::string& value) {
    lua_pushlstring(L_, value.data(), value.size());
    lua_setglobal(L_, name);
  }

  // What pcall of `expr` gives, serialized: {true,...results} or {false,"message"}.
  std::string run(const std::string& expr) {
    const std::string code = "return ser(table.pack(pcall(function() return " + expr + " end)))";
    if (luaL_loadbuffer(L_, code.data(), code.size(), "=case") != LUA_OK ||
        lua_pcall(L_, 0, 1, 0) != LUA_OK) {
      std::string err = lua_tostring(L_, -1);
      lua_pop(L_, 1);
      return "harness error: " + err;
    }
    std::string out = lua_tostring(L_, -1);
    lua_pop(L_, 1);
    return out;
  }

 private:
  lua_State* L_;
};

PatternLimits generous() {
  PatternLimits limits;
  limits.max_steps = kDefaultLuaPatternSteps;
  return limits;
}

struct Pair {
  Pair() : limits(generous()), stock(nullptr), guarded(&limits) {}
  void set(const char* name, const std::string& value) {
    stock.set(name, value);
    guarded.set(name, value);
  }
  void same(const std::string& expr) {
    const std::string want = stock.run(expr);
    INFO(expr);
    CHECK(guarded.run(expr) == want);
    ++compared;
  }
  PatternLimits limits;
  State stock;
  State guarded;
  int compared = 0;
};

// Each line a call whose results (or error) are compared; "--" lines are comments.
constexpr const char* kCases = R"lua(
-- find: init, plain, anchors, empty patterns, specials
string.find("hello world", "o w")
string.find("hello", "l")
string.find("hello", "l", 4)
string.find("hello", "l", -1)
string.find("hello", "l", -100)
string.find("hello", "", 6)
string.find("hello", "", 7)
string.find("hello", "", 0)
string.find("a.b", ".", 1, true)
string.find("a.b", "%.", 1)
string.find("a+b", "+", 1, true)
string.find("a\0b", "\0")
string.find("a\0b", "%z")
string.find("abc", "^b")
string.find("abc", "^a")
string.find("abc", "c$")
string.find("abc", "b$")
string.find("a$c", "$c")
string.find("abc", "^")
string.find("", "")
string.find("", "^$")
string.find("abc", "()b()")
string.find("abc", "(b)(c)")
string.find(12345, 34)
string.find("x", "x", 1.0)
("hello"):find("l+")
string.find("aaa", "a-", 2)
string.find("a^b", "a^b")
string.find("abc", "[^", 1, true)
-- classes, sets, %b, %f, back-references, captures
string.match("  x1_Y-z!\t\n", "%s*(%w+)(%p)(%u)")
string.match("ABC def 123 0xFF", "(%l+) (%d+) (%x+)")
string.match("\1\127abc", "%c+")
string.match(" a~", "%g+")
string.match("abc123", "%A+")
string.match("abc 123", "%S+%s%D*(%d)")
string.match("hello]", "[]]")
string.match("a-b", "[a-]+")
string.match("abcd", "[a-c]+")
string.match("-abcd", "[%a-c]+")
string.match("a-b", "[-b]+")
string.match("xyz", "[^%a]")
string.match("x]y", "[%]]")
string.match("a^b", "[b^]+")
string.match("date 2024-01-31", "(%d+)-(%d+)-(%d+)")
string.match("f(a(b)c)d", "%b()")
string.match("f(a(b)c", "%b()")
string.match("||x||", "%b||")
string.match("THE (quick) fox", "%f[%a]%a+")
string.match("THE (quick) fox", "%f[%l]%a+")
string.match("abc", "%f[%z]")
string.match("abc", ".-%f[^%a]")
string.match("x = 'a' .. 'b'", "(['\"])(.-)%1")
string.match("abcabc", "(a)(b)(c)%1%2%3")
string.match("aaa", "(a*)%1")
string.match("hello", "(h)(e)(l)(l)(o)")
string.match("hello", "()ll()")
string.match("hello", ".-(l+)(.*)")
string.match("hello", "x?h?e?")
string.match("hello", "^(h?)(.+)$")
string.match("aaab", "a-b")
string.match("aaab", "^a-$")
string.match("key = value", "^(%w+)%s*=%s*(%w+)$")
string.match("[[x]]", "%[%[(.*)%]%]")
string.match("ab", "(a)(b)", 2)
string.match("\200\201", "[\200-\255]+")
string.match("é", "%a")
-- gmatch, with init and empty matches
collect(string.gmatch("one two  three", "%a+"))
collect(string.gmatch("k1=v1, k2=v2", "(%w+)=(%w+)"))
collect(string.gmatch("abc", ""))
collect(string.gmatch("abc", "b*"))
collect(string.gmatch("abc", "()"))
collect(string.gmatch("hello", "l", 4))
collect(string.gmatch("hello", ".", -2))
collect(string.gmatch("hello", ".", 10))
collect(string.gmatch("a^b", "^."))
collect(string.gmatch("aaa", "a-"))
-- gsub: string, number, table and function replacements, n, anchors
string.gsub("hello world", "o", "0")
string.gsub("hello", "", "-")
string.gsub("abc", "b*", "-")
string.gsub("hello", "l", "%0%0")
string.gsub("hello", "(l)(l)", "%2%1")
string.gsub("abc", "%w", "%1")
string.gsub("abc", "()b", "%1")
string.gsub("abc", "b", "%%")
string.gsub("abc", "b", 5)
string.gsub("abc", "b", 1.5)
string.gsub("hello", "l", "L", 1)
string.gsub("hello", "l", "L", 0)
string.gsub("hello", "l", "L", -1)
string.gsub("hello", "^h", "H")
string.gsub("hello", "^l", "L")
string.gsub("hello", "^", ">")
string.gsub("hello", "$", "<")
string.gsub("abab", "%w+", T)
string.gsub("a b ab", "%w+", T)
string.gsub("xy", "()", T)
string.gsub("abc", "%w", odd)
string.gsub("a=1, b=2", "(%w+)=(%w+)", wrap)
string.gsub("abc", "()(b)()", wrap)
string.gsub(123, 2, 9)
string.gsub("abc", "b", "%0%0", 1.0)
("x y"):gsub("%s", "_")
-- errors, and depth and capture limits
string.find("abc", "%")
string.find("abc", "[a")
string.find("abc", "[%")
string.find("abc", "[^")
string.find("abc", "[")
string.find("abc", "%f")
string.find("abc", "%fa")
string.find("abc", "%b")
string.find("abc", "%ba")
string.find("abc", "%1")
string.find("abc", "(a%1")
string.find("abc", "(a)%2")
string.find("abc", "%0")
string.find("abc", "a)")
string.find("abc", ")")
string.match("abc", "(a")
string.match("abc", "()%1")
string.gsub("abc", "b", "%2")
string.gsub("abc", "b", "%")
string.gsub("abc", "b", "%x")
string.gsub("abc", "(b)", "%2")
string.gsub("abc", "(b", "%1")
string.gsub("abc", "b")
string.gsub("abc", "b", true)
string.gsub("abc", "b", "x", "n")
string.gsub("abc", "b", "x", 1.5)
string.gsub("abc", "b", { b = true })
string.gsub("abc", "b", function() return {} end)
string.gsub("abc", "b", function() error("inner") end)
string.find("abc", "b", 1.5)
string.find("abc", "b", "x")
string.find("abc")
string.find({}, "a")
string.match()
("abc"):find({})
("abc"):gsub("b", nil)
string.gmatch("abc")
collect(string.gmatch("abc", "%"))
collect(string.gmatch("abc", "(()"))
string.match(string.rep("a", 300), string.rep("a?", 300))
string.match(string.rep("a", 300), string.rep("a?", 199))
string.match(string.rep("a", 300), string.rep("(a)", 32))
string.match(string.rep("a", 300), string.rep("(a)", 33))
string.find("abc", string.rep("()", 33))
)lua";

TEST_CASE("guarded patterns give what Lua's give, errors included", "[harness][lua]") {
  Pair p;
  std::string expr;
  std::istringstream lines(kCases);
  while (std::getline(lines, expr)) {
    if (!expr.empty() && expr.rfind("--", 0) != 0) p.same(expr);
  }
  CHECK(p.compared > 140);
}

// Random subjects and patterns from a small alphabet: many malformed, many matching.
TEST_CASE("guarded patterns agree with Lua's on random calls", "[harness][lua]") {
  Pair p;
  std::mt19937 rng(20240521);
  const std::vector<std::string> chars = {
      "a", "b", "c", "A", "(", ")", "%", " ", "1", "-", "]", ".", std::string(1, '\0')};
  const std::vector<std::string> items = {
      "a",      "b",       ".",      "%a", "%d", "%s", "%W", "[ab]", "[^a]",
      "[a-c]",  "[b-c%d]", "[%d%]]", "(",  ")",  "()", "%1", "%2",   "%b()",
      "%f[%w]", "%f[%s]",  "^",      "$",  "%",  "[",  "%%", "%(",   "%.",
      "[]a]",   "%z",      " ",      "-",  "*",  "+",  "?",  "%b",   "1"};
  const std::vector<std::string> reps = {"%0", "%1", "<%2>", "x", "%%", "%", "", "%3"};
  auto pick = [&](const std::vector<std::string>& from) {
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
  };
  auto count = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 400; ++i) {
    std::string s, pat;
    for (int n = count(0, 12); n > 0; --n) s += pick(chars);
    for (int n = count(1, 6); n > 0; --n) pat += pick(items);
    p.set("S", s);
    p.set("P", pat);
    p.set("R", pick(reps));
    const std::string init = std::to_string(count(-4, 14));
    p.same("string.find(S, P)");
    p.same("string.find(S, P, " + init + ")");
    p.same("string.find(S, P, " + init + ", true)");
    p.same("string.match(S, P, " + init + ")");
    p.same("collect(string.gmatch(S, P, " + init + "))");
    p.same("string.gsub(S, P, R)");
    p.same("string.gsub(S, P, R, " + std::to_string(count(-1, 3)) + ")");
    p.same("string.gsub(S, P, wrap)");
  }
  CHECK(p.compared == 3200);
}

// Calls that Lua's own functions would run for ages (years for the first ones), with the function
// the budget's error names. The last ones are quadratic, not exponential: as endless on a long
// subject.
constexpr const char* kBombs = R"lua(
find string.find(("a"):rep(40), ("a*"):rep(40) .. "b")
match string.match(("a"):rep(40), ("a*"):rep(40) .. "b")
gmatch collect(string.gmatch(("a"):rep(40), ("a*"):rep(40) .. "b"))
gsub string.gsub(("a"):rep(40), ("a*"):rep(40) .. "b", "x")
find (("a"):rep(40)):find(("a*"):rep(40) .. "b")
find string.find(("a"):rep(25), ("a-"):rep(25) .. "b")
match string.match(("a"):rep(30), ("(a*)"):rep(30) .. "b")
gsub string.gsub(("("):rep(200000), "%b()", "")
gsub string.gsub(("a"):rep(100000), "", ("%1"):rep(100000))
find string.find(("a"):rep(100000), "(a*)%1%1%1%1%1%1%1%1b")
)lua";

// The bombs' hang guard, not a speed target (the step budget is what bounds them): each ends in
// at most 1.8 s in a release build, 5.7 s under ASan in one gate run, where the gate widens time
// bounds by MW_TEST_TIME_SCALE (3).
double bombSeconds() {
  const char* s = std::getenv("MW_TEST_TIME_SCALE");
  const double scale = s != nullptr ? std::atof(s) : 1.0;
  return 5.0 * (scale > 0 ? scale : 1.0);
}

TEST_CASE("a pattern that backtracks for ages ends with the budget's error", "[harness][lua]") {
  const PatternLimits limits = generous();
  State guarded(&limits);
  std::istringstream lines(kBombs);
  int bombs = 0;
  for (std::string fn, expr; lines >> fn && std::getline(lines, expr); ++bombs) {
    const auto t0 = Clock::now();
    const std::string msg = guarded.run(expr);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    INFO(expr << " took " << took << " s: " << msg);
    CHECK_THAT(msg,
               Catch::StartsWith("{false,") &&
                   Catch::EndsWith(": string." + fn +
                                   ": pattern matching exceeded its budget of 100000000 steps\"}"));
    CHECK(took < bombSeconds());
  }
  CHECK(bombs == 10);
}

TEST_CASE("the poll runs as a match goes, and can stop it", "[harness][lua]") {
  static int polls = 0;
  static bool stop = false;
  PatternLimits limits;
  limits.max_steps = 1000000;
  limits.poll = [](lua_State* L) {
    ++polls;
    if (stop) luaL_error(L, "stopped by the poll");
  };
  State guarded(&limits);
  const std::string bomb = R"(string.find(string.rep("a", 40), string.rep("a*", 40) .. "b"))";
  CHECK(guarded.run(bomb) ==
        "{false,\"case:1: string.find: pattern matching exceeded its budget of 1000000 steps\"}");
  CHECK(polls >= 900);
  CHECK(polls <= 1000);
  stop = true;
  CHECK(guarded.run(bomb) == "{false,\"case:1: stopped by the poll\"}");
  CHECK(guarded.run(R"(string.find("abc", "b"))") == "{true,2,2}");  // no steps: plain text
}

// Runs `code` as scenario code (chunk "t") in a sealed sandbox; its error, or "" on success.
std::string inSandbox(LuaSandbox& box, const std::string& code) {
  lua_State* L = box.state();
  REQUIRE(L != nullptr);
  REQUIRE(luaL_loadbufferx(L, code.data(), code.size(), "=t", "t") == LUA_OK);
  box.beginEntry();
  auto err = box.call(0, 0);
  return err ? *err : "";
}

// Scenario code stuck in a pattern; the same, catching each error and trying again.
constexpr const char* kStuck =
    R"lua(local x = string.find(("a"):rep(40), ("a*"):rep(40) .. "b"))lua";
constexpr const char* kStuckCatching =
    R"lua(while true do pcall(string.find, ("a"):rep(40), ("a*"):rep(40) .. "b") end)lua";

TEST_CASE("the sandbox's patterns answer to its step budget, time budget and memory cap",
          "[harness][lua]") {
  LuaLimits limits;
  limits.pattern_steps = 500000;
  limits.time_budget = std::chrono::milliseconds(300);
  limits.memory_bytes = 16u << 20;
  LuaSandbox box(limits);
  REQUIRE_FALSE(box.seal());
  CHECK(inSandbox(box, kStuck) ==
        "t:1: string.find: pattern matching exceeded its budget of 500000 steps");
  CHECK(inSandbox(box, "local x = ('x'):rep(40):find(('x-'):rep(40) .. 'y')") ==
        "t:1: string.find: pattern matching exceeded its budget of 500000 steps");
  // Caught and tried again, until the time budget ends it.
  CHECK(inSandbox(box, kStuckCatching) == "t:1: " + box.timeMessage());
  CHECK(inSandbox(box, "local s = string.gsub(('a'):rep(1 << 20), 'a', ('b'):rep(64))") ==
        box.memoryMessage());
  CHECK(inSandbox(box, "assert(select(2, ('a b c'):gsub('%a', '%0%0')) == 3)") == "");
}

TEST_CASE("a pattern runs no longer than the time budget", "[harness][lua]") {
  LuaLimits limits;
  limits.pattern_steps = ~0ULL;
  limits.time_budget = std::chrono::milliseconds(200);
  LuaSandbox box(limits);
  REQUIRE_FALSE(box.seal());
  const auto t0 = Clock::now();
  const char* code = R"lua(local n = 40
local x = string.find(("a"):rep(n), ("a*"):rep(n) .. "b"))lua";
  CHECK(inSandbox(box, code) == "t:2: " + box.timeMessage());
  CHECK(Clock::now() - t0 < std::chrono::seconds(2));
}

TEST_CASE("the interrupt flag stops a running pattern and a running loop", "[harness][lua]") {
  for (const char* code : {kStuck, "while true do end", kStuckCatching}) {
    std::atomic<bool> interrupted{false};
    LuaLimits limits;
    limits.pattern_steps = ~0ULL;
    limits.time_budget = std::chrono::seconds(60);
    limits.interrupted = &interrupted;
    LuaSandbox box(limits);
    REQUIRE_FALSE(box.seal());
    const auto t0 = Clock::now();
    std::jthread signal([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      interrupted = true;
    });
    INFO(code);
    CHECK(inSandbox(box, code) == "t:1: " + std::string(LuaSandbox::interruptMessage()));
    CHECK(Clock::now() - t0 < std::chrono::seconds(3));
  }
}

}  // namespace
}  // namespace mw::harness
