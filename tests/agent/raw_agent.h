// Test helpers for the host agent's tests (agent_test.cc, agent_net_test.cc): a controller
// written by hand (RawAgent), a program's output in a network namespace, and the skip where
// simulated hosts cannot be made.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/client.h"
#include "chaos/netsim.h"
#include "chaos/process.h"
#include "model/agent_protocol.h"

namespace mw::agent_test {

using namespace std::chrono_literals;

// A controller written by hand: frames in, lines out.
struct RawAgent {
  std::unique_ptr<chaos::Process> p;
  std::string buf;

  explicit RawAgent(const std::string& netns = "") {
    chaos::SpawnOptions o;
    o.netns = netns;
    auto r = chaos::Process::spawn({MW_MWCHAOS, "agent", "--stdio"}, o);
    REQUIRE(r.ok());
    p = std::move(*r);
  }
  void send(const std::string& line) {
    REQUIRE(::write(p->stdinFd(), line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  }
  void send(agent::Message m, uint64_t id) { send(agent::encode(agent::Frame{id, std::move(m)})); }
  // Says hello (id 1) with `lease_ms` and the control-plane ports `exempt`.
  void hello(int lease_ms, const std::string& build = agent::buildId(),
             std::vector<agent::PortRange> exempt = {}) {
    agent::Hello h;
    h.build = build;
    h.lease_ms = lease_ms;
    h.exempt = std::move(exempt);
    send(h, 1);
  }
  // Says hello with `lease_ms` and starts role "r" sleeping; its pid.
  pid_t startSleeper(int lease_ms) {
    hello(lease_ms);
    next<agent::HelloReply>();
    agent::Spawn s;
    s.role = "r";
    s.argv = {"/bin/sleep", "100"};
    send(s, 2);
    const auto pid = static_cast<pid_t>(std::get<agent::Reply>(next<agent::Reply>().msg).pid);
    REQUIRE(pid > 0);
    return pid;
  }
  // The next frame of type T (others skipped), within 10 s.
  template <class T>
  agent::Frame next() {
    const auto until = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        auto f = agent::decode(std::string_view(buf).substr(0, nl));
        buf.erase(0, nl + 1);
        REQUIRE(f.ok());
        if (std::holds_alternative<T>(f->msg)) return *f;
      }
      REQUIRE(std::chrono::steady_clock::now() < until);
      p->readStdout(&buf);
      std::this_thread::sleep_for(1ms);
    }
  }
  // Waits for the agent to exit; its stderr.
  std::string waitExit(std::chrono::milliseconds limit) {
    const bool done = p->waitUntil(deadlineIn(limit));
    std::string err;
    p->readStderr(&err);
    REQUIRE(done);
    return err;
  }
};

// What `argv` writes on stdout, run in network namespace `netns`.
inline std::string outputOf(const std::vector<std::string>& argv, const std::string& netns) {
  auto p = chaos::Process::spawn(argv, netns);
  REQUIRE(p.ok());
  std::string out;
  while (!(*p)->poll()) {
    (*p)->readStdout(&out);
    std::this_thread::sleep_for(1ms);
  }
  (*p)->readStdout(&out);
  return out;
}

// Exits with ctest's skip code, saying why, where simulated hosts cannot be made (not root).
inline void requireSimNet() {
  if (chaos::SimNet::available().ok()) return;
  std::fprintf(stderr, "SKIPPED: %s\n", chaos::SimNet::available().message().c_str());
  std::fflush(stderr);
  std::_Exit(77);
}

}  // namespace mw::agent_test
