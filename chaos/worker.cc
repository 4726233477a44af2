// mw_worker: the chaos harness's worker process. One per role: it joins the role's worlds, drives
// their traffic, and reports to the harness on stdout, one line each, in the protocol of
// multiworld/telemetry_lines.h (ready, event, metrics, cpu, joinfail, fifo, error).
// Commands on stdin, one per line: "stop" (also SIGTERM, SIGINT or end of input), "remove <world>",
// "add <world>" (joins a world of its configuration that is not joined).
//
// Usage: mw_worker --config '<json>' (chaos/worker_config.h: harness/orchestrator.cc writes it).
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chaos/cpu_meter.h"
#include "chaos/ports.h"
#include "chaos/worker_config.h"
#include "multiworld/multiworld.h"
#include "multiworld/telemetry_lines.h"

namespace {

using Pattern = mw::chaos::TrafficPattern;
using namespace std::chrono_literals;

std::mutex out_mu;
std::atomic<bool> stopping{false};

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

// A tensor's memory: host memory, or device memory for a cuda world (through the CUDA runtime
// the library loads, multiworld/gpu.h: this worker does not link it).
class Buffer {
 public:
  Buffer(size_t bytes, mw::Device device)
      : host_(device.kind == mw::Device::Kind::kCpu ? bytes : 0, 1) {
    if (device.kind == mw::Device::Kind::kCpu) return;
    // The worker's error line carries the Status and the size ("error unavailable: cuda:0 ...").
    const std::string what = " (a tensor of " + std::to_string(bytes) + " bytes)";
    auto buf = mw::DeviceBuffer::allocate(device, bytes);
    if (!buf.ok()) fatal(buf.status().toString() + what);
    device_ = std::move(buf).value();
    if (mw::Status s = device_.fill(1); !s.ok()) fatal(s.toString() + what);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() { return device_.data() != nullptr ? device_.data() : host_.data(); }

 private:
  std::vector<char> host_;
  mw::DeviceBuffer device_;
};

struct WorldConf {
  mw::WorldOptions options;
  bool rejoin = false;
  bool start = true;
};

// Per-world counters of the current window, swapped out by the reporter.
struct Window {
  std::mutex mu;
  long long bytes = 0, ops = 0, lat_sum = 0, lat_max = 0;
  void add(long long b, long long lat_ns) {
    std::lock_guard lock(mu);
    bytes += b;
    ++ops;
    lat_sum += lat_ns;
    lat_max = std::max(lat_max, lat_ns);
  }
};

class Worker {
 public:
  explicit Worker(const mw::chaos::WorkerConfig& conf) : traffic_(conf.traffic) {
    role_ = conf.role;
    seed_ = conf.seed;
    window_ = conf.window;
    fifo_prefix_ = conf.fifo_prefix;
    for (const auto& w : conf.worlds) {
      WorldConf c;
      auto& o = c.options;
      o.name = w.name;
      o.rank = w.rank;
      o.size = w.size;
      o.store.host = w.host;
      o.store.port = w.port;
      if (const char* token = std::getenv(mw::chaos::kTokenVariable)) o.token = token;
      o.backend = w.backend;
      o.device = w.device;
      o.heartbeat_timeout = w.heartbeat;
      o.op_timeout = w.op_timeout;
      c.rejoin = w.rejoin;
      c.start = w.start;
      worlds_[o.name] = c;
      windows_[o.name] = std::make_unique<Window>();
      removed_[o.name] = false;  // every key exists before the threads start
    }
  }

  int run() {
    if (!fifo_prefix_.empty() && !mw::failpoints::compiledIn()) {
      say(lines::Fifo{});  // the harness reports the failpoint faults as skipped
    } else if (!fifo_prefix_.empty()) {
      auto fifo = mw::failpoints::openControl(fifo_prefix_);
      if (!fifo.ok()) fatal("failpoint control: " + fifo.status().toString());
      if (mw::Status s = mw::failpoints::seed(seed_); !s.ok()) fatal(s.toString());
      say(lines::Fifo{*fifo});
    }
    events_ = manager_.subscribe();
    std::thread watcher([this] { watchEvents(); });
    // Every world joins at once (a world's members wait for each other); one that fails is tried
    // again (a replacement may reach the old store of a broken world before it is re-created).
    std::vector<std::thread> joins;
    std::atomic<int> failed{0};
    for (auto& [name, c] : worlds_) {
      if (!c.start) continue;
      joins.emplace_back([this, &failed, o = c.options] {
        if (!joinUntilStopped(o, mw::deadlineIn(30s))) ++failed;
      });
    }
    for (auto& j : joins) j.join();
    if (failed.load() > 0) fatal("could not join every world of role '" + role_ + "' in 30 s");
    say(lines::Ready{nowNs()});
    std::vector<std::thread> loops;
    std::atomic<int> running{static_cast<int>(traffic_.size())};
    for (const auto& t : traffic_) {
      loops.emplace_back([this, t, &running] {
        trafficLoop(t);
        --running;
      });
    }
    std::thread reporter([this] { reportLoop(); });
    std::jthread commands([this] { commandLoop(); });  // ends once stopping (polls stdin)
    while (!stopping.load()) std::this_thread::sleep_for(10ms);
    // Operations in flight get a moment to finish; one that is stuck (a world that no longer moves
    // data but has not broken yet) is aborted by removing its world, rather than holding the stop
    // up until its deadline.
    const auto grace = mw::deadlineIn(500ms);
    while (running.load() > 0 && mw::Clock::now() < grace) std::this_thread::sleep_for(5ms);
    if (running.load() > 0) {
      for (auto& [name, c] : worlds_) manager_.removeWorld(name).ignore();
    }
    for (auto& l : loops) l.join();
    {
      std::lock_guard lock(joiners_mu_);
      for (auto& j : joiners_) j.join();  // they give up within 2 s of stopping
      joiners_.clear();
    }
    for (auto& [name, c] : worlds_) manager_.removeWorld(name).ignore();
    reporter.join();
    watcher.join();
    commands.join();
    return 0;
  }

 private:
  void commandLoop() {
    char buf[4096];
    std::string pending;
    while (!stopping.load()) {
      // Polled with a timeout, so that the thread sees a stop that came another way (a signal)
      // and can be joined.
      pollfd p{0, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::read(0, buf, sizeof(buf));
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (line == "stop") {
          stopping = true;
        } else if (line.rfind("remove ", 0) == 0) {
          std::string w = line.substr(7);
          if (!removed_.count(w)) continue;
          removed_.at(w) = true;
          manager_.removeWorld(w).ignore();
        } else if (line.rfind("add ", 0) == 0) {
          std::string w = line.substr(4);
          auto it = worlds_.find(w);
          if (it == worlds_.end()) {
            say(lines::JoinFail{nowNs(), w, "not in this role's worlds"});
            continue;
          }
          removed_.at(w) = false;
          spawnJoin(it->second.options);
        }
      }
    }
    stopping = true;
  }

  void spawnJoin(const mw::WorldOptions& o) {
    std::lock_guard lock(joiners_mu_);
    if (stopping.load()) return;
    joiners_.emplace_back([this, o] { joinUntilStopped(o); });
  }

  // (Re)joins a world, retrying until it is healthy, the worker stops or `until` passes.
  // A machine that cannot run the world (no GPU, ...) ends the worker: "error unavailable: ...".
  bool joinUntilStopped(const mw::WorldOptions& o, mw::Deadline until = mw::Deadline::max()) {
    while (!stopping.load() && mw::Clock::now() < until) {
      mw::Status s = manager_.initWorld(o, std::min(until, mw::deadlineIn(2s)));
      if (s.ok()) return true;
      if (s.code() == mw::Code::kInvalidUsage) return true;  // exists already
      if (s.code() == mw::Code::kUnavailable) fatal("unavailable: " + s.message());
      say(lines::JoinFail{nowNs(), o.name, s.toString()});
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  void watchEvents() {
    while (!stopping.load()) {
      auto e = events_->next(mw::deadlineIn(50ms));
      if (!e) continue;
      lines::Event l{nowNs(e->at), e->world, e->kind, e->generation, mw::Cause::kNone, -1, ""};
      if (e->broken) {
        l.cause = e->broken->cause;
        l.peer = e->broken->peer_rank;
        l.detail = e->broken->detail;
      }
      say(l);
      if (e->kind == mw::WorldEvent::Kind::kBroken) {
        auto it = worlds_.find(e->world);
        if (it != worlds_.end() && it->second.rejoin && !removed_.at(e->world)) {
          // A replacement member joins a fresh world of the same name: leave the broken one and
          // join again (the store host re-creates the store on the same port).
          manager_.removeWorld(e->world).ignore();
          spawnJoin(it->second.options);
        }
      }
    }
  }

  void reportLoop() {
    auto next = mw::Clock::now() + window_;
    mw::chaos::CpuMeter cpu;
    while (!stopping.load()) {
      std::this_thread::sleep_until(next);
      const auto t = next;
      next += window_;
      for (auto& [name, w] : windows_) {
        lines::Metrics m{nowNs(t), name};
        {
          std::lock_guard lock(w->mu);
          m.bytes = w->bytes, m.ops = w->ops, m.lat_sum_ns = w->lat_sum, m.lat_max_ns = w->lat_max;
          w->bytes = w->ops = w->lat_sum = w->lat_max = 0;
        }
        auto info = manager_.world(name);
        m.generation = info.ok() ? info->generation : 0;
        say(m);
      }
      const auto d = cpu.sample();
      if (d.available) say(lines::Cpu{nowNs(t), d.cpu_ns, d.wait_ns});
    }
  }

  void trafficLoop(const mw::chaos::WorkerTraffic& t) {
    const WorldConf& wc = worlds_.at(t.world);
    const int rank = wc.options.rank, size = wc.options.size;
    const size_t elem = mw::dtypeSize(t.dtype);
    const size_t count = std::max<size_t>(1, t.bytes / elem);
    Buffer buf(count * elem, wc.options.device);
    mw::Tensor tensor{buf.data(), t.dtype, count, wc.options.device};
    Window& win = *windows_.at(t.world);
    auto slot = mw::Clock::now();
    const auto period = t.rate > 0 ? std::chrono::duration_cast<mw::Clock::duration>(
                                         std::chrono::duration<double>(1.0 / t.rate))
                                   : mw::Clock::duration::zero();
    while (!stopping.load()) {
      auto info = manager_.world(t.world);
      if (!info.ok() || info->state != mw::WorldState::kHealthy) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      auto t0 = mw::Clock::now();
      mw::Status s;
      long long moved = static_cast<long long>(tensor.bytes());
      if (t.pattern == Pattern::kGatherToLeader || t.pattern == Pattern::kPipeline) {
        if (rank == 0 && t.pattern == Pattern::kGatherToLeader) {
          for (int src = 1; src < size && s.ok(); ++src) s = comm_.recv(t.world, tensor, src);
          moved *= size - 1;
        } else if (t.pattern == Pattern::kGatherToLeader) {
          s = comm_.send(t.world, tensor, 0);
        } else if (rank == 0) {
          s = comm_.send(t.world, tensor, 1);
        } else if (rank == 1) {
          s = comm_.recv(t.world, tensor, 0);
        } else {
          std::this_thread::sleep_for(50ms);
          continue;
        }
      } else if (t.pattern == Pattern::kRingAllreduce) {
        s = comm_.allReduce(t.world, tensor).wait();
      } else {  // broadcast
        s = comm_.broadcast(t.world, tensor, t.root).wait();
      }
      if (s.ok()) {
        win.add(
            moved,
            std::chrono::duration_cast<std::chrono::nanoseconds>(mw::Clock::now() - t0).count());
      }
      if (period.count() > 0) {
        slot += period;
        auto now = mw::Clock::now();
        if (slot < now) slot = now;
        std::this_thread::sleep_until(slot);
      }
    }
  }

  std::string role_;
  unsigned seed_ = 0;
  std::chrono::milliseconds window_{100};
  std::string fifo_prefix_;
  std::map<std::string, WorldConf> worlds_;
  std::map<std::string, std::unique_ptr<Window>> windows_;
  std::map<std::string, std::atomic<bool>> removed_;
  std::vector<mw::chaos::WorkerTraffic> traffic_;
  mw::WorldManager manager_;
  mw::Communicator comm_{manager_};
  std::shared_ptr<mw::Subscription> events_;
  std::mutex joiners_mu_;
  std::vector<std::thread> joiners_;  // GUARDED_BY(joiners_mu_)
};

void onSignal(int) { stopping = true; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "--config") != 0) {
    std::fprintf(stderr,
                 "usage: mw_worker --config '<json>'\n"
                 "The chaos harness (mwchaos) starts this program, one per scenario role.\n"
                 "Its worlds' store token comes from the environment variable "
                 "MW_CHAOS_STORE_TOKEN (none when unset).\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  auto conf = mw::chaos::parseWorkerConfig(argv[2]);
  if (!conf.ok()) fatal("bad configuration: " + conf.status().message());
  Worker w(*conf);
  int rc = w.run();
  std::fflush(stdout);
  std::_Exit(rc);
}
