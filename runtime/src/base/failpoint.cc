#include "base/failpoint.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/mutex.h"
#include "multiworld/failpoints.h"

#if MW_CONFIG_WITH_FIU
#include <fiu-control.h>
#endif

namespace mw {
namespace detail {

void initFailPoints() {
#if MW_CONFIG_WITH_FIU
  static std::once_flag once;
  std::call_once(once, [] { fiu_init(0); });
#endif
}

FailPoint::FailPoint(std::string_view family, std::string_view scope) {
#if MW_CONFIG_WITH_FIU
  initFailPoints();
  name_ = std::string(family);
  if (!scope.empty()) name_ += "/" + std::string(scope);
#else
  (void)family;
  (void)scope;
#endif
}

namespace {

// The gate's lock: a pthread rwlock of the writer-preferring kind (std::shared_mutex would take
// glibc's default, reader-preferring: the very starvation the gate is for).
pthread_rwlock_t* gateLock() {
  struct Lock {
    pthread_rwlock_t lock;
    Lock() {
      pthread_rwlockattr_t attr;
      pthread_rwlockattr_init(&attr);
      pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
      pthread_rwlock_init(&lock, &attr);
      pthread_rwlockattr_destroy(&attr);
    }
  };
  static Lock l;
  return &l.lock;
}

}  // namespace

void FailPointGate::lockShared() { pthread_rwlock_rdlock(gateLock()); }
void FailPointGate::unlockShared() { pthread_rwlock_unlock(gateLock()); }
void FailPointGate::lock() {
  switched().store(true, std::memory_order_release);  // before the change it guards
  pthread_rwlock_wrlock(gateLock());
}
void FailPointGate::unlock() { pthread_rwlock_unlock(gateLock()); }

std::optional<Injection> FailPoint::checkEnabled() const {
#if MW_CONFIG_WITH_FIU
  FailPointGate::lockShared();
  const int n = fiu_fail(name_.c_str());
  void* info = n != 0 ? fiu_failinfo() : nullptr;
  FailPointGate::unlockShared();
  if (n != 0) return Injection{n, reinterpret_cast<uintptr_t>(info), name_};
#endif
  return std::nullopt;
}

std::string errnoText(int err) {
  char buf[128];
  // GNU strerror_r returns the message, which may or may not live in buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

}  // namespace detail

namespace failpoints {

namespace {

#if !MW_CONFIG_WITH_FIU
Status unavailable() {
  return Status(Code::kUnavailable,
                "this libmultiworld was built without failpoints (configure with -DMW_WITH_FIU=ON "
                "and libfiu-dev installed)");
}
#endif

#if MW_CONFIG_WITH_FIU
Mutex control_mu;
std::string control_path MW_GUARDED_BY(control_mu);
std::string control_out MW_GUARDED_BY(control_mu);

bool writeAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The control fifos' thread, speaking libfiu's protocol (one command line in, its result "0\n"
// or "-1\n" out, as fiu_rc_fifo's thread does), but running each command through
// FailPointGate. It opens both fifos, serves commands until the controller closes its end,
// then opens them again; it ends when they are gone (the controller unlinks them once open).
void serveControl(std::string in_path, std::string out_path) {
  for (;;) {
    int in = ::open(in_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) {
      if (errno == EINTR) continue;
      return;
    }
    int out = ::open(out_path.c_str(), O_WRONLY | O_CLOEXEC);
    if (out < 0) {
      ::close(in);
      if (errno == EINTR) continue;
      return;
    }
    std::string pending;
    char buf[512];
    bool open = true;
    while (open) {
      ssize_t n = ::read(in, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      for (size_t nl; open && (nl = pending.find('\n')) != std::string::npos;) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        char* error = nullptr;
        detail::FailPointGate::lock();
        const int rc = fiu_rc_string(line.c_str(), &error);
        detail::FailPointGate::unlock();
        open = writeAll(out, std::to_string(rc) + "\n");
      }
    }
    ::close(in);
    ::close(out);
  }
}

void unlinkControl() {
  MutexLock lock(control_mu);
  if (!control_path.empty()) {
    ::unlink(control_path.c_str());
    ::unlink(control_out.c_str());
  }
}
#endif

}  // namespace

bool compiledIn() { return MW_CONFIG_WITH_FIU != 0; }

Status enable(const std::string& name, const Mode& mode) {
  if (name.empty()) return Status(Code::kInvalidArgument, "failpoint name is empty");
  if (mode.failnum == 0) {
    return Status(Code::kInvalidArgument,
                  "failpoint '" + name +
                      "': failnum 0 would mean 'no failure'; give an errno or "
                      "an ncclResult_t");
  }
  if (!(mode.probability > 0.0 && mode.probability <= 1.0)) {
    return Status(Code::kInvalidArgument, "failpoint '" + name + "': probability " +
                                              std::to_string(mode.probability) +
                                              " must be in (0, 1]");
  }
#if MW_CONFIG_WITH_FIU
  detail::initFailPoints();
  void* info = reinterpret_cast<void*>(mode.failinfo);
  unsigned flags = mode.once ? FIU_ONETIME : 0;
  detail::FailPointGate::lock();
  int rc = mode.probability >= 1.0 ? fiu_enable(name.c_str(), mode.failnum, info, flags)
                                   : fiu_enable_random(name.c_str(), mode.failnum, info, flags,
                                                       static_cast<float>(mode.probability));
  detail::FailPointGate::unlock();
  if (rc != 0) return Status(Code::kIoError, "libfiu refused to enable failpoint '" + name + "'");
  return Status::Ok();
#else
  return unavailable();
#endif
}

Status disable(const std::string& name) {
#if MW_CONFIG_WITH_FIU
  detail::initFailPoints();
  detail::FailPointGate::lock();
  const int rc = fiu_disable(name.c_str());
  detail::FailPointGate::unlock();
  if (rc != 0) {
    return Status(Code::kNotFound, "failpoint '" + name + "' is not enabled");
  }
  return Status::Ok();
#else
  (void)name;
  return unavailable();
#endif
}

Status seed(uint32_t value) {
#if MW_CONFIG_WITH_FIU
  detail::initFailPoints();
  fiu_set_prng_seed(value);
  return Status::Ok();
#else
  (void)value;
  return unavailable();
#endif
}

Result<std::string> openControl(const std::string& prefix) {
#if MW_CONFIG_WITH_FIU
  if (prefix.empty()) return Status(Code::kInvalidArgument, "failpoint control prefix is empty");
  detail::initFailPoints();
  MutexLock lock(control_mu);
  if (!control_path.empty()) {
    return Status(Code::kInvalidUsage,
                  "the failpoint control fifo is open already at " + control_path);
  }
  const std::string base = prefix + "-" + std::to_string(::getpid());
  const std::string in = base + ".in", out = base + ".out";
  if (::mkfifo(in.c_str(), 0600) != 0 || ::mkfifo(out.c_str(), 0600) != 0) {
    int err = errno;
    ::unlink(in.c_str());
    return Status(Code::kIoError, "cannot create the failpoint control fifos " + base +
                                      ".in/.out: " + detail::errnoText(err));
  }
  // The thread writes each reply to the ".out" fifo: a controller that goes away must not kill
  // this process with SIGPIPE (the write fails with EPIPE and the thread opens the fifos again).
  std::signal(SIGPIPE, SIG_IGN);
  std::thread(serveControl, in, out).detach();
  control_path = in;
  control_out = out;
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(unlinkControl); });  // both gone at a normal exit
  return control_path;
#else
  (void)prefix;
  return unavailable();
#endif
}

}  // namespace failpoints
}  // namespace mw
