// Scenarios and run records made in C++ for the model's tests (no Lua): a leader with a rank in
// every world, one worker per world, and helpers for faults, events and windows.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/run.h"
#include "model/scenario.h"

namespace mw::harness::testing {

// Worlds w1..wN (heartbeat 500 ms), role "leader" rank 0 in each, role "a<i>" rank 1 in w<i>;
// 4 s long, warm-up 1 s.
inline Scenario leaderAnd(int worlds) {
  Scenario s;
  s.name = "model test";
  s.file = "t.lua";
  s.where = "t.lua:1";
  s.duration = Ms(4000);
  s.expect.where = "t.lua:9";
  for (int i = 1; i <= worlds; ++i) {
    const std::string w = "w" + std::to_string(i), a = "a" + std::to_string(i);
    s.worlds[w].name = w;
    s.worlds[w].size = 2;
    s.worlds[w].heartbeat = Ms(500);
    s.roles["leader"].name = "leader";
    s.roles["leader"].ranks[w] = 0;
    s.roles[a].name = a;
    s.roles[a].ranks[w] = 1;
  }
  return s;
}

// A 4 s run (elapsed 4.005 s) with no faults or events yet.
inline RunRecord emptyRun() {
  RunRecord r;
  r.duration = 4;
  r.elapsed = 4.005;
  return r;
}

// A delivered fault of `kind` on `role` at `t` touching `worlds`.
inline FaultRec fault(FaultKind kind, const std::string& role, double t,
                      std::vector<std::string> worlds) {
  FaultRec f;
  f.action = std::string(faultKindName(kind)) + " " + role;
  f.kind = kind;
  f.role = role;
  f.where = "t.lua:5";
  f.planned = t;
  f.sent = f.acked = t;
  f.outcome = FaultOutcome::kOk;
  f.worlds = std::move(worlds);
  f.ends_role =
      kind == FaultKind::kKill || kind == FaultKind::kRestart || kind == FaultKind::kScancelStep;
  return f;
}

inline EventRec event(EventKind kind, double t, const std::string& role, const std::string& world) {
  EventRec e;
  e.t = t;
  e.role = role;
  e.world = world;
  e.kind = kind;
  e.generation = 1;
  if (kind == EventKind::kBroken) {
    e.cause = Cause::kPeerDied;
    e.detail = "connection closed";
  }
  return e;
}

// 100 ms windows of `world` at `role` from 0.1 s to `until`: `before` bytes each up to `fault_t`,
// `after` bytes each from then.
inline void windows(RunRecord& r, const std::string& world, const std::string& role, double fault_t,
                    double before, double after, double until = 4.0) {
  for (int i = 1; i * 0.1 <= until + 1e-9; ++i) {
    WindowRec w;
    w.t = i * 0.1;
    w.generation = 1;
    w.bytes = w.t <= fault_t ? before : after;
    w.ops = 1;
    r.windows[world][role].push_back(w);
  }
}

}  // namespace mw::harness::testing
