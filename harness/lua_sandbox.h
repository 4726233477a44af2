// The Lua state that scenario code runs in: the standard library trimmed to what a scenario needs,
// its memory capped by the allocator, and each entry into it (loading the file, one call of a
// hook, closing the state) limited to a time budget by a count hook, which also stops it when the
// harness is interrupted.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

struct lua_State;
struct lua_Debug;

namespace mw::harness {

// The defaults of mwchaos's --lua-time-budget-ms and --lua-memory-mb (docs/scenarios.md, "Limits").
constexpr long long kDefaultLuaTimeBudgetMs = 10000;
constexpr uint64_t kDefaultLuaMemoryMiB = 256;
// The steps one call of string.find, match, gsub (or one step of gmatch) may take: about a second
// of backtracking; a pattern used as intended takes a few per subject byte.
constexpr uint64_t kDefaultLuaPatternSteps = 100'000'000;

struct LuaLimits {
  std::chrono::milliseconds time_budget{kDefaultLuaTimeBudgetMs};  // per entry
  uint64_t memory_bytes = kDefaultLuaMemoryMiB << 20;              // all the state holds
  uint64_t pattern_steps = kDefaultLuaPatternSteps;  // per call (harness/lua_patterns.h)
  // Once it reads true (a signal handler sets it), scenario code stops at its next instruction or
  // pattern step with interruptMessage(). nullptr: never.
  const std::atomic<bool>* interrupted = nullptr;
};

class LuaSandbox {
 public:
  explicit LuaSandbox(const LuaLimits& limits);
  ~LuaSandbox();  // closes the state, itself under a time budget
  LuaSandbox(const LuaSandbox&) = delete;
  LuaSandbox& operator=(const LuaSandbox&) = delete;

  // The state, with the base, string, table, math and debug libraries open; nullptr when it could
  // not be created.
  lua_State* state() const { return L_; }
  const LuaLimits& limits() const { return limits_; }

  // Removes what scenario code may not use (io, os, debug, bytecode, finalizers) and replaces the
  // library functions that can loop in C, where no budget can stop them, with ones that cannot
  // (pattern matching: harness/lua_patterns.h, with limits().pattern_steps).
  // Call once, after the preludes that need `debug` have run. nullopt on success, else the error.
  std::optional<std::string> seal();

  // Starts an entry: its time budget runs from now.
  void beginEntry();
  // lua_pcall of the function below the `nargs` arguments on the stack. nullopt on success (the
  // results are on the stack); else the error message, the function and its arguments popped.
  // A message is "where: what"; running past the time budget or the memory cap says so and names
  // the mwchaos flag that changes it; an interrupt gives interruptMessage().
  std::optional<std::string> call(int nargs, int nresults);

  // While one lives, the memory cap is lifted: for the harness's own bookkeeping between calls
  // (reading the scenario's tables), which must not fail where Lua cannot catch an error.
  class Uncapped {
   public:
    explicit Uncapped(LuaSandbox& box) : box_(box), was_(box.capped_) { box.capped_ = false; }
    ~Uncapped() { box_.capped_ = was_; }
    Uncapped(const Uncapped&) = delete;
    Uncapped& operator=(const Uncapped&) = delete;

   private:
    LuaSandbox& box_;
    bool was_;
  };

  // "scenario code exceeded its time budget of N ms (...)", and the same for memory.
  const std::string& timeMessage() const { return time_message_; }
  std::string memoryMessage() const;
  static constexpr const char* interruptMessage() {
    return "scenario code was interrupted by a signal";
  }

  // Raises the time budget's error in `L` (a state of a LuaSandbox) when its entry is past its
  // deadline, or the interrupt's when limits().interrupted is set; and then ever after in that
  // entry. For loops in C functions, which no hook sees.
  static void checkLimits(lua_State* L);

 private:
  static void* allocate(void* ud, void* ptr, size_t osize, size_t nsize);
  static void hook(lua_State* L, lua_Debug* ar);
  enum class Stop { kNone, kExpired, kInterrupted };
  const char* stopMessage() const;

  LuaLimits limits_;
  lua_State* L_ = nullptr;
  size_t used_ = 0;          // bytes the state holds
  bool capped_ = true;       // the memory cap is enforced
  bool refused_ = false;     // an allocation was refused in this entry
  Stop stop_ = Stop::kNone;  // why this entry was stopped, if it was
  std::chrono::steady_clock::time_point deadline_;
  std::string time_message_;  // built once: the hook raises it without making a C++ object
};

}  // namespace mw::harness
