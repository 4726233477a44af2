// mw_worker: the chaos harness's worker process. One per role: it joins the role's worlds, drives
// their traffic, checks what it receives, in host or device memory (chaos/traffic_check.h), and
// reports to the harness on stdout, one line each, in the protocol of multiworld/telemetry_lines.h
// (ready, event, metrics, verified, violation, cpu, joinfail, fifo, error).
// Commands on stdin, one per line: "stop" (also SIGTERM, SIGINT or end of input), "remove <world>",
// "add <world>" (joins a world of its configuration that is not joined).
//
// Usage: mw_worker --config '<json>' (chaos/worker_config.h: harness/orchestrator.cc writes it).
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "chaos/cpu_meter.h"
#include "chaos/op_history.h"
#include "chaos/ports.h"
#include "chaos/traffic_buffer.h"
#include "chaos/traffic_check.h"
#include "chaos/traffic_nonce.h"
#include "chaos/worker_config.h"
#include "chaos/worker_wake.h"
#include "multiworld/multiworld.h"
#include "multiworld/telemetry_lines.h"
#include "multiworld/traffic_windows.h"

namespace {

using Pattern = mw::chaos::TrafficPattern;
using namespace std::chrono_literals;

std::mutex out_mu;  // one line at a time on stdout

namespace lines = mw::telemetry_lines;

void say(const lines::Line& l) {
  const std::string line = lines::format(l);
  std::lock_guard lock(out_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

long long nowNs(mw::Clock::time_point t = mw::Clock::now()) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

[[noreturn]] void fatal(const std::string& why) {
  say(lines::Error{why});
  std::fflush(stdout);
  std::_Exit(3);
}

// The most `violation` lines one traffic loop writes (each later violation is counted in the
// `verified` lines only): a world that delivers wrong data on every operation must not flood the
// harness with thousands of lines a second.
constexpr int kViolationLines = 100;

struct WorldConf {
  mw::WorldOptions options;
  bool rejoin = false;
  bool start = true;
};

// Thread rules. run() is called once, by the main thread: it joins the worlds, then reads the
// commands and the signals (poll() on stdin and a signalfd), and at the stop it stops and joins
// every other thread before it returns. Those are std::jthread members:
//   reporter_  writes each world event as it comes (and has a rejoin world joined again), and from
//              `ready` on each window's metrics and cpu lines;
//   loops_     one per traffic entry, from `ready` to the stop;
//   joiners_   one per (re)join: "add <world>" and a rejoin after a break (the first joins are
//              run()'s own, joined before `ready`).
// Nothing polls for the stop (stop_): every wait ends on the event it waits for or on the stop (a
// stop_token wait, poll() on the signalfd or an eventfd, a condition variable). A wait that paces
// work on purpose (a traffic rate, the pause before a join is tried again) must also end at the
// stop. The reporter's is the one wait the stop cannot end: the runtime's event queue
// (mw::Subscription::next) takes a deadline and no stop token, so the reporter waits for events
// until its window ends, as the runtime's own telemetry does, and ends after the window that the
// stop falls in (writing it).
class Worker {
 public:
  explicit Worker(const mw::chaos::WorkerConfig& conf)
      : history_(conf.history),
        traffic_(conf.traffic),
        loops_running_(static_cast<int>(conf.traffic.size())) {
    role_ = conf.role;
    seed_ = conf.seed;
    window_ = conf.window;
    fifo_prefix_ = conf.fifo_prefix;
    check_ = conf.check;
    every_element_ = conf.check_every_element;
    for (const auto& w : conf.worlds) {
      WorldConf c;
      const char* token = std::getenv(mw::chaos::kTokenVariable);
      c.options = mw::chaos::worldOptions(w, token != nullptr ? token : "");
      const auto& o = c.options;
      c.rejoin = w.rejoin;
      c.start = w.start;
      worlds_[o.name] = c;
      windows_[o.name] = std::make_unique<mw::TrafficWindows>();
      checked_[o.name] = std::make_unique<mw::WindowRing<mw::chaos::CheckCounts>>();
      removed_[o.name] = false;  // every key exists before the threads start
    }
  }

  // Runs the role until a stop ("stop" or end of input on stdin, SIGTERM or SIGINT on `signals`)
  // and returns the exit code, 0. Ends the process with an error line and code 3 when a world is
  // not joined within 30 s (or a signal came first), the failpoint control cannot be opened, the
  // machine cannot run a world, or the system gives no eventfd.
  int run(const mw::chaos::SignalFd& signals) {
    openFailpoints();
    events_ = manager_.subscribe();
    reporter_ = std::jthread([this] { reportLoop(); });
    if (!joinAtStart(signals)) fatal("could not join every world of role '" + role_ + "' in 30 s");
    cpu_.emplace();
    const mw::Clock::time_point ready = mw::Clock::now();
    for (auto& [name, w] : windows_) w->start(ready, window_);  // before the loops and reporter
    for (auto& [name, w] : checked_) w->start(ready, window_);
    say(lines::Ready{nowNs(ready)});
    ready_at_.store(ready.time_since_epoch().count(), std::memory_order_release);
    for (const auto& t : traffic_) {
      loops_.emplace_back([this, &t] {
        trafficLoop(t);
        loops_running_.countDown();
      });
    }
    if (!stop_.stop_requested()) readCommands(signals);
    stopAndJoin();
    return 0;
  }

 private:
  // Opens the failpoint control fifo the configuration asks for and says `fifo`. Ends the process
  // (error line, exit 3) when it cannot be opened.
  void openFailpoints() {
    if (!fifo_prefix_.empty() && !mw::failpoints::compiledIn()) {
      say(lines::Fifo{});  // the harness reports the failpoint faults as skipped
    } else if (!fifo_prefix_.empty()) {
      auto fifo = mw::failpoints::openControl(fifo_prefix_);
      if (!fifo.ok()) fatal("failpoint control: " + fifo.status().toString());
      if (mw::Status s = mw::failpoints::seed(seed_); !s.ok()) fatal(s.toString());
      say(lines::Fifo{*fifo});
    }
  }

  // Blocks in poll() until one of `fds` is ready. Ends the process (error line, exit 3) when poll
  // fails for another reason than a signal.
  static void pollFor(pollfd* fds, nfds_t n) {
    while (::poll(fds, n, -1) < 0) {
      if (errno != EINTR) fatal(std::string("poll: ") + std::strerror(errno));
    }
  }

  // Joins every world that starts joined, all at once (a world's members wait for each other); a
  // failed join is tried again (a replacement may reach the old store of a broken world before it
  // is re-created). Meanwhile only the signals are read (stdin once `ready` is said): one stops
  // the joins. Returns whether every world was joined.
  bool joinAtStart(const mw::chaos::SignalFd& signals) {
    auto joined = mw::chaos::EventFd::open();
    if (!joined.ok()) fatal(joined.status().toString());
    std::atomic<int> pending{0}, failed{0};
    for (const auto& [name, c] : worlds_) pending += c.start ? 1 : 0;
    if (pending.load() == 0) return true;
    const mw::Deadline until = mw::deadlineIn(30s);
    std::vector<std::jthread> joins;
    for (const auto& [name, c] : worlds_) {
      if (!c.start) continue;
      joins.emplace_back([&, o = c.options] {
        // Every try may take until the 30 s are over: the members of a world join at once, and
        // a loaded machine must not turn a slow join into a world broken at the start.
        if (!joinUntilStopped(o, until, 10s)) ++failed;
        if (--pending == 0) joined->signal();
      });
    }
    for (;;) {
      pollfd fds[2] = {{joined->fd(), POLLIN, 0}, {signals.fd(), POLLIN, 0}};
      pollFor(fds, 2);
      if (fds[0].revents != 0) break;
      signals.take();
      requestStop();
    }
    joins.clear();  // each has ended: joined
    return failed.load() == 0;
  }

  // Reads commands from stdin until a stop: "stop" (the lines read with it are still done), end
  // of input, or a signal.
  void readCommands(const mw::chaos::SignalFd& signals) {
    char buf[4096];
    std::string pending;
    for (bool stop = false; !stop;) {
      pollfd fds[2] = {{0, POLLIN, 0}, {signals.fd(), POLLIN, 0}};
      pollFor(fds, 2);
      if (fds[1].revents != 0) return;
      const ssize_t n = ::read(0, buf, sizeof(buf));
      if (n <= 0) return;
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        stop |= command(line);
      }
    }
  }

  // Does one command line. Returns true for "stop"; an unknown line is ignored.
  bool command(const std::string& line) {
    if (line == "stop") return true;
    if (line.rfind("remove ", 0) == 0) {
      const std::string w = line.substr(7);
      if (!removed_.count(w)) return false;
      removed_.at(w) = true;
      manager_.removeWorld(w).ignore();
    } else if (line.rfind("add ", 0) == 0) {
      const std::string w = line.substr(4);
      auto it = worlds_.find(w);
      if (it == worlds_.end()) {
        say(lines::JoinFail{nowNs(), w, "not in this role's worlds"});
        return false;
      }
      removed_.at(w) = false;
      spawnJoin(it->second.options, false);
    }
    return false;
  }

  // Stops every wait on stop_ and notes when (events from then on are not reported). Idempotent:
  // the first call's time is kept.
  void requestStop() {
    mw::Clock::rep none = 0;
    stop_at_.compare_exchange_strong(none, mw::Clock::now().time_since_epoch().count());
    stop_.request_stop();
  }

  // The stop. Operations in flight get a moment to finish; one that is stuck (a world that no
  // longer moves data but has not broken yet) is aborted by removing its world, rather than
  // holding the stop up until its deadline. Then every world is left and every thread joined.
  void stopAndJoin() {
    requestStop();
    if (!loops_running_.waitUntil(mw::deadlineIn(500ms))) {
      for (auto& [name, c] : worlds_) manager_.removeWorld(name).ignore();
    }
    loops_.clear();
    std::vector<std::jthread> joiners;
    {
      std::lock_guard lock(joiners_mu_);
      joiners.swap(joiners_);  // spawnJoin starts none from now on
    }
    joiners.clear();  // the stop cancelled each join's try in progress (joinUntilStopped)
    for (auto& [name, c] : worlds_) manager_.removeWorld(name).ignore();
    reporter_.join();  // at the end of the window the stop fell in
  }

  // Starts a thread that joins world o.name until it is healthy or the worker stops; with
  // `leave_first` it first leaves the (broken) world of that name. None once stopping.
  void spawnJoin(const mw::WorldOptions& o, bool leave_first) {
    std::lock_guard lock(joiners_mu_);
    if (stop_.stop_requested()) return;
    joiners_.emplace_back([this, o, leave_first] {
      if (leave_first) manager_.removeWorld(o.name).ignore();
      joinUntilStopped(o);
    });
  }

  // (Re)joins a world, retrying until it is healthy, the worker stops or `until` passes.
  // A machine that cannot run the world (no GPU, ...) ends the worker: "error unavailable: ...".
  // Each try may take `attempt`, doubled (up to 10 s) after each try that timed out: a loaded
  // machine (33 processes joining 32 worlds on 2 cores) can take more than 2 s for a join, and a
  // try that times out at one member after another member's returned breaks the world at the
  // other (docs/design.md, "The join contract"). Short first tries still find a re-created store
  // quickly (a replacement that reached the old store of a broken world fails fast when it goes).
  // The stop cancels the try in progress (removeWorld), so the stop never waits for a try's
  // deadline.
  bool joinUntilStopped(const mw::WorldOptions& o, mw::Deadline until = mw::Deadline::max(),
                        mw::Clock::duration attempt = 2s) {
    const std::stop_token stop = stop_.get_token();
    const std::stop_callback cancel(stop, [&] { manager_.removeWorld(o.name).ignore(); });
    while (!stop.stop_requested() && mw::Clock::now() < until) {
      mw::Status s = manager_.initWorld(o, std::min(until, mw::deadlineIn(attempt)));
      if (s.ok()) return true;
      if (s.code() == mw::Code::kInvalidUsage) return true;  // exists already
      if (s.code() == mw::Code::kUnavailable) fatal("unavailable: " + s.message());
      if (s.code() == mw::Code::kTimeout) attempt = std::min<mw::Clock::duration>(2 * attempt, 10s);
      say(lines::JoinFail{nowNs(), o.name, s.toString()});
      mw::chaos::sleepUntil(stop, std::min(until, mw::deadlineIn(20ms)));  // before the next try
    }
    return false;
  }

  // The reporter thread (see the thread rules): until the window the stop falls in has been
  // written.
  void reportLoop() {
    const std::stop_token stop = stop_.get_token();
    mw::Deadline next = mw::Clock::now() + window_;  // before `ready`: when to look for it again
    bool ready = false;
    for (;;) {
      if (auto e = events_->next(next)) onEvent(*e);
      if (mw::Clock::now() < next) continue;
      if (!ready) {
        const mw::Clock::rep at = ready_at_.load(std::memory_order_acquire);
        ready = at != 0;
        next = ready ? mw::Deadline(mw::Clock::duration(at)) + window_ : next + window_;
        continue;
      }
      reportWindow(next);
      if (stop.stop_requested()) return;
      next += window_;
    }
  }

  // The reporter's handling of one world event: wakes the traffic loops waiting on a world, writes
  // the event line, and has a rejoin world that broke joined again.
  void onEvent(const mw::WorldEvent& e) {
    changes_.bump();
    // Events from the stop on are the stop's own (its worlds removed): not reported.
    const mw::Clock::rep stopped = stop_at_.load();
    if (stopped != 0 && e.at.time_since_epoch().count() >= stopped) return;
    lines::Event l{nowNs(e.at), e.world, e.kind, e.generation, mw::Cause::kNone, -1, ""};
    if (e.broken) {
      l.cause = e.broken->cause;
      l.peer = e.broken->peer_rank;
      l.detail = e.broken->detail;
    }
    say(l);
    if (e.kind == mw::WorldEvent::Kind::kBroken) {
      auto it = worlds_.find(e.world);
      if (it != worlds_.end() && it->second.rejoin && !removed_.at(e.world)) {
        // A replacement member joins a fresh world of the same name: leave the broken one and
        // join again (the store host re-creates the store on the same port).
        spawnJoin(it->second.options, true);
      }
    }
  }

  // The metrics and cpu lines of the window that ends at `t`.
  void reportWindow(mw::Clock::time_point t) {
    for (auto& [name, w] : windows_) {
      lines::Metrics m{nowNs(t), name};
      const mw::WindowCounts c = w->takeThrough(t);  // what completed in the window ending at t
      m.bytes = c.bytes, m.ops = c.ops, m.lat_sum_ns = c.lat_sum_ns, m.lat_max_ns = c.lat_max_ns;
      auto info = manager_.world(name);
      m.generation = info.ok() ? info->generation : 0;
      say(m);
    }
    for (auto& [name, w] : checked_) {
      if (!check_) break;
      const mw::chaos::CheckCounts c = w->takeThrough(t);
      say(lines::Verified{nowNs(t), name, c.ops, c.bytes, c.violations});
    }
    const auto d = cpu_->sample();
    if (d.available) say(lines::Cpu{nowNs(t), d.cpu_ns, d.wait_ns});
    for (const auto& l : history_.take()) say(l);
  }

  // Whether world `world`'s incarnation is still `generation`: an operation that completed in
  // another (the world broke and was joined again while it was submitted) is not judged.
  bool sameIncarnation(const std::string& world, uint64_t generation) {
    auto info = manager_.world(world);
    return info.ok() && info->generation == generation;
  }

  // Counts what `check` judged of one operation that completed at `now`: right (`bytes`
  // verified), or a violation, written as a `violation` line while the loop has written fewer
  // than kViolationLines. Returns its outcome in the history: "ok" or "violation".
  const char* judged(const mw::chaos::WorkerTraffic& t, const std::optional<mw::chaos::Finding>& f,
                     uint64_t generation, const char* op, mw::Clock::time_point now, int64_t bytes,
                     int& lines_left) {
    mw::WindowRing<mw::chaos::CheckCounts>& ring = *checked_.at(t.world);
    if (!f) {
      ring.add(now, [&](mw::chaos::CheckCounts& c) {
        ++c.ops;
        c.bytes += bytes;
      });
      return "ok";
    }
    ring.add(now, [](mw::chaos::CheckCounts& c) { ++c.violations; });
    if (lines_left > 0) {
      --lines_left;
      say(lines::Violation{nowNs(now), t.world, generation, op, f->seq, f->mismatch.offset,
                           f->mismatch.wrong, f->mismatch.expected, f->mismatch.found, f->detail});
    }
    return "violation";
  }

  // Runs traffic `t` until the stop: its operations while the world is healthy, at its rate (or
  // back to back), counting what completed in the world's window. Each incarnation of the world
  // begins with the nonce agreement (agreeNonce); from then on what this member sends carries
  // checkable content, and what it receives is checked, every element (chaos/traffic_check.h).
  // Ends the process (error line, exit 3) when the tensor cannot be allocated on the world's
  // device.
  void trafficLoop(const mw::chaos::WorkerTraffic& t) {
    const std::stop_token stop = stop_.get_token();
    const WorldConf& wc = worlds_.at(t.world);
    const int rank = wc.options.rank, size = wc.options.size;
    const size_t elem = mw::dtypeSize(t.dtype);
    const size_t count = std::max<size_t>(1, t.bytes / elem);
    // The worker's error line carries the Status and the size ("error unavailable: cuda:0 ...").
    auto made = mw::chaos::TrafficBuffer::make(count * elem, wc.options.device);
    if (!made.ok()) fatal(made.status().toString());
    mw::chaos::TrafficBuffer buf = std::move(made).value();
    mw::Tensor tensor{buf.data(), t.dtype, count, wc.options.device};
    mw::TrafficWindows& win = *windows_.at(t.world);
    if (t.pattern == Pattern::kPipeline && rank >= 2) {
      mw::chaos::waitForStop(stop);  // a pipeline moves data from rank 0 to rank 1 only
      return;
    }
    // Nothing is filled or checked with checks off (WorkerConfig::check): then no incarnation
    // begins with a nonce.
    const bool checking = check_;
    const int members = t.pattern == Pattern::kPipeline ? 2 : size;
    mw::chaos::TrafficCheck check(t.dtype, count,
                                  t.pattern == Pattern::kRingAllreduce ? members : 1,
                                  every_element_ ? mw::chaos::TrafficCheck::Coverage::kEveryElement
                                                 : mw::chaos::TrafficCheck::Coverage::kSampled);
    buf.mirror(check, elem, [&t](const mw::Status& e) {
      fatal("world " + t.world + ": checking its data: " + e.toString());  // the device is lost
    });
    const int64_t tensor_bytes = static_cast<int64_t>(tensor.bytes());
    int lines_left = kViolationLines;
    uint64_t counted_gen = 0, ops_in_gen = 0;  // the history's sequence numbers when unchecked
    mw::chaos::Pacer pacer(t.rate);            // at the traffic's rate
    while (!stop.stop_requested()) {
      const auto seen = changes_.seen();
      auto info = manager_.world(t.world);
      if (!info.ok() || info->state != mw::WorldState::kHealthy) {
        changes_.waitPast(seen, stop);  // the next world event (created, broken, removed)
        continue;
      }
      const uint64_t gen = info->generation;
      if (checking && gen != check.generation()) {  // a new incarnation: its first is the nonce's
        const uint64_t nonce =
            mw::chaos::agreeNonce(comm_, t, rank, wc.options.device, buf.nonceScratch());
        if (sameIncarnation(t.world, gen)) check.begin(gen, nonce, members);
        // All 0 at every member: an all-reduce's elements outside each operation's sample stay 0
        // (TrafficCheck::reduced).
        if (mw::Status c = buf.clear(0); !c.ok()) fatal("world " + t.world + ": " + c.toString());
        continue;
      }
      auto t0 = mw::Clock::now();
      mw::Clock::time_point end = t0;  // when the last operation returned, before its check
      mw::Status s;
      long long moved = tensor_bytes;
      if (gen != counted_gen) counted_gen = gen, ops_in_gen = 0;
      // A member's next sequence number: the check's, or (unchecked) this loop's count.
      auto seqOf = [&](int member) { return checking ? check.next(member) : ops_in_gen; };
      // Each operation's outcome: its status, then (for what this member received) the check.
      auto completed = [&](const mw::Status& st) {
        if (st.ok() && sameIncarnation(t.world, gen)) return true;
        check.failed();  // the rest of this incarnation is not judged
        return false;
      };
      // The operation's entry in the history, when one is kept: `outcome` if it completed. It
      // ended at `end`, taken when it returned (its check is not part of it).
      auto record = [&](const char* op, int peer, uint64_t seq, mw::Clock::time_point start,
                        const char* outcome) {
        if (!history_.on()) return;
        history_.add({nowNs(start), nowNs(end), t.world, gen, op, peer, seq,
                      s.ok() ? outcome : mw::codeName(s.code())});
      };
      if (t.pattern == Pattern::kGatherToLeader && rank == 0) {
        for (int src = 1; src < size && s.ok(); ++src) {
          const auto start = mw::Clock::now();
          const uint64_t seq = seqOf(src);
          s = comm_.recv(t.world, tensor, src);
          end = mw::Clock::now();
          const bool done = completed(s);
          record("recv", src, seq, start,
                 done && checking ? judgeReceived(t, check, buf.host(), src, gen, "recv", end,
                                                  tensor_bytes, lines_left)
                                  : "unchecked");
          if (!done) break;
        }
        moved *= size - 1;
      } else if (t.pattern == Pattern::kGatherToLeader ||
                 (t.pattern == Pattern::kPipeline && rank == 0)) {
        const int to = t.pattern == Pattern::kPipeline ? 1 : 0;
        const uint64_t seq = seqOf(rank);
        if (checking) check.fill(buf.host(), rank);
        s = comm_.send(t.world, tensor, to);
        end = mw::Clock::now();
        record("send", to, seq, t0, completed(s) ? "ok" : "unchecked");
      } else if (t.pattern == Pattern::kPipeline) {
        const uint64_t seq = seqOf(0);
        s = comm_.recv(t.world, tensor, 0);
        end = mw::Clock::now();
        record("recv", 0, seq, t0,
               completed(s) && checking ? judgeReceived(t, check, buf.host(), 0, gen, "recv", end,
                                                        tensor_bytes, lines_left)
                                        : "unchecked");
      } else if (t.pattern == Pattern::kRingAllreduce) {
        const uint64_t seq = seqOf(rank);
        if (checking) check.fill(buf.host(), rank);
        // synchronize: an operation counts once the GPU has finished it (an nccl world's wait()
        // would return once the operation is ordered on the stream).
        s = comm_.allReduce(t.world, tensor).synchronize();
        end = mw::Clock::now();
        const char* outcome = "unchecked";
        if (completed(s) && checking && check.judging()) {
          outcome = judged(t, check.reduced(buf.host(), rank), gen, "all_reduce", end, tensor_bytes,
                           lines_left);
        } else if (checking) {
          check.reduced(buf.host(), rank);  // the sequence numbers advance all the same
        }
        record("all_reduce", -1, seq, t0, outcome);
      } else {  // broadcast
        const uint64_t seq = seqOf(t.root);
        if (checking && rank == t.root) check.fill(buf.host(), rank);
        s = comm_.broadcast(t.world, tensor, t.root).synchronize();
        end = mw::Clock::now();
        const bool done = completed(s);
        const char* outcome = done && rank == t.root ? "ok" : "unchecked";
        if (done && checking && rank != t.root) {
          outcome = judgeReceived(t, check, buf.host(), t.root, gen, "broadcast", end, tensor_bytes,
                                  lines_left);
        }
        record("broadcast", t.root, seq, t0, outcome);
      }
      ++ops_in_gen;
      if (s.ok()) {
        win.add(end, moved, std::chrono::duration_cast<std::chrono::nanoseconds>(end - t0).count());
      }
      pacer.wait(stop);
    }
  }

  // Checks what arrived from `sender` (TrafficCheck::receive) and counts it (judged); an
  // incarnation that is not judged counts nothing. Returns the outcome in the history: judged's,
  // or "unchecked".
  const char* judgeReceived(const mw::chaos::WorkerTraffic& t, mw::chaos::TrafficCheck& check,
                            const void* data, int sender, uint64_t generation, const char* op,
                            mw::Clock::time_point end, int64_t bytes, int& lines_left) {
    const bool judging = check.judging();
    auto f = check.receive(data, sender);
    return judging ? judged(t, f, generation, op, end, bytes, lines_left) : "unchecked";
  }

  std::string role_;
  unsigned seed_ = 0;
  std::chrono::milliseconds window_{100};
  std::string fifo_prefix_;
  bool check_ = true;             // WorkerConfig::check
  bool every_element_ = false;    // WorkerConfig::check_every_element
  mw::chaos::OpHistory history_;  // WorkerConfig::history
  std::map<std::string, WorldConf> worlds_;
  std::map<std::string, std::unique_ptr<mw::TrafficWindows>> windows_;
  std::map<std::string, std::unique_ptr<mw::WindowRing<mw::chaos::CheckCounts>>>
      checked_;  // like windows_
  std::map<std::string, std::atomic<bool>> removed_;
  std::vector<mw::chaos::WorkerTraffic> traffic_;
  mw::WorldManager manager_;
  mw::Communicator comm_{manager_};
  std::shared_ptr<mw::Subscription> events_;
  std::stop_source stop_;                    // the worker is stopping
  std::atomic<mw::Clock::rep> stop_at_{0};   // when stop_ was requested; 0 before
  std::atomic<mw::Clock::rep> ready_at_{0};  // when `ready` was said; 0 before
  std::optional<mw::chaos::CpuMeter> cpu_;   // made by run() before ready_at_, then the reporter's
  mw::chaos::ChangeCount changes_;           // world events seen, for loops waiting on a world
  mw::chaos::Countdown loops_running_;       // traffic loops not yet ended
  std::mutex joiners_mu_;
  std::vector<std::jthread> joiners_;  // GUARDED_BY(joiners_mu_)
  std::vector<std::jthread> loops_;    // run()'s
  std::jthread reporter_;              // last: joined (if ever destroyed) before the above go
};

}  // namespace

int main(int argc, char** argv) {
  const bool help =
      argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0);
  if (help || argc != 3 || std::strcmp(argv[1], "--config") != 0) {
    std::fprintf(help ? stdout : stderr,
                 "usage: mw_worker --config '<json>'\n"
                 "The chaos harness (mwchaos) starts this program, one per scenario role.\n"
                 "Its worlds' store token comes from the environment variable "
                 "MW_CHAOS_STORE_TOKEN (none when unset).\n");
    return help ? 0 : 2;
  }
  // Before any thread starts, so that every thread has SIGTERM and SIGINT blocked: they reach
  // the worker through the signalfd only.
  auto signals = mw::chaos::SignalFd::open();
  if (!signals.ok()) fatal(signals.status().toString());
  auto conf = mw::chaos::parseWorkerConfig(argv[2]);
  if (!conf.ok()) fatal("bad configuration: " + conf.status().message());
  Worker w(*conf);
  int rc = w.run(*signals);
  std::fflush(stdout);
  std::_Exit(rc);
}
