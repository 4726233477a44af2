#include "chaos/posix_faults.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
extern "C" void __asan_init();
#endif

namespace mw::chaos {

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
