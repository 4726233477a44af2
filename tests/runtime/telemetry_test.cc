// The telemetry channel (worlds/telemetry.h): a process the chaos harness starts reports its worlds
// by itself, in the worker line protocol, when MW_TELEMETRY_FD names a descriptor.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"
#include "multiworld/telemetry_lines.h"
#include "support/util.h"

using namespace std::chrono_literals;
using mw::test::scaled;

namespace {

mw::WorldOptions oneRank(const std::string& name) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = 0;
  o.size = 1;
  return o;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

// Sets the channel's variables for the scope (a pipe's write end), and reads what was written.
struct Channel {
  int fds[2] = {-1, -1};
  explicit Channel(const std::string& worlds) {
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    ::setenv("MW_TELEMETRY_FD", std::to_string(fds[1]).c_str(), 1);
    ::setenv("MW_TELEMETRY_WORLDS", worlds.c_str(), 1);
  }
  ~Channel() {
    ::unsetenv("MW_TELEMETRY_FD");
    ::unsetenv("MW_TELEMETRY_WORLDS");
    if (fds[0] >= 0) ::close(fds[0]);
    if (fds[1] >= 0) ::close(fds[1]);
  }
  // Everything written so far, as lines (the writers are gone: the write end is closed here).
  std::vector<std::string> lines() {
    ::close(fds[1]);
    fds[1] = -1;
    std::string all;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) all.append(buf, n);
    std::vector<std::string> out;
    std::istringstream in(all);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
};

// Whether a thread named mw-telemetry runs, waiting up to `within` for one that is starting (a
// thread names itself once it runs).
bool hasTelemetryThread(std::chrono::milliseconds within = 0ms) {
  const auto until = mw::Clock::now() + within;
  for (;;) {
    auto names = mw::test::threadNames();
    if (std::find(names.begin(), names.end(), "mw-telemetry") != names.end()) return true;
    if (mw::Clock::now() >= until) return false;
    std::this_thread::sleep_for(5ms);
  }
}

}  // namespace

TEST_CASE("without MW_TELEMETRY_FD a manager starts no telemetry", "[runtime][telemetry]") {
  ::unsetenv("MW_TELEMETRY_FD");
  mw::WorldManager m;
  REQUIRE(m.initWorld(oneRank("quiet"), mw::deadlineIn(scaled(10000))).ok());
  CHECK_FALSE(hasTelemetryThread());
}

TEST_CASE("a manager reports ready, its events and each window's traffic to the harness",
          "[runtime][telemetry]") {
  Channel ch("t1,t2");
  constexpr int kOps = 10;
  const auto t_start = mw::Clock::now();
  {
    mw::WorldManager m;
    CHECK(hasTelemetryThread(scaled(2000)));
    mw::Communicator c(m);
    REQUIRE(m.initWorld(oneRank("t1"), mw::deadlineIn(scaled(10000))).ok());
    REQUIRE(m.initWorld(oneRank("t2"), mw::deadlineIn(scaled(10000))).ok());
    std::vector<float> data(256, 1.0f);
    for (int i = 0; i < kOps; ++i) {
      REQUIRE(c.allReduce("t1", mw::Tensor::cpu(data.data(), data.size())).wait().ok());
    }
    std::vector<float> odd(3);  // refused: never counted
    CHECK_FALSE(c.gather("t1", mw::Tensor::cpu(odd.data(), 3), {}, 5).wait().ok());
    std::this_thread::sleep_for(250ms);  // two windows at least
    REQUIRE(m.removeWorld("t2").ok());
  }
  const auto lines = ch.lines();
  int ready = 0, created = 0, removed = 0, windows_t1 = 0, windows_t2 = 0;
  long long bytes = 0, ops = 0, lat_max = 0, last_t = 0;
  for (const auto& l : lines) {
    INFO(l);
    auto w = words(l);
    REQUIRE(w.size() >= 2);
    const long long t = std::stoll(w[1]);
    CHECK(t >=
          std::chrono::duration_cast<std::chrono::nanoseconds>(t_start.time_since_epoch()).count() -
              1000000000LL);
    if (w[0] == "ready") {
      ++ready;
      CHECK(created == 2);  // ready once both worlds of MW_TELEMETRY_WORLDS are up
    } else if (w[0] == "event") {
      REQUIRE(w.size() >= 7);
      created += w[3] == "created";
      removed += w[3] == "removed";
      if (w[3] == "created") {
        // The options the world was joined with, for the harness to check against its scenario.
        CHECK(l.substr(l.find(" - -1 ") + 6) ==
              "backend=gloo device=cpu heartbeat_ms=1000 op_timeout_ms=60000");
      }
      CHECK(w[4] == "1");  // generation
      CHECK(w[5] == "-");
    } else if (w[0] == "metrics") {
      REQUIRE(w.size() == 8);
      CHECK(t >= last_t);  // windows in order
      last_t = t;
      if (w[2] == "t1") {
        ++windows_t1;
        bytes += std::stoll(w[4]);
        ops += std::stoll(w[5]);
        lat_max = std::max(lat_max, std::stoll(w[7]));
      } else {
        CHECK(w[2] == "t2");
        ++windows_t2;
        CHECK(w[4] == "0");  // no traffic on t2
      }
    } else {
      FAIL("unexpected line kind " << w[0]);
    }
  }
  CHECK(ready == 1);
  CHECK(created == 2);
  CHECK(removed == 2);  // t2 by removeWorld, t1 by the manager's end
  CHECK(windows_t1 >= 2);
  CHECK(windows_t2 >= 2);
  CHECK(bytes == kOps * 256 * 4);
  CHECK(ops == kOps);
  CHECK(lat_max > 0);
}

TEST_CASE("a harness that went away costs the program nothing", "[runtime][telemetry]") {
  Channel ch("gone");
  ::close(ch.fds[0]);  // the reading end is gone: every write fails with EPIPE
  ch.fds[0] = -1;
  mw::WorldManager m;
  mw::Communicator c(m);
  REQUIRE(m.initWorld(oneRank("gone"), mw::deadlineIn(scaled(10000))).ok());
  std::vector<float> data(16, 2.0f);
  for (int i = 0; i < 20; ++i) {
    REQUIRE(c.allReduce("gone", mw::Tensor::cpu(data.data(), data.size())).wait().ok());
    std::this_thread::sleep_for(10ms);
  }
  CHECK(m.world("gone")->state == mw::WorldState::kHealthy);
}

TEST_CASE("a value that is not a descriptor is refused with one message, and the manager works",
          "[runtime][telemetry]") {
  for (const char* bad : {"abc", "-1", "987654", "3x"}) {
    ::setenv("MW_TELEMETRY_FD", bad, 1);
    mw::WorldManager m;
    CHECK_FALSE(hasTelemetryThread());
    REQUIRE(m.initWorld(oneRank("plain"), mw::deadlineIn(scaled(10000))).ok());
  }
  ::unsetenv("MW_TELEMETRY_FD");
}

TEST_CASE("an application's own metric reaches the harness as each window's sum",
          "[runtime][telemetry]") {
  ::unsetenv("MW_TELEMETRY_FD");
  CHECK(mw::reportMetric("requests", 5).ok());  // no channel: accepted, kept nowhere
  Channel ch("");
  {
    mw::WorldManager first, second;  // one of them reports the application's metrics
    for (int i = 0; i < 30; ++i) {
      REQUIRE(mw::reportMetric("requests").ok());
      REQUIRE(mw::reportMetric("tokens.out", 2.5).ok());
      std::this_thread::sleep_for(10ms);
    }
  }
  double requests = 0, tokens = 0;
  int windows = 0;
  for (const auto& l : ch.lines()) {
    auto w = words(l);
    if (w[0] != "app") continue;
    INFO(l);
    REQUIRE(w.size() == 4);
    ++windows;
    if (w[2] == "requests") requests += std::stod(w[3]);
    if (w[2] == "tokens.out") tokens += std::stod(w[3]);
  }
  CHECK(requests == 30);  // counted once, though two managers report
  CHECK(tokens == 75);
  CHECK(windows >= 2);
}

TEST_CASE("an application's own checks reach the harness counted, with the first failure's detail",
          "[runtime][telemetry]") {
  ::unsetenv("MW_TELEMETRY_FD");
  CHECK(mw::reportCheck("answer", false, "no channel").ok());  // accepted, kept nowhere
  Channel ch("");
  std::atomic<int> failures{0}, refused{0};
  {
    mw::WorldManager m;
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 40; ++i) {
          const bool ok = (i % 10) != 3 || t != 1;  // thread 1 fails 4 times
          if (!ok) ++failures;
          // (Catch2's assertions are not for other threads: a refusal is counted.)
          if (!mw::reportCheck("answer.doubled", ok,
                               "got " + std::to_string(i) + "\nwanted " + std::to_string(2 * i))
                   .ok()) {
            ++refused;
          }
          std::this_thread::sleep_for(2ms);
        }
      });
    }
    for (auto& th : threads) th.join();
    // A detail past 200 bytes is cut there.
    REQUIRE(mw::reportCheck("long", false, std::string(500, 'x')).ok());
  }
  long long passed = 0, failed = 0, long_failed = 0;
  std::vector<std::string> details;
  for (const auto& l : ch.lines()) {
    auto w = words(l);
    if (w[0] != "check") continue;
    INFO(l);
    auto parsed = mw::telemetry_lines::parse(l);
    REQUIRE(parsed.ok());
    const auto& c = std::get<mw::telemetry_lines::Check>(*parsed);
    if (c.name == "long") {
      long_failed += c.failed;
      CHECK(c.detail == std::string(200, 'x'));
      continue;
    }
    REQUIRE(c.name == "answer.doubled");
    passed += c.passed;
    failed += c.failed;
    if (c.failed > 0) details.push_back(c.detail);
    if (c.failed == 0) CHECK(c.detail.empty());
  }
  CHECK(refused.load() == 0);
  CHECK(failures.load() == 4);
  CHECK(failed == 4);
  CHECK(passed == 3 * 40 - 4);
  CHECK(long_failed == 1);
  REQUIRE_FALSE(details.empty());
  for (const auto& d : details) {
    CHECK_THAT(d,
               Catch::Matches("got 3 wanted 6|got 13 wanted 26|got 23 wanted 46|got 33 wanted 66"));
  }
  CHECK(mw::reportCheck("two words", true).code() == mw::Code::kInvalidArgument);
  CHECK(mw::reportCheck("", false).message().find("reportCheck") != std::string::npos);
}

TEST_CASE("reportMetric refuses names and amounts the protocol cannot carry",
          "[runtime][telemetry]") {
  for (const char* bad : {"", "two words", "tab\there", "semi;colon", "ünï"}) {
    mw::Status s = mw::reportMetric(bad, 1);
    INFO(bad << ": " << s.toString());
    CHECK(s.code() == mw::Code::kInvalidArgument);
    CHECK(s.message().find("reportMetric") != std::string::npos);
  }
  CHECK(mw::reportMetric(std::string(65, 'x'), 1).code() == mw::Code::kInvalidArgument);
  CHECK(mw::reportMetric(std::string(64, 'x'), 1).ok());
  CHECK(mw::reportMetric("nan", std::nan("")).message().find("not finite") != std::string::npos);
  CHECK(mw::reportMetric("inf", 1.0 / 0.0).code() == mw::Code::kInvalidArgument);
}

TEST_CASE("metrics and counters from many threads add up exactly while windows are taken",
          "[runtime][telemetry]") {
  Channel ch("busy");
  constexpr int kThreads = 4, kOps = 300, kReports = 2000;
  {
    mw::WorldManager m;
    mw::Communicator c(m);
    REQUIRE(m.initWorld(oneRank("busy"), mw::deadlineIn(scaled(10000))).ok());
    std::atomic<int> failures{0};  // Catch2 assertions are for the test's own thread
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        std::vector<int32_t> v(64, 1);  // 256 bytes
        for (int i = 0; i < kOps; ++i) {
          // A world of one member: the threads' collectives may interleave in any order.
          if (!c.allReduce("busy", mw::Tensor::cpu(v.data(), v.size())).wait().ok()) ++failures;
        }
        for (int i = 0; i < kReports; ++i) {
          if (!mw::reportMetric("hits").ok()) ++failures;
        }
      });
    }
    for (auto& t : threads) t.join();
    REQUIRE(failures == 0);
    std::this_thread::sleep_for(150ms);  // at least one window closes after the work
  }
  long long bytes = 0, ops = 0;
  double hits = 0;
  for (const auto& l : ch.lines()) {
    auto w = words(l);
    if (w[0] == "metrics" && w[2] == "busy") {
      bytes += std::stoll(w[4]);
      ops += std::stoll(w[5]);
    } else if (w[0] == "app" && w[2] == "hits") {
      hits += std::stod(w[3]);
    }
  }
  CHECK(ops == kThreads * kOps);
  CHECK(bytes == kThreads * kOps * 256LL);
  CHECK(hits == kThreads * kReports);
}

TEST_CASE("a telemetry thread held up writes each missed window with its own counts, none skipped",
          "[runtime][telemetry]") {
  // The harness's end of the pipe is not read for a while (a harness busy elsewhere, or a loaded
  // machine): the telemetry thread blocks in its first write while the program runs on. Once the
  // pipe is read again, every window since must come, each with the operations that completed in
  // it: a thread that summed "everything since the last line" would write one window holding them
  // all, and one that skipped ahead would leave windows out.
  Channel ch("late");
  const int cap = ::fcntl(ch.fds[1], F_SETPIPE_SZ, 4096);
  REQUIRE(cap > 0);
  const std::string filler(static_cast<size_t>(cap) - 1, '#');
  REQUIRE(::write(ch.fds[1], (filler + "\n").data(), static_cast<size_t>(cap)) == cap);  // full
  constexpr int kOps = 16;
  std::string all;
  std::jthread reader;  // outlives the manager: its end waits for the thread's writes
  {
    mw::WorldManager m;
    mw::Communicator c(m);
    REQUIRE(m.initWorld(oneRank("late"), mw::deadlineIn(scaled(10000))).ok());
    std::vector<float> data(64, 1.0f);
    for (int i = 0; i < kOps; ++i) {
      REQUIRE(c.allReduce("late", mw::Tensor::cpu(data.data(), data.size())).wait().ok());
      std::this_thread::sleep_for(50ms);  // completions >= 50 ms apart: at most 2 in a window
    }
    // Read again: the thread writes what it owes, and the manager's end waits for it.
    reader = std::jthread([&] {
      char buf[4096];
      for (ssize_t n; (n = ::read(ch.fds[0], buf, sizeof buf)) > 0;) all.append(buf, n);
    });
    m.removeWorld("late").ignore();
    std::this_thread::sleep_for(250ms);
  }                    // the manager's end joins the telemetry thread: everything is written
  ::close(ch.fds[1]);  // the reader sees the end
  ch.fds[1] = -1;
  reader.join();
  std::istringstream in(all);
  long long ops = 0, max_ops = 0, last_t = 0, windows = 0;
  for (std::string l; std::getline(in, l);) {
    const auto w = words(l);
    if (w.size() != 8 || w[0] != "metrics" || w[2] != "late") continue;
    INFO(l);
    const long long t = std::stoll(w[1]);
    if (last_t != 0) {
      // Consecutive windows, 100 ms apart, until the last (the part of a window until the end).
      CHECK(t > last_t);
      CHECK(t - last_t <= 100'000'000LL);
    }
    ++windows;
    last_t = t;
    ops += std::stoll(w[5]);
    max_ops = std::max(max_ops, std::stoll(w[5]));
  }
  CHECK(ops == kOps);
  CHECK(max_ops <= 2);
  CHECK(windows >= 8);  // 16 operations 50 ms apart: 800 ms at least
}
