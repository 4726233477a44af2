// The stores of a scenario's worlds: a free TCP port on the loopback interface for each, and the
// run's token.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <random>

namespace mw::chaos {

// The environment variable through which mwchaos gives each worker its run's store token (random
// per run: mw::randomStoreToken). Never a command-line argument: /proc/<pid>/cmdline is readable
// by every local user, /proc/<pid>/environ by the process's own user only.
inline constexpr const char* kTokenVariable = "MW_CHAOS_STORE_TOKEN";

// A TCP port that was free a moment ago on 127.0.0.1 (0 when none could be bound). Another
// process may take it before it is used; the store binds with SO_REUSEADDR.
inline uint16_t freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// A free port below the kernel's ephemeral range (net.ipv4.ip_local_port_range), for a world's
// store. A scenario re-creates a store on the same port after a restart or a re-join; a port from
// the ephemeral range may meanwhile have been handed to some outgoing connection or to a Gloo
// listener, and the store could not bind it again. Falls back to freePort() when none is found.
inline uint16_t freeStorePort() {
  unsigned low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    unsigned lo = 0, hi = 0;
    if (std::fscanf(f, "%u %u", &lo, &hi) == 2 && lo > 2048) low = lo;
    std::fclose(f);
  }
  const unsigned first = 10000 < low ? 10000 : 1024;
  if (low <= first + 1) return freePort();
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<unsigned> pick(first, low - 1);
  for (int tries = 0; tries < 200; ++tries) {
    uint16_t port = static_cast<uint16_t>(pick(rng));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (ok) return port;
  }
  return freePort();
}

}  // namespace mw::chaos
