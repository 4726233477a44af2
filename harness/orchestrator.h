// The orchestrator: runs one scenario. It starts one worker process per role (its own process
// group, killed with the harness), waits until every world is joined, plays the timeline of faults
// against the clock, collects the workers' events and metrics, stops them, and leaves no process,
// fifo or temporary file behind, also when interrupted.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "model/inventory.h"
#include "model/report.h"
#include "model/run.h"
#include "model/scenario.h"

namespace mw::harness {

struct RunOptions {
  std::string worker_path;  // the mw_worker program
  std::string agent_path;   // the mwchaos program, run as `agent --stdio` on each host
  int verbosity = 1;        // 0: quiet, 1: progress, 2: every worker line
  bool tty = false;         // progress redraws one line (else a line per second)
  const std::atomic<bool>* interrupted = nullptr;  // set by the CLI's signal handler
  // Set by a second signal: roles still taking their stop_within to exit are killed at once.
  const std::atomic<bool>* forced = nullptr;
  int gpus = 0;  // GPUs this machine has (roles on "gpu" are spread across them)
  const Inventory* inventory = nullptr;  // --hosts (model/inventory.h); null: none
  // --history: the most operations each mw_worker role's history holds (RunRecord::history);
  // 0: none is kept.
  int64_t history = 0;
};

struct RunResult {
  // kCompleted: the timeline ran to its end; kInterrupted: Ctrl-C or SIGTERM; kUnavailable: the
  // machine cannot run it (no GPU, no failpoints...), `why` says what; kHarnessError: the harness
  // could not run it (a worker failed to start or join).
  Outcome outcome = Outcome::kCompleted;
  std::string why;  // for kUnavailable / kHarnessError
  RunRecord record;
};

// Runs `s` once: starts its roles, plays its timeline, stops and cleans up everything, and returns
// what it recorded. A signal that sets options.interrupted at any moment, the stop and the
// cleanup included, makes the outcome kInterrupted (unless it failed before).
RunResult runScenario(const Scenario& s, const RunOptions& options);

}  // namespace mw::harness
