// Helpers for the store tests: servers, clients and member links on loopback, a raw connection
// for bytes no well-behaved client sends, and a reader of member notices.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <deque>
#include <thread>
#include <vector>

#include "multiworld/store.h"
#include "store/member_link.h"
#include "store/socket.h"
#include "store/wire.h"
#include "support/util.h"

namespace mw::store_test {

using std::chrono::milliseconds;
using store::Message;

inline Deadline in(int ms) { return deadlineIn(milliseconds(ms)); }

inline int64_t msSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

// An upper time bound, stretched for slow (sanitizer) builds by MW_TEST_TIME_SCALE.
inline int64_t upTo(long ms) { return test::scaled(ms).count(); }

// The options of a store for world "w1" of `size` members; `heartbeat` when not zero.
inline StoreServerOptions worldStore(int size, milliseconds heartbeat = milliseconds(0)) {
  StoreServerOptions options;
  options.world_name = "w1";
  options.world_size = size;
  if (heartbeat.count() > 0) options.heartbeat_timeout = heartbeat;
  return options;
}

inline std::unique_ptr<StoreServer> startServer(const StoreServerOptions& options = {}) {
  auto server = StoreServer::start(options);
  REQUIRE(server.ok());
  return std::move(server).value();
}

inline StoreAddress addressOf(const StoreServer& server) {
  return StoreAddress{"127.0.0.1", server.port()};
}

inline std::unique_ptr<StoreClient> connectTo(const StoreServer& server,
                                              const std::string& token = "") {
  auto client = StoreClient::connect(addressOf(server), token, in(5000));
  INFO(client.status().toString());
  REQUIRE(client.ok());
  return std::move(client).value();
}

inline std::unique_ptr<MemberLink> joinAs(const StoreServer& server, int rank,
                                          const char* world = "w1", int size = 3) {
  auto link = MemberLink::join(addressOf(server), "", world, size, rank, in(5000));
  INFO(link.status().toString());
  REQUIRE(link.ok());
  return std::move(link).value();
}

// Says FORMED on each link, as a member's watchdog does once its world is healthy: from then on
// the store announces their losses and acts on their reports.
inline void formAll(std::initializer_list<MemberLink*> links) {
  for (MemberLink* link : links) REQUIRE(link->formed().ok());
}

// A raw TCP connection for feeding the server bytes that no well-behaved client sends.
class RawConn {
 public:
  explicit RawConn(uint16_t port) {
    auto fd = store::connectTcp(StoreAddress{"127.0.0.1", port}, in(5000));
    REQUIRE(fd.ok());
    fd_ = std::move(*fd);
  }
  int fd() const { return fd_.get(); }
  // The server may close while we send; that is part of what is tested.
  void send(std::string_view bytes) { store::sendAll(fd_.get(), bytes, in(2000)).ignore(); }
  // Everything received until the server closes (true) or the deadline passes (false).
  std::pair<std::string, bool> readToEof(Deadline deadline) {
    std::string got;
    char buf[4096];
    while (store::waitReady(fd_.get(), POLLIN, deadline).ok()) {
      ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return {got, true};
    }
    return {got, false};
  }

 private:
  store::Fd fd_;
};

// The first frame of `bytes`, decoded.
inline Message firstFrame(const std::string& bytes) {
  REQUIRE(bytes.size() >= 4);
  uint32_t length = store::loadU32(bytes.data());
  REQUIRE(bytes.size() >= 4 + length);
  auto m = store::decodePayload(std::string_view(bytes).substr(4, length));
  REQUIRE(m.ok());
  return *m;
}

// The frames in `bytes`, decoded (a trailing partial frame is left out).
inline std::vector<Message> framesIn(const std::string& bytes) {
  store::FrameReader reader(store::kMaxReplyBytes);
  reader.append(bytes.data(), bytes.size());
  std::vector<Message> out;
  std::string payload;
  while (reader.next(&payload).value()) out.push_back(store::decodePayload(payload).value());
  return out;
}

// The first ERROR frame in `bytes` (the test fails when there is none).
inline store::msg::Error firstError(const std::string& bytes) {
  for (auto& m : framesIn(bytes)) {
    if (auto* error = std::get_if<store::msg::Error>(&m)) return *error;
  }
  FAIL("no ERROR frame among " << framesIn(bytes).size() << " frames");
  return {};
}

inline std::string frameWith(const std::string& payload) {
  std::string out(4, '\0');
  auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + payload;
}

// Reads a member link's notices one at a time, heartbeating `beating` on the link's interval
// meanwhile.
class NoticeReader {
 public:
  explicit NoticeReader(MemberLink& link) : link_(link) {}

  // The next notice; the link's error when it fails, kTimeout at the deadline.
  Result<MemberNotice> next(const std::vector<MemberLink*>& beating, Deadline deadline) {
    auto next_beat = Clock::now();
    while (backlog_.empty() && Clock::now() < deadline) {
      if (Clock::now() >= next_beat) {
        for (auto* link : beating) link->sendHeartbeat().ignore();
        next_beat += link_.heartbeatInterval();
      }
      pollfd p{link_.fd(), POLLIN, 0};
      ::poll(&p, 1, 2);
      auto notices = link_.readNotices();
      if (!notices.ok()) return notices.status();
      backlog_.insert(backlog_.end(), notices->begin(), notices->end());
    }
    if (backlog_.empty()) return Status(Code::kTimeout, "no notice");
    MemberNotice n = backlog_.front();
    backlog_.pop_front();
    return n;
  }

 private:
  MemberLink& link_;
  std::deque<MemberNotice> backlog_;
};

inline Result<MemberNotice> awaitNotice(MemberLink& watcher,
                                        const std::vector<MemberLink*>& beating,
                                        Deadline deadline) {
  return NoticeReader(watcher).next(beating, deadline);
}

}  // namespace mw::store_test
