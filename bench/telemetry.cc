// mw_bench telemetry: what the telemetry channel (worlds/telemetry.h; docs/design.md "The telemetry
// channel") costs a program, absent and present.
//
// One process, two managers made the same way, one with MW_TELEMETRY_FD set (a pipe that a
// thread of this process drains) and one without, each with a one-member world. Per call: blocks
// of the same call on each world, alternating, wall and CPU time per call; the ratio
// (present / absent) per pair of blocks. Idle: the CPU the process spends over --idle-seconds with
// --worlds idle worlds, with the channel and without, alternating, as a share of one core; the
// difference is the telemetry thread's. Target (issue 15): the idle difference under 1% of a
// core. The per-call cost is information: without the channel an operation does a subset of what
// it does with it (one null test instead of two clock reads and four atomic adds), so the
// present/absent difference bounds what the absent channel could cost.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "agent.h"
#include "bench_util.h"
#include "multiworld/multiworld.h"
#include "subcommands.h"

namespace mwb {

const char* const kTelemetryHelp =
    "mw_bench telemetry [--calls N] [--blocks N] [--worlds N] [--idle-seconds S] [--json PATH]\n"
    "                   [--strict]\n"
    "\n"
    "The telemetry channel's cost (MW_TELEMETRY_FD: a program the chaos harness starts reports\n"
    "its worlds every 100 ms). One process, two managers alike but for the channel:\n"
    "  per call   blocks of allReduce(4 floats).wait() in a one-member world, with and without\n"
    "             the channel alternating: wall and CPU us per call, ratio present/absent per\n"
    "             pair of blocks, and the added ns per call (information: the absent\n"
    "             channel's one null test costs less than this difference).\n"
    "  idle       process CPU over S seconds with N idle worlds, with and without the channel\n"
    "             (alternating, 3 rounds): the difference as a share of one core. Target < 1%.\n"
    "\n"
    "  --calls N         calls per block (default 20000)\n"
    "  --blocks N        pairs of blocks (default 9)\n"
    "  --worlds N        idle worlds (default 8)\n"
    "  --idle-seconds S  each idle measurement (default 2)\n"
    "  --json PATH       write raw samples, medians and spreads\n"
    "  --strict          exit 1 when a target is missed\n";

namespace {

// A pipe whose write end the manager made while it is named reports into; a thread drains it.
class Drain {
 public:
  Drain() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) throw BenchError("pipe failed");
    thread_ = std::thread([this] {
      char buf[65536];
      while (::read(fds_[0], buf, sizeof buf) > 0) {
      }
    });
  }
  ~Drain() {
    ::close(fds_[1]);
    thread_.join();
    ::close(fds_[0]);
  }
  int writeFd() const { return fds_[1]; }

 private:
  int fds_[2] = {-1, -1};
  std::thread thread_;
};

// A manager with `worlds` one-member worlds "t0".."tN-1", made with the channel when `fd` >= 0.
std::unique_ptr<mw::WorldManager> makeManager(int fd, int worlds) {
  if (fd >= 0) {
    ::setenv("MW_TELEMETRY_FD", std::to_string(fd).c_str(), 1);
  } else {
    ::unsetenv("MW_TELEMETRY_FD");
  }
  auto m = std::make_unique<mw::WorldManager>();
  ::unsetenv("MW_TELEMETRY_FD");
  for (int i = 0; i < worlds; ++i) {
    mw::WorldOptions o;
    o.name = "t" + std::to_string(i);
    o.rank = 0;
    o.size = 1;
    expectOk(m->initWorld(o, mw::deadlineIn(std::chrono::seconds(20))), "joining " + o.name);
  }
  return m;
}

}  // namespace

int runTelemetry(int argc, char** argv, int first) {
  Flags f(argc, argv, first, {"--calls", "--blocks", "--worlds", "--idle-seconds", "--json"},
          {"--strict"});
  const long calls = f.integer("--calls", 20000, 1, 100000000);
  const int blocks = static_cast<int>(f.integer("--blocks", 9, 1, 10000));
  const int worlds = static_cast<int>(f.integer("--worlds", 8, 1, 256));
  const double idle_s = f.number("--idle-seconds", 2, 0.1, 600);
  const int pid = static_cast<int>(::getpid());
  Drain drain;

  // Per call.
  std::vector<double> wall[2], cpu[2], ratio;
  {
    auto absent = makeManager(-1, 1), present = makeManager(drain.writeFd(), 1);
    mw::Communicator ca(*absent), cp(*present);
    float v[4] = {1, 2, 3, 4};
    auto block = [&](mw::Communicator& c, int which) {
      const double cpu0 = processCpuSeconds({pid});
      const auto t0 = Clock::now();
      for (long n = 0; n < calls; ++n) {
        expectOk(c.allReduce("t0", mw::Tensor::cpu(v, 4)).wait(), "all_reduce");
      }
      wall[which].push_back(1e6 * seconds(Clock::now() - t0) / static_cast<double>(calls));
      cpu[which].push_back(1e6 * (processCpuSeconds({pid}) - cpu0) / static_cast<double>(calls));
    };
    for (int i = 0; i < 200; ++i) {  // warm-up
      expectOk(ca.allReduce("t0", mw::Tensor::cpu(v, 4)).wait(), "warm-up");
      expectOk(cp.allReduce("t0", mw::Tensor::cpu(v, 4)).wait(), "warm-up");
    }
    for (int b = 0; b < blocks; ++b) {
      if (b % 2 == 0) {
        block(ca, 0);
        block(cp, 1);
      } else {
        block(cp, 1);
        block(ca, 0);
      }
      ratio.push_back(wall[1].back() / wall[0].back());
    }
  }

  // Idle.
  std::vector<double> idle_share[2], idle_diff;
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 2; ++k) {
      const int which = round % 2 == 0 ? k : 1 - k;
      auto m = makeManager(which == 1 ? drain.writeFd() : -1, worlds);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // settle
      const double cpu0 = processCpuSeconds({pid});
      const auto t0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
      idle_share[which].push_back((processCpuSeconds({pid}) - cpu0) / seconds(Clock::now() - t0));
    }
    idle_diff.push_back(idle_share[1].back() - idle_share[0].back());
  }

  const Summary r = summarize(ratio), d = summarize(idle_diff);
  const bool idle_ok = d.median < 0.01;
  const double added_ns = 1000 * (summarize(wall[1]).median - summarize(wall[0]).median);
  std::printf(
      "\ntelemetry channel cost, %ld calls x %d pairs of blocks; %d idle worlds x %.1f s x 3\n",
      calls, blocks, worlds, idle_s);
  for (int k = 0; k < 2; ++k) {
    const Summary w = summarize(wall[k]), u = summarize(cpu[k]);
    std::printf(
        "  all_reduce, channel %-7s wall %6.2f [%.2f..%.2f] us   CPU %6.2f [%.2f..%.2f] us\n",
        k ? "present" : "absent", w.median, w.min, w.max, u.median, u.min, u.max);
  }
  std::printf(
      "  per call present/absent: %.3f [%.3f..%.3f], %.0f ns added per call (information)\n",
      r.median, r.min, r.max, added_ns);
  for (int k = 0; k < 2; ++k) {
    const Summary s = summarize(idle_share[k]);
    std::printf("  idle process CPU, channel %-7s %.3f%% [%.3f..%.3f] of a core\n",
                k ? "present" : "absent", 100 * s.median, 100 * s.min, 100 * s.max);
  }
  std::printf(
      "  idle difference (the telemetry thread): %.3f%% [%.3f..%.3f] of a core   target "
      "< 1%%: %s\n",
      100 * d.median, 100 * d.min, 100 * d.max, verdict(idle_ok));

  Json doc = Json::object();
  doc.set("benchmark", "telemetry").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("calls_per_block", calls)
      .set("blocks", blocks)
      .set("worlds", worlds)
      .set("idle_seconds", idle_s);
  doc.set("config", cfg);
  doc.set("wall_us_absent", sampleJson(wall[0])).set("wall_us_present", sampleJson(wall[1]));
  doc.set("cpu_us_absent", sampleJson(cpu[0])).set("cpu_us_present", sampleJson(cpu[1]));
  doc.set("ratio_present_over_absent", sampleJson(ratio));
  doc.set("idle_core_share_absent", sampleJson(idle_share[0]));
  doc.set("idle_core_share_present", sampleJson(idle_share[1]));
  doc.set("idle_core_share_difference", sampleJson(idle_diff));
  doc.set("added_ns_per_call", added_ns);
  writeJson(f.str("--json", ""), doc);
  return strict(argc, argv, first) && !idle_ok ? 1 : 0;
}

}  // namespace mwb
