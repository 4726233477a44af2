// pipeline_app: a small serving pipeline, the C++ example of a user's program that the chaos
// harness runs as scenario roles (examples/pipeline_app.lua; docs/scenarios.md "Program roles").
// Nothing in it knows about the harness: the runtime reports its worlds by itself, and the two
// harness-aware lines are mw::reportMetric("requests") and mw::reportCheck("answer", ...), which
// are no-ops outside a harness.
//
//   pipeline_app frontend --world NAME,ADDR,PORT[,HEARTBEAT_MS,OP_TIMEOUT_MS] [--world ...]
//                         [--bytes N]
//   pipeline_app stage    --world NAME,ADDR,PORT[,HEARTBEAT_MS,OP_TIMEOUT_MS] [--bytes N]
//
// A world's heartbeat timeout and operation deadline default to 1000 ms and 10000 ms; under the
// harness they come from the scenario (${world.NAME.heartbeat_ms}, ${world.NAME.op_timeout_ms}).
//
// Requests are N bytes of float32 (default 64 KiB; the front end and its stages must agree).
// The front end is rank 0 of one two-member world per stage replica (it hosts their stores at
// ADDR:PORT); each stage is rank 1 of its world. The front end sends each request to the next
// replica whose world is healthy and waits for its answer (request * 2 + 1, checked); a replica
// whose world breaks is skipped, and its world re-created under the same name in the background,
// so that a restarted replica joins it again. A stage serves until its world breaks, then joins a
// fresh one. SIGTERM or SIGINT ends either cleanly (exit 0). The store token comes from
// MW_CHAOS_STORE_TOKEN when set (the harness sets it).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"

namespace {

using namespace std::chrono_literals;

std::atomic<bool> stopping{false};
void onSignal(int) { stopping = true; }

struct WorldArg {
  std::string name, addr;
  int port = 0;
  long heartbeat_ms = 1000, op_timeout_ms = 10000;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "pipeline_app: %s\n"
               "usage: pipeline_app frontend --world NAME,ADDR,PORT[,HEARTBEAT_MS,OP_TIMEOUT_MS] "
               "[--world ...] [--bytes N]\n"
               "       pipeline_app stage --world NAME,ADDR,PORT[,HEARTBEAT_MS,OP_TIMEOUT_MS] "
               "[--bytes N]\n",
               why.c_str());
  std::exit(2);
}

// A whole number from `text`, or -1.
long number(const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  return text.empty() || *end != '\0' ? -1 : v;
}

WorldArg parseWorld(const std::string& text) {
  std::vector<std::string> f;
  for (size_t at = 0;;) {
    const size_t comma = text.find(',', at);
    f.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  const std::string want = " (want NAME,ADDR,PORT[,HEARTBEAT_MS,OP_TIMEOUT_MS])";
  if (f.size() != 3 && f.size() != 5) usage("bad --world '" + text + "'" + want);
  WorldArg w{f[0], f[1], static_cast<int>(number(f[2]))};
  if (f.size() == 5) {
    w.heartbeat_ms = number(f[3]);
    w.op_timeout_ms = number(f[4]);
  }
  if (w.name.empty() || w.addr.empty() || w.port <= 0 || w.port > 65535 || w.heartbeat_ms <= 0 ||
      w.op_timeout_ms <= 0) {
    usage("bad --world '" + text + "'" + want);
  }
  return w;
}

mw::WorldOptions options(const WorldArg& w, int rank) {
  mw::WorldOptions o;
  o.name = w.name;
  o.rank = rank;
  o.size = 2;
  o.store.host = w.addr;
  o.store.port = static_cast<uint16_t>(w.port);
  o.heartbeat_timeout = std::chrono::milliseconds(w.heartbeat_ms);
  o.op_timeout = std::chrono::milliseconds(w.op_timeout_ms);
  if (const char* t = std::getenv("MW_CHAOS_STORE_TOKEN")) o.token = t;
  return o;
}

// Joins (or re-joins) `o` until it works or the program stops; true once joined.
bool join(mw::WorldManager& m, const mw::WorldOptions& o) {
  while (!stopping) {
    m.removeWorld(o.name).ignore();  // a broken generation, if any
    if (m.initWorld(o, mw::deadlineIn(2s)).ok()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Waits for `w` in short slices so that a stop is seen; the stop removes the worlds (aborting w).
mw::Status await(mw::Work w) {
  for (;;) {
    mw::Status s = w.wait(mw::deadlineIn(100ms));
    if (s.code() != mw::Code::kTimeout || w.test()) return w.test() ? w.status() : s;
    if (stopping) return mw::Status(mw::Code::kAborted, "stopping");
  }
}

int frontend(const std::vector<WorldArg>& worlds, size_t bytes) {
  mw::WorldManager m;
  mw::Communicator c(m);
  std::map<std::string, std::thread> joiners;       // a world being (re-)created
  std::map<std::string, std::atomic<bool>> joined;  // keys fixed before any thread starts
  for (const auto& w : worlds) joined[w.name] = false;
  auto rejoin = [&](const WorldArg& w) {
    if (auto it = joiners.find(w.name); it != joiners.end()) it->second.join();
    joined.at(w.name) = false;
    joiners[w.name] = std::thread([&, w] { joined.at(w.name) = join(m, options(w, 0)); });
  };
  for (const auto& w : worlds) rejoin(w);
  const size_t n = std::max<size_t>(1, bytes / sizeof(float));
  std::vector<float> req(n), resp(n);
  long served = 0;
  size_t next = 0;
  while (!stopping) {
    const WorldArg* target = nullptr;
    for (size_t i = 0; i < worlds.size() && target == nullptr; ++i) {
      const WorldArg& w = worlds[(next + i) % worlds.size()];
      if (joined.at(w.name)) target = &w;
    }
    next = (next + 1) % worlds.size();
    if (target == nullptr) {
      std::this_thread::sleep_for(5ms);  // no replica up
      continue;
    }
    for (size_t i = 0; i < n; ++i) req[i] = static_cast<float>((served + i) % 1000);
    mw::Status s = await(c.isend(target->name, mw::Tensor::cpu(req.data(), n), 1));
    if (s.ok()) s = await(c.irecv(target->name, mw::Tensor::cpu(resp.data(), n), 1));
    if (s.ok()) {
      // The program's own check of each answer, for the harness's expect.app_checks (a no-op
      // outside a harness; a wrong answer is also said on stderr).
      size_t wrong = n;
      for (size_t i = 0; i < n && wrong == n; ++i) {
        if (resp[i] != req[i] * 2 + 1) wrong = i;
      }
      std::string detail;
      if (wrong < n) {
        detail = "from " + target->name + ": element " + std::to_string(wrong) + " is " +
                 std::to_string(resp[wrong]) + ", not " + std::to_string(req[wrong] * 2 + 1);
        std::fprintf(stderr, "pipeline_app: wrong answer %s\n", detail.c_str());
      }
      mw::reportCheck("answer", wrong == n, detail).ignore();
      ++served;
      mw::reportMetric("requests").ignore();
    } else if (!stopping) {
      std::fprintf(stderr, "pipeline_app: %s failed (%s); re-creating it\n", target->name.c_str(),
                   s.toString().c_str());
      rejoin(*target);
    }
  }
  for (auto& [name, t] : joiners) m.removeWorld(name).ignore();  // ends joins in progress
  for (auto& [name, t] : joiners) t.join();
  std::fprintf(stderr, "pipeline_app: frontend served %ld requests\n", served);
  return 0;
}

int stage(const WorldArg& w, size_t bytes) {
  mw::WorldManager m;
  mw::Communicator c(m);
  std::vector<float> buf(std::max<size_t>(1, bytes / sizeof(float)));
  while (!stopping) {
    if (!join(m, options(w, 1))) break;
    for (;;) {  // serve this generation until it breaks
      mw::Status s = await(c.irecv(w.name, mw::Tensor::cpu(buf.data(), buf.size()), 0));
      if (s.ok()) {
        for (float& x : buf) x = x * 2 + 1;  // the model
        s = await(c.isend(w.name, mw::Tensor::cpu(buf.data(), buf.size()), 0));
      }
      if (!s.ok()) break;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("missing the role (frontend or stage)");
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  const std::string role = argv[1];
  std::vector<WorldArg> worlds;
  size_t bytes = 1 << 16;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--world" && i + 1 < argc) {
      worlds.push_back(parseWorld(argv[++i]));
    } else if (a == "--bytes" && i + 1 < argc) {
      bytes = static_cast<size_t>(std::atol(argv[++i]));
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  if (worlds.empty()) usage("no --world");
  if (role == "frontend") return frontend(worlds, bytes);
  if (role == "stage") {
    if (worlds.size() != 1) usage("a stage is in one world");
    return stage(worlds[0], bytes);
  }
  usage("unknown role '" + role + "'");
}
