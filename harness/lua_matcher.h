// The matcher behind harness/lua_patterns.h: Lua 5.4's patterns (reference manual, 6.4.1) matched
// by backtracking as Lua's own matcher does, so that each match is Lua's (the same trials in the
// same order, the same captures, the same errors), counting its steps.
#pragma once

#include <cstddef>
#include <cstdint>

#include "harness/lua_patterns.h"

struct lua_State;

namespace mw::harness {

// One pattern over one subject, for one call of a pattern function: its steps add up over every
// matchAt. Errors (a malformed pattern, the budget, what the poll raises) are Lua errors, which
// longjmp over the caller's frames: it holds nothing that needs a destructor, and its callers
// should hold nothing either. The subject, pattern and limits must outlive it.
class PatternMatcher {
 public:
  static constexpr ptrdiff_t kPosition = -2;  // capture()'s length for a position capture, ()

  // `fn` names the calling function in the budget's error ("find"); the pattern is [p, p + plen)
  // without the leading '^' that find, match and gsub take as an anchor.
  PatternMatcher(lua_State* L, const PatternLimits& limits, const char* fn, const char* src,
                 size_t len, const char* p, size_t plen)
      : L_(L),
        limits_(limits),
        fn_(fn),
        src_(src),
        end_(src + len),
        p_end_(p + plen),
        next_check_(limits.max_steps < kPollEvery ? limits.max_steps + 1 : kPollEvery) {}

  lua_State* state() const { return L_; }

  // Matches the pattern from `p` on at subject position `s`: the end of the match, or nullptr.
  const char* matchAt(const char* s, const char* p);

  // Capture i of the last match [s, e): its text in *at and its length; or kPosition, with its
  // position pushed on the stack. Without captures, capture 0 is the whole match.
  ptrdiff_t capture(int i, const char* s, const char* e, const char** at);
  // Pushes capture i of the last match [s, e).
  void pushCapture(int i, const char* s, const char* e);
  // Pushes the captures of the last match [s, e), or the whole match when it has none (and s is
  // not nullptr). Returns how many.
  int pushCaptures(const char* s, const char* e);

  // Counts n steps of work: past the budget, raises its error; every 1024 steps, calls the poll.
  void step(uint64_t n = 1) {
    steps_ += n;
    if (steps_ >= next_check_) check();
  }

 private:
  static constexpr int kMaxCaptures = 32;  // Lua's LUA_MAXCAPTURES
  static constexpr int kMaxDepth = 200;    // Lua's MAXCCALLS: nested matcher calls
  static constexpr uint64_t kPollEvery = 1024;

  enum class Item { kTaken, kFailed, kOrdinary };
  struct Capture {
    const char* init;
    ptrdiff_t len;  // or kOpen, kPosition
  };

  void check();
  const char* match(const char* s, const char* p);
  const char* items(const char* s, const char* p);
  Item escape(const char*& s, const char*& p);
  const char* classEnd(const char* p);
  bool single(const char* s, const char* p, const char* ep) const;
  const char* longest(const char* s, const char* p, const char* ep);
  const char* shortest(const char* s, const char* p, const char* ep);
  const char* openCapture(const char* s, const char* p, ptrdiff_t what);
  const char* closeCapture(const char* s, const char* p);
  const char* balanced(const char* s, const char* p);
  const char* frontier(const char* s, const char* p);
  const char* backReference(const char* s, char digit);

  lua_State* L_;
  const PatternLimits& limits_;
  const char* fn_;
  const char* src_;
  const char* end_;
  const char* p_end_;
  uint64_t steps_ = 0;
  uint64_t next_check_;    // the step count of the next look at the budget and the poll
  int depth_ = kMaxDepth;  // nested matcher calls left
  int level_ = 0;          // captures opened
  Capture caps_[kMaxCaptures];
};

}  // namespace mw::harness
