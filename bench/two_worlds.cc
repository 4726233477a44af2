// mw_bench two-worlds: what belonging to a second world costs a world's throughput.
//
// This process is rank 0 of world A, whose rank 1 (agent X) sends 16 MiB messages. Per rep, the
// variants run in the mirrored order one, two-idle, two-busy, two-idle, one:
//   one        A only (world B removed)
//   two-idle   A and B, where B (rank 1: agent Y) is healthy and heartbeating but carries nothing
//   two-busy   X sends on A and Y sends on B at once; this process takes whichever arrives next
// B is created before the first "two-idle" and removed before the second "one"; every timing
// follows the same settle pause, so the only difference between one and two-idle is B's existence.
//
// That throughput ratio is the direct measure, but on a shared 2-core machine its per-rep noise is
// several percent, more than the 1% the target asks about. So the run also measures what an idle
// B costs directly: the CPU time of all three processes in windows without traffic, with B and
// without (mirrored), against the CPU time A's traffic uses while it runs. An idle world's cost is
// its heartbeats; what it takes from A is bounded by the CPU it takes from the cores A runs on.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "agent.h"
#include "bench_util.h"
#include "subcommands.h"

namespace mwb {

const char* const kTwoWorldsHelp =
    "mw_bench two-worlds [--reps N] [--size BYTES] [--rep-seconds S] [--heartbeat-ms MS]\n"
    "                    [--settle-ms MS] [--json PATH] [--strict]\n"
    "\n"
    "Three processes: this one (rank 0 of worlds A and B), agent X (rank 1 of A) and agent Y\n"
    "(rank 1 of B). Per rep, in the mirrored order one, two-idle, two-busy, two-idle, one:\n"
    "  one       this process is in world A only (B removed); X sends to it\n"
    "  two-idle  this process is in A and B; B is healthy and heartbeating, carries no traffic;\n"
    "            X sends on A\n"
    "  two-busy  X sends on A and Y sends on B at the same time; aggregate bytes/time\n"
    "Each timing moves the same number of --size messages (calibrated to --rep-seconds).\n"
    "Loss = 1 - (two-idle / one) per rep, each side from its two timings (the mirrored order\n"
    "cancels a load drift within the rep); target: median loss < 1%, printed with the\n"
    "confidence interval of that median. two-busy/one is informational (both worlds share\n"
    "this machine's two cores).\n"
    "CPU cost: after the reps, windows of --idle-seconds without traffic, mirrored (B absent, B\n"
    "present, B present, B absent) x --idle-reps: the CPU time of all three processes per second\n"
    "with B minus without it, over the CPU time per second of all three while A carries traffic\n"
    "alone, is the share of A's CPU an idle world takes (the loss it can cause). PASS when that\n"
    "share is < 1% and the throughput loss's confidence interval reaches below 1%.\n"
    "\n"
    "  --reps N           reps (default 15)\n"
    "  --size BYTES       message size (default 16M)\n"
    "  --rep-seconds S    target duration of one variant (default 0.4)\n"
    "  --heartbeat-ms MS  heartbeat timeout of both worlds (default 1000; pings every MS/10)\n"
    "  --settle-ms MS     pause after creating/removing B before timing (default 200)\n"
    "  --idle-seconds S   length of one CPU-cost window (default 1.5)\n"
    "  --idle-reps N      mirrored groups of CPU-cost windows (default 3)\n"
    "  --json PATH        write raw samples, medians and spreads\n"
    "  --strict           exit 1 when the target is missed\n";

namespace {

struct Setup {
  mw::WorldManager manager;
  mw::Communicator comm{manager};
  std::unique_ptr<Agent> x, y;
  std::chrono::milliseconds hb{1000};
  size_t bytes = 0;
  std::vector<float> buf_a, buf_b;
  bool b_exists = false;
};

// CPU seconds that this process and both agents have used so far.
double cpuAll(const Setup& s) {
  return processCpuSeconds({static_cast<int>(::getpid()), s.x->pid(), s.y->pid()});
}

void createB(Setup& s) {
  Hosted h = hostWorld(s.manager, "B", 2, s.hb);
  s.y->call(joinCommand("B", 1, 2, h.port, s.hb));
  expectOk(h.join.wait(mw::deadlineIn(std::chrono::seconds(20))), "joining world B");
  s.b_exists = true;
}

void removeB(Setup& s) {
  expectOk(s.manager.removeWorld("B"), "removing world B");
  s.y->call("leave B");
  s.b_exists = false;
}

std::string sendCmd(const char* world, size_t bytes, long iters) {
  return std::string("send ") + world + " 0 " + std::to_string(bytes) + " " + std::to_string(iters);
}

// Seconds to receive `iters` messages on A; with `cores`, also the CPU cores all three processes
// used meanwhile.
double timeOne(Setup& s, long iters, double* cores = nullptr) {
  auto t = mw::Tensor::cpu(s.buf_a.data(), s.buf_a.size());
  const double cpu0 = cpuAll(s);
  const auto t0 = Clock::now();
  s.x->post(sendCmd("A", s.bytes, iters));
  for (long i = 0; i < iters; ++i) expectOk(s.comm.recv("A", t, 1), "recv in A");
  const double sec = seconds(Clock::now() - t0);
  s.x->reply();
  if (cores) *cores = (cpuAll(s) - cpu0) / sec;
  return sec;
}

// Seconds to receive `iters` messages on each of A and B, whichever arrives next.
double timeBoth(Setup& s, long iters) {
  const char* names[2] = {"A", "B"};
  mw::Tensor ts[2] = {mw::Tensor::cpu(s.buf_a.data(), s.buf_a.size()),
                      mw::Tensor::cpu(s.buf_b.data(), s.buf_b.size())};
  long left[2] = {iters, iters};
  const auto t0 = Clock::now();
  s.x->post(sendCmd("A", s.bytes, iters));
  s.y->post(sendCmd("B", s.bytes, iters));
  mw::Work w[2] = {s.comm.irecv("A", ts[0], 1), s.comm.irecv("B", ts[1], 1)};
  while (left[0] > 0 || left[1] > 0) {
    std::vector<mw::Work> live;
    std::vector<int> index;
    for (int i = 0; i < 2; ++i) {
      if (left[i] > 0) live.push_back(w[i]), index.push_back(i);
    }
    auto got = mw::waitAny(live, mw::deadlineIn(std::chrono::seconds(60)));
    expectOk(got.status(), "waitAny");
    int i = index[*got];
    expectOk(w[i].status(), std::string("recv in ") + names[i]);
    if (--left[i] > 0) w[i] = s.comm.irecv(names[i], ts[i], 1);
  }
  const double sec = seconds(Clock::now() - t0);
  s.x->reply();
  s.y->reply();
  return sec;
}

// Seconds to receive `iters` messages on A after a settle pause (cores: as timeOne).
double timeSettled(Setup& s, long iters, std::chrono::milliseconds settle,
                   double* cores = nullptr) {
  std::this_thread::sleep_for(settle);
  return timeOne(s, iters, cores);
}

// CPU cores all three processes use over `sec` seconds without traffic.
double idleCores(Setup& s, double sec) {
  const double cpu0 = cpuAll(s);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(sec));
  return (cpuAll(s) - cpu0) / seconds(Clock::now() - t0);
}

// Per group, the CPU cores that B's existence costs with no traffic: windows in the mirrored
// order absent, present, present, absent.
std::vector<double> idleWorldCost(Setup& s, int groups, double sec,
                                  std::chrono::milliseconds settle) {
  std::vector<double> cost;
  for (int g = 0; g < groups; ++g) {
    if (s.b_exists) removeB(s);
    std::this_thread::sleep_for(settle);
    const double absent_a = idleCores(s, sec);
    createB(s);
    std::this_thread::sleep_for(settle);
    const double present = idleCores(s, sec) + idleCores(s, sec);
    removeB(s);
    std::this_thread::sleep_for(settle);
    const double absent_b = idleCores(s, sec);
    cost.push_back((present - absent_a - absent_b) / 2);
    std::fprintf(stderr, "two-worlds: idle B costs %.3f ms of CPU per second (group %d/%d)\n",
                 1e3 * cost.back(), g + 1, groups);
  }
  return cost;
}

struct Samples {
  std::vector<double> one, idle, busy;          // GB/s per rep (busy: aggregate of both worlds)
  std::vector<double> one_single, idle_single;  // GB/s of every single measurement
  std::vector<double> loss_pct, busy_ratio;
  std::vector<double> one_cores;        // CPU cores of A's traffic alone, per "one" timing
  std::vector<double> idle_cost_cores;  // per CPU-cost group
  double cpu_share_pct = 0;             // 100 * median idle cost / median cores of A's traffic
};

void printResult(const Samples& r, long iters, size_t bytes, int reps, bool ok) {
  auto line = [](const char* name, const std::vector<double>& v) {
    Summary s = summarize(v);
    std::printf("  %-34s %7.3f   [%.3f..%.3f]  p10..p90 %.3f..%.3f\n", name, s.median, s.min, s.max,
                s.p10, s.p90);
  };
  std::printf("\ntwo-worlds: world A receives %s messages (%ld per timing), %d reps\n",
              sizeName(bytes).c_str(), iters, reps);
  std::printf("  %-34s %7s   %s\n", "variant (GB/s)", "median", "[min..max]");
  line("one world (A only)", r.one);
  line("two worlds, B idle (A's rate)", r.idle);
  line("two worlds, both busy (aggregate)", r.busy);
  line("loss % = 100*(1 - idle/one) per rep", r.loss_pct);
  line("busy aggregate / one (info)", r.busy_ratio);
  Summary loss = summarize(r.loss_pct);
  Summary cost = summarize(r.idle_cost_cores);
  std::printf("  %-34s %7.3f   [%.3f..%.3f]\n", "idle B's CPU cost (ms per second)",
              1e3 * cost.median, 1e3 * cost.min, 1e3 * cost.max);
  std::printf(
      "throughput loss: median %.2f%%, %.0f%% confidence interval of the median %.2f..%.2f%%\n",
      loss.median, 100 * loss.ci_level, loss.ci_lo, loss.ci_hi);
  std::printf("CPU share an idle B takes from A's traffic: %.3f%%\n", r.cpu_share_pct);
  std::printf("target: loss < 1%% (CPU share < 1%% and the loss interval reaches below 1%%): %s\n",
              verdict(ok));
}

}  // namespace

int runTwoWorlds(int argc, char** argv, int first) {
  Flags f(argc, argv, first,
          {"--reps", "--size", "--rep-seconds", "--heartbeat-ms", "--settle-ms", "--idle-seconds",
           "--idle-reps", "--json"},
          {"--strict"});
  const int reps = static_cast<int>(f.integer("--reps", 15, 1, 10000));
  Setup s;
  s.bytes = parseSize(f.str("--size", "16M"));
  if (s.bytes % sizeof(float) != 0) throw UsageError("--size must be a multiple of 4");
  const double rep_seconds = f.number("--rep-seconds", 0.4, 0.001, 60);
  s.hb = std::chrono::milliseconds(f.integer("--heartbeat-ms", 1000, 50, 3600000));
  const auto settle = std::chrono::milliseconds(f.integer("--settle-ms", 200, 0, 60000));
  const double idle_seconds = f.number("--idle-seconds", 1.5, 0.1, 600);
  const int idle_reps = static_cast<int>(f.integer("--idle-reps", 3, 1, 1000));
  const auto start = Clock::now();

  s.buf_a.assign(s.bytes / sizeof(float), 0.0f);
  s.buf_b.assign(s.bytes / sizeof(float), 0.0f);
  s.x = Agent::spawn("agent X");
  s.y = Agent::spawn("agent Y");
  Hosted a = hostWorld(s.manager, "A", 2, s.hb);
  s.x->call(joinCommand("A", 1, 2, a.port, s.hb));
  expectOk(a.join.wait(mw::deadlineIn(std::chrono::seconds(20))), "joining world A");

  // Warm up both worlds (first creation of B is a cold one), verify the data, calibrate.
  createB(s);
  timeBoth(s, 2);
  if (!checkPattern(s.buf_a.data(), s.buf_a.size()) ||
      !checkPattern(s.buf_b.data(), s.buf_b.size())) {
    throw BenchError("received data differs from what was sent");
  }
  const long probe = std::max<long>(2, static_cast<long>((64u << 20) / s.bytes));
  const double per = timeOne(s, probe) / static_cast<double>(probe);
  const long iters = std::clamp<long>(std::lround(rep_seconds / per), 2, 1000000);

  Samples r;
  const double gb = static_cast<double>(s.bytes) * static_cast<double>(iters) / 1e9;
  for (int rep = 0; rep < reps; ++rep) {
    // one, idle, busy, idle, one: the mirrored order cancels a load drift that is linear within
    // the rep, which on a shared machine is larger than the effect being measured.
    if (s.b_exists) removeB(s);
    double cores_a = 0, cores_b = 0;
    const double one_a = timeSettled(s, iters, settle, &cores_a);
    createB(s);
    const double idle_a = timeSettled(s, iters, settle);
    std::this_thread::sleep_for(settle);
    const double busy = 2 * gb / timeBoth(s, iters);
    const double idle_b = timeSettled(s, iters, settle);
    removeB(s);
    const double one_b = timeSettled(s, iters, settle, &cores_b);
    r.one_cores.insert(r.one_cores.end(), {cores_a, cores_b});
    const double one = 2 * gb / (one_a + one_b), idle = 2 * gb / (idle_a + idle_b);
    for (double t : {one_a, one_b}) r.one_single.push_back(gb / t);
    for (double t : {idle_a, idle_b}) r.idle_single.push_back(gb / t);
    r.one.push_back(one);
    r.idle.push_back(idle);
    r.busy.push_back(busy);
    r.loss_pct.push_back(100.0 * (1.0 - idle / one));
    r.busy_ratio.push_back(busy / one);
    std::fprintf(stderr, "two-worlds: rep %d/%d one %.3f idle %.3f busy %.3f GB/s\n", rep + 1, reps,
                 one, idle, busy);
  }

  r.idle_cost_cores = idleWorldCost(s, idle_reps, idle_seconds, settle);
  r.cpu_share_pct = 100.0 * summarize(r.idle_cost_cores).median / summarize(r.one_cores).median;
  const bool ok = r.cpu_share_pct < 1.0 && summarize(r.loss_pct).ci_lo < 1.0;
  printResult(r, iters, s.bytes, reps, ok);
  Json doc = Json::object();
  doc.set("benchmark", "two-worlds").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("reps", reps).set("bytes", s.bytes).set("iters_per_variant", iters);
  cfg.set("heartbeat_timeout_ms", static_cast<long>(s.hb.count()));
  cfg.set("settle_ms", static_cast<long>(settle.count())).set("processes", 3);
  cfg.set("idle_seconds", idle_seconds).set("idle_reps", idle_reps);
  doc.set("config", cfg);
  doc.set("one_world_gbps", sampleJson(r.one));
  doc.set("two_worlds_idle_gbps", sampleJson(r.idle));
  doc.set("one_world_each_measurement_gbps", sampleJson(r.one_single));
  doc.set("two_worlds_idle_each_measurement_gbps", sampleJson(r.idle_single));
  doc.set("two_worlds_busy_aggregate_gbps", sampleJson(r.busy));
  doc.set("loss_pct_per_rep", sampleJson(r.loss_pct));
  doc.set("busy_over_one_per_rep", sampleJson(r.busy_ratio));
  doc.set("one_world_cpu_cores", sampleJson(r.one_cores));
  doc.set("idle_world_cpu_cores", sampleJson(r.idle_cost_cores));
  doc.set("idle_world_cpu_share_pct", r.cpu_share_pct);
  doc.set("target_loss_lt_1pct_pass", ok);
  doc.set("wall_seconds", seconds(Clock::now() - start));
  writeJson(f.str("--json", ""), doc);
  return !ok && f.has("--strict") ? 1 : 0;
}

}  // namespace mwb
