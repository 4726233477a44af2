// mw_bench: benchmarks of libmultiworld against raw Gloo and TCP, with two real processes.
//
//   mw_bench throughput | two-worlds | detection | creation | latency | overhead [flags]
//   mw_bench agent --fd N          the worker role; spawned by the benchmarks themselves
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "agent.h"
#include "bench_util.h"
#include "subcommands.h"

namespace {

const char kUsage[] =
    "usage: mw_bench <subcommand> [flags]      mw_bench <subcommand> --help\n"
    "\n"
    "Every comparison uses two or more real processes (overhead alone uses one): mw_bench\n"
    "re-executes itself as worker agents (fork+exec of /proc/self/exe; they die with it).\n"
    "Results are ratios against a baseline measured in the same processes, variants\n"
    "interleaved rep by rep (A,B,C,A,B,C...),\n"
    "each reported as median [min..max] plus the median of per-rep ratios. Every subcommand\n"
    "prints a table with PASS/MISS beside each target and writes raw samples to --json PATH.\n"
    "Exit: 0 ran (targets may be missed; --strict makes a miss exit 1), 2 usage, 3 failure.\n"
    "\n"
    "subcommands:\n"
    "  throughput   send/recv and all_reduce bandwidth of the runtime vs raw Gloo in the same\n"
    "               two processes, and send/recv vs a plain TCP socket pair (64KiB..64MiB).\n"
    "  two-worlds   a world's 16 MiB send/recv throughput when its process also belongs to a\n"
    "               second, idle (heartbeating) world, vs one world only; plus both busy.\n"
    "  detection    SIGKILL (>=30) and SIGSTOP (10) of a world's worker: detection time from\n"
    "               the signal to BrokenInfo.detected_at, and a streaming survivor world's\n"
    "               throughput in the window after each fault vs the window before.\n"
    "  creation     time from initWorld to healthy at rank 0 for 2 members (fresh name and a\n"
    "               reused name after removeWorld), and 4 members (informational).\n"
    "  latency      diagnostic: the distribution of single-operation times behind the\n"
    "               throughput variants (no targets).\n"
    "  overhead     diagnostic: the runtime's own cost per call in a one-member world, where\n"
    "               no data moves (one process; no targets).\n"
    "  starvation   busy-loop hogs oversubscribe the cores 4x while several worlds (500 ms\n"
    "               heartbeat) stream: no world may break; then SIGSTOP of a member under the\n"
    "               same load must be detected within timeout + 250 ms.\n"
    "  store-attack a world's store attacked by clients without its token (idle sockets,\n"
    "               slowloris, 16 MiB frames, wrong proofs, a stale rank) while the world\n"
    "               forms and works: it must form, stay healthy and keep memory bounded.\n"
    "  telemetry    the telemetry channel's cost (MW_TELEMETRY_FD) per call and when idle,\n"
    "               with the channel against without it, in one process.\n"
    "  nccl         one GPU: a one-rank nccl world against a one-rank raw NCCL communicator,\n"
    "               per-call time and all_reduce/broadcast bandwidth (exit 3 without a GPU).\n";

int help(const char* sub) {
  std::string s = sub;
  if (s == "throughput")
    std::fputs(mwb::kThroughputHelp, stdout);
  else if (s == "two-worlds")
    std::fputs(mwb::kTwoWorldsHelp, stdout);
  else if (s == "detection")
    std::fputs(mwb::kDetectionHelp, stdout);
  else if (s == "creation")
    std::fputs(mwb::kCreationHelp, stdout);
  else if (s == "latency")
    std::fputs(mwb::kLatencyHelp, stdout);
  else if (s == "overhead")
    std::fputs(mwb::kOverheadHelp, stdout);
  else if (s == "starvation")
    std::fputs(mwb::kStarvationHelp, stdout);
  else if (s == "store-attack")
    std::fputs(mwb::kStoreAttackHelp, stdout);
  else if (s == "telemetry")
    std::fputs(mwb::kTelemetryHelp, stdout);
#ifdef MW_BENCH_NCCL
  else if (s == "nccl")
    std::fputs(mwb::kNcclHelp, stdout);
#endif
  else
    std::fputs(kUsage, stdout);
  return 0;
}

bool wantsHelp(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") return help(argc > 2 ? argv[2] : "");
  if (sub == "agent") {
    if (argc != 4 || std::strcmp(argv[2], "--fd") != 0) return 2;
    return mwb::agentMain(std::atoi(argv[3]));
  }
  if (wantsHelp(argc, argv)) return help(sub.c_str());
  try {
    if (sub == "throughput") return mwb::runThroughput(argc, argv, 2);
    if (sub == "two-worlds") return mwb::runTwoWorlds(argc, argv, 2);
    if (sub == "detection") return mwb::runDetection(argc, argv, 2);
    if (sub == "creation") return mwb::runCreation(argc, argv, 2);
    if (sub == "latency") return mwb::runLatency(argc, argv, 2);
    if (sub == "overhead") return mwb::runOverhead(argc, argv, 2);
    if (sub == "starvation") return mwb::runStarvation(argc, argv, 2);
    if (sub == "store-attack") return mwb::runStoreAttack(argc, argv, 2);
    if (sub == "telemetry") return mwb::runTelemetry(argc, argv, 2);
    if (sub == "nccl") {
#ifdef MW_BENCH_NCCL
      return mwb::runNccl(argc, argv, 2);
#else
      throw mwb::BenchError("this mw_bench was built without the NCCL backend (no NCCL found)");
#endif
    }
    throw mwb::UsageError("unknown subcommand '" + sub + "'");
  } catch (const mwb::UsageError& e) {
    std::fprintf(stderr, "mw_bench: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mw_bench %s: %s\n", sub.c_str(), e.what());
    return 3;
  }
}
