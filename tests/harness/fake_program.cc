// mw_fake_program: a stand-in for a user's program in a program role
// (tests/harness/program_test.sh). It does what the runtime's telemetry channel does in a real
// program, without joining any world: on the pipe named by MW_TELEMETRY_FD it writes `ready <t>`
// and then, every 100 ms, a `metrics` line for each world of MW_TELEMETRY_WORLDS
// (multiworld/telemetry_lines.h), until SIGTERM ends it (exit 0). On its stdout it prints its
// arguments and the harness's variables, for the test to check (the token only by its length).
//
// Options:
//   --exit-before-ready N   print a line to stderr and exit N before writing `ready`
//   --child                 start a child process (in its group) that sleeps until killed
//   --never-ready           never write `ready` (a program that never joins its worlds): sleep
//                           until SIGTERM
//   --no-failpoints         when MW_FAILPOINT_FIFO asks for failpoints, answer `fifo -` first,
//                           as the runtime of a release build without failpoints does
//   --exit-after-term MS    once SIGTERM came, take MS milliseconds to exit (a program whose
//                           interpreter takes seconds to wind up)
//   --checks N              every 100 ms also a `check` line of its check "answer": one that
//                           held, except in the N-th window (from 1; 0: never), where it failed
//                           ("got 5 wanted 6"), as mw::reportCheck reports
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "multiworld/status.h"
#include "multiworld/telemetry_lines.h"

namespace {

volatile sig_atomic_t g_stop = 0;

void onTerm(int) { g_stop = 1; }

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(mw::Clock::now().time_since_epoch())
      .count();
}

const char* var(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// Writes one protocol line to `fd`; false when the pipe is gone.
bool emit(int fd, const mw::telemetry_lines::Line& l) {
  const std::string s = mw::telemetry_lines::format(l) + "\n";
  return ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
}

}  // namespace

int main(int argc, char** argv) {
  int exit_early = -1;
  bool child = false, never_ready = false, no_failpoints = false;
  int exit_after_term_ms = 0;
  int checks = -1, window = 0;  // -1: no check lines
  std::printf("fake: argv");
  for (int i = 0; i < argc; ++i) std::printf(" [%s]", argv[i]);
  std::printf("\n");
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exit-before-ready") == 0 && i + 1 < argc) {
      exit_early = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--child") == 0) {
      child = true;
    } else if (std::strcmp(argv[i], "--never-ready") == 0) {
      never_ready = true;
    } else if (std::strcmp(argv[i], "--no-failpoints") == 0) {
      no_failpoints = true;
    } else if (std::strcmp(argv[i], "--exit-after-term") == 0 && i + 1 < argc) {
      exit_after_term_ms = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--checks") == 0 && i + 1 < argc) {
      checks = std::atoi(argv[++i]);
    }
  }
  char cwd[4096] = "";
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) std::strcpy(cwd, "?");
  std::printf("fake: role=%s worlds=%s fd=%s token_length=%zu cwd=%s extra=%s\n",
              var("MW_CHAOS_ROLE"), var("MW_TELEMETRY_WORLDS"), var("MW_TELEMETRY_FD"),
              std::strlen(var("MW_CHAOS_STORE_TOKEN")), cwd, var("FAKE_EXTRA"));
  std::printf("fake: options=%s\n", var("MW_CHAOS_WORLD_OPTIONS"));
  std::fflush(stdout);
  if (exit_early >= 0) {
    std::fprintf(stderr, "fake: exiting with %d before ready, as asked\n", exit_early);
    return exit_early;
  }
  const int fd = std::atoi(var("MW_TELEMETRY_FD"));
  if (fd <= 2) {
    std::fprintf(stderr, "fake: no telemetry fd in MW_TELEMETRY_FD\n");
    return 2;
  }
  std::vector<std::string> worlds;
  std::stringstream list(var("MW_TELEMETRY_WORLDS"));
  for (std::string w; std::getline(list, w, ',');) worlds.push_back(w);
  struct sigaction sa {};
  sa.sa_handler = onTerm;
  ::sigaction(SIGTERM, &sa, nullptr);
  if (child && ::fork() == 0) {
    ::close(fd);
    for (;;) ::pause();
  }
  if (no_failpoints && *var("MW_FAILPOINT_FIFO") != '\0') {
    if (!emit(fd, mw::telemetry_lines::Fifo{})) return 2;
  }
  if (never_ready) {
    while (g_stop == 0) ::pause();
    return 0;
  }
  if (!emit(fd, mw::telemetry_lines::Ready{nowNs()})) return 2;
  int64_t bytes = 0;
  while (g_stop == 0) {
    ::usleep(100000);
    bytes += 1 << 20;
    for (const auto& w : worlds) {
      mw::telemetry_lines::Metrics m;
      m.t_ns = nowNs();
      m.world = w;
      m.bytes = 1 << 20;
      m.ops = 1;
      m.lat_sum_ns = m.lat_max_ns = 1000000;
      if (!emit(fd, m)) return 2;
    }
    if (checks >= 0) {
      const bool failed = ++window == checks;
      const mw::telemetry_lines::Check c{nowNs(), "answer", failed ? 0 : 1, failed ? 1 : 0,
                                         failed ? "got 5 wanted 6" : ""};
      if (!emit(fd, c)) return 2;
    }
  }
  std::printf("fake: stopped by SIGTERM after %lld bytes\n", static_cast<long long>(bytes));
  std::fflush(stdout);
  if (exit_after_term_ms > 0) ::usleep(static_cast<useconds_t>(exit_after_term_ms) * 1000);
  return 0;
}
