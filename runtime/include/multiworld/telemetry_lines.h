// The line protocol a scenario role speaks to the chaos harness (mwchaos), one line per message:
// what the runtime's telemetry channel writes (MW_TELEMETRY_FD; docs/design.md, "The telemetry
// channel") and what mw_worker writes on its stdout, which adds `cpu`, `joinfail`, `verified` and
// `violation`. The runtime owns it: one definition serves the writers and the harness's parser,
// so a message that is written can always be read back (tests/runtime/telemetry_lines_test.cc
// round-trips each kind).
//
// Times are CLOCK_MONOTONIC nanoseconds (mw::Clock), comparable across the processes of a machine.
// Words are separated by one space; the last field of `event`, `joinfail`, `check`, `violation`
// and `error` is free text (newlines replaced by spaces when written).
//
//   fifo <path>|-                       failpoint control fifo, or "-": no failpoints compiled in
//   ready <t>                           every world joined (the runtime: every world of
//                                       MW_TELEMETRY_WORLDS, or the first when that is unset)
//   event <t> <world> <kind> <generation> <cause>|- <peer> <detail...>
//                                       (a program's `created` detail: optionsText)
//   metrics <t> <world> <generation> <bytes> <ops> <latency_sum_ns> <latency_max_ns>
//   cpu <t> <cpu_ns> <wait_ns>          the worker process's CPU time and run-queue wait (summed
//                                       over its threads) during the window that ends at t
//   joinfail <t> <world> <status...>    a join or rejoin failed (the worker tries again)
//   error <message...>                  mw_worker: fatal, it exits 3; the runtime: the failpoint
//                                       fifo could not be opened, the program goes on
//   app <t> <name> <value>              a program's own metric (multiworld/telemetry.h): the sum
//                                       of what it reported in the window that ends at t
//   check <t> <name> <passed> <failed> <detail...>
//                                       a program's own check (multiworld/telemetry.h,
//                                       reportCheck): how often it passed and failed in the window
//                                       that ends at t, and the first failure's detail
//   verified <t> <world> <ops> <bytes> <violations>
//                                       mw_worker: in the window that ends at t, the operations it
//                                       received and checked with every element right, their
//                                       bytes, and the operations whose content was wrong (each
//                                       of which has a `violation` line, up to a bound)
//   violation <t> <world> <generation> <op> <seq> <offset> <wrong> <expected> <found> <detail...>
//                                       mw_worker: an operation that completed with content that
//                                       is not what it must be (chaos/traffic_content.h): the
//                                       first wrong element, how many are wrong, the values
//                                       (expected, found: %.17g, found may be nan or inf)
//   history <start> <end> <world> <generation> <op> <peer> <seq> <outcome>
//                                       mw_worker with a history (WorkerConfig::history): one
//                                       operation of its traffic, from its start to its end
//   history_full <t>                    mw_worker: its history holds as many operations as it
//                                       may; the operation that began at t and every later one
//                                       are not in it
//
// Thread rules: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "multiworld/status.h"
#include "multiworld/world_manager.h"

namespace mw::telemetry_lines {

struct Fifo {
  std::string path;  // empty: the worker has no failpoints ("fifo -")
};
struct Ready {
  int64_t t_ns = 0;
};
struct Event {
  int64_t t_ns = 0;
  std::string world;
  WorldEvent::Kind kind = WorldEvent::Kind::kCreated;  // written as mw::eventKindName
  uint64_t generation = 0;
  Cause cause = Cause::kNone;  // written as mw::causeName, "-" for none
  int peer = -1;
  std::string detail;
};
struct Metrics {
  int64_t t_ns = 0;  // end of the window
  std::string world;
  uint64_t generation = 0;
  int64_t bytes = 0, ops = 0, lat_sum_ns = 0, lat_max_ns = 0;
};
struct Cpu {
  int64_t t_ns = 0;     // end of the window
  int64_t cpu_ns = 0;   // CPU time the process's threads ran
  int64_t wait_ns = 0;  // time they were runnable but waited for a CPU
};
struct JoinFail {
  int64_t t_ns = 0;
  std::string world;
  std::string status;
};
struct Error {
  std::string message;
};
struct App {
  int64_t t_ns = 0;  // end of the window
  std::string name;  // one word of [A-Za-z0-9_.-]
  double value = 0;  // finite
};

struct Check {
  int64_t t_ns = 0;  // end of the window
  std::string name;  // one word of [A-Za-z0-9_.-]
  int64_t passed = 0, failed = 0;
  std::string detail;  // free text: the window's first failure's; empty when none failed
};
struct Verified {
  int64_t t_ns = 0;  // end of the window
  std::string world;
  int64_t ops = 0, bytes = 0, violations = 0;
};
struct Violation {
  int64_t t_ns = 0;  // when the operation completed
  std::string world;
  uint64_t generation = 0;
  std::string op;       // one word: "recv", "broadcast", "all_reduce"
  uint64_t seq = 0;     // the operation's number in the world's incarnation, from 0
  uint64_t offset = 0;  // the first wrong element
  uint64_t wrong = 0;   // how many elements are wrong
  double expected = 0, found = 0;
  std::string detail;  // free text: whose content, and what the found content is, when known
};

// One operation of a traffic loop (docs/scenarios.md, "The operation history").
struct History {
  int64_t start_ns = 0, end_ns = 0;
  std::string world;
  uint64_t generation = 0;
  std::string op;       // one word: "send", "recv", "broadcast", "all_reduce"
  int peer = -1;        // a send's destination, a receive's source, a broadcast's root; -1: none
  uint64_t seq = 0;     // the operation's number in the world's incarnation (Violation::seq)
  std::string outcome;  // "ok", "unchecked", "violation", or the failure's codeName
};
struct HistoryFull {
  int64_t t_ns = 0;  // the start of the first operation left out
};

using Line = std::variant<Fifo, Ready, Event, Metrics, Cpu, JoinFail, Error, App, Check, Verified,
                          Violation, History, HistoryFull>;

// The line for `l`, without its newline. Free-text fields have their newlines replaced by spaces;
// a name field (world) must be one word without spaces (the scenario validator's name rule).
std::string format(const Line& l);

// The detail of a `created` event from the runtime's telemetry: the options the world was joined
// with, "backend=gloo device=cpu heartbeat_ms=500 op_timeout_ms=10000" (the runtime's writer).
std::string optionsText(const WorldOptions& o);

// Parses one line (without its newline). kInvalidArgument, naming the line's kind and the field,
// when it is not the protocol: an unknown kind, a missing field, a number that is not one, an
// event kind or cause the runtime does not have.
Result<Line> parse(std::string_view line);

}  // namespace mw::telemetry_lines
