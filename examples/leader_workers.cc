// leader_workers: the MultiWorld demo, natively. A leader belongs to worlds "world1" and
// "world2"; one worker process sits in each and streams tensors to the leader, which takes
// whichever world has data next. Halfway through, the demo SIGKILLs the worker of world2: only
// world2 breaks, and the leader keeps receiving from world1 at full rate.
//
//   leader_workers [--duration-s S] [--mib M] [--kill-at-s T | --no-kill] [--heartbeat-ms H]
//   leader_workers --worker N --port P [--mib M]      (what the demo spawns; one per world)
//
// Prints each world's throughput before and after the fault and the detection time.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"

namespace {

using namespace std::chrono_literals;
using mw::Clock;

struct Args {
  double duration_s = 6;
  double kill_at_s = 3;
  bool kill = true;
  size_t mib = 4;
  int heartbeat_ms = 1000;
  int worker = 0;  // 1 or 2 in a worker process
  uint16_t port = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "leader_workers: %s\n"
               "usage: leader_workers [--duration-s S] [--mib M] [--kill-at-s T | --no-kill]\n"
               "                      [--heartbeat-ms H]\n"
               "       leader_workers --worker N --port P [--mib M]\n",
               why.c_str());
  std::exit(2);
}

double number(const char* flag, const char* v) {
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || d < 0) usage(std::string("bad value for ") + flag + ": " + v);
  return d;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--no-kill") {
      a.kill = false;
      continue;
    }
    if (f == "--help" || f == "-h") usage("help");
    if (i + 1 >= argc) usage("missing value for " + f);
    const char* v = argv[++i];
    if (f == "--duration-s")
      a.duration_s = number(argv[i - 1], v);
    else if (f == "--kill-at-s")
      a.kill_at_s = number(argv[i - 1], v);
    else if (f == "--mib")
      a.mib = static_cast<size_t>(number(argv[i - 1], v));
    else if (f == "--heartbeat-ms")
      a.heartbeat_ms = static_cast<int>(number(argv[i - 1], v));
    else if (f == "--worker")
      a.worker = static_cast<int>(number(argv[i - 1], v));
    else if (f == "--port")
      a.port = static_cast<uint16_t>(number(argv[i - 1], v));
    else
      usage("unknown flag " + f);
  }
  if (a.mib == 0 || a.mib > 1024) usage("--mib must be 1..1024");
  if (a.kill && a.kill_at_s >= a.duration_s) usage("--kill-at-s must be before the end");
  return a;
}

// The worlds' shared secret, which the leader makes and its workers inherit: a store without one
// serves any local process (docs/store-protocol.md, "Without a token").
constexpr const char* kTokenVariable = "MW_EXAMPLE_STORE_TOKEN";

mw::WorldOptions worldOptions(int n, int rank, uint16_t port, int heartbeat_ms) {
  mw::WorldOptions o;
  const char* token = std::getenv(kTokenVariable);
  o.token = token ? token : "";
  o.name = "world" + std::to_string(n);
  o.rank = rank;
  o.size = 2;
  o.store.port = port;
  o.heartbeat_timeout = std::chrono::milliseconds(heartbeat_ms);
  return o;
}

int runWorker(const Args& a) {
  mw::WorldManager m;
  mw::Communicator c(m);
  auto o = worldOptions(a.worker, 1, a.port, a.heartbeat_ms);
  if (mw::Status s = m.initWorld(o, mw::deadlineIn(20s)); !s.ok()) {
    std::fprintf(stderr, "worker %d: %s\n", a.worker, s.toString().c_str());
    return 1;
  }
  std::vector<float> data(a.mib << 18, static_cast<float>(a.worker));
  while (c.send(o.name, mw::Tensor::cpu(data.data(), data.size()), 0).ok()) {
  }
  return 0;
}

pid_t spawnWorker(const char* self, int n, uint16_t port, const Args& a) {
  std::array<std::string, 8> s = {self,
                                  "--worker",
                                  std::to_string(n),
                                  "--port",
                                  std::to_string(port),
                                  "--mib",
                                  std::to_string(a.mib),
                                  "--heartbeat-ms"};
  std::string hb = std::to_string(a.heartbeat_ms);
  std::vector<char*> argv;
  for (auto& x : s) argv.push_back(x.data());
  argv.push_back(hb.data());
  argv.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the demo
    if (getppid() != parent) _exit(1);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

// Bytes received per world, split at the fault.
struct Meter {
  double bytes_before = 0, bytes_after = 0;
};

double gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

int runLeader(const char* self, const Args& a) {
  mw::WorldManager m;
  mw::Communicator c(m);
  auto events = m.subscribe();
  auto token = mw::randomStoreToken();
  if (!token.ok()) {
    std::fprintf(stderr, "leader: %s\n", token.status().toString().c_str());
    return 3;
  }
  ::setenv(kTokenVariable, token->c_str(), 1);  // before the workers are spawned
  std::vector<mw::Work> joins;
  std::vector<pid_t> workers;
  for (int n = 1; n <= 2; ++n) {
    joins.push_back(m.initWorldAsync(worldOptions(n, 0, 0, a.heartbeat_ms), mw::deadlineIn(20s)));
    // Rank 0 hosts the world's store on a free port: the workers need to be told which.
    auto port = m.storePort("world" + std::to_string(n), mw::deadlineIn(20s));
    if (!port.ok()) {
      std::fprintf(stderr, "leader: %s\n", port.status().toString().c_str());
      return 3;
    }
    workers.push_back(spawnWorker(self, n, *port, a));
  }
  for (auto& j : joins) {
    if (mw::Status s = j.wait(); !s.ok()) {
      std::fprintf(stderr, "leader: %s\n", s.toString().c_str());
      return 3;
    }
  }
  std::printf("leader: joined world1 and world2; receiving %zu MiB tensors for %.1f s%s\n", a.mib,
              a.duration_s, a.kill ? "" : " (no fault)");
  std::fflush(stdout);

  const size_t count = a.mib << 18;
  std::vector<std::vector<float>> bufs(2, std::vector<float>(count));
  std::vector<mw::Work> recvs(2);
  std::array<Meter, 2> meters;
  std::array<bool, 2> alive = {true, true};
  auto post = [&](int i) {
    recvs[i] = c.irecv("world" + std::to_string(i + 1), mw::Tensor::cpu(bufs[i].data(), count), 1);
  };
  post(0);
  post(1);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(a.duration_s));
  const auto kill_at = start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(a.kill_at_s));
  std::optional<Clock::time_point> killed_at;
  std::optional<mw::BrokenInfo> broken;
  // A progress line per second: each world's rate over the last second.
  auto next_tick = start + 1s;
  std::array<double, 2> tick_bytes = {0, 0};
  auto progress = [&] {
    double t = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("  t=%4.1f s  world1 %5.2f GB/s  world2 %5.2f GB/s\n", t, tick_bytes[0] / 1e9,
                tick_bytes[1] / 1e9);
    std::fflush(stdout);
    tick_bytes = {0, 0};
    next_tick += 1s;
  };
  while (Clock::now() < end) {
    if (Clock::now() >= next_tick) progress();
    if (a.kill && !killed_at && Clock::now() >= kill_at) {
      killed_at = Clock::now();
      kill(workers[1], SIGKILL);
    }
    std::vector<mw::Work> live;
    std::vector<int> index;
    for (int i = 0; i < 2; ++i) {
      if (alive[i]) live.push_back(recvs[i]), index.push_back(i);
    }
    if (live.empty()) break;
    auto wake = std::min({end, next_tick, a.kill && !killed_at ? kill_at : end});
    auto got = mw::waitAny(live, wake);
    if (!got.ok()) continue;  // deadline: time to kill or to stop
    int i = index[*got];
    mw::Status s = recvs[i].status();
    if (s.ok()) {
      (killed_at ? meters[i].bytes_after : meters[i].bytes_before) += count * sizeof(float);
      tick_bytes[i] += count * sizeof(float);
      post(i);
    } else {
      alive[i] = false;
      if (s.broken()) broken = *s.broken();
    }
  }
  const auto stop = Clock::now();
  while (auto e = events->next(mw::deadlineIn(0ms))) {
    if (e->kind == mw::WorldEvent::Kind::kBroken && !broken) broken = e->broken;
  }
  const double t_before =
      std::chrono::duration<double>((killed_at ? *killed_at : stop) - start).count();
  const double t_after = killed_at ? std::chrono::duration<double>(stop - *killed_at).count() : 0;
  for (int i = 0; i < 2; ++i) {
    std::printf("world%d: before %.2f GB/s", i + 1, gbps(meters[i].bytes_before, t_before));
    if (killed_at) std::printf(", after %.2f GB/s", gbps(meters[i].bytes_after, t_after));
    std::printf("  [%s]\n", mw::worldStateName(m.world("world" + std::to_string(i + 1))->state));
  }
  if (killed_at && broken) {
    double ms = std::chrono::duration<double, std::milli>(broken->detected_at - *killed_at).count();
    std::printf(
        "world2: worker SIGKILLed at %.2f s, break detected after %.2f ms (%s, rank %d: %s)\n",
        t_before, ms, mw::causeName(broken->cause), broken->peer_rank, broken->detail.c_str());
    double before = gbps(meters[0].bytes_before, t_before);
    double after = gbps(meters[0].bytes_after, t_after);
    std::printf("world1 kept %.0f%% of its throughput through the fault\n",
                before > 0 ? 100 * after / before : 0);
  }
  for (auto& n : {"world1", "world2"}) m.removeWorld(n).ignore();
  for (pid_t p : workers) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  bool ok = !a.kill || (broken && broken->world == "world2" && m.worlds().empty() &&
                        meters[0].bytes_after > 0);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  return a.worker != 0 ? runWorker(a) : runLeader(argv[0], a);
}
