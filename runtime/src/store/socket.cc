#include "store/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "store/auth.h"
#include "store/wire.h"

namespace mw {

std::string StoreAddress::str() const { return host + ":" + std::to_string(port); }

Result<StoreAddress> parseStoreAddress(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status(Code::kInvalidArgument, "store address '" + text + "' is not host:port");
  }
  std::string port_text = text.substr(colon + 1);
  bool digits =
      !port_text.empty() && port_text.size() <= 5 &&
      std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  int port = digits ? std::stoi(port_text) : 0;
  if (port < 1 || port > 65535) {
    return Status(Code::kInvalidArgument,
                  "store address '" + text + "' has port '" + port_text + "', expected 1..65535");
  }
  StoreAddress address;
  address.host = text.substr(0, colon);
  address.port = static_cast<uint16_t>(port);
  return address;
}

namespace store {
namespace {

// Connect failures worth retrying until the deadline: the server may not listen yet.
bool isTransient(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT || err == EHOSTUNREACH ||
         err == ENETUNREACH || err == EAGAIN || err == EINTR || err == ECONNABORTED;
}

timespec toTimespec(Clock::duration d) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  if (ns < 0) ns = 0;
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

sockaddr_in makeAddr(in_addr ip, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = ip;
  sa.sin_port = htons(port);
  return sa;
}

// One non-blocking connect attempt. Returns 0 and sets *out, an errno, or -1 when the deadline
// passed first.
int connectOnce(const sockaddr_in& sa, Deadline deadline, Fd* out) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    if (errno != EINPROGRESS) return errno;
    Status ready = waitReady(fd.get(), POLLOUT, deadline);
    if (ready.code() == Code::kAborted) return ECANCELED;
    if (!ready.ok()) return ready.code() == Code::kTimeout ? -1 : EIO;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    if (err != 0) return err;
  }
  *out = std::move(fd);
  return 0;
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int Fd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errnoText(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

Status setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return Status(Code::kIoError, "cannot make socket non-blocking: " + errnoText(errno));
  }
  return Status::Ok();
}

Status setNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Status(Code::kIoError, "cannot set TCP_NODELAY: " + errnoText(errno));
  }
  return Status::Ok();
}

Result<in_addr> resolveIpv4(const std::string& host) {
  in_addr ip{};
  if (::inet_pton(AF_INET, host.c_str(), &ip) == 1) return ip;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0 || list == nullptr) {
    return Status(Code::kInvalidArgument,
                  "cannot resolve host '" + host + "': " + ::gai_strerror(rc));
  }
  ip = reinterpret_cast<const sockaddr_in*>(list->ai_addr)->sin_addr;
  ::freeaddrinfo(list);
  return ip;
}

Result<Fd> connectTcp(const StoreAddress& address, Deadline deadline) {
  auto ip = resolveIpv4(address.host);
  if (!ip.ok()) return ip.status();
  sockaddr_in sa = makeAddr(*ip, address.port);
  int last = 0;
  while (true) {
    Fd fd;
    int err = connectOnce(sa, deadline, &fd);
    if (err == 0) {
      MW_RETURN_IF_ERROR(setNoDelay(fd.get()));
      return fd;
    }
    if (err == ECANCELED) return Status(Code::kAborted, "cancelled");
    if (err > 0) last = err;
    if (err > 0 && !isTransient(err)) {
      return Status(Code::kIoError,
                    "cannot connect to store " + address.str() + ": " + errnoText(err));
    }
    if (err < 0 || Clock::now() >= deadline) {
      return Status(Code::kTimeout, "could not connect to store " + address.str() +
                                        " before the deadline" +
                                        (last ? ": last error " + errnoText(last) : ""));
    }
    // The server may not listen yet; retry soon, but never sleep past the deadline.
    MW_RETURN_IF_ERROR(pause(std::chrono::milliseconds(10), deadline));
  }
}

Result<Fd> listenTcp(const std::string& host, uint16_t port, int backlog) {
  std::string where = host + ":" + std::to_string(port);
  auto ip = resolveIpv4(host);
  if (!ip.ok()) return ip.status();
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(Code::kIoError, "cannot create socket: " + errnoText(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa = makeAddr(*ip, port);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    return Status(Code::kIoError, "cannot bind store address " + where + ": " + errnoText(errno));
  }
  if (::listen(fd.get(), backlog) != 0) {
    return Status(Code::kIoError, "cannot listen on " + where + ": " + errnoText(errno));
  }
  return fd;
}

Result<uint16_t> localPort(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    return Status(Code::kIoError, "getsockname failed: " + errnoText(errno));
  }
  return static_cast<uint16_t>(ntohs(sa.sin_port));
}

namespace {
thread_local int t_cancel_fd = -1;  // the calling thread's CancelScope, or -1
}  // namespace

CancelScope::CancelScope(int event_fd) { t_cancel_fd = event_fd; }
CancelScope::~CancelScope() { t_cancel_fd = -1; }
int currentCancelFd() { return t_cancel_fd; }

Status waitReady(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p[2] = {{fd, events, 0}, {t_cancel_fd, POLLIN, 0}};
    const nfds_t n = t_cancel_fd >= 0 ? 2 : 1;
    timespec ts = toTimespec(timeUntil(deadline));
    int rc = ::ppoll(p, n, &ts, nullptr);
    if (rc > 0 && n == 2 && p[1].revents != 0) return Status(Code::kAborted, "cancelled");
    if (rc > 0) return Status::Ok();  // errors and hangups surface in the following call
    if (rc < 0 && errno != EINTR) {
      return Status(Code::kIoError, "poll failed: " + errnoText(errno));
    }
    if (rc == 0 && Clock::now() >= deadline) {
      return Status(Code::kTimeout, "deadline passed while waiting for the store");
    }
  }
}

Status pause(Clock::duration d, Deadline deadline) {
  const Deadline until = std::min(deadline, deadlineIn(d));
  if (t_cancel_fd < 0) {
    std::this_thread::sleep_until(until);
    return Status::Ok();
  }
  Status s = waitReady(t_cancel_fd, POLLIN, until);
  if (s.ok()) return Status(Code::kAborted, "cancelled");
  return s.code() == Code::kTimeout ? Status::Ok() : s;
}

Status sendAll(int fd, std::string_view data, Deadline deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      MW_RETURN_IF_ERROR(waitReady(fd, POLLOUT, deadline));
    } else if (n < 0 && errno != EINTR) {
      return Status(Code::kIoError, "send failed: " + errnoText(errno));
    }
  }
  return Status::Ok();
}

Status recvExact(int fd, char* data, size_t size, Deadline deadline) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd, data + got, size - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      return Status(Code::kIoError, "connection closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      MW_RETURN_IF_ERROR(waitReady(fd, POLLIN, deadline));
    } else if (errno != EINTR) {
      return Status(Code::kIoError, "recv failed: " + errnoText(errno));
    }
  }
  return Status::Ok();
}

Result<std::string> recvFrame(int fd, size_t max_payload, Deadline deadline) {
  char header[kFrameHeaderBytes];
  MW_RETURN_IF_ERROR(recvExact(fd, header, sizeof(header), deadline));
  uint32_t length = loadU32(header);
  if (length == 0 || length > max_payload) {
    return Status(Code::kRemoteError, "received a frame of " + std::to_string(length) +
                                          " bytes (limit " + std::to_string(max_payload) + ")");
  }
  // Grow in steps so a bogus length costs memory only for bytes that really arrive.
  constexpr size_t kStep = 1u << 20;
  std::string payload;
  while (payload.size() < length) {
    size_t old = payload.size();
    payload.resize(std::min<size_t>(length, old + kStep));
    MW_RETURN_IF_ERROR(recvExact(fd, payload.data() + old, payload.size() - old, deadline));
  }
  return payload;
}

Status FramedConn::flush() {
  while (pending() > 0) {
    ssize_t n = ::send(fd_.get(), out_.data() + out_sent_, pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_sent_ += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else if (n < 0 && errno != EINTR) {
      return Status(Code::kIoError, "failed: " + errnoText(errno));
    }
  }
  // Frames sent whole: the next one starts after each header's length.
  while (frame_start_ < out_sent_) {
    frame_start_ += kFrameHeaderBytes + loadU32(out_.data() + frame_start_);
  }
  if (pending() == 0) {
    // A reply of many megabytes must not stay held by a connection that is idle now.
    if (out_.capacity() > kKeptOutCapacity) std::string().swap(out_);
    out_.clear();
    out_sent_ = 0;
    frame_start_ = 0;
  } else if (out_sent_ > (64u << 10)) {
    MW_CHECK(frame_start_ >= out_sent_);  // the headers still to be read are kept
    out_.erase(0, out_sent_);
    frame_start_ -= out_sent_;
    out_sent_ = 0;
  }
  return Status::Ok();
}

bool FramedConn::dropQueued() {
  const bool between_frames = frame_start_ == out_sent_;
  std::string().swap(out_);
  out_sent_ = 0;
  frame_start_ = 0;
  return between_frames;
}

Status FramedConn::readAvailable(size_t budget, bool keep, size_t* got) {
  char buf[64 * 1024];
  *got = 0;
  while (*got < budget) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      *got += static_cast<size_t>(n);
      if (keep) in_.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      return Status(Code::kIoError, "closed");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      return Status(Code::kIoError, "failed: " + errnoText(errno));
    }
  }
  return Status::Ok();
}

namespace {

// The next frame of the greeting, decoded; an ERROR reply becomes its status. `*closed` is set
// when the connection closed or failed before a frame came.
Result<Message> greetingReply(int fd, const StoreAddress& address, Deadline deadline,
                              bool* closed) {
  auto payload = recvFrame(fd, kMaxReplyBytes, deadline);
  if (!payload.ok()) {
    *closed = payload.status().code() == Code::kIoError;
    return payload.status();
  }
  auto reply = decodePayload(*payload);
  if (!reply.ok()) return reply.status();
  if (auto* error = std::get_if<msg::Error>(&*reply)) {
    return Status(error->code, "store " + address.str() + ": " + error->message);
  }
  return reply;
}

// One attempt at connecting and greeting. `*closed` tells whether it failed because the
// connection closed or failed under it (worth another attempt).
Result<Fd> greetOnce(const StoreAddress& address, const std::string& token, Deadline deadline,
                     bool* closed) {
  *closed = false;
  auto client_nonce = auth::randomBytes(auth::kNonceBytes);
  if (!client_nonce.ok()) return client_nonce.status();
  auto fd = connectTcp(address, deadline);
  if (!fd.ok()) return fd.status();
  auto prefix = [&](const Status& s) {
    if (s.code() == Code::kPermissionDenied || s.message().rfind("store ", 0) == 0) return s;
    return Status(s.code() == Code::kTimeout ? Code::kTimeout : Code::kIoError,
                  "store " + address.str() + ": greeting failed: " + s.message());
  };
  auto unexpected = [&](const Message& m) {
    return prefix(
        Status(Code::kIoError, std::string("unexpected reply ") + msgTypeName(typeOf(m))));
  };
  Status sent =
      sendAll(fd->get(), encodeFrame(msg::Hello{kProtocolVersion, *client_nonce}), deadline);
  if (!sent.ok()) {
    *closed = sent.code() == Code::kIoError;
    return prefix(sent);
  }
  auto reply = greetingReply(fd->get(), address, deadline, closed);
  if (!reply.ok()) return prefix(reply.status());
  if (std::holds_alternative<msg::Ok>(*reply)) {
    if (token.empty()) return fd;
    // It asked for no proof, so it cannot know the token: not the store this caller was sent to.
    return Status(Code::kPermissionDenied,
                  "store " + address.str() +
                      " requires no token, but this client has one: it is not the store that "
                      "token belongs to");
  }
  auto* challenge = std::get_if<msg::Challenge>(&*reply);
  if (challenge == nullptr) return unexpected(*reply);
  if (token.empty()) {
    return Status(Code::kPermissionDenied,
                  "store " + address.str() + " requires a token, and this client has none");
  }
  if (!auth::equalProofs(challenge->server_proof,
                         auth::serverProof(token, *client_nonce, challenge->server_nonce))) {
    return Status(Code::kPermissionDenied,
                  "store " + address.str() +
                      " could not prove that it holds this client's token (a different token, "
                      "or not the world's store)");
  }
  sent = sendAll(
      fd->get(),
      encodeFrame(msg::Auth{auth::clientProof(token, *client_nonce, challenge->server_nonce)}),
      deadline);
  if (!sent.ok()) {
    *closed = sent.code() == Code::kIoError;
    return prefix(sent);
  }
  reply = greetingReply(fd->get(), address, deadline, closed);
  if (!reply.ok()) return prefix(reply.status());
  if (!std::holds_alternative<msg::Ok>(*reply)) return unexpected(*reply);
  return fd;
}

}  // namespace

Result<Fd> connectAndGreet(const StoreAddress& address, const std::string& token,
                           Deadline deadline) {
  if (token.size() > kMaxKeyBytes) {
    return Status(Code::kInvalidArgument, "store token is longer than 4096 bytes");
  }
  // A store under a flood of connections may close ours during the handshake (store-protocol.md,
  // "Limits"): like a refused connection, that is tried again until the deadline.
  while (true) {
    bool closed = false;
    auto fd = greetOnce(address, token, deadline, &closed);
    if (fd.ok() || !closed || Clock::now() >= deadline) return fd;
    MW_RETURN_IF_ERROR(pause(std::chrono::milliseconds(10), deadline));
  }
}

Result<Fd> connectAsMember(const StoreAddress& address, const std::string& token,
                           const Message& claim, Deadline deadline, Message* reply) {
  auto pauseFor = std::chrono::milliseconds(10);
  Status refused;  // the store's last refusal: the reason when the deadline then passes
  while (true) {
    Status failed;
    auto fd = connectAndGreet(address, token, deadline);
    if (fd.ok()) {
      failed = sendAll(fd->get(), encodeFrame(claim), deadline);
      Result<std::string> payload = failed;
      if (failed.ok()) payload = recvFrame(fd->get(), kMaxReplyBytes, deadline);
      Result<Message> decoded = payload.ok() ? decodePayload(*payload) : payload.status();
      if (decoded.ok()) {
        if (auto* e = std::get_if<msg::Error>(&*decoded)) return Status(e->code, e->message);
        *reply = std::move(*decoded);
        return fd;
      }
      failed = decoded.status();
    } else {
      failed = fd.status();
    }
    // Evicted or refused for room: worth another try. Anything else is the answer.
    const bool retry = failed.code() == Code::kUnavailable || failed.code() == Code::kIoError;
    if (failed.code() == Code::kUnavailable) refused = failed;
    if (failed.code() == Code::kTimeout && !refused.ok()) {
      return Status(Code::kUnavailable, refused.message() + " (tried again until the deadline)");
    }
    if (!retry || Clock::now() >= deadline) return failed;
    MW_RETURN_IF_ERROR(pause(pauseFor, deadline));
    pauseFor = std::min(pauseFor * 2, std::chrono::milliseconds(160));
  }
}

}  // namespace store
}  // namespace mw
