// Test helper: a scenario loaded from Lua text, through a file, as mwchaos loads one.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "harness/loader.h"
#include "model/run.h"

namespace mw::harness::testing {

// Loads `text`; REQUIREs that it is valid (the first error is shown when it is not).
inline LoadedScenario loadText(const std::string& text) {
  static int n = 0;
  const std::string path =
      "/tmp/mw_harness_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".lua";
  std::ofstream(path) << text;
  auto r = loadScenario(path, LoadOptions{});
  ::unlink(path.c_str());
  INFO((r.errors.empty() ? std::string() : r.errors.front()));
  REQUIRE(r.loaded);
  return std::move(*r.loaded);
}

// A delivered SIGKILL of `role` at `t` s that touches `worlds` (the role's process ends).
inline FaultRec killFault(const std::string& role, double t, std::vector<std::string> worlds) {
  FaultRec f;
  f.action = "kill " + role + " SIGKILL";
  f.kind = FaultKind::kKill;
  f.role = role;
  f.planned = t;
  f.sent = f.acked = t;
  f.outcome = FaultOutcome::kOk;
  f.worlds = std::move(worlds);
  f.ends_role = true;
  return f;
}

}  // namespace mw::harness::testing
