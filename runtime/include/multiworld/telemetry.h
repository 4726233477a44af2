// The application's own metrics and checks, for the chaos harness (docs/scenarios.md, "Program
// roles").
//
// A program the harness runs as a scenario role reports its worlds by itself (the runtime's
// telemetry channel, docs/design.md). With reportMetric it also reports what it serves (requests,
// tokens, frames...), and a scenario's throughput_kept can judge that metric instead of bytes:
// "did my front end keep serving while a stage died".
#pragma once

#include <string_view>

#include "multiworld/status.h"

namespace mw {

// Adds `amount` to this process's metric `name`. Every 100 ms the harness gets the window's sum
// of each metric ("app <t> <name> <sum>" on the telemetry channel), from the moment a
// WorldManager exists; without the harness's channel (MW_TELEMETRY_FD unset) nothing is kept or
// sent. `name`: 1 to 64 characters of A-Z a-z 0-9 _ . - ; `amount`: finite. Anything else returns
// kInvalidArgument naming it, and nothing is added.
// Thread rules: any thread; never blocks on I/O (a mutex around a small map).
Status reportMetric(std::string_view name, double amount = 1.0);

// Reports the outcome of one of the program's own checks of what it computed (an answer equals
// twice the request; a served prediction matches a reference), for the chaos harness's
// expect.app_checks, which fails when any check failed. Every 100 ms the harness gets, per check
// name, how many passed and failed in the window and the first failure's `detail` (what was
// wrong: what was expected and what was found; its first 200 bytes, kept for failures only), from
// the moment a WorldManager exists; without the harness's channel (MW_TELEMETRY_FD unset) nothing
// is kept or sent. `name` as for reportMetric; kInvalidArgument naming it otherwise, and nothing
// is counted.
// Thread rules: any thread; never blocks on I/O (a mutex around a small map).
Status reportCheck(std::string_view name, bool ok, std::string_view detail = {});

// The check reportMetric makes of `name` (1 to 64 characters of A-Z a-z 0-9 _ . -), for tools
// that take metric names (mwchaos's throughput_kept). kInvalidArgument saying what is wrong.
Status checkMetricName(std::string_view name);

}  // namespace mw
