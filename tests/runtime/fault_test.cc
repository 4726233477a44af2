// Faults with real processes: SIGKILL and SIGSTOP of members, detection time, confinement.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/hosted_world.h"
#include "support/local_worlds.h"
#include "support/util.h"

using namespace std::chrono_literals;
using mw::test::Child;
using mw::test::scaled;

namespace {

using namespace mw::test;

long msBetween(mw::Clock::time_point a, mw::Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

// Receives from rank 1 of `world` in a loop, counting messages, until stopped or broken.
class Receiver {
 public:
  Receiver(mw::Communicator& c, std::string world) : buf_(65536) {
    thread_ = std::jthread([this, &c, world](std::stop_token st) {
      mw::Tensor t{buf_.data(), mw::DType::kUInt8, buf_.size(), mw::Device::cpu()};
      while (!st.stop_requested()) {
        if (!c.recv(world, t, 1).ok()) {
          failed_ = true;
          return;
        }
        ++count_;
      }
    });
  }
  long count() const { return count_.load(); }
  bool failed() const { return failed_.load(); }

 private:
  std::vector<char> buf_;
  std::atomic<long> count_{0};
  std::atomic<bool> failed_{false};
  std::jthread thread_;
};

}  // namespace

TEST_CASE("SIGKILL of a member breaks only its world, with an operation pending",
          "[runtime][fault]") {
  mw::WorldManager m;
  mw::Communicator c(m);
  auto sub = m.subscribe();
  auto a = hostWorld(m, "a", 2);
  auto b = hostWorld(m, "b", 2);
  auto x = worker({"--join", joinArg("a", 1, 2, a.port)});
  auto y = worker({"--join", joinArg("b", 1, 2, b.port), "--send", "b:0:65536"});
  REQUIRE(a.join.wait(mw::deadlineIn(20s)).ok());
  REQUIRE(b.join.wait(mw::deadlineIn(20s)).ok());
  REQUIRE(x->waitFor("ready", 20s));
  Receiver rx(c, "b");
  std::vector<float> buf(16);
  auto pending = c.irecv("a", mw::Tensor::cpu(buf.data(), buf.size()), 1);
  std::this_thread::sleep_for(200ms);
  REQUIRE_FALSE(pending.test());

  auto t0 = mw::Clock::now();
  x->signal(SIGKILL);
  auto e = brokenEvent(*sub, "a", 5s);
  REQUIRE(e);
  long ms = msBetween(t0, e->at);
  INFO("detected after " << ms << " ms, cause " << mw::causeName(e->broken->cause) << ": "
                         << e->broken->detail);
  CHECK(ms <= scaled(100).count());
  mw::Status s = pending.wait(mw::deadlineIn(1s));
  CHECK(s.code() == mw::Code::kWorldBroken);
  REQUIRE(s.broken());
  CHECK(s.broken()->world == "a");

  long before = rx.count();
  std::this_thread::sleep_for(300ms);
  CHECK(rx.count() > before);
  CHECK_FALSE(rx.failed());
  CHECK(m.world("b")->state == mw::WorldState::kHealthy);
  CHECK(m.world("a")->state == mw::WorldState::kBroken);
  CHECK_FALSE(brokenEvent(*sub, "b", 100ms));
  y->signal(SIGKILL);
}

TEST_CASE("SIGKILL of an idle member breaks its world at every survivor", "[runtime][fault]") {
  mw::WorldManager m;
  auto sub = m.subscribe();
  auto a = hostWorld(m, "a3", 3);
  auto x = worker({"--join", joinArg("a3", 1, 3, a.port)});
  auto z = worker({"--join", joinArg("a3", 2, 3, a.port)});
  REQUIRE(a.join.wait(mw::deadlineIn(20s)).ok());
  REQUIRE(x->waitFor("ready", 20s));
  REQUIRE(z->waitFor("ready", 20s));
  std::this_thread::sleep_for(100ms);

  auto t0 = mw::Clock::now();
  x->signal(SIGKILL);
  auto e = brokenEvent(*sub, "a3", 5s);
  REQUIRE(e);
  CHECK(msBetween(t0, e->at) <= scaled(100).count());
  CHECK(e->broken->cause == mw::Cause::kPeerDied);
  CHECK(e->broken->peer_rank == 1);
  // The other survivor reports its own detection time on the shared monotonic clock.
  auto line = z->waitFor("broken a3", 5s);
  REQUIRE(line);
  long long t_ns = std::stoll(line->substr(line->rfind(' ') + 1));
  long z_ms = (t_ns - t0.time_since_epoch().count()) / 1000000;
  INFO(*line);
  CHECK(z_ms <= scaled(100).count());
}

TEST_CASE("SIGKILL of the member hosting the store breaks the world at the others",
          "[runtime][fault]") {
  mw::WorldManager m;
  auto sub = m.subscribe();
  auto keep = hostWorld(m, "keep", 2);
  uint16_t port = mw::test::freePort();
  auto x = worker({"--join", joinArg("c", 0, 2, port)});
  auto y = worker({"--join", joinArg("keep", 1, 2, keep.port)});
  REQUIRE(m.initWorld(options("c", 1, 2, port), mw::deadlineIn(20s)).ok());
  REQUIRE(keep.join.wait(mw::deadlineIn(20s)).ok());
  auto t0 = mw::Clock::now();
  x->signal(SIGKILL);
  auto e = brokenEvent(*sub, "c", 5s);
  REQUIRE(e);
  CHECK(msBetween(t0, e->at) <= scaled(100).count());
  CHECK(e->broken->peer_rank == 0);
  CHECK(m.world("keep")->state == mw::WorldState::kHealthy);
}

TEST_CASE("SIGSTOP of a member breaks its world after the heartbeat timeout", "[runtime][fault]") {
  const long hb = 500;
  mw::WorldManager m;
  mw::Communicator c(m);
  auto sub = m.subscribe();
  auto a = hostWorld(m, "s", 2, std::chrono::milliseconds(hb));
  auto b = hostWorld(m, "t", 2);
  auto x = worker({"--join", joinArg("s", 1, 2, a.port, hb)});
  auto y = worker({"--join", joinArg("t", 1, 2, b.port), "--send", "t:0:65536"});
  REQUIRE(a.join.wait(mw::deadlineIn(20s)).ok());
  REQUIRE(b.join.wait(mw::deadlineIn(20s)).ok());
  REQUIRE(x->waitFor("ready", 20s));
  Receiver rx(c, "t");
  std::this_thread::sleep_for(200ms);

  auto t0 = mw::Clock::now();
  x->signal(SIGSTOP);
  auto e = brokenEvent(*sub, "s", 5s);
  REQUIRE(e);
  long ms = msBetween(t0, e->at);
  INFO("detected after " << ms << " ms: " << e->broken->detail);
  CHECK(ms >= hb * 9 / 10);
  CHECK(ms <= hb + scaled(250).count());
  CHECK(e->broken->cause == mw::Cause::kPeerSilent);

  // Resuming the member revives nothing: it sees its own world broken, ours stays broken.
  x->signal(SIGCONT);
  auto line = x->waitFor("broken s", 5s);
  CHECK(line);
  std::this_thread::sleep_for(200ms);
  CHECK(m.world("s")->state == mw::WorldState::kBroken);
  CHECK(m.world("t")->state == mw::WorldState::kHealthy);
  CHECK_FALSE(rx.failed());
  CHECK_FALSE(brokenEvent(*sub, "t", 50ms));

  // The name can be used again at once, with a replacement member.
  REQUIRE(m.removeWorld("s").ok());
  auto again = hostWorld(m, "s", 2, std::chrono::milliseconds(hb));
  auto x2 = worker({"--join", joinArg("s", 1, 2, again.port, hb)});
  REQUIRE(again.join.wait(mw::deadlineIn(20s)).ok());
  CHECK(m.world("s")->generation == 2);
  CHECK(m.world("s")->state == mw::WorldState::kHealthy);
}

TEST_CASE("SIGSTOP of the store host breaks the world at the others", "[runtime][fault]") {
  const long hb = 300;
  mw::WorldManager m;
  auto sub = m.subscribe();
  uint16_t port = mw::test::freePort();
  auto x = worker({"--join", joinArg("h", 0, 2, port, hb)});
  REQUIRE(m.initWorld(options("h", 1, 2, port, std::chrono::milliseconds(hb)), mw::deadlineIn(20s))
              .ok());
  std::this_thread::sleep_for(100ms);
  auto t0 = mw::Clock::now();
  x->signal(SIGSTOP);
  auto e = brokenEvent(*sub, "h", 5s);
  REQUIRE(e);
  long ms = msBetween(t0, e->at);
  CHECK(ms >= hb * 9 / 10);
  CHECK(ms <= hb + scaled(250).count());
  x->signal(SIGCONT);
}

TEST_CASE("a pending all_reduce fails at once when its world breaks", "[runtime][fault]") {
  // float32 takes Gloo's own ring; int8-sized types take ours: both must be cut short.
  for (mw::DType dtype : {mw::DType::kFloat32, mw::DType::kUInt8}) {
    CAPTURE(mw::dtypeName(dtype));
    mw::test::LocalWorld w(std::string("ar-") + mw::dtypeName(dtype), 2);
    REQUIRE(w.status().ok());
    auto sub = w.manager(0).subscribe();
    std::vector<char> buf(1 << 20);
    mw::Tensor t{buf.data(), dtype, buf.size() / mw::dtypeSize(dtype), mw::Device::cpu()};
    auto pending = w.comm(0).allReduce(w.name(), t);  // rank 1 never joins the call
    std::this_thread::sleep_for(100ms);
    REQUIRE_FALSE(pending.test());
    auto t0 = mw::Clock::now();
    REQUIRE(w.manager(1).removeWorld(w.name()).ok());
    mw::Status s = pending.wait(mw::deadlineIn(5s));
    CHECK(s.code() == mw::Code::kWorldBroken);
    CHECK(msBetween(t0, mw::Clock::now()) <= scaled(100).count());
  }
}

TEST_CASE("a process stopped as a whole blames no peer when it resumes", "[runtime][starvation]") {
  // Every member of the world and its store live in this process, which is stopped for 1 s,
  // three heartbeat timeouts: nobody was silent but the judges themselves, who measure their own
  // lateness and discount it (base/lateness.h). Before they did, the world broke on resume with
  // "rank N silent for ~1000 ms".
  LocalWorld w("whole_stop", 3, 300ms);
  REQUIRE(w.status().ok());
  const auto t0 = mw::Clock::now();
  pid_t helper = ::fork();
  REQUIRE(helper >= 0);
  if (helper == 0) {  // only async-signal-safe calls in the child of a threaded process
    timespec ts{1, 0};
    ::nanosleep(&ts, nullptr);
    ::kill(::getppid(), SIGCONT);
    ::_exit(0);
  }
  ::raise(SIGSTOP);
  int status = 0;
  ::waitpid(helper, &status, 0);
  CHECK(mw::Clock::now() - t0 >= 900ms);
  std::this_thread::sleep_for(900ms);  // three timeouts of running on schedule after the stop
  for (int r = 0; r < 3; ++r) {
    auto info = w.manager(r).world("whole_stop");
    REQUIRE(info.ok());
    INFO("rank " << r << ": " << (info->broken ? info->broken->detail : std::string("healthy")));
    CHECK(info->state == mw::WorldState::kHealthy);
  }
  std::vector<float> x(3, 1.0f);
  std::vector<mw::Status> got(3);
  w.parallel([&](int r) {
    got[r] = w.comm(r)
                 .allReduce("whole_stop", mw::Tensor::cpu(&x[r], 1))
                 .wait(mw::deadlineIn(scaled(10000)));
  });
  for (auto& s : got) CHECK(s.ok());
}

TEST_CASE("a member resumed after its world broke leaves that world's calls at once",
          "[runtime][fault]") {
  // The worker all_reduces (Gloo's own ring, float32) in step with us; it is stopped, we break the
  // world by its silence, and it is resumed: it learns of the break from its link and every call
  // of the world must return then, not stay in Gloo's waits.
  const long hb = 300;
  mw::WorldManager m;
  mw::Communicator c(m);
  auto sub = m.subscribe();
  auto a = hostWorld(m, "resumed", 2, std::chrono::milliseconds(hb));
  auto x =
      worker({"--join", joinArg("resumed", 1, 2, a.port, hb), "--allreduce", "resumed:262144"});
  REQUIRE(a.join.wait(mw::deadlineIn(20s)).ok());
  REQUIRE(x->waitFor("ready", 20s));
  // A call that succeeds must have the whole sum, on both sides: an abort during the last waits of
  // Gloo's ring once let the call report success with the output half written.
  std::atomic<long> wrong_sums{0};
  std::thread ours([&] {
    std::vector<float> v(262144);
    for (;;) {
      std::fill(v.begin(), v.end(), 1.0f);
      if (!c.allReduce("resumed", mw::Tensor::cpu(v.data(), v.size())).wait().ok()) break;
      wrong_sums += std::count_if(v.begin(), v.end(), [](float f) { return f != 2.0f; });
    }
  });
  std::this_thread::sleep_for(300ms);
  x->signal(SIGSTOP);
  auto e = brokenEvent(*sub, "resumed", 5s);
  ours.join();
  REQUIRE(e);
  std::this_thread::sleep_for(100ms);
  x->signal(SIGCONT);
  long long broke_ns = -1, ended_ns = -1;
  std::string ended;
  for (auto until = mw::deadlineIn(30s);
       (broke_ns < 0 || ended_ns < 0) && mw::Clock::now() < until;) {
    auto line = x->readLine(1000ms);
    if (!line) continue;
    if (line->rfind("broken resumed", 0) == 0)
      broke_ns = std::stoll(line->substr(line->rfind(' ')));
    if (line->rfind("traffic resumed", 0) == 0) {
      ended = *line;
      ended_ns = std::stoll(line->substr(line->rfind(' ')));
    }
  }
  REQUIRE(broke_ns > 0);
  REQUIRE(ended_ns > 0);
  const long late_ms = static_cast<long>((ended_ns - broke_ns) / 1000000);
  INFO(ended << "; the loop ended " << late_ms << " ms after the member saw the break");
  CHECK(wrong_sums == 0);
  CHECK(ended.find("world_broken") != std::string::npos);  // not wrong_result
  CHECK(late_ms < scaled(1000).count());  // a hang guard: it took ~10 s in half the runs
}

TEST_CASE("removing a world cuts none of the process's other connections, even those on its ports",
          "[runtime][fault][ports]") {
  // A world's removal (and abort) shuts down its Gloo pairs' sockets, found by address. The
  // kernel lends the local port of a connection it chose to the process's other connections to
  // other destinations, so another world's store client or pair can share it; matching on the
  // local address alone shut those down too (the other world's join failed, or it broke). The
  // ctest entry runtime.shared_ports runs this case where the kernel has 2048 ports to lend,
  // which makes such sharing happen about 25 times in its 200 cycles; before the fix, the
  // world `stay` broke in 2 of 2 runs there, at cycles 8 and 124
  // (tests/runtime/shared_ports_test.sh).
  const char* cycles_env = std::getenv("MW_TEST_PORT_CYCLES");  // 200 there, where it matters
  const int cycles = cycles_env != nullptr ? std::atoi(cycles_env) : 20;
  LocalWorld stay("stay", 4);
  REQUIRE(stay.status().ok());
  for (int cycle = 0; cycle < cycles; ++cycle) {
    {
      LocalWorld gone("gone", 4);
      INFO("cycle " << cycle << ": " << gone.status().toString());
      REQUIRE(gone.status().ok());
      gone.parallel([&](int r) { gone.manager(r).removeWorld("gone").ignore(); });
    }
    std::vector<mw::Status> done(4);
    std::vector<std::vector<float>> data(4, std::vector<float>(64, 1.0f));
    stay.parallel([&](int r) {
      done[static_cast<size_t>(r)] =
          stay.comm(r)
              .allReduce("stay", mw::Tensor::cpu(data[static_cast<size_t>(r)].data(), 64))
              .wait();
    });
    for (int r = 0; r < 4; ++r) {
      INFO("cycle " << cycle << " rank " << r << ": " << done[static_cast<size_t>(r)].toString());
      REQUIRE(done[static_cast<size_t>(r)].ok());
      REQUIRE(data[static_cast<size_t>(r)][63] == 4.0f);
      REQUIRE(stay.manager(r).world("stay")->state == mw::WorldState::kHealthy);
    }
  }
}
