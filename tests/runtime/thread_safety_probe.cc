// Compiled, never run, by the tsa.* tests (clang only, tests/runtime/CMakeLists.txt): clang's
// thread-safety analysis accepts a MW_GUARDED_BY member read with its mutex held
// (-DMW_PROBE_LOCKED) and rejects the same read without it, which keeps the annotations of
// thread_annotations.h and mutex.h honest: macros that expanded to nothing would pass both.
#include "base/mutex.h"

class Counter {
 public:
  int get() {
#ifdef MW_PROBE_LOCKED
    mw::MutexLock lock(mu_);
#endif
    return n_;
  }

 private:
  mw::Mutex mu_;
  int n_ MW_GUARDED_BY(mu_) = 0;
};

int main() {
  Counter c;
  return c.get();
}
