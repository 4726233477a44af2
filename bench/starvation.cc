// mw_bench starvation: no false breaks on a starved machine, and a silent member still found.
//
// Busy-loop hog processes oversubscribe the cores (default 4 per core). This process is rank 0 of
// --worlds worlds, each with its own agent streaming small messages to it and a short heartbeat
// timeout. For --seconds nothing is done to them: every break is a false one (a member blamed for
// silence that was the starved machine's). Then, under the same load, --stops times a fresh world's
// agent is SIGSTOPped: its detection must stay within timeout + 250 ms.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include "agent.h"
#include "bench_util.h"
#include "subcommands.h"

namespace mwb {

const char* const kStarvationHelp =
    "mw_bench starvation [--seconds S] [--hogs N] [--worlds N] [--heartbeat-ms MS] [--stops N]\n"
    "                    [--stream-bytes BYTES] [--json PATH] [--strict]\n"
    "\n"
    "--hogs busy-loop processes (default 4 per core) starve the machine. This process is rank 0\n"
    "of --worlds worlds (default 4), each with its own worker streaming --stream-bytes messages\n"
    "(default 64K) to it, heartbeat timeout --heartbeat-ms (default 500). For --seconds (default\n"
    "600) no fault is injected: target 0 breaks. Then, still under load, --stops times (default "
    "5)\n"
    "a fresh world's worker is SIGSTOPped: target every detection <= timeout + 250 ms.\n"
    "\n"
    "  --json PATH   write the counts, every break's detail and the detection samples\n"
    "  --strict      exit 1 when a target is missed\n";

namespace {

// Busy-loop children, killed (and reaped) with this object; they die with us too.
class Hogs {
 public:
  explicit Hogs(int n) {
    for (int i = 0; i < n; ++i) {
      pid_t pid = ::fork();
      if (pid < 0) throw BenchError("fork of a CPU hog failed");
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        volatile unsigned long x = 0;
        for (;;) x = x + 1;
      }
      pids_.push_back(pid);
    }
  }
  ~Hogs() {
    for (pid_t p : pids_) ::kill(p, SIGKILL);
    for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

struct Config {
  long seconds = 600, hogs = 0, worlds = 4, stops = 5;
  std::chrono::milliseconds hb{500};
  size_t stream_bytes = 64u << 10;
};

// Receives world `name`'s stream until it fails; counts messages.
struct Sink {
  std::atomic<long> messages{0};
  std::jthread thread;
  void start(mw::Communicator& c, const std::string& name, size_t bytes) {
    thread = std::jthread([this, &c, name, bytes] {
      std::vector<float> buf(bytes / sizeof(float));
      auto t = mw::Tensor::cpu(buf.data(), buf.size());
      while (c.recv(name, t, 1).ok()) ++messages;
    });
  }
};

// Counts and keeps every broken event that arrives before `until` (of any world).
void collectBreaks(mw::Subscription& sub, Clock::time_point until, std::vector<std::string>* out) {
  while (auto ev = sub.next(until)) {
    if (ev->kind == mw::WorldEvent::Kind::kBroken && ev->broken) {
      out->push_back(ev->world + ": " + mw::causeName(ev->broken->cause) + ": " +
                     ev->broken->detail);
      std::fprintf(stderr, "starvation: FALSE BREAK %s\n", out->back().c_str());
    }
  }
}

// SIGSTOPs a fresh world's worker and returns ms from the signal to BrokenInfo.detected_at.
double stopDetection(mw::WorldManager& m, mw::Subscription& sub, std::chrono::milliseconds hb) {
  Hosted h = hostWorld(m, "victim", 2, hb);
  auto v = Agent::spawn("victim agent");
  v->call(joinCommand("victim", 1, 2, h.port, hb));
  expectOk(h.join.wait(mw::deadlineIn(std::chrono::seconds(30))), "joining world victim");
  std::this_thread::sleep_for(2 * hb);
  const auto t0 = Clock::now();
  ::kill(v->pid(), SIGSTOP);
  double ms = -1;
  while (auto ev = sub.next(t0 + hb + std::chrono::seconds(10))) {
    if (ev->kind == mw::WorldEvent::Kind::kBroken && ev->world == "victim") {
      ms = millis(ev->broken->detected_at - t0);
      break;
    }
  }
  v->signal(SIGKILL);
  expectOk(m.removeWorld("victim"), "removing world victim");
  if (ms < 0) throw BenchError("the stopped worker's world was not reported broken in time");
  return ms;
}

Config parseConfig(int argc, char** argv, int first, std::string& json) {
  Flags fl(
      argc, argv, first,
      {"--seconds", "--hogs", "--worlds", "--heartbeat-ms", "--stops", "--stream-bytes", "--json"},
      {"--strict"});
  Config c;
  const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  c.seconds = fl.integer("--seconds", 600, 1, 86400);
  c.hogs = fl.integer("--hogs", 4 * cores, 0, 1024);
  c.worlds = fl.integer("--worlds", 4, 1, 64);
  c.stops = fl.integer("--stops", 5, 0, 1000);
  c.hb = std::chrono::milliseconds(fl.integer("--heartbeat-ms", 500, 50, 3600000));
  c.stream_bytes = parseSize(fl.str("--stream-bytes", "64K"));
  if (c.stream_bytes == 0 || c.stream_bytes % sizeof(float) != 0) {
    throw UsageError("--stream-bytes: a positive multiple of 4");
  }
  json = fl.str("--json", "");
  return c;
}

}  // namespace

int runStarvation(int argc, char** argv, int first) {
  std::string json;
  const Config c = parseConfig(argc, argv, first, json);
  mw::WorldManager m;
  mw::Communicator comm(m);
  auto sub = m.subscribe();
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<Sink> sinks(static_cast<size_t>(c.worlds));
  for (long i = 0; i < c.worlds; ++i) {
    const std::string name = "w" + std::to_string(i);
    Hosted h = hostWorld(m, name, 2, c.hb);
    agents.push_back(Agent::spawn("agent of " + name));
    agents.back()->call(joinCommand(name, 1, 2, h.port, c.hb));
    expectOk(h.join.wait(mw::deadlineIn(std::chrono::seconds(30))), "joining world " + name);
    sinks[static_cast<size_t>(i)].start(comm, name, c.stream_bytes);
    agents.back()->call("stream " + name + " 0 " + std::to_string(c.stream_bytes));
  }
  std::vector<std::string> breaks;
  std::vector<double> stops;
  {
    Hogs hogs(static_cast<int>(c.hogs));
    std::fprintf(stderr, "starvation: %ld hogs, %ld worlds, heartbeat %lld ms, %ld s\n", c.hogs,
                 c.worlds, static_cast<long long>(c.hb.count()), c.seconds);
    collectBreaks(*sub, Clock::now() + std::chrono::seconds(c.seconds), &breaks);
    for (long i = 0; i < c.stops; ++i) {
      stops.push_back(stopDetection(m, *sub, c.hb));
      std::fprintf(stderr, "starvation: SIGSTOP %ld/%ld detected after %.1f ms\n", i + 1, c.stops,
                   stops.back());
    }
  }
  long messages = 0;
  for (auto& s : sinks) messages += s.messages.load();
  for (long i = 0; i < c.worlds; ++i) m.removeWorld("w" + std::to_string(i)).ignore();

  const double limit = static_cast<double>(c.hb.count()) + 250.0;
  const Summary st = summarize(stops);
  const bool no_false = breaks.empty();
  const bool stop_ok = stops.empty() || st.max <= limit;
  std::printf("\nstarvation: %ld hogs on %ld cores, %ld worlds (heartbeat %lld ms), %ld s\n",
              c.hogs, std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)), c.worlds,
              static_cast<long long>(c.hb.count()), c.seconds);
  std::printf("  false breaks                      %6zu   target 0          %s\n", breaks.size(),
              verdict(no_false));
  std::printf("  SIGSTOP detection (ms)  n=%zu  median %.1f  max %.1f   target <= %.0f   %s\n",
              st.n, st.median, st.max, limit, verdict(stop_ok));
  std::printf("  messages streamed meanwhile       %ld\n", messages);
  Json doc = Json::object();
  doc.set("benchmark", "starvation").set("host", hostJson());
  doc.set("hogs", c.hogs).set("worlds", c.worlds).set("heartbeat_ms", c.hb.count());
  doc.set("seconds", c.seconds).set("messages", messages);
  Json bj = Json::array();
  for (const auto& b : breaks) bj.push(b);
  doc.set("false_breaks", bj).set("sigstop_detect_ms", sampleJson(stops));
  doc.set("sigstop_limit_ms", limit);
  writeJson(json, doc);
  return (!no_false || !stop_ok) && strict(argc, argv, first) ? 1 : 0;
}

}  // namespace mwb
