// mw_test_worker: a member process for the fault tests. It joins worlds, optionally drives traffic
// in them, and reports on stdout, one line each:
//   ready                                   every world joined
//   joinfail <world> <status>               a world could not be joined
//   broken <world> <cause> <peer> <t_ns>    a world broke (t_ns: steady clock, comparable across
//                                           processes on Linux)
//   traffic <world> <ok_ops> <status> <t_ns>  a traffic loop ended (t_ns: when)
// Usage: mw_test_worker --join NAME:RANK:SIZE:PORT[:HEARTBEAT_MS] ...
//                       [--send NAME:PEER:BYTES] [--recv NAME:PEER:BYTES] [--exit-after-ms N]
//                       [--allreduce NAME:FLOATS] (float32 all_reduce of ones in a loop; a
//                       call that succeeds with any element other than the world's size ends
//                       the loop with status "wrong_result")
//                       [--failpoint POINT:FAILNUM] (enabled once every world joined; needs a
//                       runtime built with failpoints; prints "enabled <point> <t_ns>")
//                       [--store-fds N] (first: hosts a StoreServer with token "fuzz-token",
//                       with RLIMIT_NOFILE at N descriptors beyond those open; prints
//                       "store <port>")
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"

namespace {

std::mutex out_mu;

void say(const std::string& line) {
  std::lock_guard lock(out_mu);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, sep);) parts.push_back(p);
  return parts;
}

struct Traffic {
  enum Kind { kSend, kRecv, kAllReduce } kind;
  std::string world;
  int peer;
  size_t bytes;     // elements for kAllReduce
  int members = 0;  // the world's size, for kAllReduce
};

// One operation; `wrong` is set when an all_reduce succeeded with a wrong sum.
mw::Status runOnce(mw::Communicator& comm, const Traffic& t, std::vector<char>& bytes,
                   std::vector<float>& floats, bool& wrong) {
  auto tensor = mw::Tensor{bytes.data(), mw::DType::kUInt8, bytes.size(), mw::Device::cpu()};
  switch (t.kind) {
    case Traffic::kSend:
      return comm.send(t.world, tensor, t.peer);
    case Traffic::kRecv:
      return comm.recv(t.world, tensor, t.peer);
    case Traffic::kAllReduce: {
      std::fill(floats.begin(), floats.end(), 1.0f);
      mw::Status s = comm.allReduce(t.world, mw::Tensor::cpu(floats.data(), floats.size())).wait();
      const auto want = static_cast<float>(t.members);
      wrong =
          s.ok() && std::any_of(floats.begin(), floats.end(), [&](float f) { return f != want; });
      return s;
    }
  }
  return mw::Status::Ok();
}

void runTraffic(mw::Communicator& comm, const Traffic& t) {
  std::vector<char> bytes(t.kind == Traffic::kAllReduce ? 0 : t.bytes, 1);
  std::vector<float> floats(t.kind == Traffic::kAllReduce ? t.bytes : 0);
  long ok = 0;
  mw::Status s;
  bool wrong = false;
  while ((s = runOnce(comm, t, bytes, floats, wrong)).ok() && !wrong) ++ok;
  const std::string status = wrong ? "wrong_result" : mw::codeName(s.code());
  say("traffic " + t.world + " " + std::to_string(ok) + " " + status + " " +
      std::to_string(mw::Clock::now().time_since_epoch().count()));
}

// Waits (up to `limit`) until every thread of this process but the main one has named itself
// (the library names each thread as it starts), i.e. has started running.
void waitThreadsNamed(std::chrono::milliseconds limit) {
  auto comm = [](const std::string& tid) {
    std::ifstream f("/proc/self/task/" + tid + "/comm");
    std::string name;
    std::getline(f, name);
    return name;
  };
  const std::string self = std::to_string(::getpid());
  const std::string main_name = comm(self);
  for (auto until = mw::deadlineIn(limit); mw::Clock::now() < until;) {
    bool all = true;
    if (DIR* d = ::opendir("/proc/self/task")) {
      while (dirent* e = ::readdir(d)) {
        const std::string tid = e->d_name;
        if (tid == "." || tid == ".." || tid == self) continue;
        if (comm(tid) == main_name) all = false;
      }
      ::closedir(d);
    }
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int usage(const char* why) {
  std::fprintf(stderr, "mw_test_worker: %s\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<mw::WorldOptions> joins;
  std::vector<Traffic> traffic;
  long exit_after_ms = 600000;
  int store_fds = 0;
  std::vector<std::pair<std::string, int>> failpoints;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], val = argv[i + 1];
    auto p = split(val, ':');
    if (flag == "--join" && (p.size() == 4 || p.size() == 5)) {
      mw::WorldOptions o;
      o.name = p[0];
      o.rank = std::atoi(p[1].c_str());
      o.size = std::atoi(p[2].c_str());
      o.store.port = static_cast<uint16_t>(std::atoi(p[3].c_str()));
      if (p.size() == 5) o.heartbeat_timeout = std::chrono::milliseconds(std::atoi(p[4].c_str()));
      joins.push_back(o);
    } else if ((flag == "--send" || flag == "--recv") && p.size() == 3) {
      traffic.push_back({flag == "--send" ? Traffic::kSend : Traffic::kRecv, p[0],
                         std::atoi(p[1].c_str()), static_cast<size_t>(std::atoll(p[2].c_str()))});
    } else if (flag == "--allreduce" && p.size() == 2) {
      traffic.push_back(
          {Traffic::kAllReduce, p[0], -1, static_cast<size_t>(std::atoll(p[1].c_str()))});
    } else if (flag == "--failpoint" && p.size() == 2) {
      failpoints.emplace_back(p[0], std::atoi(p[1].c_str()));
    } else if (flag == "--store-fds") {
      store_fds = std::atoi(val.c_str());
    } else if (flag == "--exit-after-ms") {
      exit_after_ms = std::atol(val.c_str());
    } else {
      return usage(("bad argument " + flag + " " + val).c_str());
    }
  }
  // Made before a --store-fds limit: once the test has used up the spare descriptors, the
  // sanitizers' runtime cannot make the pipe it probes memory with, and UBSan's first dynamic type
  // check of the manager's threads reported a false "invalid vptr" (3 runs in 8 beside CPU hogs).
  mw::WorldManager manager;
  mw::Communicator comm(manager);
  auto events = manager.subscribe();
  std::unique_ptr<mw::StoreServer> store;
  if (store_fds > 0) {
    size_t open = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
      while (::readdir(d) != nullptr) ++open;
      ::closedir(d);
    }
    mw::StoreServerOptions so;
    so.token = "fuzz-token";
    auto started = mw::StoreServer::start(so);
    if (!started.ok()) return usage(started.status().toString().c_str());
    store = std::move(*started);
    // UBSan checks each dynamic type once, probing memory through a pipe, and with no descriptor
    // left it reports a false "invalid vptr" (its suppressions cannot help: the type is unknown
    // then). So every check this process needs is made before the limit: the events queue's here,
    // and each thread's start (std::thread's state) by waiting until every thread has named
    // itself. Seen with clang beside CPU hogs: mw::Subscription at events->next, and the
    // watchdog's thread state, each after the limit.
    (void)events->next(mw::Clock::now());
    waitThreadsNamed(std::chrono::seconds(5));
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = open + static_cast<rlim_t>(store_fds);
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return usage("setrlimit failed");
    say("store " + std::to_string(store->port()));
  }
  std::vector<mw::Work> pending;
  for (const auto& o : joins)
    pending.push_back(manager.initWorldAsync(o, mw::deadlineIn(std::chrono::seconds(20))));
  for (size_t i = 0; i < joins.size(); ++i) {
    mw::Status s = pending[i].wait();
    if (!s.ok()) say("joinfail " + joins[i].name + " " + s.toString());
  }
  for (const auto& [name, failnum] : failpoints) {
    mw::failpoints::Mode mode;
    mode.failnum = failnum;
    if (mw::Status s = mw::failpoints::enable(name, mode); !s.ok()) {
      say("failpointfail " + name + " " + s.toString());
      return 3;
    }
    say("enabled " + name + " " + std::to_string(mw::Clock::now().time_since_epoch().count()));
  }
  say("ready");
  for (auto& t : traffic) {
    for (const auto& o : joins)
      if (o.name == t.world) t.members = o.size;
  }
  std::vector<std::thread> loops;
  for (const auto& t : traffic) loops.emplace_back(runTraffic, std::ref(comm), t);
  auto until = mw::deadlineIn(std::chrono::milliseconds(exit_after_ms));
  while (mw::Clock::now() < until) {
    auto e = events->next(std::min(until, mw::deadlineIn(std::chrono::milliseconds(100))));
    if (e && e->kind == mw::WorldEvent::Kind::kBroken) {
      say("broken " + e->world + " " + mw::causeName(e->broken->cause) + " " +
          std::to_string(e->broken->peer_rank) + " " +
          std::to_string(e->broken->detected_at.time_since_epoch().count()));
    }
  }
  for (const auto& o : joins) manager.removeWorld(o.name).ignore();
  for (auto& t : loops) t.join();
  return 0;
}
