// Names the calling thread, so that a stack dump or `top -H` of a process with many worlds says
// which thread is which (`mw-watchdog`, `mw-exec:<world>`, `mw-store:<world>`, ...).
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace mw::detail {

// Sets the calling thread's name to `role` + ":" + `world` (just `role` when `world` is empty),
// cut to the 15 bytes Linux keeps. Never fails: a name that cannot be set is left as it was.
inline void nameThisThread(std::string_view role, std::string_view world = {}) {
  std::string name(role);
  if (!world.empty()) name.append(":").append(world);
  if (name.size() > 15) name.resize(15);
  ::pthread_setname_np(::pthread_self(), name.c_str());
}

}  // namespace mw::detail
