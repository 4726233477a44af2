// The application's own metric, for the chaos harness (docs/scenarios.md, "Program roles").
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

// The check reportMetric makes of `name` (1 to 64 characters of A-Z a-z 0-9 _ . -), for tools
// that take metric names (mwchaos's throughput_kept). kInvalidArgument saying what is wrong.
Status checkMetricName(std::string_view name);

}  // namespace mw
