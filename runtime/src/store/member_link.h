// MemberLink: a member's liveness link to its world's store (internal to the runtime; the
// membership protocol is in docs/store-protocol.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "multiworld/status.h"
#include "multiworld/store.h"

namespace mw {

// What a server tells a member about another member.
struct MemberNotice {
  int rank = -1;               // the member concerned
  Cause cause = Cause::kNone;  // kPeerDied, kPeerSilent, kRemoteBroken or kPeerLeft
  std::string detail;
};

// A member's liveness link to its world's store. Non-blocking after join; designed to be driven by
// one watchdog thread that polls fd(). Thread rules: any thread (an internal mutex serializes the
// calls; none blocks).
class MemberLink {
 public:
  // Connects (retrying refused connections, and a store full or closing the connection under a
  // flood, until `deadline`), presents `token`, and joins world `world` of `size` members as
  // `rank`. The server refuses, with kInvalidArgument naming both values, a different world name
  // or size, a rank outside [0, size), a rank already joined, or a `heartbeat_timeout` other than
  // the server's (0 takes the server's).
  static Result<std::unique_ptr<MemberLink>> join(
      const StoreAddress& address, const std::string& token, const std::string& world, int size,
      int rank, Deadline deadline,
      std::chrono::milliseconds heartbeat_timeout = std::chrono::milliseconds(0));
  virtual ~MemberLink() = default;

  // The socket to poll for POLLIN.
  virtual int fd() const = 0;
  // How often the member should heartbeat, and the silence after which each side gives up.
  virtual std::chrono::milliseconds heartbeatInterval() const = 0;
  virtual std::chrono::milliseconds heartbeatTimeout() const = 0;
  // Sends one heartbeat without blocking. kIoError when the link is closed.
  virtual Status sendHeartbeat() = 0;
  // Tells the server that this member saw the world break. Best effort, never blocks.
  virtual Status reportBroken(Cause cause, const std::string& detail) = 0;
  // Tells the server that this member's world has formed (its rendezvous completed): from then
  // on the server announces the loss of every member joined now and acts on their reports;
  // before, a member that goes is no loss. Sent once (later calls do nothing). Best effort, never
  // blocks.
  virtual Status formed() = 0;
  // Tells the server that this member leaves the world: the others are told kPeerLeft, not
  // kPeerDied, when the link then closes. Says formed() first. Best effort, never blocks; call
  // just before closing.
  virtual Status leave() = 0;
  // After leave(): sends what is still queued and waits until the server has closed the link,
  // which it does once it has taken the leave (its announcement to the others is queued by
  // then). For the store's host, before it stops its own store: stopping first could close the
  // others' links before the leave was read, and they would take it for a death. Returns Ok at
  // the close, kTimeout at `deadline`, the link's error if it failed otherwise. Blocks; the
  // internal mutex is not held while waiting.
  virtual Status awaitClose(Deadline deadline) = 0;
  // Reads what has arrived without blocking and returns the notices in it. Returns kIoError once
  // the server closed the link (rank 0 died or stopped the store) or sent a malformed frame.
  virtual Result<std::vector<MemberNotice>> readNotices() = 0;
  // Monotonic time of the last frame received from the server (join counts).
  virtual Clock::time_point lastHeard() const = 0;
};

// Connects the key-value client of member `rank` of world `world` (of `size` members): as
// StoreClient::connect, then claims the connection as that member's (MEMBER_CLIENT), so that it
// gets the room the store keeps for its members, retrying as MemberLink::join does. The server
// refuses, with kInvalidArgument, a different world or size, a rank out of range, or a rank whose
// key-value client is connected already.
Result<std::unique_ptr<StoreClient>> connectMemberClient(const StoreAddress& address,
                                                         const std::string& token,
                                                         const std::string& world, int size,
                                                         int rank, Deadline deadline,
                                                         const std::string& failpoint_scope);

}  // namespace mw
