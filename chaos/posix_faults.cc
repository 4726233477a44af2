#include "chaos/posix_faults.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
extern "C" void __asan_init();
#endif

namespace mw::chaos {

const std::vector<PosixPoint>& posixPoints() {
  static const std::vector<PosixPoint> kPoints = {
      {"posix/io/rw/writev", "Gloo's writes: every tensor a world sends"},
      {"posix/io/net/recv", "Gloo's reads, and the store's (client, server, member links)"},
      {"posix/io/net/send", "the store's writes: requests, replies, heartbeats"},
      {"posix/io/net/connect", "every new connection: store clients and Gloo pairs (joining)"},
      {"posix/io/net/accept", "the store server and Gloo's listeners (others joining)"},
      {"posix/io/net/socket", "every new socket"},
  };
  return kPoints;
}

bool isPosixPoint(const std::string& name) {
  for (const char* p : {"posix/", "libc/", "linux/"}) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::string checkPosixPoint(const std::string& name) {
  for (const auto& p : posixPoints()) {
    if (name == p.name) return "";
  }
  std::string list;
  for (const auto& p : posixPoints()) list += std::string(list.empty() ? "" : ", ") + p.name;
  std::string why = "POSIX point '" + name + "' is not offered";
  if (name.find('*') != std::string::npos) {
    why += " (no wildcards: posix/io/net/* would take poll(2) and the control fifo with it)";
  } else if (name.rfind("posix/io/rw/", 0) == 0 || name.rfind("posix/io/net/poll", 0) == 0 ||
             name.rfind("posix/io/net/select", 0) == 0) {
    why +=
        " (the worker's control fifo and its reports to the harness go through it: failing it "
        "would cut the harness off from the worker)";
  }
  return why + "; POSIX points: " + list;
}

Result<std::string> posixPreload() {
  std::string lib;
  if (const char* env = std::getenv("MW_FIU_POSIX_PRELOAD"); env != nullptr && *env != '\0') {
    lib = env;
  } else {
#ifdef MW_FIU_POSIX_PRELOAD_DEFAULT
    lib = MW_FIU_POSIX_PRELOAD_DEFAULT;
#endif
  }
  if (lib.empty() || ::access(lib.c_str(), R_OK) != 0) {
    return Status(Code::kUnavailable,
                  "POSIX-level faults need libfiu's preload library fiu_posix_preload.so" +
                      (lib.empty() ? std::string() : " (looked for " + lib + ")") +
                      "; install it (Debian/Ubuntu: apt-get install libfiu0) or point "
                      "MW_FIU_POSIX_PRELOAD at it");
  }
  std::string preload = lib;
#if defined(__SANITIZE_ADDRESS__)
  // The workers come from the same build, so they load ASan too, which refuses to start unless
  // its runtime is the first library of the process.
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&__asan_init), &info) != 0 && info.dli_fname != nullptr) {
    preload = std::string(info.dli_fname) + " " + preload;
  }
#endif
  return preload;
}

}  // namespace mw::chaos
