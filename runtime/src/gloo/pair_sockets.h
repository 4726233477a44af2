// PairSockets: the TCP sockets of one world's Gloo pairs, so they can be cut from outside.
//
// Why: when a world is aborted, data may still arrive for Gloo buffers we have dropped. Gloo's
// event loop then spins on the unread bytes, and Gloo's own close paths (Pair::close, ~Pair) take
// the pair's mutex and wait for a loop tick. shutdown(2) on the socket instead makes the loop see
// end-of-file and close the pair itself on its own thread, failing every wait posted on it, while
// abort() waits for nothing. The loop cannot always see it: when the message it was reading
// belongs to a buffer that is gone (an operation that failed and unwound), Gloo's reader stops
// before it reads again, so it never reaches the end-of-file, and the pair stays open and spins.
// Such a pair is closed from outside (closeStragglers), once its world's operations have all
// failed. Debian's Gloo ships no usable header that exposes a pair's descriptor or its peer's
// address (its tcp/pair.h includes a header it does not ship), so the sockets are found by
// address: once connected, each pair's address() is its socket's local address (Gloo resets it
// in Pair::handleConnected). That alone is not enough: the side that connected got its local
// port from the kernel, which lends the same port to the process's other connections to other
// destinations (another world's store client, say), and cutting those crossed worlds. So such a
// socket is the pair's only if its remote end is one of the listening addresses the world's
// members published in the rendezvous; the side that accepted holds the local address of its
// device's listener, which no connection outside the world shares.
#pragma once

#include <gloo/context.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace mw::detail {

class PairSockets {
 public:
  // Finds the connected sockets of `ctx`'s pairs (rank `rank` of `size`). Call once every pair is
  // connected (after connectFullMesh), with `published`: the values the rendezvous read from the
  // store (each a run of the other members' Gloo addresses). Best effort: sockets not found are
  // left to Gloo; a socket of anything else is never among them.
  static PairSockets find(gloo::Context& ctx, int rank, int size,
                          const std::vector<std::string>& published);

  // shutdown(SHUT_RDWR) on every socket still open (checked by inode, so a reused descriptor
  // number is never touched).
  void shutdownAll() const;
  // True once every one of them is closed.
  bool allClosed() const;
  // Closes, through Gloo (Pair::close), the pairs of `ctx` whose sockets are still open. Waits a
  // tick of Gloo's loop for each. Only once nothing of the world can still be waiting on them:
  // Pair::close fails none of the waits posted on the pair.
  void closeStragglers(gloo::Context& ctx) const;

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
    int peer;
  };
  bool open(const Ref& s) const;
  std::vector<Ref> socks_;
};

}  // namespace mw::detail
