// A Catch2 listener that turns a hung test into a diagnosis: if one test case runs longer than
// MW_TEST_HANG_SECONDS (default 100), it prints every thread's stack (gdb, when installed) to
// stderr and aborts, so CI logs show where it hung instead of only a ctest timeout.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace {

class HangReporter : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    const char* env = std::getenv("MW_TEST_HANG_SECONDS");
    const long seconds = env ? std::atol(env) : 100;
    name_ = info.name;
    done_ = false;
    watcher_ = std::thread([this, seconds] {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(seconds), [&] { return done_; })) return;
      std::fprintf(stderr, "\nhang_reporter: '%s' still running after %ld s; thread stacks:\n",
                   name_.c_str(), seconds);
      std::string cmd = "gdb -p " + std::to_string(::getpid()) +
                        " -batch -ex 'thread apply all bt 30' 1>&2 2>/dev/null";
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "hang_reporter: gdb failed\n");
      std::abort();
    });
  }

  void testCaseEnded(const Catch::TestCaseStats&) override {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

 private:
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watcher_;
};

}  // namespace

CATCH_REGISTER_LISTENER(HangReporter)
