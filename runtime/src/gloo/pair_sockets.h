// PairSockets: the TCP sockets of one world's Gloo pairs, so they can be cut from outside.
//
// Why: when a world is aborted, data may still arrive for Gloo buffers we have dropped. Gloo's
// event loop then spins on the unread bytes, and Gloo's own close paths (Pair::close, ~Pair) take
// the pair's mutex and wait for a loop tick, which deadlocks if the loop is handling that pair at
// that moment. shutdown(2) on the socket instead makes the loop see end-of-file and close the pair
// itself on its own thread, where no wait happens. Debian's Gloo ships no header that exposes a
// pair's descriptor, so the sockets are found by address: our side of each pair listens on the
// address Gloo published for it, and the connections we opened go to the addresses our peers
// published in the world's store.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include <gloo/context.h>

#include "multiworld/store.h"

namespace mw::detail {

class PairSockets {
 public:
  // Finds the connected sockets of `ctx`'s pairs (rank `rank` of `size`); peers' published
  // addresses are read from `store` under "gloo/<rank>". Best effort: sockets not found are left
  // to Gloo.
  static PairSockets find(gloo::Context& ctx, int rank, int size, StoreClient& store,
                          Deadline deadline);

  // shutdown(SHUT_RDWR) on every socket still open (checked by inode, so a reused descriptor
  // number is never touched).
  void shutdownAll() const;
  // True once Gloo has closed every one of them.
  bool allClosed() const;

  // The rank whose published pair address ("[ip]:port", as Gloo prints it) appears in `text`
  // (a Gloo error message), or -1.
  int peerIn(const std::string& text) const;

 private:
  struct Peer {
    int rank;
    std::string name;
  };
  std::vector<Peer> peers_;
  struct Ref {
    int fd;
    ino_t inode;
  };
  std::vector<Ref> socks_;
};

}  // namespace mw::detail
