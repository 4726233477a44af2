// mw_bench overhead: what the runtime itself costs per call, with no data to move.
//
// One process, one world of one member: an operation there runs the runtime's whole path
// (argument checks, the world lookup, the Work, the backend's queue and executor hand-off rules,
// the call check, completion) and no transfer. Timed per call in wall and CPU time (all threads of
// the process), in blocks, reported as medians over blocks. Low noise: no second process and no
// socket, so it shows changes to the per-call path that the throughput ratios cannot resolve.
#include <unistd.h>

#include <cstdio>

#include "agent.h"
#include "bench_util.h"
#include "multiworld/multiworld.h"
#include "subcommands.h"

namespace mwb {

const char* const kOverheadHelp =
    "mw_bench overhead [--calls N] [--blocks N] [--json PATH]\n"
    "\n"
    "One process in a one-member world: per-call wall and CPU time (every thread of the\n"
    "process) of calls that move no data, so what is measured is the runtime's own path:\n"
    "  all_reduce   allReduce(world, 4 floats).wait()  (asynchronous call, then wait)\n"
    "  broadcast    broadcast(world, 4 floats, 0).wait()\n"
    "  barrier      barrier(world).wait()\n"
    "Diagnostic, no targets. Medians over blocks, [min..max].\n"
    "\n"
    "  --calls N    calls per block and variant (default 20000)\n"
    "  --blocks N   blocks, variants interleaved (default 5)\n"
    "  --json PATH  write raw samples, medians and spreads\n";

namespace {

enum Call { kAllReduce, kBroadcast, kBarrier, kNumCalls };
const char* const kCallKey[] = {"all_reduce", "broadcast", "barrier"};
constexpr char kWorld[] = "solo";

mw::Status callOnce(mw::Communicator& comm, Call c, float* v) {
  const mw::Tensor t = mw::Tensor::cpu(v, 4);
  switch (c) {
    case kAllReduce:
      return comm.allReduce(kWorld, t).wait();
    case kBroadcast:
      return comm.broadcast(kWorld, t, 0).wait();
    default:
      return comm.barrier(kWorld).wait();
  }
}

}  // namespace

int runOverhead(int argc, char** argv, int first) {
  Flags f(argc, argv, first, {"--calls", "--blocks", "--json"}, {});
  const long calls = f.integer("--calls", 20000, 1, 100000000);
  const int blocks = static_cast<int>(f.integer("--blocks", 5, 1, 10000));

  mw::WorldManager manager;
  mw::WorldOptions o;
  o.name = kWorld;
  o.rank = 0;
  o.size = 1;
  expectOk(manager.initWorld(o, mw::deadlineIn(std::chrono::seconds(20))), "joining world solo");
  mw::Communicator comm(manager);
  float v[4] = {1, 2, 3, 4};
  for (int c = 0; c < kNumCalls; ++c) {  // warm-up
    for (int i = 0; i < 100; ++i) expectOk(callOnce(comm, static_cast<Call>(c), v), kCallKey[c]);
  }

  const int pid = static_cast<int>(::getpid());
  std::vector<double> wall_us[kNumCalls], cpu_us[kNumCalls];
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < kNumCalls; ++i) {
      const auto c = static_cast<Call>(b % 2 == 0 ? i : kNumCalls - 1 - i);
      const double cpu0 = processCpuSeconds({pid});
      const auto t0 = Clock::now();
      for (long n = 0; n < calls; ++n) expectOk(callOnce(comm, c, v), kCallKey[c]);
      wall_us[c].push_back(1e6 * seconds(Clock::now() - t0) / static_cast<double>(calls));
      cpu_us[c].push_back(1e6 * (processCpuSeconds({pid}) - cpu0) / static_cast<double>(calls));
    }
  }

  std::printf("\nper-call cost in a one-member world (no data moves), %ld calls x %d blocks (us)\n",
              calls, blocks);
  std::printf("  %-12s %-26s %s\n", "call", "wall median [min..max]", "CPU median [min..max]");
  Json doc = Json::object();
  doc.set("benchmark", "overhead").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("calls_per_block", calls).set("blocks", blocks);
  doc.set("config", cfg);
  for (int c = 0; c < kNumCalls; ++c) {
    const Summary w = summarize(wall_us[c]), u = summarize(cpu_us[c]);
    std::printf("  %-12s %7.2f [%.2f..%.2f]%6s %7.2f [%.2f..%.2f]\n", kCallKey[c], w.median, w.min,
                w.max, "", u.median, u.min, u.max);
    Json x = Json::object();
    x.set("wall_us_per_call", sampleJson(wall_us[c]));
    x.set("cpu_us_per_call", sampleJson(cpu_us[c]));
    doc.set(kCallKey[c], x);
  }
  writeJson(f.str("--json", ""), doc);
  return 0;
}

}  // namespace mwb
