#include "gloo/pair_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mw::detail {

namespace {

bool sameEndpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(x.sin6_addr)) == 0;
  }
  return false;
}

// "[ip]:port", the way Gloo's Address::str() prints an address.
std::string printable(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
    port = ntohs(a.sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    ::inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof(host));
    port = ntohs(a.sin6_port);
  }
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

}  // namespace

int PairSockets::peerIn(const std::string& text) const {
  for (const auto& p : peers_) {
    if (text.find(p.name) != std::string::npos) return p.rank;
  }
  return -1;
}

PairSockets PairSockets::find(gloo::Context& ctx, int rank, int size,
                              const std::vector<std::string>& published) {
  PairSockets out;
  struct Endpoint {
    int rank;
    sockaddr_storage self;  // the pair's socket's local address (Pair::address())
  };
  std::vector<Endpoint> locals;
  size_t entry_bytes = 0;  // the size of one published Gloo address
  for (int i = 0; i < size; ++i) {
    if (i == rank) continue;
    auto& pair = ctx.getPair(i);
    if (!pair) continue;
    const auto& self = static_cast<const gloo::transport::tcp::Address&>(pair->address());
    locals.push_back({i, self.getSockaddr()});
    entry_bytes = self.bytes().size();
  }
  // The members' listening addresses: each published value is a run of addresses, one per pair
  // of the member that published it.
  std::vector<sockaddr_storage> listening;
  for (const auto& value : published) {
    if (entry_bytes == 0 || value.size() % entry_bytes != 0) continue;
    for (size_t at = 0; at < value.size(); at += entry_bytes) {
      std::vector<char> bytes(value.begin() + static_cast<ptrdiff_t>(at),
                              value.begin() + static_cast<ptrdiff_t>(at + entry_bytes));
      gloo::transport::tcp::Address a(bytes);
      if (a.getSockaddr().ss_family == AF_INET || a.getSockaddr().ss_family == AF_INET6) {
        listening.push_back(a.getSockaddr());
      }
    }
  }
  struct Found {
    int fd;
    ino_t inode;
    sockaddr_storage local, remote;
  };
  std::vector<Found> sockets;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (dirent* ent = ::readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(ent->d_name, &end, 10);
    if (*end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st;
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    Found f{static_cast<int>(fd), st.st_ino, {}, {}};
    socklen_t ll = sizeof(f.local), rl = sizeof(f.remote);
    if (::getsockname(f.fd, reinterpret_cast<sockaddr*>(&f.local), &ll) != 0 ||
        ::getpeername(f.fd, reinterpret_cast<sockaddr*>(&f.remote), &rl) != 0) {
      continue;  // not connected (a listener, or something else)
    }
    sockets.push_back(f);
  }
  ::closedir(dir);
  // The side that connected holds a socket from a port the kernel chose, which it lends to the
  // process's other connections to other destinations: only the one to a member's listening
  // address is the pair's. The side that accepted holds its device listener's address, which
  // no connection outside the world shares. Each judged once: a large world has many of both.
  std::vector<bool> to_listener(sockets.size());
  for (size_t k = 0; k < sockets.size(); ++k) {
    to_listener[k] = std::any_of(listening.begin(), listening.end(),
                                 [&](const auto& l) { return sameEndpoint(l, sockets[k].remote); });
  }
  std::vector<bool> connected(locals.size());
  for (size_t j = 0; j < locals.size(); ++j) {
    for (size_t k = 0; k < sockets.size() && !connected[j]; ++k) {
      connected[j] = to_listener[k] && sameEndpoint(sockets[k].local, locals[j].self);
    }
  }
  for (size_t k = 0; k < sockets.size(); ++k) {
    const Found& f = sockets[k];
    for (size_t j = 0; j < locals.size(); ++j) {
      const Endpoint& l = locals[j];
      if (!sameEndpoint(l.self, f.local) || (connected[j] && !to_listener[k])) continue;
      out.socks_.push_back({f.fd, f.inode, l.rank});
      // Gloo names the peer in its errors by the address at the other end of this socket.
      out.peers_.push_back({l.rank, printable(f.remote)});
      break;
    }
  }
  return out;
}

bool PairSockets::open(const Ref& s) const {
  struct stat st;
  return ::fstat(s.fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == s.inode;
}

void PairSockets::shutdownAll() const {
  for (const auto& s : socks_) {
    if (open(s)) ::shutdown(s.fd, SHUT_RDWR);
  }
}

bool PairSockets::allClosed() const {
  for (const auto& s : socks_) {
    if (open(s)) return false;
  }
  return true;
}

void PairSockets::closeStragglers(gloo::Context& ctx) const {
  for (const auto& s : socks_) {
    if (!open(s)) continue;
    auto& pair = ctx.getPair(s.peer);
    if (pair) pair->close();
  }
}

}  // namespace mw::detail
