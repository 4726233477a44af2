// Names a scenario may use for faults: signals, errno values and NCCL results.
#pragma once

#include <cerrno>
#include <string>

namespace mw::harness {

// A signal by name ("SIGKILL", "KILL") or number ("9"): any signal of this system. 0 if unknown.
int signalNumber(const std::string& text, std::string* canonical);

struct ErrnoName {
  const char* name;
  int number;
};
inline constexpr ErrnoName kErrnos[] = {
    {"ECONNRESET", ECONNRESET},
    {"EPIPE", EPIPE},
    {"EIO", EIO},
    {"ETIMEDOUT", ETIMEDOUT},
    {"ECONNREFUSED", ECONNREFUSED},
    {"ENETUNREACH", ENETUNREACH},
    {"EHOSTUNREACH", EHOSTUNREACH},
    {"ENOMEM", ENOMEM},
    {"EAGAIN", EAGAIN},
    {"EINVAL", EINVAL},
    {"ENOSPC", ENOSPC},
    {"ECONNABORTED", ECONNABORTED},
};

struct NcclName {
  const char* name;
  int number;
  int gloo_errno;  // what a Gloo world gets instead when the scenario runs on Gloo
};
inline constexpr NcclName kNcclResults[] = {
    {"ncclUnhandledCudaError", 1, EIO}, {"ncclSystemError", 2, EIO},
    {"ncclInternalError", 3, EIO},      {"ncclInvalidArgument", 4, EINVAL},
    {"ncclInvalidUsage", 5, EINVAL},    {"ncclRemoteError", 6, ECONNRESET},
};

}  // namespace mw::harness
