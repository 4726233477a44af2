#include "base/failpoint.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

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
  int rc = mode.probability >= 1.0 ? fiu_enable(name.c_str(), mode.failnum, info, flags)
                                   : fiu_enable_random(name.c_str(), mode.failnum, info, flags,
                                                       static_cast<float>(mode.probability));
  if (rc != 0) return Status(Code::kIoError, "libfiu refused to enable failpoint '" + name + "'");
  return Status::Ok();
#else
  return unavailable();
#endif
}

Status disable(const std::string& name) {
#if MW_CONFIG_WITH_FIU
  detail::initFailPoints();
  if (fiu_disable(name.c_str()) != 0) {
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
  if (fiu_rc_fifo(prefix.c_str()) != 0) {
    int err = errno;
    return Status(Code::kIoError, "cannot create the failpoint control fifos " + base +
                                      ".in/.out: " + detail::errnoText(err));
  }
  // libfiu's thread writes each reply to the ".out" fifo: a controller that goes away must not
  // kill this process with SIGPIPE (the write fails with EPIPE and libfiu reopens the fifos).
  std::signal(SIGPIPE, SIG_IGN);
  control_path = base + ".in";  // libfiu removes both fifos at a normal exit
  return control_path;
#else
  (void)prefix;
  return unavailable();
#endif
}

}  // namespace failpoints
}  // namespace mw
