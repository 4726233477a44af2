// Lua 5.4's pattern matching (string.find, string.match, string.gmatch, string.gsub) with a bound
// on the work of each call. Lua's own matcher runs a whole match inside one C call, where no count
// hook fires: a pattern that backtracks a great deal (("a*"):rep(40) .. "b" over ("a"):rep(40))
// would run for ages, deaf to any time budget or signal. These functions count their steps.
#pragma once

#include <cstdint>

struct lua_State;

namespace mw::harness {

struct PatternLimits {
  // The steps one call may take: all of find, match or gsub; one call of a gmatch iterator. A step
  // is one entry into the matcher, one pattern item tried, one subject byte looked at by a
  // repetition, a %b or a back-reference, or one escape of gsub's replacement. Past it the call
  // raises "<where>: string.find: pattern matching exceeded its budget of N steps".
  uint64_t max_steps = 0;
  // Called from inside a call every 1024 steps, and may raise a Lua error to stop it (a time
  // budget, an interrupt); returns to let it go on. nullptr: never called.
  void (*poll)(lua_State* L) = nullptr;
};

// Sets the fields find, match, gmatch and gsub of the table at `table` (the string library's, which
// is also the __index of strings, so s:find(...) gets them too) to functions that behave as Lua
// 5.4's do, with the same results and error messages, within `limits` (copied). Their recursion is
// as deep as Lua's at most (200 nested items, then "pattern too complex"). What they build, gsub's
// result included, is allocated by the state's allocator. REQUIRES: a table at `table`. Raises a
// Lua error when out of memory: call it in protected mode.
void openGuardedPatterns(lua_State* L, int table, const PatternLimits& limits);

}  // namespace mw::harness
