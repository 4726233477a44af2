// Store: the key-value rendezvous of a world, and its membership (liveness) links.
//
// By default rank 0 of each world hosts that world's StoreServer, so a world's rendezvous shares
// that world's fate and no other. Every blocking call takes a Deadline. Wire input is untrusted:
// frames are length-checked against a bound, malformed frames close the offending connection, and
// an optional shared token must be presented before anything else is served.
//
// Wire format (all integers little-endian): a frame is `u32 length` followed by `length` payload
// bytes; the payload starts with a `u8` message type. Strings are `u32 length` + bytes. See
// docs/store-protocol.md.
//
// Membership: a member of the world opens a member link to the server (runtime-internal). The
// server pings every link every heartbeat_timeout/10 and expects a heartbeat from each member at
// least every heartbeat_timeout. When a member's link closes (process death) or goes silent, or a
// member reports that the world broke, the server sends a MemberNotice to every other member link
// and records the key "mw/broken". A member that stops hearing from the server for
// heartbeat_timeout treats the store (rank 0) as lost.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "multiworld/status.h"

namespace mw {

struct StoreAddress {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // "host:port".
  std::string str() const;
};

// Parses "host:port" (host may be a name or IPv4 address; port 1..65535). kInvalidArgument naming
// the problem otherwise.
Result<StoreAddress> parseStoreAddress(const std::string& text);

inline constexpr size_t kDefaultMaxFrameBytes = 16u << 20;  // 16 MiB

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // address to bind
  uint16_t port = 0;               // 0 picks a free port (see StoreServer::port())
  std::string token;               // when non-empty every client must present it first
  size_t max_frame_bytes = kDefaultMaxFrameBytes;  // larger frames are refused, connection closed
  // Open connections at most. While ranks of the hosted world have not joined, the last two per
  // such rank are kept for connections that claim a member's place (its link or its key-value
  // client); a connection admitted there must do so before anything else (store-protocol.md,
  // "Without a token"). A world's own store raises it to 2 * size + 64 when that is more.
  size_t max_connections = 4096;
  // Membership of the world this store hosts. world_size 0 disables MemberLinks.
  std::string world_name;
  int world_size = 0;
  std::chrono::milliseconds heartbeat_timeout{1000};  // >= 10 ms
  // Limits on clients that have not completed the handshake (HELLO, and AUTH when there is a
  // token), so that nobody who cannot authenticate can starve the members: such a connection may
  // send frames of kMaxHandshakeFrameBytes (256) at most, is closed when its handshake is not done
  // within `handshake_timeout`, and at most `max_handshaking` of them are open at once (beyond,
  // the oldest is closed, or the newest while the oldest is younger than 50 ms).
  std::chrono::milliseconds handshake_timeout{10000};  // 1 ms .. 30 days
  size_t max_handshaking = 64;                         // >= 1
  // Memory held for all connections together: the requests they sent that are not yet served,
  // and the replies queued for them that they have not yet read. Over it, the connection whose
  // reply has waited longest unread is closed (or, when no reply waits, the one holding the
  // most), with ERROR unavailable when the stream allows; the store and the others live on.
  size_t max_buffered_bytes = size_t{256} << 20;  // >= max_frame_bytes + 4
};

// What a store holds now, for monitoring and tests.
struct StoreServerStats {
  size_t buffered_bytes = 0;        // counted against max_buffered_bytes now
  size_t peak_buffered_bytes = 0;   // the most ever counted
  size_t connections = 0;           // open connections
  uint64_t closed_over_budget = 0;  // connections closed to keep within max_buffered_bytes
};

// A fresh random store token: 64 hex digits (32 bytes from the operating system's generator,
// through OpenSSL). kUnavailable if the generator fails. Thread-safe.
Result<std::string> randomStoreToken();

// A TCP key-value server with one event-loop thread owned by the object.
// Thread rules: start/port/stop/destructor may be called from any thread; stop is idempotent.
class StoreServer {
 public:
  // Binds, listens and starts the server thread. Returns kInvalidArgument for bad options and
  // kIoError when the address cannot be bound (the message names the address and errno).
  static Result<std::unique_ptr<StoreServer>> start(const StoreServerOptions& options);
  virtual ~StoreServer() = default;

  // The bound port (the chosen one when options.port was 0).
  virtual uint16_t port() const = 0;
  // A snapshot of the store's memory and connections; any thread, never blocks.
  virtual StoreServerStats stats() const = 0;
  // Stops the thread and closes every socket. Blocks until the thread has joined.
  virtual void stop() = 0;
};

// A blocking key-value client. Thread rules: any thread; calls are serialized by an internal mutex.
// After a kTimeout or kIoError the connection is closed and every later call returns kIoError.
class StoreClient {
 public:
  // Connects (retrying refused connections until `deadline`) and presents `token`.
  // kTimeout when the server could not be reached in time, kPermissionDenied for a wrong token.
  // In a library with failpoints (multiworld/failpoints.h) every call checks the point
  // "mw/store/<call>/<failpoint_scope>" (set, get, wait, check, add, compare_set, delete), or
  // "mw/store/<call>" when the scope is empty; a world's own client uses the world's name.
  static Result<std::unique_ptr<StoreClient>> connect(const StoreAddress& address,
                                                      const std::string& token, Deadline deadline,
                                                      const std::string& failpoint_scope = "");
  virtual ~StoreClient() = default;

  virtual Status set(const std::string& key, const std::string& value, Deadline deadline) = 0;
  // Waits until `key` exists, then returns its value. kTimeout at the deadline.
  virtual Result<std::string> get(const std::string& key, Deadline deadline) = 0;
  // Waits until every key exists. kTimeout at the deadline.
  virtual Status wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // True when every key exists now (does not wait for them).
  virtual Result<bool> check(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // Adds `delta` to the integer stored at `key` (absent counts as 0) and returns the new value.
  // kInvalidUsage when the stored value is not a decimal integer.
  virtual Result<int64_t> add(const std::string& key, int64_t delta, Deadline deadline) = 0;
  // Sets `key` to `desired` when its value equals `expected` (`expected_absent` means the key must
  // not exist) and returns the value after the call.
  virtual Result<std::string> compareSet(const std::string& key, bool expected_absent,
                                         const std::string& expected, const std::string& desired,
                                         Deadline deadline) = 0;
  // Deletes `key`; returns whether it existed.
  virtual Result<bool> remove(const std::string& key, Deadline deadline) = 0;
};

}  // namespace mw
