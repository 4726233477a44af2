// Bugs and environment failures (docs/errors.md): a broken invariant (MW_CHECK, check.h) aborts
// with file and line; running out of descriptors is an error status, never an abort. Each case
// that ends a process runs in a child: this binary again (/proc/self/exe), running one hidden
// ([.]) case, so that the child is a fresh process and no sanitizer minds a fork of a threaded one.
#include "base/check.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "multiworld/world_manager.h"

using namespace std::chrono_literals;

namespace {

// Sets *line to the line of its MW_CHECK, then checks that x is 2.
void brokenUnlessTwo(int x, int* line) {
  *line = __LINE__ + 1;
  MW_CHECK(x == 2);
}

struct ChildEnd {
  int signal = 0;      // the signal that ended it, or 0
  int exit_code = -1;  // its exit code when it exited
  std::string err;     // what it wrote to stderr
};

// Runs this binary's test case `name` in a child process; stdout is dropped.
ChildEnd runCase(const std::string& name) {
  int err[2];
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  REQUIRE(null >= 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // only async-signal-safe calls before exec
    ::dup2(err[1], STDERR_FILENO);
    ::dup2(null, STDOUT_FILENO);
    const char* argv[] = {"check_test", name.c_str(), nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  ::close(err[1]);
  ::close(null);
  ChildEnd end;
  char buf[512];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) != 0;) {
    if (n > 0) end.err.append(buf, static_cast<size_t>(n));
    if (n < 0 && errno != EINTR) break;
  }
  ::close(err[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  return end;
}

}  // namespace

TEST_CASE("a check that holds does nothing and evaluates its condition once", "[runtime]") {
  int evaluated = 0;
  MW_CHECK(++evaluated == 1);
  REQUIRE(evaluated == 1);
  int line = 0;
  brokenUnlessTwo(2, &line);
  REQUIRE(line > 0);
}

TEST_CASE("check child: a broken invariant", "[.][check_child]") {
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);  // the abort is expected: no core file
  // Catch2's own SIGABRT handler would report the abort first, with calls that are not
  // signal-safe (TSan ends the process over them); the parent judges the abort instead.
  ::signal(SIGABRT, SIG_DFL);
  int line = 0;
  brokenUnlessTwo(3, &line);
}

TEST_CASE("a broken invariant aborts with file, line and the condition", "[runtime]") {
  int line = 0;
  brokenUnlessTwo(2, &line);
  ChildEnd end = runCase("check child: a broken invariant");
  INFO("stderr: " << end.err);
  std::string expected = __FILE__;
  expected.append(":").append(std::to_string(line)).append(": check failed: x == 2\n");
  CHECK(end.signal == SIGABRT);
  CHECK(end.err.rfind(expected, 0) == 0);  // it starts with the message
}

TEST_CASE("check child: a manager made without a free descriptor", "[.][check_child]") {
  // Made and dropped first, so that the sanitizers' one-time checks of its types happen while
  // descriptors are left (UBSan probes memory through a pipe: see test_worker.cc).
  { mw::WorldManager warm_up; }
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  const int lowest_free = ::dup(STDIN_FILENO);
  REQUIRE(lowest_free >= 0);
  ::close(lowest_free);
  rlimit none = saved;
  none.rlim_cur = static_cast<rlim_t>(lowest_free);  // the next descriptor is over the limit
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &none) == 0);
  mw::WorldManager manager;  // its watchdog gets no eventfd
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  mw::WorldOptions o;
  o.name = "w";
  o.rank = 0;
  o.size = 1;
  mw::Status s = manager.initWorld(o, mw::deadlineIn(5s));
  INFO(s.toString());
  REQUIRE(s.code() == mw::Code::kIoError);
  REQUIRE(s.message().find("eventfd") != std::string::npos);
}

TEST_CASE("running out of descriptors is an error status, not an abort", "[runtime]") {
  ChildEnd end = runCase("check child: a manager made without a free descriptor");
  INFO("stderr: " << end.err);
  CHECK(end.signal == 0);
  CHECK(end.exit_code == 0);
}
