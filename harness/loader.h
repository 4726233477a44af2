// Loading scenario files: Lua 5.4 runs the file in a sandbox (harness/lua_sandbox.h) and the table
// given to scenario { ... } is validated into the model (model/scenario.h). The Lua state is kept
// for the scenario's expect.check hook.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/lua_sandbox.h"
#include "model/scenario.h"

namespace mw::harness {

// Overrides from the command line.
struct LoadOptions {
  std::optional<uint64_t> seed;
  // soak: run for this long (the nemesis draws faults until 1 s before the end)
  std::optional<Ms> duration;
  std::optional<std::string> backend;  // every world on this backend
  LuaLimits lua;  // the time budget of each entry into scenario code, and its memory cap
};

// A loaded scenario, with its Lua state kept for hooks.
class LoadedScenario {
 public:
  LoadedScenario();
  ~LoadedScenario();
  LoadedScenario(LoadedScenario&&) noexcept;
  LoadedScenario& operator=(LoadedScenario&&) noexcept;

  Scenario scenario;
  // Calls expect.check(run) with `run_json` (the report's run section, as a Lua table), under the
  // time budget of one entry. Returns {ok, message}; ok=false with the Lua error (or the budget's)
  // when the hook fails. REQUIRES: scenario.expect.has_check.
  std::pair<bool, std::string> callCheck(const std::string& run_json) const;

  struct Lua;
  std::unique_ptr<Lua> lua;
};

// Loads and validates `path`. On failure returns the errors, each "file:line: message".
struct LoadResult {
  std::optional<LoadedScenario> loaded;
  std::vector<std::string> errors;
};
LoadResult loadScenario(const std::string& path, const LoadOptions& options);

// Every fault, traffic pattern and expectation of the scenario API, for `mwchaos list`.
std::string describeApi();

}  // namespace mw::harness
