// MW_CHECK(cond): an invariant of the code itself. When `cond` is false the program has a bug:
// MW_CHECK writes "file:line: check failed: cond" to stderr and aborts (SIGABRT). Always on,
// NDEBUG or not; `cond` is evaluated exactly once.
//
// Only for what no input, peer or environment can make false. A failure the world can cause (bad
// input, a peer's bad frame, running out of descriptors or memory, a socket error) is an error
// Status the caller can switch on, never a check (docs/errors.md).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace mw::detail {

// What a failed MW_CHECK does. Not for direct use.
[[noreturn]] inline void checkFailed(const char* file, int line, const char* text) {
  std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, text);
  std::fflush(stderr);
  std::abort();
}

}  // namespace mw::detail

#define MW_CHECK(cond)                          \
  (__builtin_expect(static_cast<bool>(cond), 1) \
       ? static_cast<void>(0)                   \
       : ::mw::detail::checkFailed(__FILE__, __LINE__, #cond))
