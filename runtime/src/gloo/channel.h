// Channel: Gloo unbound buffers that the backend can cancel.
//
// Every buffer an operation posts is registered here; abortAll() interrupts every wait on them
// (abortWaitRecv/abortWaitSend, never a short Gloo timeout, which would close every pair of the
// context). Waits take the deadline of the operation that is running.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "multiworld/status.h"

namespace mw::detail {

// Thrown out of a wait when the channel was aborted.
struct AbortedError {};
// Thrown when an operation passed its deadline.
struct OpTimeoutError {
  std::string detail;
};

class Channel;

// A registered unbound buffer. Thread rules: post from any thread, wait from the executor only.
class Buf {
 public:
  Buf(Channel* ch, std::unique_ptr<gloo::transport::UnboundBuffer> ub);
  ~Buf();
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;

  void send(int peer, uint64_t slot, size_t offset, size_t nbytes);
  void recv(int peer, uint64_t slot, size_t offset, size_t nbytes);
  // Wait for one completed send/recv on this buffer, until the channel's deadline.
  // Throws AbortedError, OpTimeoutError or Gloo's exceptions.
  void waitSend();
  void waitRecv();

 private:
  Channel* ch_;
  std::unique_ptr<gloo::transport::UnboundBuffer> ub_;
};

class Channel {
 public:
  explicit Channel(std::shared_ptr<gloo::Context> ctx) : ctx_(std::move(ctx)) {}

  // A buffer over [ptr, ptr+bytes). Throws AbortedError once the channel is aborted.
  std::unique_ptr<Buf> buffer(void* ptr, size_t bytes);
  // Interrupts every current and future wait. Idempotent.
  void abortAll();
  bool aborted() const;

  // The deadline for waits; set by the executor before each operation.
  void setDeadline(Deadline d) { deadline_ = d; }
  Deadline deadline() const { return deadline_; }

 private:
  friend class Buf;
  void unregister(gloo::transport::UnboundBuffer* ub);

  std::shared_ptr<gloo::Context> ctx_;
  mutable std::mutex mu_;
  std::unordered_set<gloo::transport::UnboundBuffer*> live_;  // GUARDED_BY(mu_)
  bool aborted_ = false;                                       // GUARDED_BY(mu_)
  Deadline deadline_{};  // executor thread only
};

}  // namespace mw::detail
