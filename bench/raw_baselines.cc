#include "raw_baselines.h"

#include <arpa/inet.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bench_util.h"

namespace mwb {

namespace {

constexpr uint64_t kSlot = 0x6d77626e;  // fixed slot of every raw send/recv
constexpr uint32_t kAllreduceTag = 7;

std::string errnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

struct RawGloo::Impl {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  // Kept across calls, as a Gloo user moving the same buffer again and again keeps them: the
  // last buffer registered per direction and the last all_reduce's options.
  struct Registered {
    void* ptr = nullptr;
    size_t bytes = 0;
    std::unique_ptr<gloo::transport::UnboundBuffer> ub;
  } send_buf, recv_buf;
  float* ar_ptr = nullptr;
  size_t ar_count = 0;
  std::unique_ptr<gloo::AllreduceOptions> ar_opts;

  gloo::transport::UnboundBuffer& buffer(Registered& r, void* ptr, size_t bytes) {
    if (!r.ub || r.ptr != ptr || r.bytes != bytes) {
      r.ub = context->createUnboundBuffer(ptr, bytes);
      r.ptr = ptr;
      r.bytes = bytes;
    }
    return *r.ub;
  }
  gloo::AllreduceOptions& allreduceOptions(float* buf, size_t count) {
    if (!ar_opts || ar_ptr != buf || ar_count != count) {
      ar_opts = std::make_unique<gloo::AllreduceOptions>(context);
      ar_opts->setOutput(buf, count);
      void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
      ar_opts->setReduceFunction(fn);
      ar_opts->setTag(kAllreduceTag);
      ar_ptr = buf;
      ar_count = count;
    }
    return *ar_opts;
  }
};

RawGloo::RawGloo(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RawGloo::~RawGloo() = default;

std::unique_ptr<RawGloo> RawGloo::connect(const std::string& dir, const std::string& prefix,
                                          int rank, int size) {
  try {
    auto impl = std::make_unique<Impl>();
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    impl->device = gloo::transport::tcp::CreateDevice(attr);
    impl->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    impl->context->setTimeout(std::chrono::seconds(60));
    gloo::rendezvous::FileStore file(dir);
    gloo::rendezvous::PrefixStore store(prefix, file);
    impl->context->connectFullMesh(store, impl->device);
    return std::unique_ptr<RawGloo>(new RawGloo(std::move(impl)));
  } catch (const std::exception& e) {
    throw BenchError(std::string("raw gloo connect: ") + e.what());
  }
}

void RawGloo::send(const void* buf, size_t bytes, int dst, long iters) {
  try {
    auto& ub = impl_->buffer(impl_->send_buf, const_cast<void*>(buf), bytes);
    for (long i = 0; i < iters; ++i) {
      ub.send(dst, kSlot);
      ub.waitSend();
    }
  } catch (const std::exception& e) {
    throw BenchError(std::string("raw gloo send: ") + e.what());
  }
}

void RawGloo::recv(void* buf, size_t bytes, int src, long iters) {
  try {
    auto& ub = impl_->buffer(impl_->recv_buf, buf, bytes);
    for (long i = 0; i < iters; ++i) {
      ub.recv(src, kSlot);
      ub.waitRecv();
    }
  } catch (const std::exception& e) {
    throw BenchError(std::string("raw gloo recv: ") + e.what());
  }
}

void RawGloo::allreduce(float* buf, size_t count, long iters) {
  try {
    auto& opts = impl_->allreduceOptions(buf, count);
    for (long i = 0; i < iters; ++i) gloo::allreduce(opts);
  } catch (const std::exception& e) {
    impl_->ar_opts.reset();  // a failed transfer may still use its buffers
    throw BenchError(std::string("raw gloo allreduce: ") + e.what());
  }
}

TcpListener::TcpListener() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw BenchError(errnoText("socket"));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 4) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw BenchError(errnoText("tcp listen"));
  }
  port_ = ntohs(a.sin_port);
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

int TcpListener::accept(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) throw BenchError("tcp accept: no connection in time");
  int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) throw BenchError(errnoText("accept"));
  return fd;
}

std::unique_ptr<TcpLink> TcpLink::connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw BenchError(errnoText("socket"));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw BenchError(errnoText("tcp connect"));
  }
  return std::make_unique<TcpLink>(fd);
}

TcpLink::~TcpLink() { ::close(fd_); }

void TcpLink::send(const void* buf, size_t bytes, long iters) {
  const char* p = static_cast<const char*>(buf);
  for (long i = 0; i < iters; ++i) {
    for (size_t done = 0; done < bytes;) {
      ssize_t n = ::send(fd_, p + done, bytes - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw BenchError(errnoText("tcp send"));
      done += static_cast<size_t>(n);
    }
  }
}

void TcpLink::recv(void* buf, size_t bytes, long iters) {
  char* p = static_cast<char*>(buf);
  for (long i = 0; i < iters; ++i) {
    for (size_t done = 0; done < bytes;) {
      ssize_t n = ::recv(fd_, p + done, bytes - done, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw BenchError(n == 0 ? "tcp recv: peer closed" : errnoText("tcp recv"));
      done += static_cast<size_t>(n);
    }
  }
}

}  // namespace mwb
