// MemberLink: a member's liveness connection to its world's store. After the blocking join the
// socket is only used without blocking: heartbeats and BROKEN reports go through a small output
// buffer (a partial write is finished on the next call, so the frame stream stays intact), and
// readNotices parses whatever complete frames have arrived.
#include "store/member_link.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>

#include "base/failpoint.h"
#include "base/mutex.h"
#include "multiworld/store.h"
#include "store/socket.h"
#include "store/wire.h"

namespace mw {
namespace store {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxDetailBytes = 4096;
constexpr size_t kMaxOutBytes = 64u << 10;  // reports beyond this are dropped, never block
constexpr size_t kMaxNoticeFrameBytes = 1u << 20;

class Link final : public MemberLink {
 public:
  Link(Fd fd, milliseconds interval, milliseconds timeout, const std::string& world)
      : io_(std::move(fd), kMaxNoticeFrameBytes),
        fd_(io_.fd()),
        interval_(interval),
        timeout_(timeout),
        heartbeat_point_("mw/heartbeat", world),
        link_point_("mw/store/link", world) {}

  int fd() const override { return fd_; }
  milliseconds heartbeatInterval() const override { return interval_; }
  milliseconds heartbeatTimeout() const override { return timeout_; }
  Clock::time_point lastHeard() const override {
    MutexLock lock(mu_);
    return last_heard_;
  }

  Status sendHeartbeat() override {
    MutexLock lock(mu_);
    if (auto injected = link_point_.check()) {
      // As when the socket fails for real: the connection is gone at both ends, so the store
      // announces this member's loss to the others at once.
      ::shutdown(io_.fd(), SHUT_RDWR);
      fail("connection to the store: " + detail::errnoText(injected->failnum) + injected->suffix());
    }
    if (!error_.ok()) return error_;
    flush();
    // A backlog means the socket buffer is full: skip this beat rather than queue beats up. An
    // injected heartbeat failure drops the beat: the member looks silent to the store.
    if (error_.ok() && io_.pending() == 0 && !heartbeat_point_.check()) {
      io_.queue(encodeFrame(msg::Heartbeat{}));
      flush();
    }
    return error_;
  }

  Status reportBroken(Cause cause, const std::string& detail) override {
    MutexLock lock(mu_);
    return queueReport(cause, detail);
  }

  Status formed() override {
    MutexLock lock(mu_);
    return queueFormed();
  }

  Status leave() override {
    MutexLock lock(mu_);
    // A member that leaves was in a formed world (it was healthy): said first, so that the
    // others hear of its leaving even if FORMED had not gone out yet.
    queueFormed().ignore();
    return queueReport(Cause::kPeerLeft, "left the world");
  }

  Status awaitClose(Deadline deadline) override {
    while (true) {
      short events = POLLIN;
      {
        MutexLock lock(mu_);
        if (!error_.ok()) return error_;
        flush();
        if (!error_.ok()) return error_;
        size_t got = 0;
        // Whatever the store still says is of no use to a member that left: read and dropped.
        Status read = io_.readAvailable(SIZE_MAX, false, &got);
        if (!read.ok()) {
          fail("left the world");
          return Status::Ok();  // closed (EOF or reset): the store has taken the leave
        }
        if (io_.pending() > 0) events |= POLLOUT;
      }
      const auto left = remaining(deadline);
      if (left.count() <= 0) {
        return Status(Code::kTimeout,
                      "member link: the store did not close the link of a "
                      "member that left in time");
      }
      pollfd p{fd_, events, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    }
  }

  Result<std::vector<MemberNotice>> readNotices() override {
    MutexLock lock(mu_);
    if (!error_.ok()) return error_;
    size_t got = 0;
    Status read = io_.readAvailable(SIZE_MAX, true, &got);
    std::vector<MemberNotice> notices;
    std::string payload;
    while (error_.ok()) {
      auto next = io_.in().next(&payload);
      if (!next.ok()) fail("store sent a bad frame: " + next.status().message());
      if (!next.ok() || !*next) break;
      last_heard_ = Clock::now();
      handleFrame(payload, &notices);
    }
    if (!read.ok()) fail("connection to the store " + read.message());
    // Notices that arrived before the close are delivered first; the error follows next call.
    if (!error_.ok() && notices.empty()) return error_;
    return notices;
  }

  void markJoined() {
    MutexLock lock(mu_);
    last_heard_ = Clock::now();
  }

 private:
  Status queueReport(Cause cause, const std::string& detail) MW_REQUIRES(mu_) {
    if (!error_.ok()) return error_;
    std::string frame = encodeFrame(msg::Broken{cause, detail.substr(0, kMaxDetailBytes)});
    if (io_.pending() + frame.size() <= kMaxOutBytes) io_.queue(frame);
    flush();
    return error_;
  }

  Status queueFormed() MW_REQUIRES(mu_) {
    if (!error_.ok() || formed_sent_) return error_;
    formed_sent_ = true;
    io_.queue(encodeFrame(msg::Formed{}));
    flush();
    return error_;
  }

  void fail(const std::string& why) MW_REQUIRES(mu_) {
    if (error_.ok()) error_ = Status(Code::kIoError, "member link: " + why);
  }

  void flush() MW_REQUIRES(mu_) {
    Status sent = io_.flush();
    if (!sent.ok()) fail("connection to the store " + sent.message());
  }

  void handleFrame(const std::string& payload, std::vector<MemberNotice>* notices)
      MW_REQUIRES(mu_) {
    auto m = decodePayload(payload);
    if (!m.ok()) return fail("store sent a bad frame: " + m.status().message());
    if (std::holds_alternative<msg::Ping>(*m)) return;
    if (auto* n = std::get_if<msg::Notice>(&*m)) {
      notices->push_back(MemberNotice{static_cast<int>(n->rank), n->cause, n->detail});
      return;
    }
    if (auto* e = std::get_if<msg::Error>(&*m)) return fail("store sent an error: " + e->message);
    fail(std::string("unexpected ") + msgTypeName(typeOf(*m)) + " frame from the store");
  }

  // The watchdog drives the link; the joining thread says FORMED (World::markHealthy) meanwhile.
  mutable Mutex mu_;
  FramedConn io_ MW_GUARDED_BY(mu_);
  const int fd_;  // io_'s socket, which never changes
  const milliseconds interval_;
  const milliseconds timeout_;
  Status error_ MW_GUARDED_BY(mu_);  // sticky: the first failure
  bool formed_sent_ MW_GUARDED_BY(mu_) = false;
  Clock::time_point last_heard_ MW_GUARDED_BY(mu_) = {};
  detail::FailPoint heartbeat_point_ MW_GUARDED_BY(mu_);
  detail::FailPoint link_point_ MW_GUARDED_BY(mu_);
};

}  // namespace
}  // namespace store

Result<std::unique_ptr<MemberLink>> MemberLink::join(const StoreAddress& address,
                                                     const std::string& token,
                                                     const std::string& world, int size, int rank,
                                                     Deadline deadline,
                                                     std::chrono::milliseconds heartbeat_timeout) {
  if (world.size() > store::kMaxKeyBytes) {
    return Status(Code::kInvalidArgument, "world name is longer than 4096 bytes");
  }
  auto failed = [&](const Status& s) {
    return Status(s.code(), "joining world '" + world + "' as rank " + std::to_string(rank) +
                                " at store " + address.str() + ": " + s.message());
  };
  store::Message reply;
  auto fd = store::connectAsMember(
      address, token, store::msg::MemberJoin{world, size, rank, heartbeat_timeout.count()},
      deadline, &reply);
  if (!fd.ok()) return failed(fd.status());
  auto* joined = std::get_if<store::msg::JoinOk>(&reply);
  if (joined == nullptr || joined->heartbeat_interval_ms <= 0 ||
      joined->heartbeat_timeout_ms <= 0) {
    return failed(Status(Code::kIoError, std::string("unexpected ") +
                                             store::msgTypeName(store::typeOf(reply)) +
                                             " reply to MEMBER_JOIN"));
  }
  auto link = std::make_unique<store::Link>(
      std::move(*fd), std::chrono::milliseconds(joined->heartbeat_interval_ms),
      std::chrono::milliseconds(joined->heartbeat_timeout_ms), world);
  link->markJoined();
  return std::unique_ptr<MemberLink>(std::move(link));
}

}  // namespace mw
