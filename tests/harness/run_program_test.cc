// runProgram (chaos/process.h): a command's limit bounds its own time. Time the machine held it
// off the CPU extends the limit; a command that hangs still ends at it.
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "chaos/process.h"

namespace mw::chaos {
namespace {

using namespace std::chrono_literals;

// Busy loops pinned to CPU 0, killed when it goes.
struct PinnedHogs {
  std::vector<std::unique_ptr<Process>> hogs;
  explicit PinnedHogs(int n) {
    for (int i = 0; i < n; ++i) {
      auto p =
          Process::spawn({whichProgram("taskset"), "-c", "0", "sh", "-c", "while :; do :; done"});
      REQUIRE(p.ok());
      hogs.push_back(std::move(p).value());
    }
  }
  ~PinnedHogs() {
    for (auto& h : hogs) h->killAndReap();
  }
};

TEST_CASE("a process waiting for a CPU shows its wait and state", "[process]") {
  REQUIRE_FALSE(whichProgram("taskset").empty());  // util-linux, in every Debian
  PinnedHogs hogs(2);
  std::this_thread::sleep_for(1s);
  const RunQueueWait w = runQueueWait(hogs.hogs[0]->pid());
  CHECK(w.state == 'R');
  CHECK(w.waited >= 100ms);  // two busy loops on one CPU: each waits about half the time
  CHECK(runQueueWait(999999999).state == '?');
}

TEST_CASE("a command held off the CPU is given the time it waited, and a hung one still ends",
          "[process]") {
  REQUIRE_FALSE(whichProgram("taskset").empty());
  REQUIRE_FALSE(whichProgram("python3").empty());  // the test command installs it
  // 0.3 s of CPU time in its loop, on a CPU that five busy loops share: it gets a sixth to a half
  // of that CPU, so it takes 1.2 s or more of wall time, past its 1.2 s limit (2-3 s here); the
  // time it waited extends the limit. `-S -E`: python starts without `site` and its imports
  // (20 ms, not 0.2-0.3 s): reading those files from a cold page cache is time of its own, not
  // waiting, and once took it past the limit (1206 ms of its own time beside the gate's ctest).
  const std::vector<std::string> burn = {
      "taskset", "-c",
      "0",       "python3",
      "-S",      "-E",
      "-c",      "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"};
  {
    PinnedHogs hogs(5);
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = runProgram(burn, 1200ms);
    INFO(s.toString());
    CHECK(s.ok());
    CHECK(std::chrono::steady_clock::now() - t0 > 1200ms);  // it did run past the bare limit
  }
  // A command that sleeps (never waits for a CPU) ends at its limit, saying so.
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = runProgram({"sleep", "30"}, 300ms);
  CHECK(s.code() == Code::kTimeout);
  CHECK_THAT(s.message(), Catch::Matchers::Contains("did not finish in 300 ms of its own time") &&
                              Catch::Matchers::Contains("state S"));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
}

TEST_CASE("a command is given its input, and one that does not read it still ends", "[process]") {
  std::string out;
  REQUIRE(runProgram({"cat"}, 10s, &out, "-F CHAIN\nCOMMIT\n").ok());
  CHECK(out == "-F CHAIN\nCOMMIT\n");
  // 1 MiB to a program that reads none of it: the writing ends at the limit, and so does the
  // program; never a hang.
  const auto t0 = std::chrono::steady_clock::now();
  Status s = runProgram({"sleep", "30"}, 2s, nullptr, std::string(1 << 20, 'x'));
  CHECK_FALSE(s.ok());
  INFO(s.message());
  CHECK(s.message().find("writing its input") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

}  // namespace
}  // namespace mw::chaos
