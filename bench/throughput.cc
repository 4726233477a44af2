// mw_bench throughput: the runtime's send/recv and all_reduce against raw Gloo and TCP.
//
// Two processes: this one (rank 0, receiver) and one agent (rank 1, sender). They share a runtime
// world "tp", a raw Gloo context and a TCP connection, so every variant runs between the same two
// processes. Per size the variants run interleaved, rep by rep, each rep `iters` messages timed at
// the receiver from the command that starts the sender to the last message's completion.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "agent.h"
#include "bench_util.h"
#include "raw_baselines.h"
#include "subcommands.h"

namespace mwb {

const char* const kThroughputHelp =
    "mw_bench throughput [--reps N] [--sizes LIST] [--rep-seconds S] [--paired-seconds S]\n"
    "                    [--fifo] [--pin] [--json PATH] [--strict]\n"
    "\n"
    "Two processes (this one = rank 0 receives, an agent = rank 1 sends). Five variants:\n"
    "  runtime send/recv   Communicator::send at rank 1, Communicator::recv at rank 0\n"
    "  raw gloo send/recv  gloo::rendezvous::Context over a FileStore + tcp::Device; one unbound\n"
    "                      buffer per side (kept across calls), send/recv + waitSend/waitRecv on\n"
    "                      a fixed slot\n"
    "  tcp send/recv       a plain connected loopback TCP socket, blocking send/recv\n"
    "  runtime all_reduce  Communicator::allReduce(...).wait(), float32 sum, in place, 2 ranks\n"
    "  raw gloo all_reduce gloo::allreduce (AllreduceOptions kept across calls, ring), float32 "
    "sum\n"
    "Bandwidth follows nccl-tests: algbw = bytes/time; busbw = algbw for send/recv and\n"
    "algbw*2*(n-1)/n for all_reduce (= algbw with n=2). Data is verified once per size (pattern\n"
    "for send/recv, 1+2=3 for all_reduce) before timing. Per size:\n"
    "1. Reps: the variants run one after another, in alternating order, --reps times; each rep\n"
    "   moves `iters` messages (calibrated so a runtime rep takes about --rep-seconds). Gives the\n"
    "   bandwidths, runtime/tcp, and the CPU time of both processes per byte\n"
    "   (/proc/<pid>/task/*/schedstat; runtime/gloo CPU per byte is information).\n"
    "2. Paired: runtime and raw Gloo alternate operation by operation, A B B A, both processes in\n"
    "   the same order, for about --paired-seconds per kind; each group's ratio is its raw Gloo\n"
    "   time over its runtime time (runtime/gloo throughput). Noise slower than an operation hits\n"
    "   both variants of a group alike. Also shown: the pooled ratio (all gloo time / all runtime\n"
    "   time) with a 95% bootstrap interval.\n"
    "Targets: runtime/raw gloo >= 0.98 at 1 MiB and above (send/recv and all_reduce), judged on\n"
    "         the median of the paired groups' ratios; runtime/tcp >= 0.90 at 16 MiB and above\n"
    "         (send/recv), judged on the median of the per-rep ratios. A MISS whose confidence\n"
    "         interval still reaches the target is marked 'unresolved' (this run's noise is\n"
    "         larger than the shortfall).\n"
    "\n"
    "  --reps N            reps per variant and size (default 9)\n"
    "  --sizes LIST        comma-separated sizes (default 64K,256K,1M,4M,16M,64M)\n"
    "  --rep-seconds S     target duration of one rep (default 0.3)\n"
    "  --paired-seconds S  target duration of each paired run (default 2; 16 groups at least)\n"
    "  --fifo              run both processes, every thread, under SCHED_FIFO (root or\n"
    "                      CAP_SYS_NICE): a thread woken by the network then runs at once instead\n"
    "                      of waiting, often a whole 4 ms scheduler tick, for the running one\n"
    "                      (docs/benchmarks.md). Both variants run under it alike\n"
    "  --pin               this process (rank 0) and all its threads on CPU 0, the agent on\n"
    "                      CPU 1: both variants then share the same placement of threads, which\n"
    "                      otherwise changes from run to run and shifts one against the other.\n"
    "                      With --fifo it makes 1 MiB all_reduce repeatable; send/recv and large\n"
    "                      sizes stall instead (a process's threads share one CPU)\n"
    "  --json PATH         write raw samples, medians and spreads\n"
    "  --strict            exit 1 when a target is missed\n";

namespace {

enum Variant { kRtP2P, kGlooP2P, kTcpP2P, kRtAllReduce, kGlooAllReduce, kNumVariants };
const char* const kVariantKey[] = {"runtime_send_recv", "gloo_send_recv", "tcp_send_recv",
                                   "runtime_all_reduce", "gloo_all_reduce"};
constexpr char kWorld[] = "tp";

// The leader's side of the two processes.
struct Pair {
  mw::WorldManager manager;
  mw::Communicator comm{manager};
  std::unique_ptr<Agent> agent;
  std::unique_ptr<RawGloo> gloo;
  std::unique_ptr<TcpLink> tcp;
  std::vector<float> rx;   // receive buffer of the send/recv variants
  std::vector<float> red;  // all_reduce buffer (zeros)
  std::string dir;         // FileStore of the raw Gloo rendezvous

  ~Pair() {
    agent.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

void connectPair(Pair& p, size_t max_bytes, int agent_cpu = -1) {
  p.rx.assign(max_bytes / sizeof(float), 0.0f);
  p.red.assign(max_bytes / sizeof(float), 0.0f);
  p.agent = Agent::spawn("rank 1 agent", agent_cpu);
  Hosted h = hostWorld(p.manager, kWorld, 2, std::chrono::milliseconds(1000));
  p.agent->call(joinCommand(kWorld, 1, 2, h.port, std::chrono::milliseconds(1000)));
  expectOk(h.join.wait(mw::deadlineIn(std::chrono::seconds(20))), "joining world tp");

  char tmpl[] = "/tmp/mw_bench_gloo.XXXXXX";
  if (!::mkdtemp(tmpl)) throw BenchError("mkdtemp failed");
  p.dir = tmpl;
  p.agent->post("gloo-init " + p.dir + " tp 1 2");
  p.gloo = RawGloo::connect(p.dir, "tp", 0, 2);
  p.agent->reply();
  // Both contexts are connected: the rendezvous files are not needed any more.
  std::filesystem::remove_all(p.dir);
  p.dir.clear();

  TcpListener listener;
  p.agent->post("tcp-connect " + std::to_string(listener.port()));
  p.tcp = std::make_unique<TcpLink>(listener.accept(10000));
  p.agent->reply();
}

// Runs op `i` of variant `v` at rank 0 (the agent runs its side of all of them).
void runOp(Pair& p, Variant v, size_t bytes, long ops) {
  const size_t count = bytes / sizeof(float);
  switch (v) {
    case kRtP2P:
      for (long i = 0; i < ops; ++i) {
        expectOk(p.comm.recv(kWorld, mw::Tensor::cpu(p.rx.data(), count), 1), "runtime recv");
      }
      return;
    case kGlooP2P:
      return p.gloo->recv(p.rx.data(), bytes, 1, ops);
    case kTcpP2P:
      return p.tcp->recv(p.rx.data(), bytes, ops);
    case kRtAllReduce:
      for (long i = 0; i < ops; ++i) {
        expectOk(p.comm.allReduce(kWorld, mw::Tensor::cpu(p.red.data(), count)).wait(),
                 "runtime all_reduce");
      }
      return;
    case kGlooAllReduce:
      return p.gloo->allreduce(p.red.data(), count, ops);
    default:
      return;
  }
}

// The agent's command for `iters` ops of `v`.
std::string agentCommand(Variant v, size_t bytes, long iters) {
  const std::string n = std::to_string(iters), b = std::to_string(bytes);
  const std::string count = std::to_string(bytes / sizeof(float));
  switch (v) {
    case kRtP2P:
      return std::string("send ") + kWorld + " 0 " + b + " " + n;
    case kGlooP2P:
      return "gloo-send 0 " + b + " " + n;
    case kTcpP2P:
      return "tcp-send " + b + " " + n;
    case kRtAllReduce:
      return std::string("allreduce ") + kWorld + " " + count + " " + n;
    default:
      return "gloo-allreduce " + count + " " + n;
  }
}

// CPU seconds both processes have used so far.
double cpuBoth(const Pair& p) {
  return processCpuSeconds({static_cast<int>(::getpid()), p.agent->pid()});
}

// One rep: seconds from starting the sender to the last completion at rank 0. With `per_op`,
// also the time of each op at rank 0 (ops then run one call at a time).
double timeVariant(Pair& p, Variant v, size_t bytes, long iters,
                   std::vector<double>* per_op = nullptr, double* cpu = nullptr) {
  const double cpu0 = cpu ? cpuBoth(p) : 0;
  const auto t0 = Clock::now();
  p.agent->post(agentCommand(v, bytes, iters));
  if (!per_op) {
    runOp(p, v, bytes, iters);
  } else {
    for (long i = 0; i < iters; ++i) {
      const auto a = Clock::now();
      runOp(p, v, bytes, 1);
      per_op->push_back(millis(Clock::now() - a));
    }
  }
  const double s = seconds(Clock::now() - t0);
  p.agent->reply();
  if (cpu) *cpu = cpuBoth(p) - cpu0;
  return s;
}

// Checks that every variant moves the right bytes at this size (and warms it up).
void verify(Pair& p, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  for (Variant v : {kRtP2P, kGlooP2P, kTcpP2P}) {
    std::fill(p.rx.begin(), p.rx.begin() + count, 0.0f);
    timeVariant(p, v, bytes, 2);
    if (!checkPattern(p.rx.data(), count)) {
      throw BenchError(std::string(kVariantKey[v]) + ": received data differs at " +
                       sizeName(bytes));
    }
  }
  auto check = [&](const char* what) {
    bool good =
        std::all_of(p.red.begin(), p.red.begin() + count, [](float x) { return x == 3.0f; });
    std::fill(p.red.begin(), p.red.begin() + count, 0.0f);
    if (!good) throw BenchError(std::string(what) + ": all_reduce result is not 1+2");
  };
  std::fill(p.red.begin(), p.red.begin() + count, 1.0f);
  p.agent->post(std::string("allreduce-check ") + kWorld + " " + std::to_string(count));
  expectOk(p.comm.allReduce(kWorld, mw::Tensor::cpu(p.red.data(), count)).wait(), "all_reduce");
  p.agent->reply();
  check("runtime");
  std::fill(p.red.begin(), p.red.begin() + count, 1.0f);
  p.agent->post("gloo-allreduce-check " + std::to_string(count));
  p.gloo->allreduce(p.red.data(), count, 1);
  p.agent->reply();
  check("raw gloo");
}

// The variant run at position `i` of rep (or block) `rep`: forward in even reps, backward in odd
// ones, so that no variant always runs first after the switch from another size or always
// follows the same neighbour (on a 2-core machine a variant's place in the order moved its
// per-op latency by more than the differences measured here).
Variant variantAt(int rep, int i) {
  return static_cast<Variant>(rep % 2 == 0 ? i : kNumVariants - 1 - i);
}

long calibrate(Pair& p, Variant v, size_t bytes, double rep_seconds) {
  long probe = std::max<long>(2, static_cast<long>((32u << 20) / bytes));
  double s = timeVariant(p, v, bytes, probe);
  double per = s / static_cast<double>(probe);
  return std::clamp<long>(std::lround(rep_seconds / per), 2, 1000000);
}

// Runtime and raw Gloo alternating operation by operation (pairedUsesGloo: A B B A per group),
// both processes in the same order, each operation timed at rank 0. Host noise that lasts longer
// than an operation (load bursts, frequency changes) hits both variants of a group alike, which
// the rep-by-rep comparison above cannot promise.
struct Paired {
  long groups = 0;
  std::vector<double> ratio;         // per group: raw Gloo seconds / runtime seconds
  std::vector<double> rt_s, gloo_s;  // per group: seconds of its two operations of each variant
};

// `groups` A B B A groups of all_reduce (or of send/recv, rank 1 -> rank 0) at `bytes`.
Paired measurePaired(Pair& p, bool allreduce, size_t bytes, long groups) {
  const size_t count = bytes / sizeof(float);
  const long n = 4 * groups;
  p.agent->post(allreduce ? std::string("paired-allreduce ") + kWorld + " " +
                                std::to_string(count) + " " + std::to_string(n)
                          : std::string("paired-send ") + kWorld + " 0 " + std::to_string(bytes) +
                                " " + std::to_string(n));
  Paired r;
  r.groups = groups;
  double rt = 0, gl = 0;
  for (long i = 0; i < n; ++i) {
    const bool gloo = pairedUsesGloo(i);
    const auto t0 = Clock::now();
    if (allreduce && gloo) {
      p.gloo->allreduce(p.red.data(), count, 1);
    } else if (allreduce) {
      expectOk(p.comm.allReduce(kWorld, mw::Tensor::cpu(p.red.data(), count)).wait(),
               "runtime all_reduce");
    } else if (gloo) {
      p.gloo->recv(p.rx.data(), bytes, 1, 1);
    } else {
      expectOk(p.comm.recv(kWorld, mw::Tensor::cpu(p.rx.data(), count), 1), "runtime recv");
    }
    (gloo ? gl : rt) += seconds(Clock::now() - t0);
    if (i % 4 == 3) {
      r.ratio.push_back(gl / rt);
      r.rt_s.push_back(rt);
      r.gloo_s.push_back(gl);
      rt = gl = 0;
    }
  }
  p.agent->reply();
  return r;
}

// The pooled ratio (all raw Gloo time / all runtime time) and a 95% percentile-bootstrap interval
// over groups (fixed seed: the same samples give the same interval).
struct Pooled {
  double ratio = 0, lo = 0, hi = 0;
};
Pooled pooled(const Paired& r) {
  auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  Pooled out;
  if (r.rt_s.empty()) return out;
  out.ratio = sum(r.gloo_s) / sum(r.rt_s);
  std::mt19937_64 rng(20261123);
  std::uniform_int_distribution<size_t> pick(0, r.rt_s.size() - 1);
  std::vector<double> boot;
  for (int b = 0; b < 2000; ++b) {
    double rt = 0, gl = 0;
    for (size_t k = 0; k < r.rt_s.size(); ++k) {
      size_t j = pick(rng);
      rt += r.rt_s[j];
      gl += r.gloo_s[j];
    }
    boot.push_back(gl / rt);
  }
  std::sort(boot.begin(), boot.end());
  out.lo = percentile(boot, 0.025);
  out.hi = percentile(boot, 0.975);
  return out;
}

struct SizeResult {
  size_t bytes = 0;
  long p2p_iters = 0, ar_iters = 0;
  std::vector<double> secs[kNumVariants];
  std::vector<double> gbps[kNumVariants];  // algbw
  std::vector<double> rt_gloo_p2p, rt_tcp_p2p, rt_gloo_ar;
  std::vector<double> cpu[kNumVariants];  // CPU seconds of both processes per GB moved
  std::vector<double> cpu_rt_gloo_p2p, cpu_rt_gloo_ar;  // runtime/gloo CPU per byte, per rep
  Paired paired_p2p, paired_ar;
};

// Groups for a paired run of about `secs`, from the runtime's per-op time in the reps.
long pairedGroups(const std::vector<double>& rep_secs, long iters, double secs) {
  const double per_op = summarize(rep_secs).median / static_cast<double>(iters);
  return std::clamp<long>(std::lround(secs / (4 * per_op)), 16, 1000000);
}

SizeResult measureSize(Pair& p, size_t bytes, int reps, double rep_seconds, double paired_seconds) {
  SizeResult r;
  r.bytes = bytes;
  verify(p, bytes);
  r.p2p_iters = calibrate(p, kRtP2P, bytes, rep_seconds);
  r.ar_iters = calibrate(p, kRtAllReduce, bytes, rep_seconds);
  for (int rep = 0; rep < reps; ++rep) {
    double bw[kNumVariants], cpu_per_gb[kNumVariants];
    for (int i = 0; i < kNumVariants; ++i) {
      const Variant v = variantAt(rep, i);
      long iters = v >= kRtAllReduce ? r.ar_iters : r.p2p_iters;
      double cpu = 0;
      double s = timeVariant(p, v, bytes, iters, nullptr, &cpu);
      const double gb = static_cast<double>(bytes) * static_cast<double>(iters) / 1e9;
      bw[v] = gb / s;
      cpu_per_gb[v] = cpu / gb;
      r.secs[v].push_back(s);
      r.gbps[v].push_back(bw[v]);
      r.cpu[v].push_back(cpu_per_gb[v]);
    }
    r.rt_gloo_p2p.push_back(bw[kRtP2P] / bw[kGlooP2P]);
    r.rt_tcp_p2p.push_back(bw[kRtP2P] / bw[kTcpP2P]);
    r.rt_gloo_ar.push_back(bw[kRtAllReduce] / bw[kGlooAllReduce]);
    r.cpu_rt_gloo_p2p.push_back(cpu_per_gb[kRtP2P] / cpu_per_gb[kGlooP2P]);
    r.cpu_rt_gloo_ar.push_back(cpu_per_gb[kRtAllReduce] / cpu_per_gb[kGlooAllReduce]);
  }
  r.paired_p2p =
      measurePaired(p, false, bytes, pairedGroups(r.secs[kRtP2P], r.p2p_iters, paired_seconds));
  r.paired_ar =
      measurePaired(p, true, bytes, pairedGroups(r.secs[kRtAllReduce], r.ar_iters, paired_seconds));
  return r;
}

std::string cell(const std::vector<double>& v, int prec) {
  Summary s = summarize(v);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*f [%.*f..%.*f]", prec, s.median, prec, s.min, prec, s.max);
  return buf;
}

// "0.991 [0.95..1.02]": the median of the per-rep ratios and its confidence interval (see
// Summary).
std::string ratioCell(const std::vector<double>& ratios) {
  Summary s = summarize(ratios);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f [%.3f..%.3f]", s.median, s.ci_lo, s.ci_hi);
  return buf;
}

constexpr size_t kGlooTargetFrom = 1u << 20;
constexpr size_t kTcpTargetFrom = 16u << 20;
constexpr double kGlooTarget = 0.98, kTcpTarget = 0.90;

// The per-rep ratios' median against `target`, with its interval; "" where it does not apply.
std::string verdictOf(const std::vector<double>& ratios, bool applies, double target,
                      bool& missed) {
  if (!applies) return "";
  const Summary s = summarize(ratios);
  const bool ok = s.median >= target;
  missed |= !ok;
  if (ok) return "PASS";
  return s.ci_hi >= target ? "MISS (unresolved: interval reaches it)" : "MISS";
}

std::string pooledCell(const Paired& x) {
  const Pooled q = pooled(x);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f [%.3f..%.3f]", q.ratio, q.lo, q.hi);
  return buf;
}

bool printTables(const std::vector<SizeResult>& results, int reps) {
  bool missed = false;
  const double level = results.empty() ? 0 : summarize(results[0].rt_gloo_p2p).ci_level;
  std::printf(
      "\n1. reps. send/recv, rank 1 -> rank 0: algbw = busbw in GB/s, median [min..max] of %d "
      "reps;\nratios: median of per-rep ratios [%.0f%% confidence interval of that median]\n",
      reps, 100 * level);
  std::printf("%-7s %7s  %-22s %-22s %-22s %-21s %-21s %-21s %s\n", "size", "iters", "runtime",
              "raw gloo", "tcp", "runtime/gloo", "CPU/byte runtime/gloo", "runtime/tcp",
              "verdict (tcp)");
  for (const auto& r : results) {
    std::string t = verdictOf(r.rt_tcp_p2p, r.bytes >= kTcpTargetFrom, kTcpTarget, missed);
    std::printf("%-7s %7ld  %-22s %-22s %-22s %-21s %-21s %-21s %s\n", sizeName(r.bytes).c_str(),
                r.p2p_iters, cell(r.gbps[kRtP2P], 3).c_str(), cell(r.gbps[kGlooP2P], 3).c_str(),
                cell(r.gbps[kTcpP2P], 3).c_str(), ratioCell(r.rt_gloo_p2p).c_str(),
                ratioCell(r.cpu_rt_gloo_p2p).c_str(), ratioCell(r.rt_tcp_p2p).c_str(), t.c_str());
  }
  std::printf("target: runtime/tcp >= %.2f from %s (on the median)\n", kTcpTarget,
              sizeName(kTcpTargetFrom).c_str());
  std::printf(
      "\n1. reps. all_reduce float32 sum, 2 ranks: algbw GB/s (busbw = algbw*2*(n-1)/n = "
      "algbw), median [min..max] of %d reps\n",
      reps);
  std::printf("%-7s %7s  %-22s %-22s %-21s %s\n", "size", "iters", "runtime", "raw gloo",
              "runtime/gloo", "CPU/byte runtime/gloo");
  for (const auto& r : results) {
    std::printf("%-7s %7ld  %-22s %-22s %-21s %s\n", sizeName(r.bytes).c_str(), r.ar_iters,
                cell(r.gbps[kRtAllReduce], 3).c_str(), cell(r.gbps[kGlooAllReduce], 3).c_str(),
                ratioCell(r.rt_gloo_ar).c_str(), ratioCell(r.cpu_rt_gloo_ar).c_str());
  }
  std::printf(
      "\n2. paired. runtime/raw gloo throughput, operations alternating A B B A in both "
      "processes:\nmedian of the groups' ratios [its interval]; pooled = all gloo time / all "
      "runtime time [95%% bootstrap]\n");
  std::printf("%-7s %7s  %-21s %-21s %-14s %7s  %-21s %-21s %s\n", "size", "groups", "send/recv",
              "pooled", "verdict", "groups", "all_reduce", "pooled", "verdict");
  for (const auto& r : results) {
    const bool applies = r.bytes >= kGlooTargetFrom;
    std::string g = verdictOf(r.paired_p2p.ratio, applies, kGlooTarget, missed);
    std::string a = verdictOf(r.paired_ar.ratio, applies, kGlooTarget, missed);
    std::printf("%-7s %7ld  %-21s %-21s %-14s %7ld  %-21s %-21s %s\n", sizeName(r.bytes).c_str(),
                r.paired_p2p.groups, ratioCell(r.paired_p2p.ratio).c_str(),
                pooledCell(r.paired_p2p).c_str(), g.c_str(), r.paired_ar.groups,
                ratioCell(r.paired_ar.ratio).c_str(), pooledCell(r.paired_ar).c_str(), a.c_str());
  }
  std::printf("target: runtime/gloo >= %.2f from %s (on the median), send/recv and all_reduce\n",
              kGlooTarget, sizeName(kGlooTargetFrom).c_str());
  return missed;
}

Json pairedJson(const Paired& x) {
  const Pooled q = pooled(x);
  Json j = Json::object();
  j.set("groups", x.groups);
  j.set("ratio_runtime_over_gloo", sampleJson(x.ratio));
  j.set("pooled", q.ratio).set("pooled_ci95_lo", q.lo).set("pooled_ci95_hi", q.hi);
  j.set("runtime_seconds", Json(x.rt_s)).set("gloo_seconds", Json(x.gloo_s));
  return j;
}

Json sizeJson(const SizeResult& r) {
  Json j = Json::object();
  j.set("bytes", r.bytes).set("size", sizeName(r.bytes));
  j.set("send_recv_iters", r.p2p_iters).set("all_reduce_iters", r.ar_iters);
  for (int v = 0; v < kNumVariants; ++v) {
    Json x = Json::object();
    x.set("algbw_gbps", sampleJson(r.gbps[v]));
    // busbw: send/recv as algbw; all_reduce algbw*2*(n-1)/n with n = 2, the same numbers.
    x.set("busbw_gbps", sampleJson(r.gbps[v]));
    x.set("seconds", Json(r.secs[v]));
    x.set("cpu_seconds_per_gb", sampleJson(r.cpu[v]));
    j.set(kVariantKey[v], x);
  }
  j.set("ratio_runtime_over_gloo_send_recv", sampleJson(r.rt_gloo_p2p));
  j.set("ratio_runtime_over_tcp_send_recv", sampleJson(r.rt_tcp_p2p));
  j.set("ratio_runtime_over_gloo_all_reduce", sampleJson(r.rt_gloo_ar));
  j.set("cpu_per_byte_runtime_over_gloo_send_recv", sampleJson(r.cpu_rt_gloo_p2p));
  j.set("cpu_per_byte_runtime_over_gloo_all_reduce", sampleJson(r.cpu_rt_gloo_ar));
  j.set("paired_send_recv", pairedJson(r.paired_p2p));
  j.set("paired_all_reduce", pairedJson(r.paired_ar));
  Json t = Json::object();
  if (r.bytes >= kGlooTargetFrom) {
    t.set("send_recv_runtime_over_gloo_ge_0.98",
          summarize(r.paired_p2p.ratio).median >= kGlooTarget);
    t.set("all_reduce_runtime_over_gloo_ge_0.98",
          summarize(r.paired_ar.ratio).median >= kGlooTarget);
  }
  if (r.bytes >= kTcpTargetFrom) {
    t.set("send_recv_runtime_over_tcp_ge_0.90", summarize(r.rt_tcp_p2p).median >= kTcpTarget);
  }
  j.set("targets_pass", t);
  return j;
}

}  // namespace

int runThroughput(int argc, char** argv, int first) {
  Flags f(argc, argv, first, {"--reps", "--sizes", "--rep-seconds", "--paired-seconds", "--json"},
          {"--strict", "--fifo", "--pin"});
  const int reps = static_cast<int>(f.integer("--reps", 9, 1, 1000));
  const auto sizes = parseSizes(f.str("--sizes", "64K,256K,1M,4M,16M,64M"));
  const double rep_seconds = f.number("--rep-seconds", 0.3, 0.001, 60);
  const double paired_seconds = f.number("--paired-seconds", 2.0, 0.001, 600);
  for (size_t b : sizes) {
    if (b % sizeof(float) != 0) throw UsageError("sizes must be multiples of 4 bytes");
  }
  Json doc = Json::object();
  doc.set("benchmark", "throughput").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("reps", reps).set("rep_seconds", rep_seconds).set("processes", 2);
  cfg.set("paired_seconds", paired_seconds);
  const bool fifo = f.has("--fifo");
  cfg.set("scheduler", fifo ? "SCHED_FIFO" : "default");
  const bool pin = f.has("--pin");
  if (pin && ::sysconf(_SC_NPROCESSORS_ONLN) < 2) throw BenchError("--pin needs 2 CPUs or more");
  cfg.set("pinned", pin);
  Json sz = Json::array();
  for (size_t b : sizes) sz.push(Json(b));
  cfg.set("sizes", sz);
  doc.set("config", cfg);

  // Before any thread or the agent exists: they inherit the policy.
  if (fifo) enterFifo();
  if (pin) pinToCpu(0);
  const auto start = Clock::now();
  Pair p;
  connectPair(p, *std::max_element(sizes.begin(), sizes.end()), pin ? 1 : -1);
  if (pin) {
    const int off =
        threadsOffCpu(static_cast<int>(::getpid()), 0) + threadsOffCpu(p.agent->pid(), 1);
    if (off != 0) throw BenchError("--pin: " + std::to_string(off) + " threads are not pinned");
    std::fprintf(stderr, "throughput: rank 0 runs on CPU 0 only, the agent on CPU 1 only\n");
  }
  if (fifo) {
    auto [outside, all] = threadsOutsideFifo({static_cast<int>(::getpid()), p.agent->pid()});
    if (outside != 0) {
      throw BenchError("--fifo: " + std::to_string(outside) + " of " + std::to_string(all) +
                       " threads of the two processes are not under SCHED_FIFO");
    }
    std::fprintf(stderr, "throughput: all %d threads of both processes run under SCHED_FIFO\n",
                 all);
  }
  std::vector<SizeResult> results;
  Json js = Json::array();
  for (size_t b : sizes) {
    std::fprintf(stderr, "throughput: %s ...\n", sizeName(b).c_str());
    results.push_back(measureSize(p, b, reps, rep_seconds, paired_seconds));
    js.push(sizeJson(results.back()));
  }
  doc.set("sizes", js);
  std::printf("\nscheduler: %s%s\n",
              fifo ? "SCHED_FIFO, every thread of both processes" : "the default (SCHED_OTHER)",
              pin ? "; rank 0 pinned to CPU 0, the agent to CPU 1" : "");
  bool missed = printTables(results, reps);
  doc.set("all_targets_pass", !missed);
  doc.set("wall_seconds", seconds(Clock::now() - start));
  writeJson(f.str("--json", ""), doc);
  return missed && f.has("--strict") ? 1 : 0;
}

}  // namespace mwb

namespace mwb {

const char* const kLatencyHelp =
    "mw_bench latency [--size BYTES] [--ops N] [--blocks N] [--json PATH]\n"
    "\n"
    "Diagnostic (no targets): the time of each single operation at rank 0, for the same five\n"
    "variants and two processes as `throughput`, run in interleaved blocks of --ops operations.\n"
    "Bandwidth hides whether an operation is uniformly slow or sometimes stalls; this shows the\n"
    "distribution, and the share of operations that took 3.5 ms or more (on these machines\n"
    "stalls come in multiples of the 4 ms scheduler tick).\n"
    "\n"
    "  --size BYTES  message / all_reduce size (default 256K)\n"
    "  --ops N       operations per block (default 200)\n"
    "  --blocks N    blocks per variant (default 5)\n"
    "  --json PATH   write every per-op sample and the summaries\n";

int runLatency(int argc, char** argv, int first) {
  Flags f(argc, argv, first, {"--size", "--ops", "--blocks", "--json"}, {});
  const size_t bytes = parseSize(f.str("--size", "256K"));
  if (bytes % sizeof(float) != 0) throw UsageError("--size must be a multiple of 4");
  const long ops = f.integer("--ops", 200, 1, 1000000);
  const int blocks = static_cast<int>(f.integer("--blocks", 5, 1, 10000));
  Pair p;
  connectPair(p, bytes);
  verify(p, bytes);
  std::vector<double> lat[kNumVariants];
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < kNumVariants; ++i) {
      const Variant v = variantAt(b, i);
      timeVariant(p, v, bytes, ops, &lat[v]);
    }
  }
  std::printf("\nper-operation time at rank 0, %s, %d blocks of %ld ops (ms)\n",
              sizeName(bytes).c_str(), blocks, ops);
  std::printf("  %-20s %8s %8s %8s %8s %8s %8s  %s\n", "variant", "min", "p10", "median", "p90",
              "p99", "max", ">=3.5ms");
  Json doc = Json::object();
  doc.set("benchmark", "latency").set("host", hostJson());
  doc.set("bytes", bytes).set("ops_per_block", ops).set("blocks", blocks);
  for (int v = 0; v < kNumVariants; ++v) {
    Summary s = summarize(lat[v]);
    double slow = static_cast<double>(
        std::count_if(lat[v].begin(), lat[v].end(), [](double x) { return x >= 3.5; }));
    double share = lat[v].empty() ? 0 : slow / static_cast<double>(lat[v].size());
    std::printf("  %-20s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f  %5.1f%%\n", kVariantKey[v], s.min,
                s.p10, s.median, s.p90, s.p99, s.max, 100 * share);
    Json j = sampleJson(lat[v]);
    j.set("share_ge_3_5ms", share);
    doc.set(std::string(kVariantKey[v]) + "_ms", j);
  }
  writeJson(f.str("--json", ""), doc);
  return 0;
}

}  // namespace mwb
