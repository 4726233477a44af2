// Failpoints (libfiu): an injected error takes the path a real one would and breaks exactly the
// targeted world. Built only when the runtime has failpoints (MW_WITH_FIU). Every test case runs
// in its own process (catch_discover_tests), so enabled points never leak between cases.
#include "base/failpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/child.h"
#include "support/hosted_world.h"
#include "support/local_worlds.h"
#include "support/util.h"

using namespace std::chrono_literals;
using namespace mw::test;

namespace {

mw::failpoints::Mode errnoOnce(int err) {
  mw::failpoints::Mode m;
  m.failnum = err;
  m.once = true;
  return m;
}

// Rank 0 sends `n` tensors of world `w` to rank 1; returns the first failure (or OK).
mw::Status exchange(LocalWorld& w, int n) {
  std::vector<float> a(1024, 1.0f), b(1024, 0.0f);
  mw::Status first;
  for (int i = 0; i < n && first.ok(); ++i) {
    auto s = w.comm(0).isend(w.name(), mw::Tensor::cpu(a.data(), a.size()), 1);
    auto r = w.comm(1).irecv(w.name(), mw::Tensor::cpu(b.data(), b.size()), 0);
    mw::Status ss = s.wait(mw::deadlineIn(scaled(5000)));
    mw::Status rs = r.wait(mw::deadlineIn(scaled(5000)));
    first = !ss.ok() ? ss : rs;
  }
  return first;
}

// Waits until every member of `w` sees it broken; returns rank 0's BrokenInfo.
mw::BrokenInfo waitBroken(LocalWorld& w, std::chrono::milliseconds limit) {
  auto until = mw::deadlineIn(limit);
  for (int i = 0; i < w.size(); ++i) {
    while (mw::Clock::now() < until &&
           w.manager(i).world(w.name())->state != mw::WorldState::kBroken)
      std::this_thread::sleep_for(1ms);
    REQUIRE(w.manager(i).world(w.name())->state == mw::WorldState::kBroken);
  }
  return *w.manager(0).world(w.name())->broken;
}

void requireHealthy(LocalWorld& w) {
  for (int i = 0; i < w.size(); ++i) {
    REQUIRE(w.manager(i).world(w.name())->state == mw::WorldState::kHealthy);
  }
  REQUIRE(exchange(w, 20).ok());
}

}  // namespace

TEST_CASE("failpoint calls reject bad arguments", "[failpoint]") {
  REQUIRE(mw::failpoints::compiledIn());
  mw::failpoints::Mode m;
  CHECK(mw::failpoints::enable("", m).code() == mw::Code::kInvalidArgument);
  m.failnum = 0;
  auto zero = mw::failpoints::enable("mw/gloo/send/x", m);
  CHECK(zero.code() == mw::Code::kInvalidArgument);
  CHECK(zero.message().find("failnum 0") != std::string::npos);
  m.failnum = EIO;
  for (double p : {0.0, -0.5, 1.5}) {
    m.probability = p;
    auto s = mw::failpoints::enable("mw/gloo/send/x", m);
    CHECK(s.code() == mw::Code::kInvalidArgument);
    CHECK(s.message().find("probability") != std::string::npos);
  }
  CHECK(mw::failpoints::disable("mw/never/enabled").code() == mw::Code::kNotFound);
  CHECK(mw::failpoints::openControl("").status().code() == mw::Code::kInvalidArgument);
}

TEST_CASE("an injected ECONNRESET on one world's send breaks that world only", "[failpoint]") {
  LocalWorld a("fp_a", 2), b("fp_b", 2);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  REQUIRE(mw::failpoints::enable("mw/gloo/send/fp_a", errnoOnce(ECONNRESET)).ok());
  mw::Status failed = exchange(a, 5);
  REQUIRE(failed.code() == mw::Code::kWorldBroken);
  auto info = waitBroken(a, scaled(2000));
  CHECK(info.cause == mw::Cause::kPeerDied);  // what a real reset means
  CHECK(info.detail.find("Connection reset by peer") != std::string::npos);
  CHECK(info.detail.find("injected by failpoint mw/gloo/send/fp_a") != std::string::npos);
  requireHealthy(b);
}

TEST_CASE("an injected EIO in one world's all_reduce is a backend error there only",
          "[failpoint]") {
  LocalWorld a("fp_ar", 3), b("fp_other", 3);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  REQUIRE(mw::failpoints::enable("mw/gloo/all_reduce/fp_ar", errnoOnce(EIO)).ok());
  std::vector<std::vector<float>> data(3, std::vector<float>(4096, 1.0f));
  std::vector<mw::Status> got(3);
  a.parallel([&](int r) {
    got[r] = a.comm(r)
                 .allReduce("fp_ar", mw::Tensor::cpu(data[r].data(), data[r].size()))
                 .wait(mw::deadlineIn(scaled(5000)));
  });
  for (auto& s : got) CHECK(s.code() == mw::Code::kWorldBroken);
  waitBroken(a, scaled(2000));
  // The member that drew the injection blames the backend; the others see their connections to it
  // cut, or learn of the break from the store, whichever comes first.
  int backend = 0;
  for (int r = 0; r < 3; ++r) {
    auto info = *a.manager(r).world("fp_ar")->broken;
    INFO(mw::causeName(info.cause) << ": " << info.detail);
    if (info.cause == mw::Cause::kBackendError) {
      ++backend;
      CHECK(info.detail.find("Input/output error (errno 5)") != std::string::npos);
      CHECK(info.detail.find("injected by failpoint mw/gloo/all_reduce/fp_ar") !=
            std::string::npos);
    } else {
      bool expected = info.cause == mw::Cause::kPeerDied || info.cause == mw::Cause::kRemoteBroken;
      CHECK(expected);
    }
  }
  CHECK(backend == 1);  // "once": one member drew it
  requireHealthy(b);
}

// Rank 0 of `w` sends one tensor of 4 floats per value in `sent` (all posted at once), then rank 1
// receives `received` of them; returns their first elements, in order. Every operation must
// succeed.
std::vector<float> deliver(LocalWorld& w, const std::vector<float>& sent, size_t received) {
  std::vector<std::vector<float>> out(sent.size()), in(received, std::vector<float>(4, -1.0f));
  std::vector<mw::Work> sends;
  for (size_t i = 0; i < sent.size(); ++i) {
    out[i].assign(4, sent[i]);
    sends.push_back(w.comm(0).isend(w.name(), mw::Tensor::cpu(out[i].data(), 4), 1));
  }
  std::vector<float> got;
  for (auto& t : in) {
    REQUIRE(w.comm(1).recv(w.name(), mw::Tensor::cpu(t.data(), 4), 0).ok());
    got.push_back(t[0]);
    CHECK(t[1] == t[0]);  // the tensor is one message's, whole
  }
  for (auto& s : sends) REQUIRE(s.wait(mw::deadlineIn(scaled(5000))).ok());
  return got;
}

TEST_CASE("a dropped send succeeds and the next one takes its place, in that world only",
          "[failpoint]") {
  LocalWorld a("fp_drop", 2), b("fp_drop_other", 2);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  CHECK(deliver(a, {10}, 1) == std::vector<float>{10});
  REQUIRE(mw::failpoints::enable("mw/gloo/drop/fp_drop", errnoOnce(1)).ok());
  // 11 is the one dropped ("once"): the receiver gets 12 where it would have got 11.
  CHECK(deliver(a, {11, 12, 13}, 2) == std::vector<float>{12, 13});
  CHECK(deliver(a, {14}, 1) == std::vector<float>{14});
  requireHealthy(a);
  REQUIRE(mw::failpoints::enable("mw/gloo/drop/fp_drop", mw::failpoints::Mode{}).ok());
  requireHealthy(b);  // always on in fp_drop: fp_drop_other's sends are untouched
  // (libfiu frees an enabled point's name only when it is disabled: LeakSanitizer watches.)
  REQUIRE(mw::failpoints::disable("mw/gloo/drop/fp_drop").ok());
}

TEST_CASE("a repeated send arrives twice, in that world only", "[failpoint]") {
  LocalWorld a("fp_repeat", 2), b("fp_repeat_other", 2);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  REQUIRE(mw::failpoints::enable("mw/gloo/repeat/fp_repeat", errnoOnce(1)).ok());
  CHECK(deliver(a, {20, 21}, 3) == std::vector<float>{20, 20, 21});
  CHECK(deliver(a, {22}, 1) == std::vector<float>{22});
  requireHealthy(a);
  REQUIRE(mw::failpoints::enable("mw/gloo/repeat/fp_repeat", mw::failpoints::Mode{}).ok());
  requireHealthy(b);
  REQUIRE(mw::failpoints::disable("mw/gloo/repeat/fp_repeat").ok());
}

TEST_CASE(
    "a corrupted receive succeeds with one bit of the chosen byte changed, in that world only",
    "[failpoint]") {
  LocalWorld a("fp_corrupt", 3), b("fp_corrupt_other", 3);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  mw::failpoints::Mode m;
  m.failnum = 6;  // byte 5 (from 0): the second float's second byte
  REQUIRE(mw::failpoints::enable("mw/gloo/corrupt/fp_corrupt", m).ok());
  for (LocalWorld* w : {&b, &a}) {
    std::vector<std::vector<float>> data(3, std::vector<float>(4, 1.0f));
    std::vector<mw::Status> st(3);
    w->parallel([&](int r) {
      st[r] = w->comm(r).allReduce(w->name(), mw::Tensor::cpu(data[r].data(), 4)).wait();
    });
    for (int r = 0; r < 3; ++r) {
      INFO(w->name() << " rank " << r);
      REQUIRE(st[r].ok());
      CHECK(data[r][0] == 3.0f);
      CHECK(data[r][2] == 3.0f);
      unsigned char want[4];
      const float three = 3.0f;
      std::memcpy(want, &three, 4);
      if (w == &a) want[1] ^= 0x01;
      CHECK(std::memcmp(&data[r][1], want, 4) == 0);
    }
  }
  REQUIRE(mw::failpoints::disable("mw/gloo/corrupt/fp_corrupt").ok());
  requireHealthy(a);
}

// This process hosts `name` and `other` as rank 0; a worker joins both as rank 1 with
// `failpoint` (POINT:FAILNUM) enabled. Returns this process's kBroken event for `name`.
struct WorkerFault {
  mw::WorldManager m;
  std::shared_ptr<mw::Subscription> sub = m.subscribe();
  std::unique_ptr<Child> child;
  mw::Clock::time_point enabled_at{};

  WorkerFault(const std::string& name, const std::string& other, long hb_ms,
              const std::string& failpoint) {
    auto a = hostWorld(m, name, 2, std::chrono::milliseconds(hb_ms));
    auto b = hostWorld(m, other, 2, std::chrono::milliseconds(hb_ms));
    child = worker({"--join", joinArg(name, 1, 2, a.port, hb_ms), "--join",
                    joinArg(other, 1, 2, b.port, hb_ms), "--failpoint", failpoint});
    REQUIRE(a.join.wait(mw::deadlineIn(20s)).ok());
    REQUIRE(b.join.wait(mw::deadlineIn(20s)).ok());
    auto enabled = child->waitFor("enabled", 20s);
    REQUIRE(enabled);
    // The worker's own clock reading (steady clock: the same across processes on Linux).
    long long ns = std::stoll(enabled->substr(enabled->rfind(' ') + 1));
    enabled_at = mw::Clock::time_point(mw::Clock::duration(ns));
    REQUIRE(child->waitFor("ready", 20s));
  }
};

TEST_CASE("an injected store-link timeout in one member breaks its world everywhere, no other",
          "[failpoint]") {
  WorkerFault f("fp_link", "fp_link_other", 500,
                "mw/store/link/fp_link:" + std::to_string(ETIMEDOUT));
  auto e = brokenEvent(*f.sub, "fp_link", scaled(2000));
  REQUIRE(e);
  // The member's link failed as a real one does: its connection closed, so the store announced
  // the loss at once, long before the heartbeat timeout.
  CHECK(e->broken->cause == mw::Cause::kPeerDied);
  CHECK(e->broken->peer_rank == 1);
  CHECK(e->at - f.enabled_at < scaled(400));
  auto line = f.child->waitFor("broken fp_link", scaled(2000));
  REQUIRE(line);
  CHECK(line->find("peer_died") != std::string::npos);
  CHECK_FALSE(brokenEvent(*f.sub, "fp_link_other", 300ms));
  CHECK(f.m.world("fp_link_other")->state == mw::WorldState::kHealthy);
}

TEST_CASE("a member whose heartbeats are dropped is silent: its world breaks after the timeout",
          "[failpoint]") {
  // Scaled: a slow sanitizer build must not starve a store past a short timeout by itself.
  const long hb = scaled(300).count();
  WorkerFault f("fp_hb", "fp_hb_other", hb, "mw/heartbeat/fp_hb:1");
  auto e = brokenEvent(*f.sub, "fp_hb", scaled(3000) + std::chrono::milliseconds(hb));
  REQUIRE(e);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(e->at - f.enabled_at);
  INFO(e->broken->detail << " after " << took.count() << " ms");
  CHECK(e->broken->cause == mw::Cause::kPeerSilent);
  CHECK(e->broken->peer_rank == 1);
  // Not before 0.9x the timeout of silence: the store says how long it heard nothing (the last
  // beat may have left well before the point was enabled when the machine is slow).
  const std::string& d = e->broken->detail;
  const size_t at = d.find("silent for ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stol(d.substr(at + 11)) >= hb * 9 / 10);
  CHECK(took.count() >= 0);
  CHECK(took < std::chrono::milliseconds(hb) + scaled(250));
  CHECK_FALSE(brokenEvent(*f.sub, "fp_hb_other", 300ms));
  CHECK(f.m.world("fp_hb_other")->state == mw::WorldState::kHealthy);
}

TEST_CASE("an injected store timeout fails that world's initialization only", "[failpoint]") {
  LocalWorld b("fp_init_other", 2);
  REQUIRE(b.status().ok());
  REQUIRE(mw::failpoints::enable("mw/store/set/fp_init", errnoOnce(ETIMEDOUT)).ok());
  mw::WorldManager m;
  mw::WorldOptions o;
  o.name = "fp_init";
  o.rank = 0;
  o.size = 1;
  mw::Status s = m.initWorld(o, mw::deadlineIn(scaled(5000)));
  INFO(s.toString());
  CHECK(s.code() == mw::Code::kTimeout);
  CHECK(s.message().find("injected by failpoint mw/store/set/fp_init") != std::string::npos);
  CHECK(m.world("fp_init").status().code() == mw::Code::kNotFound);
  // The name is free again and the point fired once: the next initialization succeeds.
  REQUIRE(m.initWorld(o, mw::deadlineIn(scaled(5000))).ok());
  requireHealthy(b);
}

TEST_CASE("sends failing with probability 0.1 break that world, no other", "[failpoint]") {
  REQUIRE(mw::failpoints::seed(42).ok());
  LocalWorld a("fp_rand", 2), b("fp_rand_other", 2);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  mw::failpoints::Mode m;
  m.failnum = ECONNRESET;
  m.probability = 0.1;
  REQUIRE(mw::failpoints::enable("mw/gloo/send/fp_rand", m).ok());
  // P(no failure in 300 sends) = 0.9^300, about 2e-14.
  CHECK(exchange(a, 300).code() == mw::Code::kWorldBroken);
  waitBroken(a, scaled(2000));
  requireHealthy(b);
}

namespace {

// Writes one command line to `wfd` and returns the reply line read from `rfd` (non-blocking)
// within 2 s: "0\n" is success, "" no reply in time.
std::string commandOn(int wfd, int rfd, const std::string& line) {
  REQUIRE(::write(wfd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  std::string reply;
  auto until = mw::deadlineIn(scaled(2000));
  while (reply.find('\n') == std::string::npos && mw::Clock::now() < until) {
    pollfd p{rfd, POLLIN, 0};
    ::poll(&p, 1, 10);
    char buf[64];
    ssize_t n = ::read(rfd, buf, sizeof(buf));
    if (n > 0) reply.append(buf, static_cast<size_t>(n));
  }
  return reply;
}

// One command line into libfiu's control fifo `in`, and its reply line ("0\n" is success), as the
// harness does it.
std::string fifoCommand(const std::string& in, const std::string& line) {
  const std::string out_path = in.substr(0, in.size() - 3) + ".out";
  int wfd = ::open(in.c_str(), O_WRONLY);
  REQUIRE(wfd >= 0);
  int rfd = ::open(out_path.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(rfd >= 0);
  std::string reply = commandOn(wfd, rfd, line);
  ::close(wfd);
  ::close(rfd);
  return reply;
}

}  // namespace

TEST_CASE("points are switched through libfiu's control fifo while the process runs",
          "[failpoint]") {
  char dir[] = "/tmp/mw-fp-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string prefix = std::string(dir) + "/ctl";
  auto in = mw::failpoints::openControl(prefix);
  REQUIRE(in.ok());
  CHECK(*in == prefix + "-" + std::to_string(::getpid()) + ".in");
  CHECK(mw::failpoints::openControl(prefix).status().code() == mw::Code::kInvalidUsage);
  LocalWorld a("fp_fifo", 2), b("fp_fifo_other", 2);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  std::string out_path = prefix + "-" + std::to_string(::getpid()) + ".out";
  auto command = [&](const std::string& line) { return fifoCommand(*in, line); };
  CHECK(command("enable name=mw/gloo/send/fp_fifo,failnum=104,onetime\n") == "0\n");
  CHECK(exchange(a, 5).code() == mw::Code::kWorldBroken);
  auto info = waitBroken(a, scaled(2000));
  CHECK(info.detail.find("mw/gloo/send/fp_fifo") != std::string::npos);
  CHECK(command("bogus command\n") == "-1\n");
  requireHealthy(b);
  ::unlink(in->c_str());
  ::unlink(out_path.c_str());
  ::rmdir(dir);
}

// Until a point is switched, a check is one atomic load: no libfiu lookup, no lock, nothing
// shared written (a cost on every operation of every world otherwise). The first switch, from
// any thread, is seen by the checks that follow it.
TEST_CASE("a check touches nothing shared until a point is switched, and sees the first switch",
          "[failpoint]") {
  const mw::detail::FailPoint p("mw/test/fast", "w");
  REQUIRE_FALSE(mw::detail::FailPointGate::everSwitched());  // a process of its own
  CHECK_FALSE(p.check());
  std::thread([] {
    REQUIRE(mw::failpoints::enable("mw/test/fast/w", errnoOnce(EIO)).ok());
  }).join();
  CHECK(mw::detail::FailPointGate::everSwitched());
  auto fired = p.check();
  REQUIRE(fired);
  CHECK(fired->failnum == EIO);
  CHECK_FALSE(p.check());                            // once
  CHECK(mw::detail::FailPointGate::everSwitched());  // stays: a point may be switched again
}

// libfiu guards its table with a reader-preferring rwlock: every check takes it to read, and an
// enable command waits to write until no check holds it. Checks that overlap without pause (a
// busy worker on a loaded machine) once kept a scenario's delay command waiting 2.6 s, until
// the traffic stopped. The runtime's checks now yield to a command (a writer-preferring gate
// taken by both), so a command is applied at once however busy the checks are.
TEST_CASE("a control command is applied at once while threads check failpoints nonstop",
          "[failpoint]") {
  char dir[] = "/tmp/mw-fp-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string prefix = std::string(dir) + "/ctl";
  auto in = mw::failpoints::openControl(prefix);
  REQUIRE(in.ok());
  std::atomic<bool> stop{false};
  std::atomic<long> checks{0};
  std::vector<std::thread> hammers;
  for (int i = 0; i < 6; ++i) {
    hammers.emplace_back([&, i] {
      mw::detail::FailPoint fp("mw/test/hammer", std::to_string(i));
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 64; ++k) (void)fp.check();
        checks.fetch_add(64, std::memory_order_relaxed);
      }
    });
  }
  while (checks.load() < 100000) std::this_thread::yield();
  // One session for the five commands, as the harness keeps its fifos open for a whole run.
  const std::string out_name = in->substr(0, in->size() - 3) + ".out";
  int wfd = ::open(in->c_str(), O_WRONLY);
  REQUIRE(wfd >= 0);
  int rfd = ::open(out_name.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(rfd >= 0);
  std::vector<std::string> replies;
  for (int i = 0; i < 5; ++i) {
    replies.push_back(
        commandOn(wfd, rfd, "enable name=mw/test/other" + std::to_string(i) + ",failnum=1\n"));
  }
  ::close(wfd);
  ::close(rfd);
  stop = true;
  for (auto& t : hammers) t.join();
  for (const auto& r : replies) CHECK(r == "0\n");  // "": no reply within 2 s (starved)
  std::string out_path = prefix + "-" + std::to_string(::getpid()) + ".out";
  ::unlink(in->c_str());
  ::unlink(out_path.c_str());
  ::rmdir(dir);
}

TEST_CASE("the delay point slows each operation of its world and breaks nothing", "[failpoint]") {
  LocalWorld a("fp_delay", 2), b("fp_delay_other", 2);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  mw::failpoints::Mode m;
  m.failnum = 100;  // milliseconds
  REQUIRE(mw::failpoints::enable("mw/gloo/delay/fp_delay", m).ok());
  auto t0 = mw::Clock::now();
  REQUIRE(exchange(a, 3).ok());
  auto slow = mw::Clock::now() - t0;
  CHECK(slow >= 300ms);  // three sends, each delayed (the receives too, on the other rank)
  t0 = mw::Clock::now();
  REQUIRE(exchange(b, 3).ok());
  CHECK(mw::Clock::now() - t0 < scaled(250));  // the other world is not delayed
  REQUIRE(mw::failpoints::disable("mw/gloo/delay/fp_delay").ok());
  requireHealthy(a);
  requireHealthy(b);
}

namespace {

// Members 0..size-1 of world `name`, each with a manager of its own, joining at once (deadline
// 30 s): rank 0 first, to learn the store's port; the others from threads.
struct JoinedAtOnce {
  std::vector<std::unique_ptr<mw::WorldManager>> managers;
  std::vector<mw::Status> joined;  // each member's initWorld
  mw::Clock::duration took{};      // until every join returned
};

JoinedAtOnce joinAtOnce(const std::string& name, int size) {
  JoinedAtOnce j;
  for (int r = 0; r < size; ++r) j.managers.push_back(std::make_unique<mw::WorldManager>());
  j.joined.resize(static_cast<size_t>(size));
  mw::WorldOptions o;
  o.name = name;
  o.size = size;
  o.rank = 0;
  const auto t0 = mw::Clock::now();
  const auto deadline = mw::deadlineIn(30s);
  mw::Work j0 = j.managers[0]->initWorldAsync(o, deadline);
  o.store.port = LocalWorld::waitForPort(*j.managers[0], name);
  REQUIRE(o.store.port != 0);
  std::vector<std::thread> threads;
  for (int r = 1; r < size; ++r) {
    threads.emplace_back([&, r, o]() mutable {
      o.rank = r;
      j.joined[static_cast<size_t>(r)] = j.managers[static_cast<size_t>(r)]->initWorld(o, deadline);
    });
  }
  j.joined[0] = j0.wait();
  for (auto& t : threads) t.join();
  j.took = mw::Clock::now() - t0;
  return j;
}

}  // namespace

TEST_CASE("a member whose join fails at the barrier fails every other member's join at once",
          "[failpoint][lifecycle]") {
  // The join barrier (docs/design.md, "The join contract"): the last member counted in fails to
  // open it (its compare_set fails, injected) and its join ends. Before, every other member
  // waited for the opening until its join's deadline (kTimeout); now the store shuts the barrier
  // once that member's link is lost, and each of the others fails at once, naming it.
  int named_total = 0, told_total = 0;
  for (int size = 2; size <= 5; ++size) {
    const std::string name = "fp_barrier" + std::to_string(size);
    const std::string point = "mw/store/compare_set/" + name;
    mw::failpoints::Mode mode;
    mode.failnum = ECONNRESET;
    REQUIRE(mw::failpoints::enable(point, mode).ok());  // only the last member in calls it
    JoinedAtOnce j = joinAtOnce(name, size);
    auto& managers = j.managers;
    const std::vector<mw::Status>& joined = j.joined;
    REQUIRE(mw::failpoints::disable(point).ok());
    std::string joins;
    int opener = -1, openers = 0;
    for (int r = 0; r < size; ++r) {
      const mw::Status& s = joined[static_cast<size_t>(r)];
      joins += "\n  rank " + std::to_string(r) + ": " + s.toString();
      if (s.message().find("injected by failpoint " + point) != std::string::npos) {
        opener = r;
        ++openers;
      }
    }
    INFO("size " << size << joins);
    REQUIRE(openers == 1);
    if (opener != 0) told_total += size - 2;  // the members but rank 0 and the opener
    for (int r = 0; r < size; ++r) {
      const mw::Status& s = joined[static_cast<size_t>(r)];
      CHECK_FALSE(s.ok());
      CHECK(s.code() != mw::Code::kTimeout);
      // Rank 0's loss takes the store with it: an io_error. Any other's is named, unless the
      // member had not read the barrier when rank 0, whose join failed too, stopped its store
      // (it waits for that up to half the heartbeat timeout: 500 ms here).
      if (r != opener && opener != 0 && s.code() != mw::Code::kIoError) {
        CHECK(s.code() == mw::Code::kRemoteError);
        CHECK(s.message().find("a member was lost before every member was connected: rank " +
                               std::to_string(opener) + " ") != std::string::npos);
      }
      if (r != opener && r != 0 && opener != 0 && s.code() == mw::Code::kRemoteError) {
        ++named_total;
      }
      CHECK(managers[static_cast<size_t>(r)]->world(name).status().code() == mw::Code::kNotFound);
    }
  }
  // Told why, not only that the store went: in 60 runs beside two busy loops every one was.
  INFO(named_total << " of " << told_total << " members named the member lost");
  CHECK((told_total == 0 || named_total > 0));
}

TEST_CASE("a member lost after the join barrier opened fails no join and breaks the world at once",
          "[failpoint][lifecycle]") {
  // The join contract's other side (docs/design.md): once the barrier opened every member's join
  // has succeeded. A member lost then, before it counted itself through (mw/join/through, as if
  // its process died there), must neither hold rank 0's join until its deadline (rank 0 waits for
  // every member to be through) nor leave a world that formed without it looking healthy: the
  // store announces the loss as the formed world's (peer_died, naming it).
  for (int size = 2; size <= 5; ++size) {
    const std::string name = "fp_through" + std::to_string(size);
    const std::string point = "mw/join/through/" + name;
    mw::failpoints::Mode mode;
    mode.once = true;  // the first member past the opening, whichever it is (never rank 0)
    REQUIRE(mw::failpoints::enable(point, mode).ok());
    JoinedAtOnce j = joinAtOnce(name, size);
    auto& managers = j.managers;
    const std::vector<mw::Status>& joined = j.joined;
    mw::failpoints::disable(point).ignore();  // once: it may have disabled itself
    std::string joins;
    int lost = -1, losses = 0;
    for (int r = 0; r < size; ++r) {
      const mw::Status& s = joined[static_cast<size_t>(r)];
      joins += "\n  rank " + std::to_string(r) + ": " + s.toString();
      if (!s.ok()) {
        lost = r;
        ++losses;
      }
    }
    INFO("size " << size << joins);
    REQUIRE(losses == 1);
    CHECK(lost != 0);
    CHECK(joined[static_cast<size_t>(lost)].message().find("injected by failpoint " + point) !=
          std::string::npos);
    // Not its deadline: 30 s; a join here takes well under a second.
    CHECK(j.took < 15s);
    // Every other member's world breaks, the loss named, within a few heartbeat timeouts.
    for (int r = 0; r < size; ++r) {
      if (r == lost) continue;
      const auto until = mw::deadlineIn(scaled(5000));
      mw::Result<mw::WorldInfo> info = managers[static_cast<size_t>(r)]->world(name);
      while (info.ok() && info->state != mw::WorldState::kBroken && mw::Clock::now() < until) {
        std::this_thread::sleep_for(5ms);
        info = managers[static_cast<size_t>(r)]->world(name);
      }
      REQUIRE(info.ok());
      INFO("rank " << r);
      REQUIRE(info->state == mw::WorldState::kBroken);
      REQUIRE(info->broken.has_value());
      CHECK(info->broken->cause == mw::Cause::kPeerDied);
      CHECK(info->broken->peer_rank == lost);
    }
  }
}

TEST_CASE("members that take longer to connect than the heartbeat timeout come up healthy",
          "[failpoint]") {
  // The store times the members' silence from the moment all have joined its link; their Gloo
  // connection comes after that, here 400 ms later, four heartbeat timeouts. They heartbeat
  // meanwhile, so the world is healthy when it comes up, and stays so.
  mw::failpoints::Mode m;
  m.failnum = 400;  // milliseconds, at each member
  REQUIRE(mw::failpoints::enable("mw/gloo/delay/fp_slow_connect", m).ok());
  const auto t0 = mw::Clock::now();
  LocalWorld w("fp_slow_connect", 2, 100ms);
  INFO(w.status().toString());
  REQUIRE(w.status().ok());
  CHECK(mw::Clock::now() - t0 >= 400ms);  // the delay was in the connection
  REQUIRE(mw::failpoints::disable("mw/gloo/delay/fp_slow_connect").ok());
  std::this_thread::sleep_for(300ms);  // three timeouts of normal running
  for (int i = 0; i < w.size(); ++i) {
    auto info = w.manager(i).world(w.name());
    REQUIRE(info.ok());
    INFO("rank " << i << ": " << (info->broken ? info->broken->detail : std::string("healthy")));
    CHECK(info->state == mw::WorldState::kHealthy);
  }
  REQUIRE(exchange(w, 5).ok());
}

TEST_CASE("a local break at the store host reaches every other member through the store",
          "[failpoint]") {
  // Rank 0 hosts the store; its receive fails (only rank 0 receives here). Ranks 1 and 2 run no
  // operation, so nothing but the store can tell them. Before the store host reported its own
  // breaks, they learned only when rank 0's heartbeats stopped: peer_silent after the timeout.
  const auto hb = scaled(5000);
  LocalWorld w("fp_host", 3, hb);
  REQUIRE(w.status().ok());
  REQUIRE(mw::failpoints::enable("mw/gloo/recv/fp_host", errnoOnce(ECONNRESET)).ok());
  std::vector<float> x(16, 0.0f);
  const auto t0 = mw::Clock::now();
  auto s = w.comm(0)
               .irecv("fp_host", mw::Tensor::cpu(x.data(), x.size()), 1)
               .wait(mw::deadlineIn(scaled(5000)));
  CHECK(s.code() == mw::Code::kWorldBroken);
  waitBroken(w, hb / 2);  // well before the heartbeat timeout
  for (int r = 1; r < 3; ++r) {
    auto info = *w.manager(r).world("fp_host")->broken;
    INFO("rank "
         << r << ": " << mw::causeName(info.cause) << ": " << info.detail << " after "
         << std::chrono::duration_cast<std::chrono::milliseconds>(info.detected_at - t0).count()
         << " ms");
    CHECK(info.cause == mw::Cause::kRemoteBroken);
    CHECK(info.peer_rank == 0);
    CHECK(info.detail.find("injected by failpoint mw/gloo/recv/fp_host") != std::string::npos);
  }
}

// A program the harness starts (worlds/telemetry.h) gets MW_FAILPOINT_FIFO: its first manager opens
// libfiu's control fifo there and names it on the telemetry channel, first; the harness's commands
// then break the world they name. libfiu's control opens once per process: a child runs it.
TEST_CASE("a program asked for failpoints through its environment opens the fifo and names it",
          "[failpoint][telemetry]") {
  char dir[] = "/tmp/mw-fpt-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  ::setenv("MW_TEST_FIFO_PREFIX", (std::string(dir) + "/fiu").c_str(), 1);
  mw::test::Child child({"/proc/self/exe", "-w", "NoTests", "[fifo_telemetry_child]"});
  auto line = child.waitFor("fifo_telemetry_child: ", scaled(60000));
  const int status = child.reap();
  ::unsetenv("MW_TEST_FIFO_PREFIX");
  REQUIRE(line);
  CHECK(*line == "fifo_telemetry_child: ok");
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(::rmdir(dir) == 0);  // the fifos were removed at the child's exit
}

TEST_CASE("fifo_telemetry_child", "[.][fifo_telemetry_child]") {
  const char* prefix = std::getenv("MW_TEST_FIFO_PREFIX");
  REQUIRE(prefix != nullptr);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::setenv("MW_TELEMETRY_FD", std::to_string(fds[1]).c_str(), 1);
  ::setenv("MW_FAILPOINT_FIFO", prefix, 1);
  ::setenv("MW_FAILPOINT_SEED", "7", 1);
  {
    mw::WorldManager m;
    std::string first;
    for (char c; first.find('\n') == std::string::npos && ::read(fds[0], &c, 1) == 1;) first += c;
    const std::string in = std::string(prefix) + "-" + std::to_string(::getpid()) + ".in";
    REQUIRE(first == "fifo " + in + "\n");
    mw::WorldOptions o;
    o.name = "fw";
    o.rank = 0;
    o.size = 1;
    REQUIRE(m.initWorld(o, mw::deadlineIn(scaled(10000))).ok());
    REQUIRE(fifoCommand(in, "enable name=mw/gloo/all_reduce/fw,failnum=5,onetime\n") == "0\n");
    mw::Communicator c(m);
    float v[4] = {1, 2, 3, 4};
    mw::Status s = c.allReduce("fw", mw::Tensor::cpu(v, 4)).wait(mw::deadlineIn(scaled(10000)));
    REQUIRE(s.code() == mw::Code::kWorldBroken);
    REQUIRE(s.toString().find("mw/gloo/all_reduce/fw") != std::string::npos);
    mw::WorldManager second;  // only the first manager of a process opens the fifo
  }
  ::unsetenv("MW_TELEMETRY_FD");
  std::string rest;
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) rest.append(buf, n);
  REQUIRE(rest.find("fifo ") == std::string::npos);
  std::printf("fifo_telemetry_child: ok\n");  // every REQUIRE above held
  std::fflush(stdout);
}
