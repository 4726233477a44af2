// FailPoint: one named libfiu point of failure inside the runtime (see docs/failpoints.md).
//
// Names are "<family>/<scope>": the family says where (mw/gloo/send, mw/nccl/all_reduce,
// mw/store/get, mw/heartbeat, ...) and the scope says which world, so enabling
// "mw/gloo/send/w1" fails only world w1's sends and "mw/gloo/send/*" every world's. A point is
// built once, when its world is created; check() is one atomic load until any point of the
// process is first switched (through failpoints::enable/disable or the control fifo, the only
// ways the runtime switches libfiu's points), then one libfiu lookup per call; it compiles to
// nothing in a library built without failpoints (MW_WITH_FIU off).
//
// Thread rules: check() from any thread; libfiu keeps the failure details per thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "multiworld/config.h"

#if MW_CONFIG_WITH_FIU
#ifndef FIU_ENABLE
#define FIU_ENABLE 1
#endif
#include <fiu.h>
#endif

namespace mw::detail {

// What an enabled point asked for: `failnum` and `failinfo` as given to libfiu's enable command;
// each family documents their meaning (an errno, an ncclResult_t, a mode).
struct Injection {
  int failnum = 0;
  uintptr_t failinfo = 0;
  std::string point;
  // " (injected by failpoint <point>)", to append to the error it causes.
  std::string suffix() const { return " (injected by failpoint " + point + ")"; }
};

// libfiu guards its points with a reader-preferring rwlock: every check reads under it, and a
// command that enables or disables a point waits to write until no check holds it, which checks
// that keep overlapping (busy threads on a loaded machine) can put off for seconds. So every
// check of the runtime and every change of the points (failpoints::enable/disable, the control
// fifo's commands) also goes through this writer-preferring gate: once a change waits, new
// checks wait behind it. Nothing else takes it; it is never held across a call into the runtime.
class FailPointGate {
 public:
  // Whether any point was switched in this process: lock() was taken (every change takes it
  // before it changes libfiu's table, so a check that happens after a change returns sees true).
  static bool everSwitched() { return switched().load(std::memory_order_acquire); }
  static void lockShared();
  static void unlockShared();
  static void lock();
  static void unlock();

 private:
  static std::atomic<bool>& switched() {
    static std::atomic<bool> s{false};
    return s;
  }
};

class FailPoint {
 public:
  FailPoint() = default;
  // The point "<family>/<scope>", or "<family>" when scope is empty. Initializes libfiu once.
  FailPoint(std::string_view family, std::string_view scope);

  // The injection when the point is enabled and fires now (once, with its probability, ...);
  // nullopt otherwise, and always in a build without failpoints. Yields to a control command
  // waiting to change the points (failPointGate): a command is never starved by checks.
  std::optional<Injection> check() const {
#if MW_CONFIG_WITH_FIU
    // No point switched yet: nothing can fire, and nothing shared is written (no lock).
    if (!name_.empty() && FailPointGate::everSwitched()) return checkEnabled();
#endif
    return std::nullopt;
  }
  const std::string& name() const { return name_; }

 private:
  std::optional<Injection> checkEnabled() const;
  std::string name_;
};

// Initializes libfiu once per process (its tables exist only after fiu_init); a no-op without
// failpoints. FailPoint's constructor calls it.
void initFailPoints();

// The errno text for an injected failnum: "Connection reset by peer (errno 104)".
std::string errnoText(int err);

}  // namespace mw::detail
