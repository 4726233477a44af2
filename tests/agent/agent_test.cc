// The host agent, for real: `mwchaos agent --stdio` driven through agent::Connection, and by raw
// frames where the test plays a controller that misbehaves (silent, gone, of another build).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "agent/client.h"
#include "agent/server.h"
#include "chaos/netsim.h"
#include "chaos/process.h"
#include "model/agent_protocol.h"
#include "tests/agent/raw_agent.h"

using namespace mw;
using namespace std::chrono_literals;
using namespace mw::agent_test;

namespace {

agent::LaunchSpec localSpec(int lease_ms = 2000) {
  agent::LaunchSpec s;
  s.host = "t";
  s.launcher = "local";
  s.argv = {MW_MWCHAOS, "agent", "--stdio"};
  s.lease_ms = lease_ms;
  return s;
}

// Running or stopped: a zombie (killed, and kept unreleased by its agent so that its pid, its
// group's id, is nobody else's until release) is not alive.
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(f)), {});
  const size_t close = all.rfind(')');
  return close == std::string::npos || close + 2 >= all.size() || all[close + 2] != 'Z';
}

// Pumps `c` until `done` or 10 s.
template <class F>
bool pumpUntil(agent::Connection& c, F done) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    c.pump();
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("an agent runs a role and relays its output and its exit", "[agent]") {
  auto c = agent::Connection::start(localSpec(), 10s);
  REQUIRE(c.ok());
  CHECK((*c)->hello().build == agent::buildId());
  CHECK((*c)->sameClock());  // one machine: its clock is ours
  agent::Spawn s;
  s.role = "r";
  s.argv = {"/bin/sh", "-c", "echo out; echo err >&2; echo tel >&3; exit 3"};
  s.telemetry = true;
  auto p = (*c)->spawn(s);
  REQUIRE(p.ok());
  std::string out, err, tel;
  bool o = true, e = true, t = true;
  REQUIRE(pumpUntil(**c, [&] {
    o = o && (*p)->readStdout(&out);
    e = e && (*p)->readStderr(&err);
    t = t && (*p)->readTelemetry(&tel);
    return (*p)->poll() && !o && !e && !t;
  }));
  CHECK(out == "out\n");
  CHECK(err == "err\n");
  CHECK(tel == "tel\n");
  CHECK((*p)->exitText() == "exited 3");
  CHECK((*p)->exitCode() == 3);
  CHECK((*p)->release() == 0);
  CHECK((*c)->bye().ok());
}

TEST_CASE("a controller waiting on one agent reads the others through its hook", "[agent]") {
  auto a = agent::Connection::start(localSpec(), 10s);
  auto b = agent::Connection::start(localSpec(), 10s);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  agent::Spawn s;
  s.role = "talker";
  s.argv = {"/usr/bin/yes", "a line of output that fills pipes"};
  auto p = (*b)->spawn(s);
  REQUIRE(p.ok());
  int woken = 0;
  (*a)->setWhileWaiting([&] {
    ++woken;
    (*b)->pump();
  });
  // Only a's requests run here: what b's role writes reaches us through a's hook alone. Without
  // it, b's pipes fill (some 100 KiB) and its agent stops.
  size_t got = 0;
  std::string chunk;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (got < (4u << 20) && std::chrono::steady_clock::now() < until) {
    REQUIRE((*a)->call(agent::ClockRead{}).ok());
    (*p)->readStdout(&chunk);
    got += chunk.size();
    chunk.clear();
  }
  CHECK(woken > 0);
  CHECK(got >= (4u << 20));
  (*a)->setWhileWaiting(nullptr);
  CHECK((*p)->signal(SIGKILL));
}

TEST_CASE("requests posted to many agents are each answered once, in any order awaited",
          "[agent]") {
  auto a = agent::Connection::start(localSpec(), 10s);
  auto b = agent::Connection::start(localSpec(), 10s);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  (*a)->setWhileWaiting([&] { (*b)->pump(); });  // as the orchestrator's hook: others are read
  (*b)->setWhileWaiting([&] { (*a)->pump(); });
  auto a1 = (*a)->post(agent::ClockRead{});
  auto b1 = (*b)->post(agent::ClockRead{});
  auto a2 = (*a)->post(agent::ClockRead{});
  REQUIRE(a1.ok());
  REQUIRE(b1.ok());
  REQUIRE(a2.ok());
  CHECK(*a1 != *a2);
  // The later request first: the earlier one's answer, read meanwhile, is kept for its await.
  auto r2 = (*a)->await(*a2);
  auto r1 = (*a)->await(*a1);
  auto rb = (*b)->await(*b1);
  REQUIRE(r2.ok());
  REQUIRE(r1.ok());
  REQUIRE(rb.ok());
  CHECK(r1->t_ns <= r2->t_ns);  // the agent answered in the order it was asked
  // Once answered, an id is no longer pending; nor is one never posted.
  CHECK((*a)->await(*a1).status().code() == Code::kInvalidUsage);
  CHECK((*a)->await(999999).status().code() == Code::kInvalidUsage);
  // A failed request's answer is its error, as call()'s.
  agent::Signal sig;
  sig.role = "nobody";
  auto bad = (*b)->post(sig);
  REQUIRE(bad.ok());
  CHECK_FALSE((*b)->await(*bad).ok());
  CHECK((*a)->call(agent::ClockRead{}).ok());  // and the connections go on
}

TEST_CASE("a request to an agent that died fails, and SIGPIPE does not end the program",
          "[agent]") {
  // This program does not ignore SIGPIPE (a benchmark's or a user's may not): a write to the
  // dead agent's pipe must fail with EPIPE, not end it, and leave no SIGPIPE pending.
  struct sigaction dfl {
  }, old{};
  dfl.sa_handler = SIG_DFL;
  REQUIRE(::sigaction(SIGPIPE, &dfl, &old) == 0);
  auto c = agent::Connection::start(localSpec(), 10s);
  REQUIRE(c.ok());
  const auto pid = static_cast<pid_t>((*c)->hello().pid);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  for (int i = 0; i < 200 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(5ms);
  // Its reader may see the end first; either way the request fails, naming the agent.
  auto r = (*c)->call(agent::ClockRead{}, 2s);
  CHECK_FALSE(r.ok());
  INFO(r.status().message());
  CHECK(r.status().message().find("agent") != std::string::npos);
  CHECK_FALSE((*c)->call(agent::ClockRead{}, 2s).ok());
  sigset_t pending;
  sigemptyset(&pending);
  REQUIRE(::sigpending(&pending) == 0);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
  c->reset();
  REQUIRE(::sigaction(SIGPIPE, &old, nullptr) == 0);
}

TEST_CASE("an agent says whether a signal ends the role before it sends it", "[agent]") {
  auto c = agent::Connection::start(localSpec(), 10s);
  REQUIRE(c.ok());
  agent::Spawn s;
  s.role = "sleeper";
  s.argv = {"/bin/sleep", "100"};
  auto p = (*c)->spawn(s);
  REQUIRE(p.ok());
  CHECK_FALSE((*p)->signal(SIGSTOP));
  CHECK_FALSE((*p)->signal(SIGCONT));
  CHECK((*p)->signal(SIGTERM));
  REQUIRE(pumpUntil(**c, [&] { return (*p)->poll(); }));
  CHECK((*p)->exitText() == "killed by SIGTERM");
  // A second role of the same name only once the first is released.
  auto again = (*c)->call(s);
  CHECK(again.status().code() == Code::kInvalidUsage);
  (*p)->release();
  p->reset();
  auto fresh = (*c)->spawn(s);
  REQUIRE(fresh.ok());
  const pid_t pid = (*fresh)->pid();
  CHECK(alive(pid));
  (*fresh)->killAndReap();
  CHECK((*fresh)->exitText() == "killed by SIGKILL");
  CHECK_FALSE(alive(pid));
  // Released, the leader is reaped: its pid is free again.
  (*fresh)->release();
  CHECK(::kill(pid, 0) != 0);
}

TEST_CASE("an agent whose controller falls silent kills its roles when the lease ends", "[agent]") {
  RawAgent a;
  const pid_t pid = a.startSleeper(300);
  CHECK(alive(pid));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = a.waitExit(5s);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(a.p->exitCode() == agent::kServedLeaseLost);
  // (A load that held the agent off the CPU adds how long to the message, and to the wait.)
  CHECK(err.find("lease expired (no word from the controller for 300 ms") != std::string::npos);
  CHECK(err.find("1 process(es) killed") != std::string::npos);
  CHECK(took >= 250ms);
  CHECK_FALSE(alive(pid));
}

TEST_CASE("an agent frozen together with its controller keeps its lease", "[agent]") {
  // A machine frozen as a whole (both sides stopped alike, as this project's test VM does for
  // seconds under load) is no silence of the controller: the agent excuses the time it was held
  // off the CPU itself, and a quarter of the lease is left when both run again.
  RawAgent a;
  const pid_t pid = a.startSleeper(2000);
  REQUIRE(::kill(a.p->pid(), SIGSTOP) == 0);
  std::this_thread::sleep_for(3000ms);  // past the lease: the controller was frozen too
  REQUIRE(::kill(a.p->pid(), SIGCONT) == 0);
  std::this_thread::sleep_for(100ms);  // the controller runs again, and pings a moment later
  a.send(agent::Ping{}, 0);
  a.send(agent::ClockRead{}, 7);
  const agent::Frame f = a.next<agent::Reply>();
  CHECK(f.id == 7);
  CHECK_FALSE(a.p->poll());
  CHECK(alive(pid));
  // Real silence still ends the lease, and the message says what was excused.
  const std::string err = a.waitExit(10s);
  CHECK(a.p->exitCode() == agent::kServedLeaseLost);
  CHECK(err.find("lease expired (no word from the controller for 2000 ms; this agent was itself "
                 "held off the CPU for ") != std::string::npos);
  CHECK_FALSE(alive(pid));
}

TEST_CASE("an agent opens failpoint fifos only in the role's own folder, and only fifos",
          "[agent]") {
  RawAgent a;
  a.startSleeper(60000);
  a.send(agent::MakeDir{"r"}, 3);
  const std::string dir = std::get<agent::Reply>(a.next<agent::Reply>().msg).path;
  REQUIRE(!dir.empty());
  // A regular file and a link to a fifo elsewhere, both named as fifos in the role's folder.
  { std::ofstream(dir + "/file.in") << "x"; }
  const std::string elsewhere = dir + ".elsewhere.in";
  REQUIRE(::mkfifo(elsewhere.c_str(), 0600) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), (dir + "/link.in").c_str()) == 0);
  struct Case {
    std::string path;
    Code code;
    std::string says;
  };
  const Case cases[] = {
      {"/etc/passwd.in", Code::kInvalidArgument, "is not inside a folder this agent made"},
      {dir + "/../x.in", Code::kInvalidArgument, "is not inside a folder this agent made"},
      {dir + "/sub/x.in", Code::kInvalidArgument, "is not inside a folder this agent made"},
      {dir + "/file.in", Code::kInvalidArgument, "is not a fifo"},
      {dir + "/link.in", Code::kIoError, "Too many levels of symbolic links"},
  };
  uint64_t id = 10;
  for (const Case& c : cases) {
    a.send(agent::FifoOpen{"r", c.path, 200}, id++);
    const auto r = std::get<agent::Reply>(a.next<agent::Reply>().msg);
    INFO(c.path << ": " << r.why);
    CHECK(r.code == c.code);
    CHECK(r.why.find(c.says) != std::string::npos);
  }
  ::unlink(elsewhere.c_str());
  a.p->closeStdin();
  a.waitExit(5s);
}

TEST_CASE("an agent whose controller is gone cleans up at once", "[agent]") {
  RawAgent a;
  const pid_t pid = a.startSleeper(60000);
  agent::MakeDir d{"r"};
  a.send(d, 3);
  const std::string dir = std::get<agent::Reply>(a.next<agent::Reply>().msg).path;
  REQUIRE(::access(dir.c_str(), F_OK) == 0);
  a.p->closeStdin();
  const std::string err = a.waitExit(5s);
  CHECK(a.p->exitCode() == agent::kServedLeaseLost);
  CHECK(err.find("the controller's pipe closed") != std::string::npos);
  CHECK_FALSE(alive(pid));
  CHECK(::access(dir.c_str(), F_OK) != 0);
}

TEST_CASE("an agent refuses a controller of another build naming both", "[agent]") {
  RawAgent a;
  a.hello(2000, "0.0.1+elsewhere");
  const auto h = std::get<agent::HelloReply>(a.next<agent::HelloReply>().msg);
  CHECK(h.build == agent::buildId());  // the controller learns the agent's build too
  const std::string err = a.waitExit(5s);
  CHECK(a.p->exitCode() == agent::kServedRefused);
  CHECK(err.find("build 0.0.1+elsewhere") != std::string::npos);
  CHECK(err.find("(build " + agent::buildId() + ")") != std::string::npos);
}

TEST_CASE("an agent answers a request before hello with an error and a bad frame by leaving",
          "[agent]") {
  RawAgent a;
  a.send(agent::ClockRead{}, 5);
  const auto r = std::get<agent::Reply>(a.next<agent::Reply>().msg);
  CHECK(r.code == Code::kInvalidUsage);
  CHECK(r.why == "'clock' before hello: say hello first");
  a.send("{\"t\":\"spawn\",\"id\":6}\n");
  const auto bad = std::get<agent::Reply>(a.next<agent::Reply>().msg);
  CHECK(bad.code == Code::kInvalidArgument);
  CHECK(bad.why == "agent frame: spawn: field 'role' is missing");
  const std::string err = a.waitExit(5s);
  CHECK(a.p->exitCode() == agent::kServedRefused);
  CHECK(err.find("refused a frame: agent frame: spawn: field 'role' is missing") !=
        std::string::npos);
}

TEST_CASE("an agent whose clock runs 2 s ahead has its times placed on the controller's clock",
          "[agent]") {
  // A time namespace shifts the agent's CLOCK_MONOTONIC (steady_clock) by +2 s and nothing else
  // (libfaketime cannot: it fakes the monotonic clock as the wall clock; tests/hosts/README.md).
  if (::geteuid() != 0 || chaos::whichProgram("unshare").empty() ||
      !chaos::runProgram({"unshare", "--time", "--monotonic", "2", "/bin/true"}).ok()) {
    std::fprintf(stderr,
                 "SKIPPED: needs root and unshare --time (a kernel with time namespaces)\n");
    std::fflush(stderr);
    std::_Exit(77);
  }
  agent::LaunchSpec spec = localSpec();
  spec.argv = {
      chaos::whichProgram("unshare"), "--time", "--monotonic", "2", MW_MWCHAOS, "agent", "--stdio"};
  auto c = agent::Connection::start(spec, 10s);
  REQUIRE(c.ok());
  const agent::ClockOffset& o = (*c)->clock();
  INFO("offset " << o.offset_ns << " ns, uncertainty " << o.uncertainty_ns << " ns");
  CHECK(std::llabs(o.offset_ns - 2'000'000'000) <= o.uncertainty_ns);
  CHECK(o.uncertainty_ns < 5'000'000);
  CHECK_FALSE((*c)->sameClock());  // one kernel, but not one clock
  // A role's exit, stamped by the agent on its own clock, lands on ours where we saw it.
  agent::Spawn s;
  s.role = "r";
  s.argv = {"/bin/sleep", "0.2"};
  auto p = (*c)->spawn(s);
  REQUIRE(p.ok());
  int64_t seen = 0;
  REQUIRE(pumpUntil(**c, [&] {
    if ((*p)->poll() && seen == 0) {
      seen = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
                 .count();
    }
    return seen != 0;
  }));
  // Seen after it happened, by at most the pump's period and a pipe's delay (generous under load).
  CHECK((*p)->exitNs() <= seen + o.uncertainty_ns);
  CHECK(seen - (*p)->exitNs() < 500'000'000);
}

TEST_CASE("an agent whose controller stops reading still ends at its lease", "[agent]") {
  // The role writes without end; the controller never reads again and never writes: the agent's
  // writes wait, and its lease must end there too.
  RawAgent a;
  a.hello(500);
  a.next<agent::HelloReply>();
  agent::Spawn s;
  s.role = "chatty";
  s.argv = {"/usr/bin/yes", "a line the controller never reads"};
  a.send(s, 2);
  const auto pid = static_cast<pid_t>(std::get<agent::Reply>(a.next<agent::Reply>().msg).pid);
  REQUIRE(pid > 0);
  const std::string err = a.waitExit(10s);
  CHECK(a.p->exitCode() == agent::kServedLeaseLost);
  CHECK(err.find("lease expired while waiting to write") != std::string::npos);
  CHECK_FALSE(alive(pid));
}
