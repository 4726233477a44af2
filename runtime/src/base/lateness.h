// LatenessMeter: how long a judging thread was kept from running when it should have run.
//
// The watchdog and the store server judge a peer silent when they have heard nothing from it for
// its heartbeat timeout. On a starved machine (more runnable threads than cores, a VM's stolen
// time, a whole process stopped) the judge itself may not run for a while, and on waking finds
// every peer "silent" although the silence was its own. So each judge measures the time it was
// kept from running, and peers' silence is counted only over time in which the judge ran on
// schedule: effective silence = (now - last heard) - (lateness accrued since then).
//
// The judge can be kept from running anywhere in its loop, not only in its sleep: a process
// stopped (SIGSTOP) while its judge was reading sockets resumes with that thread mid-loop. So the
// meter counts both ways a thread loses time:
//   - asleep: a wake-up later than planned accrues the delay past the plan (woke);
//   - awake: over a stretch of running, the wall time the thread spent off its CPU (wall time
//     minus the thread's CPU time: preempted, or stopped) accrues when it exceeds kSlack (ran,
//     and sleeping, which closes the stretch). Time the loop spends working is not lateness, so
//     a judge kept busy still counts silence at full rate.
// A judge calls ran() with the instant it judges by, so that no lateness before it goes uncounted.
//
// Lateness is kept with the time it happened, so that a judge can ask for what accrued after a
// peer was last heard (since(heard)) whenever it learns of that instant: a judge that learned of
// a contact only after a stop (a world's first contact is stamped by the thread that joined it)
// once counted that stop as before the contact, and broke the world on resume.
//
// Thread rules: one thread (the judge's own).
#pragma once

#include <time.h>

#include <algorithm>
#include <array>
#include <cstddef>

#include "multiworld/status.h"

namespace mw::detail {

class LatenessMeter {
 public:
  // Wake-ups later than planned, and time off the CPU while running, up to this are the
  // scheduler's ordinary jitter.
  static constexpr Clock::duration kSlack = std::chrono::milliseconds(2);

  // A point in the judge's life: wall time and the thread's own CPU time.
  struct Instant {
    Clock::time_point wall;
    Clock::duration cpu{0};
    // Both clocks of the calling thread, now.
    static Instant now() {
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return {Clock::now(), std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)};
    }
  };

  // The thread runs at `t` and judges by it: the time it spent off its CPU since it last woke
  // (or last called this) accrues if longer than kSlack.
  void ran(const Instant& t) {
    if (awake_) {
      const Clock::duration off = (t.wall - since_.wall) - (t.cpu - since_.cpu);
      // Where in the stretch the thread was off its CPU is not known: the latest place, which
      // discounts the most from a silence that began within the stretch.
      if (off > kSlack) accrue(t.wall - off, t.wall);
    }
    awake_ = true;
    since_ = t;
  }
  // The thread, running at `t`, is about to sleep until `until` at the latest.
  void sleeping(const Instant& t, Clock::time_point until) {
    ran(t);
    awake_ = false;
    planned_ = until;
  }
  // The thread runs again at `t`: what passed beyond the planned wake-up (and kSlack) is
  // lateness. A thread woken early by an event accrues none.
  void woke(const Instant& t) {
    if (planned_ != Clock::time_point::max() && t.wall > planned_ + kSlack) {
      accrue(planned_, t.wall);
    }
    planned_ = Clock::time_point::max();
    awake_ = true;
    since_ = t;
  }
  // Lateness accrued since this meter was made.
  Clock::duration total() const { return total_; }

  // Lateness accrued after `t`: the part of each recorded stretch that lies after it. Exact for
  // the last kHistory stretches; older ones count as wholly before `t` (a judge asks about
  // instants within a few heartbeat timeouts).
  Clock::duration since(Clock::time_point t) const {
    Clock::duration after{0};
    for (size_t i = 0; i < std::min(count_, kHistory); ++i) {
      const Stretch& s = recent_[i];
      if (s.to > t) after += s.to - std::max(s.from, t);
    }
    return after;
  }

  // The time a peer confirmed silent must have been silent beyond its timeout, over time the judge
  // ran on schedule: a suspicion (silence past the timeout) holds this much longer before a world
  // breaks, long enough for a peer whose thread was merely delayed to be heard, short enough to
  // keep detection within timeout + 100 ms.
  static Clock::duration confirmation(Clock::duration timeout) {
    return std::min<Clock::duration>(timeout / 5, std::chrono::milliseconds(100));
  }

  static constexpr size_t kHistory = 64;

 private:
  // A stretch of wall time in which the thread was kept from running.
  struct Stretch {
    Clock::time_point from, to;
  };
  void accrue(Clock::time_point from, Clock::time_point to) {
    total_ += to - from;
    recent_[count_++ % kHistory] = {from, to};
  }

  Clock::time_point planned_ = Clock::time_point::max();
  bool awake_ = false;  // between woke() or ran() and sleeping()
  Instant since_{};     // when the current stretch of running was last measured
  Clock::duration total_{0};
  std::array<Stretch, kHistory> recent_{};  // the last kHistory stretches, a ring
  size_t count_ = 0;                        // stretches recorded
};

}  // namespace mw::detail
