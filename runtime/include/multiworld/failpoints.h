// Failpoints: switch the runtime's libfiu points of failure on and off (docs/failpoints.md).
//
// A library built with failpoints (CMake MW_WITH_FIU, on by default except in Release builds)
// checks a named point at every backend operation, store call and heartbeat; an enabled point
// makes that call fail the way a real fault would (the world breaks, nothing else does). Points
// are switched from inside the process with the calls below, or from outside through libfiu's
// control fifo, which the chaos harness writes to directly. In a library without failpoints
// every call here returns kUnavailable and nothing is ever injected.
//
// Names: "<family>/<world>" (for example "mw/gloo/send/w1"); a trailing '*' matches every name
// with that prefix ("mw/gloo/send/*", "mw/gloo/*").
//
// Thread rules: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "multiworld/status.h"

namespace mw::failpoints {

// True when this libmultiworld was built with failpoints.
bool compiledIn();

struct Mode {
  int failnum = 5;           // what the failure returns: an errno, or an ncclResult_t (nccl points)
  uintptr_t failinfo = 0;    // family specific: 1 on nccl points makes the error asynchronous
  double probability = 1.0;  // each check fails with this probability, in (0, 1]
  bool once = false;         // disable the point after it failed once
};

// Enables point `name` (see the header comment for wildcards). Errors: kInvalidArgument for an
// empty name, failnum 0 or a probability outside (0, 1]; kUnavailable without failpoints.
Status enable(const std::string& name, const Mode& mode);
// Disables point `name` (the exact name it was enabled with). kNotFound when it was not enabled;
// kUnavailable without failpoints.
Status disable(const std::string& name);
// Seeds the generator that random points draw from, so a run replays. Give every process its
// own seed (libfiu's default seed is the same in every process). kUnavailable without failpoints.
Status seed(uint32_t value);

// Opens libfiu's remote control for this process: fifos "<prefix>-<pid>.in" and ".out", served
// by a thread of the runtime speaking libfiu's protocol (libfiu's own thread would wait for the
// points' lock behind checks that keep overlapping: seconds on a loaded machine; this one is
// never put off by the runtime's checks), taking one command per line
// ("enable name=N,failnum=F[,failinfo=I][,onetime]", "enable_random name=N,probability=P,...",
// "disable name=N") and answering each with its result code on ".out", "0" for success, "-1"
// for a failure). Returns the ".in" path.
// A controller opens ".in" for writing and then ".out" for reading, and may keep both open for
// many commands. SIGPIPE is ignored from then on (a controller that vanished must not kill the
// process). The fifos are removed when the process exits normally (a killed process leaves them:
// its parent removes them). At most once per process: kInvalidUsage after that. kIoError when the
// fifos cannot be created; kUnavailable without failpoints.
Result<std::string> openControl(const std::string& prefix);

}  // namespace mw::failpoints
