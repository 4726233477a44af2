// POSIX-level faults: system calls that fail inside a worker, through libfiu's preload library.
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

#include "chaos/posix_points.h"
#include "multiworld/status.h"

namespace mw::chaos {

// The LD_PRELOAD value a worker needs for POSIX faults: libfiu's preload library
// ($MW_FIU_POSIX_PRELOAD, else the one found when this was built), preceded by the address
// sanitizer's runtime when this program is built with it (ASan must come first). kUnavailable,
// naming what to install, when the library is not there.
Result<std::string> posixPreload();

}  // namespace mw::chaos
