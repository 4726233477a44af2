// Small POSIX socket helpers for the store: an owning fd, IPv4 TCP connect/listen, and deadline-
// bounded send/receive.
//
// Every fd is created close-on-exec; every send uses MSG_NOSIGNAL (a closed peer gives EPIPE, never
// SIGPIPE). Sockets returned here are non-blocking; the blocking helpers wait with poll() and never
// past their deadline.
//
// Thread rules: an Fd is a value owned by one thread at a time; the functions are thread-safe.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "multiworld/status.h"
#include "multiworld/store.h"
#include "store/wire.h"

namespace mw::store {

// Owns a file descriptor and closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  // Closes the current fd (if any) and takes `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "strerror text (errno N)".
std::string errnoText(int err);

Status setNonBlocking(int fd);
Status setNoDelay(int fd);

// Resolves `host` (dotted IPv4 or a name) to an IPv4 address. kInvalidArgument when it cannot be
// resolved. Name resolution may block briefly (getaddrinfo has no deadline).
Result<in_addr> resolveIpv4(const std::string& host);

// Connects to `address`, retrying refused (and other transient) failures until `deadline`. Never
// blocks past the deadline. Returns a non-blocking socket with TCP_NODELAY. kTimeout when the
// deadline passed, kIoError (naming the address and errno) for a permanent failure.
Result<Fd> connectTcp(const StoreAddress& address, Deadline deadline);

// A non-blocking listening socket bound to host:port (port 0 picks one) with SO_REUSEADDR.
// kIoError naming the address and errno when it cannot be bound.
Result<Fd> listenTcp(const std::string& host, uint16_t port, int backlog);
// The local port of a bound socket.
Result<uint16_t> localPort(int fd);

// Cancellation of the blocking helpers here, for one thread. While a CancelScope lives on a
// thread, every wait of this module on that thread (waitReady and everything built on it, and the
// pauses between connection attempts) also ends, with kAborted "cancelled", once `event_fd` is
// readable. A world's join runs in one (World::cancelJoin). Scopes do not nest.
class CancelScope {
 public:
  explicit CancelScope(int event_fd);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;
};
// The event fd of the calling thread's CancelScope, or -1 when none lives on it: what a helper
// thread doing part of this thread's wait passes to a CancelScope of its own.
int currentCancelFd();

// Waits until `fd` reports one of `events` (or an error/hangup). kTimeout at the deadline,
// kAborted when the thread's CancelScope is cancelled.
Status waitReady(int fd, short events, Deadline deadline);
// Sleeps for `d` (never past `deadline`); kAborted at once when the thread's CancelScope is
// cancelled.
Status pause(Clock::duration d, Deadline deadline);

// Sends every byte of `data` on a non-blocking socket. kTimeout at the deadline, kIoError when the
// connection fails.
Status sendAll(int fd, std::string_view data, Deadline deadline);
// Receives exactly `size` bytes. kTimeout at the deadline, kIoError on EOF or failure.
Status recvExact(int fd, char* data, size_t size, Deadline deadline);
// Receives one length-prefixed frame and returns its payload. kRemoteError when the declared
// length is zero or above `max_payload`; memory grows only as bytes actually arrive.
Result<std::string> recvFrame(int fd, size_t max_payload, Deadline deadline);

// A non-blocking connected socket with an incoming frame splitter and an outgoing byte queue, so a
// partial write never corrupts the frame stream. Nothing here blocks. Thread rules: one thread at a
// time.
class FramedConn {
 public:
  FramedConn(Fd fd, size_t max_frame_bytes) : fd_(std::move(fd)), in_(max_frame_bytes) {}

  int fd() const { return fd_.get(); }
  FrameReader& in() { return in_; }
  const FrameReader& in() const { return in_; }
  // Bytes queued but not yet accepted by the kernel.
  size_t pending() const { return out_.size() - out_sent_; }
  // Memory the output queue holds (its capacity, at least pending()): what a store counts in its
  // budget. An emptied queue keeps at most kKeptOutCapacity of it.
  size_t outHeld() const { return out_.capacity(); }
  static constexpr size_t kKeptOutCapacity = 4096;
  // Queues one whole frame (`bytes`) behind what is pending; flush() sends them. An rvalue is
  // taken without a copy when nothing is pending.
  void queue(std::string_view bytes) { out_.append(bytes); }
  void queue(std::string&& bytes) {
    if (out_.empty()) {
      out_ = std::move(bytes);
    } else {
      out_.append(bytes);
    }
  }
  // Sends what the socket accepts now. kIoError "failed: <errno>" when the connection broke.
  Status flush();
  // Drops every byte not yet sent and releases the output memory. Returns true when the stream
  // was cut between frames (nothing of a frame was half sent), so that another frame may follow.
  bool dropQueued();
  // Reads what is available (at most about `budget` bytes) into in(), or drops it when `keep` is
  // false, and sets `*got` to the byte count. kIoError "closed" at EOF, "failed: <errno>" on error.
  Status readAvailable(size_t budget, bool keep, size_t* got);

 private:
  Fd fd_;
  FrameReader in_;
  std::string out_;  // the unsent bytes start at out_sent_
  size_t out_sent_ = 0;
  // Offset in out_ of the first frame of which nothing was sent: out_sent_ when the stream is
  // between frames, else the end of the frame being sent (queued frames are whole, so their
  // headers tell where each ends).
  size_t frame_start_ = 0;
};

// Connects (as connectTcp) and performs the store greeting: sends HELLO with `token` and waits for
// OK. The server's ERROR code is returned as is (kPermissionDenied for a wrong token, kUnavailable
// when the store is full); kTimeout/kIoError when the greeting cannot complete.
Result<Fd> connectAndGreet(const StoreAddress& address, const std::string& token,
                           Deadline deadline);

// For a member of a world: connects and greets (as connectAndGreet), sends `claim` (MEMBER_JOIN
// or MEMBER_CLIENT) and reads its reply into `*reply`. While the store is full (kUnavailable) or
// closes the connection under a flood of others, tries again after a pause (10 ms, doubling up to
// 160 ms) until `deadline`: the store keeps room for its world's members, so a member gets in
// once strangers' connections are evicted. An ERROR reply to the claim is returned as its status.
Result<Fd> connectAsMember(const StoreAddress& address, const std::string& token,
                           const Message& claim, Deadline deadline, Message* reply);

}  // namespace mw::store
