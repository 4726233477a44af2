// The baselines the runtime is measured against, in the same two processes:
//   RawGloo: Gloo used directly (rendezvous::Context over a FileStore, tcp::Device, unbound buffers
//            with one fixed slot, gloo::allreduce), the best a Gloo user gets without a runtime:
//            the unbound buffers and the all_reduce options are kept from call to call while the
//            buffer and size stay the same.
//   TcpLink: one connected loopback TCP socket moving the same bytes with blocking send/recv, the
//            ceiling of any TCP transport on the machine.
//
// Every call blocks and throws BenchError on failure. Thread rules: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mwb {

class RawGloo {
 public:
  // Connects rank `rank` of `size` through a gloo::rendezvous::FileStore in `dir`, keys under
  // `prefix` (FileStore keys cannot be reused: use a fresh prefix per context).
  static std::unique_ptr<RawGloo> connect(const std::string& dir, const std::string& prefix,
                                          int rank, int size);
  ~RawGloo();

  // `iters` messages of `bytes` from `buf`, one after another, each waited for. A buffer must stay
  // valid until another buffer is passed (or this object goes).
  void send(const void* buf, size_t bytes, int dst, long iters);
  void recv(void* buf, size_t bytes, int src, long iters);
  // `iters` in-place float32 sum all-reduces of `count` elements.
  void allreduce(float* buf, size_t count, long iters);

 private:
  struct Impl;
  explicit RawGloo(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A listening loopback socket (port 0 picks a free port).
class TcpListener {
 public:
  TcpListener();
  ~TcpListener();
  uint16_t port() const { return port_; }
  // Accepts one connection, waiting at most `timeout_ms`. Returns the connected fd.
  int accept(int timeout_ms);

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

class TcpLink {
 public:
  explicit TcpLink(int fd) : fd_(fd) {}
  static std::unique_ptr<TcpLink> connect(uint16_t port);
  ~TcpLink();
  void send(const void* buf, size_t bytes, long iters);
  void recv(void* buf, size_t bytes, long iters);

 private:
  int fd_;
};

}  // namespace mwb
