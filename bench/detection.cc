// mw_bench detection: how fast a dead or silent member is detected, and what it costs a survivor.
//
// This process is rank 0 of world "survivor", whose rank 1 (agent S) streams 4 MiB messages for
// the whole run, received here by a meter thread that timestamps each message. Each iteration
// creates world "victim" (same name every time) with a fresh agent V, optionally posts an irecv on
// it that never completes, waits a seeded random time, then SIGKILLs (or SIGSTOPs) V. Detection is
// BrokenInfo.detected_at minus the time read just before kill(). The survivor's throughput is
// compared between the window before the signal and the window after it.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "agent.h"
#include "bench_util.h"
#include "subcommands.h"

namespace mwb {

const char* const kDetectionHelp =
    "mw_bench detection [--kills N] [--stops N] [--seed N] [--kill-heartbeat-ms MS]\n"
    "                   [--stop-heartbeat-ms MS] [--stream-bytes BYTES] [--window-ms MS]\n"
    "                   [--json PATH] [--strict]\n"
    "\n"
    "This process is rank 0 of world \"survivor\" (its worker streams --stream-bytes messages to "
    "it\n"
    "throughout) and, each iteration, rank 0 of a re-created world \"victim\" with a fresh "
    "worker.\n"
    "After a seeded random wait (2 windows + 0.1..0.5 s) the victim's worker gets the signal:\n"
    "  SIGKILL x --kills (default 30): half with an irecv pending on the victim world, half idle.\n"
    "          detection = BrokenInfo.detected_at - time before kill(); target p99 <= 50 ms.\n"
    "  SIGSTOP x --stops (default 10), victim heartbeat timeout --stop-heartbeat-ms (500):\n"
    "          target: every detection <= timeout + min(timeout/5, 100 ms) (the runtime's\n"
    "          confirmation of a suspicion) + 100 ms. The stopped worker is SIGKILLed "
    "after.\n"
    "For every fault the survivor's bytes received in [t-window, t) and [t, t+window) are\n"
    "compared (window --window-ms, default 1000); target: median after/before >= 0.97.\n"
    "As a control for the machine's noise, the same ratio is computed between the two windows\n"
    "before each fault (no fault in either).\n"
    "The survivor must stay healthy throughout (a break there is reported as a failure).\n"
    "\n"
    "  --kills N               SIGKILL iterations (default 30)\n"
    "  --stops N               SIGSTOP iterations (default 10)\n"
    "  --seed N                seed of the random waits (default 1)\n"
    "  --kill-heartbeat-ms MS  heartbeat timeout of the victim world for SIGKILL (default 1000)\n"
    "  --stop-heartbeat-ms MS  heartbeat timeout of the victim world for SIGSTOP (default 500)\n"
    "  --stream-bytes BYTES    survivor message size (default 4M)\n"
    "  --window-ms MS          throughput window before/after the fault (default 1000)\n"
    "  --json PATH             write raw samples, medians and spreads\n"
    "  --strict                exit 1 when a target is missed\n";

namespace {

// Receives the survivor's stream and remembers when each message completed. Thread rules: its
// own thread receives; bytesIn/failure from any thread; stop() then removing the world ends it.
class Meter {
 public:
  Meter(mw::Communicator& c, size_t bytes) : buf_(bytes / sizeof(float)), bytes_(bytes) {
    thread_ = std::jthread([this, &c] { loop(c); });
  }
  // Bytes of the messages completed in [from, to).
  double bytesIn(Clock::time_point from, Clock::time_point to) const {
    std::lock_guard lock(mu_);
    auto lo = std::lower_bound(done_.begin(), done_.end(), from);
    auto hi = std::lower_bound(done_.begin(), done_.end(), to);
    return static_cast<double>(hi - lo) * static_cast<double>(bytes_);
  }
  // Whether the stream failed before stop(), and why.
  std::string failure() const {
    std::lock_guard lock(mu_);
    return failure_;
  }
  void stop() { stopping_ = true; }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop(mw::Communicator& c) {
    auto t = mw::Tensor::cpu(buf_.data(), buf_.size());
    for (;;) {
      mw::Status s = c.recv("survivor", t, 1);
      std::lock_guard lock(mu_);
      if (!s.ok()) {
        if (!stopping_) failure_ = s.toString();
        return;
      }
      done_.push_back(Clock::now());
    }
  }

  std::vector<float> buf_;
  const size_t bytes_;
  mutable std::mutex mu_;
  std::vector<Clock::time_point> done_;  // GUARDED_BY(mu_)
  std::string failure_;                  // GUARDED_BY(mu_)
  std::atomic<bool> stopping_{false};
  std::jthread thread_;
};

struct Fault {
  int signal = SIGKILL;
  bool pending = false;
  double wait_s = 0;
  double detect_ms = 0;  // detected_at - t0
  double event_ms = 0;   // event delivered to subscribers - t0
  std::string cause, detail, pending_status;
  double before_gbps = 0, after_gbps = 0, ratio = 0;
  // The same ratio between the two windows before the fault: the machine's noise floor.
  double control_ratio = 0;
};

struct Env {
  mw::WorldManager manager;
  mw::Communicator comm{manager};
  std::shared_ptr<mw::Subscription> events = manager.subscribe();
  std::unique_ptr<Agent> survivor_agent;
  std::unique_ptr<Meter> meter;
  std::mt19937_64 rng;
  std::chrono::milliseconds window{1000};
  int spurious = 0;  // broken events of any world but the victim
};

// Waits for the victim's kBroken event; counts any other world's break as spurious.
mw::WorldEvent awaitVictimBroken(Env& e, Clock::time_point until) {
  while (auto ev = e.events->next(until)) {
    if (ev->kind != mw::WorldEvent::Kind::kBroken) continue;
    if (ev->world == "victim" && ev->broken) return *ev;
    ++e.spurious;
  }
  throw BenchError("the victim world was not reported broken in time");
}

Fault runFault(Env& e, int sig, bool pending, std::chrono::milliseconds hb) {
  Fault f;
  f.signal = sig;
  f.pending = pending;
  Hosted h = hostWorld(e.manager, "victim", 2, hb);
  auto v = Agent::spawn("victim agent");
  v->call(joinCommand("victim", 1, 2, h.port, hb));
  expectOk(h.join.wait(mw::deadlineIn(std::chrono::seconds(20))), "joining world victim");
  std::vector<float> small(16);
  mw::Work pend;
  if (pending) pend = e.comm.irecv("victim", mw::Tensor::cpu(small.data(), small.size()), 1);
  std::uniform_real_distribution<double> extra(0.1, 0.5);
  f.wait_s = 2 * seconds(e.window) + extra(e.rng);
  std::this_thread::sleep_for(std::chrono::duration<double>(f.wait_s));
  while (auto ev = e.events->next(mw::deadlineIn(std::chrono::milliseconds(0)))) {
    if (ev->kind == mw::WorldEvent::Kind::kBroken) ++e.spurious;  // nothing should break yet
  }

  const auto t0 = Clock::now();
  ::kill(v->pid(), sig);
  mw::WorldEvent ev = awaitVictimBroken(e, t0 + hb + std::chrono::seconds(10));
  f.detect_ms = millis(ev.broken->detected_at - t0);
  f.event_ms = millis(ev.at - t0);
  f.cause = mw::causeName(ev.broken->cause);
  f.detail = ev.broken->detail;
  if (pending) {
    mw::Status s = pend.wait(mw::deadlineIn(std::chrono::seconds(2)));
    f.pending_status = mw::codeName(s.code());
  }
  std::this_thread::sleep_until(t0 + e.window + std::chrono::milliseconds(20));
  double before = e.meter->bytesIn(t0 - e.window, t0);
  double after = e.meter->bytesIn(t0, t0 + e.window);
  f.before_gbps = before / seconds(e.window) / 1e9;
  f.after_gbps = after / seconds(e.window) / 1e9;
  f.ratio = before > 0 ? after / before : 0;
  double earlier = e.meter->bytesIn(t0 - 2 * e.window, t0 - e.window);
  f.control_ratio = earlier > 0 ? before / earlier : 0;
  v->signal(SIGKILL);  // reaps; a stopped worker dies here
  expectOk(e.manager.removeWorld("victim"), "removing world victim");
  if (!e.meter->failure().empty()) {
    throw BenchError("the survivor world failed: " + e.meter->failure());
  }
  return f;
}

Json faultJson(const Fault& f) {
  Json j = Json::object();
  j.set("signal", f.signal == SIGKILL ? "SIGKILL" : "SIGSTOP").set("pending_irecv", f.pending);
  j.set("wait_s", f.wait_s).set("detect_ms", f.detect_ms).set("event_ms", f.event_ms);
  j.set("cause", f.cause).set("detail", f.detail);
  if (f.pending) j.set("pending_status", f.pending_status);
  j.set("survivor_before_gbps", f.before_gbps).set("survivor_after_gbps", f.after_gbps);
  j.set("survivor_ratio", f.ratio).set("control_ratio", f.control_ratio);
  return j;
}

template <typename Pred>
std::vector<double> pick(const std::vector<Fault>& fs, Pred p, double Fault::*field) {
  std::vector<double> v;
  for (const auto& f : fs) {
    if (p(f)) v.push_back(f.*field);
  }
  return v;
}

void printRow(const char* name, const std::vector<double>& v, const char* unit) {
  Summary s = summarize(v);
  std::printf("  %-36s %3zu  %8.2f %8.2f %8.2f %8.2f %8.2f  %s\n", name, s.n, s.min, s.median,
              s.p90, s.p99, s.max, unit);
}

struct Config {
  int kills = 30, stops = 10;
  long seed = 1;
  std::chrono::milliseconds kill_hb{1000}, stop_hb{500}, window{1000};
  size_t stream_bytes = 4u << 20;
};

// Verdicts and the numbers they rest on.
struct Outcome {
  Summary kill, stop, ratio;
  double stop_limit_ms = 0;
  bool kill_ok = false, stop_ok = false, ratio_ok = false, clean = false;
};

bool isKill(const Fault& f) { return f.signal == SIGKILL; }
bool isStop(const Fault& f) { return f.signal == SIGSTOP; }
bool any(const Fault&) { return true; }
bool pendingKill(const Fault& f) { return isKill(f) && f.pending; }
bool idleKill(const Fault& f) { return isKill(f) && !f.pending; }

Outcome judge(const std::vector<Fault>& faults, const Config& c, bool clean) {
  Outcome o;
  auto kd = pick(faults, isKill, &Fault::detect_ms);
  auto sd = pick(faults, isStop, &Fault::detect_ms);
  o.kill = summarize(kd);
  o.stop = summarize(sd);
  o.ratio = summarize(pick(faults, any, &Fault::ratio));
  // A suspicion of silence is confirmed for min(timeout/5, 100 ms) before a world breaks
  // (runtime/src/base/lateness.h); 100 ms of slack beyond that.
  o.stop_limit_ms = static_cast<double>(c.stop_hb.count()) +
                    std::min(static_cast<double>(c.stop_hb.count()) / 5.0, 100.0) + 100.0;
  o.kill_ok = kd.empty() || o.kill.p99 <= 50.0;
  o.stop_ok = sd.empty() || o.stop.max <= o.stop_limit_ms;
  o.ratio_ok = o.ratio.n == 0 || o.ratio.median >= 0.97;
  o.clean = clean;
  return o;
}

void printReport(const std::vector<Fault>& faults, const Config& c, const Outcome& o) {
  std::printf("\ndetection (ms from just before kill() to BrokenInfo.detected_at)\n");
  std::printf("  %-36s %3s  %8s %8s %8s %8s %8s\n", "", "n", "min", "median", "p90", "p99", "max");
  printRow("SIGKILL, all", pick(faults, isKill, &Fault::detect_ms), "ms");
  printRow("SIGKILL, irecv pending", pick(faults, pendingKill, &Fault::detect_ms), "ms");
  printRow("SIGKILL, idle", pick(faults, idleKill, &Fault::detect_ms), "ms");
  printRow("SIGKILL, event delivered", pick(faults, isKill, &Fault::event_ms), "ms");
  printRow(("SIGSTOP, hb " + std::to_string(c.stop_hb.count()) + " ms").c_str(),
           pick(faults, isStop, &Fault::detect_ms), "ms");
  printRow("survivor after/before, all", pick(faults, any, &Fault::ratio), "ratio");
  printRow("survivor after/before, SIGKILL", pick(faults, isKill, &Fault::ratio), "ratio");
  printRow("survivor after/before, SIGSTOP", pick(faults, isStop, &Fault::ratio), "ratio");
  printRow("control (no fault): before/earlier", pick(faults, any, &Fault::control_ratio), "ratio");
  printRow("survivor GB/s before", pick(faults, any, &Fault::before_gbps), "GB/s");
  printRow("survivor GB/s after", pick(faults, any, &Fault::after_gbps), "GB/s");
  std::map<std::string, int> causes;
  int pending = 0, pending_broken = 0;
  for (const auto& f : faults) {
    ++causes[(isKill(f) ? "SIGKILL:" : "SIGSTOP:") + f.cause];
    if (f.pending) ++pending, pending_broken += f.pending_status == "world_broken";
  }
  std::printf("  causes:");
  for (const auto& [name, n] : causes) std::printf(" %s x%d", name.c_str(), n);
  std::printf("; pending irecvs failed with world_broken: %d of %d\n", pending_broken, pending);
  std::printf(
      "targets: SIGKILL p99 <= 50 ms: %.2f %s; SIGSTOP max <= %.0f ms: %.2f %s;\n"
      "         survivor median after/before >= 0.97: %.3f %s (%.0f%% CI of the median "
      "%.3f..%.3f, min %.3f);\n"
      "         survivor stayed healthy, no other world broke: %s\n",
      o.kill.p99, verdict(o.kill_ok), o.stop_limit_ms, o.stop.max, verdict(o.stop_ok),
      o.ratio.median, verdict(o.ratio_ok), 100 * o.ratio.ci_level, o.ratio.ci_lo, o.ratio.ci_hi,
      o.ratio.min, verdict(o.clean));
}

Json reportJson(const std::vector<Fault>& faults, const Config& c, const Outcome& o, int spurious) {
  Json doc = Json::object();
  doc.set("benchmark", "detection").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("kills", c.kills).set("stops", c.stops).set("seed", c.seed);
  cfg.set("kill_heartbeat_timeout_ms", static_cast<long>(c.kill_hb.count()));
  cfg.set("stop_heartbeat_timeout_ms", static_cast<long>(c.stop_hb.count()));
  cfg.set("stream_bytes", c.stream_bytes).set("window_ms", static_cast<long>(c.window.count()));
  doc.set("config", cfg);
  doc.set("sigkill_detect_ms", sampleJson(pick(faults, isKill, &Fault::detect_ms)));
  doc.set("sigkill_pending_detect_ms", sampleJson(pick(faults, pendingKill, &Fault::detect_ms)));
  doc.set("sigkill_idle_detect_ms", sampleJson(pick(faults, idleKill, &Fault::detect_ms)));
  doc.set("sigstop_detect_ms", sampleJson(pick(faults, isStop, &Fault::detect_ms)));
  doc.set("survivor_ratio", sampleJson(pick(faults, any, &Fault::ratio)));
  doc.set("control_ratio_no_fault", sampleJson(pick(faults, any, &Fault::control_ratio)));
  Json fj = Json::array();
  for (const auto& f : faults) fj.push(faultJson(f));
  doc.set("faults", fj);
  doc.set("spurious_breaks", spurious);
  Json t = Json::object();
  t.set("sigkill_p99_le_50ms", o.kill_ok).set("sigstop_max_le_timeout_plus_100ms", o.stop_ok);
  t.set("survivor_median_ratio_ge_0.97", o.ratio_ok).set("survivor_untouched", o.clean);
  doc.set("targets_pass", t);
  return doc;
}

Config parseConfig(int argc, char** argv, int first, std::string& json) {
  Flags fl(argc, argv, first,
           {"--kills", "--stops", "--seed", "--kill-heartbeat-ms", "--stop-heartbeat-ms",
            "--stream-bytes", "--window-ms", "--json"},
           {"--strict"});
  Config c;
  c.kills = static_cast<int>(fl.integer("--kills", 30, 0, 100000));
  c.stops = static_cast<int>(fl.integer("--stops", 10, 0, 100000));
  c.kill_hb = std::chrono::milliseconds(fl.integer("--kill-heartbeat-ms", 1000, 50, 3600000));
  c.stop_hb = std::chrono::milliseconds(fl.integer("--stop-heartbeat-ms", 500, 50, 3600000));
  c.window = std::chrono::milliseconds(fl.integer("--window-ms", 1000, 10, 60000));
  c.stream_bytes = parseSize(fl.str("--stream-bytes", "4M"));
  if (c.stream_bytes % sizeof(float) != 0) throw UsageError("--stream-bytes: multiple of 4");
  c.seed = fl.integer("--seed", 1, 0, 1L << 62);
  json = fl.str("--json", "");
  return c;
}

}  // namespace

int runDetection(int argc, char** argv, int first) {
  std::string json;
  const Config c = parseConfig(argc, argv, first, json);
  const auto start = Clock::now();
  Env e;
  e.rng.seed(static_cast<uint64_t>(c.seed));
  e.window = c.window;
  e.survivor_agent = Agent::spawn("survivor agent");
  Hosted h = hostWorld(e.manager, "survivor", 2, std::chrono::milliseconds(1000));
  e.survivor_agent->call(joinCommand("survivor", 1, 2, h.port, std::chrono::milliseconds(1000)));
  expectOk(h.join.wait(mw::deadlineIn(std::chrono::seconds(20))), "joining world survivor");
  e.meter = std::make_unique<Meter>(e.comm, c.stream_bytes);
  e.survivor_agent->call("stream survivor 0 " + std::to_string(c.stream_bytes));

  std::vector<Fault> faults;
  for (int i = 0; i < c.kills + c.stops; ++i) {
    const bool is_kill = i < c.kills;
    faults.push_back(runFault(e, is_kill ? SIGKILL : SIGSTOP, is_kill && i % 2 == 0,
                              is_kill ? c.kill_hb : c.stop_hb));
    const Fault& f = faults.back();
    std::fprintf(stderr, "detection: %d/%d %s%s detected %.2f ms (%s), survivor %.3f\n", i + 1,
                 c.kills + c.stops, is_kill ? "SIGKILL" : "SIGSTOP", f.pending ? " pending" : "",
                 f.detect_ms, f.cause.c_str(), f.ratio);
  }
  const bool healthy = e.manager.world("survivor")->state == mw::WorldState::kHealthy;
  e.meter->stop();
  expectOk(e.manager.removeWorld("survivor"), "removing world survivor");
  e.meter->join();

  const Outcome o = judge(faults, c, healthy && e.spurious == 0);
  printReport(faults, c, o);
  Json doc = reportJson(faults, c, o, e.spurious);
  doc.set("survivor_healthy_at_end", healthy);
  doc.set("wall_seconds", seconds(Clock::now() - start));
  writeJson(json, doc);
  const bool missed = !(o.kill_ok && o.stop_ok && o.ratio_ok && o.clean);
  return missed && strict(argc, argv, first) ? 1 : 0;
}

}  // namespace mwb
