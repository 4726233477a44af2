// POSIX-level faults: system calls that fail inside a worker, through libfiu's preload library.
// This header is the catalog of their points (pure, used by the scenario model); posix_faults.h
// finds the preload library.
//
// fiu_posix_preload.so wraps libc's functions with failpoints named after them
// ("posix/io/net/send", "posix/io/rw/writev", ...). A worker started with it in LD_PRELOAD shares
// libfiu with the runtime, so the worker's own control fifo switches these points too. They reach
// what the runtime's failpoints do not: Gloo's reads and writes inside its event loop, and
// connect(2) wherever it is called. They act on the whole process, so on every world the worker
// is in. The errno is always pinned (libfiu's failinfo), never drawn at random.
#pragma once

#include <string>
#include <vector>

namespace mw::chaos {

struct PosixPoint {
  const char* name;  // "posix/io/net/connect"
  const char* what;  // who calls it in a worker
};

// The POSIX points a scenario may use, in the order the docs list them.
const std::vector<PosixPoint>& posixPoints();

// True when `name` is in libfiu's preload namespace ("posix/", "libc/" or "linux/"): the harness
// must start the role with the preload library.
bool isPosixPoint(const std::string& name);

// Empty when `name` (a POSIX point) may be used; otherwise a sentence saying why not and which
// points may. Points such as read/write are refused because the worker's control fifo and its
// reports to the harness use them: failing them would cut the harness off from the worker.
std::string checkPosixPoint(const std::string& name);

}  // namespace mw::chaos
