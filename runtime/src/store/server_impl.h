// The StoreServer's implementation class, shared by store_server.cc (event loop, key-value
// requests) and store_membership.cc (member links: join, heartbeats, silence, notices).
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <optional>
#include <stop_token>
#include <thread>
#include <unordered_map>

#include "base/lateness.h"
#include "base/mutex.h"
#include "multiworld/store.h"
#include "store/join_keys.h"
#include "store/kv_table.h"
#include "store/socket.h"
#include "store/wire.h"

namespace mw {
namespace store {
namespace server_impl {

using std::chrono::milliseconds;

constexpr milliseconds kLinger{500};        // how long a closing connection may drain
constexpr milliseconds kAcceptPause{100};   // back-off after EMFILE and friends
constexpr size_t kOutHighWater = 1u << 20;  // stop serving a client that does not read replies
constexpr size_t kInWhileWaiting = 64u << 10;
constexpr size_t kReadBudget = 1u << 20;  // bytes read from one connection per wake-up
constexpr int64_t kMaxTimeoutMs = 30LL * 24 * 3600 * 1000;
// Bound on a frame from a connection admitted into the room kept for members, until it claims a
// member's place: a MEMBER_JOIN or MEMBER_CLIENT with the longest world name.
constexpr size_t kMaxClaimFrameBytes = kMaxKeyBytes + 64;

enum class ConnState { kOpen, kLingering, kDead };

struct PendingWait {
  std::vector<std::string> keys;
  bool is_get = false;
  int64_t timeout_ms = 0;
  Deadline deadline;
};

struct Conn {
  Conn(uint64_t conn_id, Fd socket, Clock::time_point now)
      : id(conn_id), io(std::move(socket), kMaxHandshakeFrameBytes), accepted_at(now) {}

  uint64_t id;
  FramedConn io;
  ConnState state = ConnState::kOpen;
  // The handshake (store_handshake.cc): HELLO seen, CHALLENGE sent, and done (authed).
  bool hello_seen = false;
  bool authed = false;
  std::string client_nonce;
  std::string server_nonce;  // non-empty once CHALLENGE was sent
  Clock::time_point accepted_at;
  size_t counted_in = 0;   // this connection's input as counted in Server::buffered_
  size_t counted_out = 0;  // its output queue's memory as counted there
  // Since when its output has waited without the peer taking any of it (valid while pending).
  Clock::time_point out_since{};
  // Admitted into the room kept for the world's members: until it claims a member's place
  // (MEMBER_JOIN or MEMBER_CLIENT) it counts as a connection in its handshake.
  bool provisional = false;
  int client_rank = -1;  // the member whose key-value connection this is (MEMBER_CLIENT), or -1
  bool formed = false;   // its member sent FORMED: its loss and reports count from then on
  bool write_shut = false;
  int rank = -1;  // member rank, -1 for plain clients
  bool reported_broken = false;
  Clock::time_point last_heard{};
  Clock::time_point linger_until{};
  std::optional<PendingWait> wait;
};

struct MemberEvent {
  int rank;
  Cause cause;
  std::string detail;
};

inline std::string quoteKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 8) out += ", ... (" + std::to_string(keys.size()) + " keys)";
  return out;
}

inline Status validate(const StoreServerOptions& o) {
  auto bad = [](std::string what) { return Status(Code::kInvalidArgument, std::move(what)); };
  if (o.max_frame_bytes < 64 || o.max_frame_bytes > UINT32_MAX) {
    return bad("max_frame_bytes " + std::to_string(o.max_frame_bytes) + " is outside [64, 2^32)");
  }
  if (o.max_connections < 1) return bad("max_connections must be at least 1");
  if (o.max_handshaking < 1) return bad("max_handshaking must be at least 1");
  if (o.handshake_timeout < milliseconds(1) || o.handshake_timeout.count() > kMaxTimeoutMs) {
    return bad("handshake_timeout " + std::to_string(o.handshake_timeout.count()) +
               " ms is outside [1 ms, 30 days]");
  }
  if (o.max_buffered_bytes < o.max_frame_bytes + kFrameHeaderBytes) {
    return bad("max_buffered_bytes " + std::to_string(o.max_buffered_bytes) +
               " is below one frame (max_frame_bytes + 4)");
  }
  if (o.token.size() > kMaxKeyBytes) return bad("token is longer than 4096 bytes");
  if (o.world_size < 0) return bad("world_size " + std::to_string(o.world_size) + " < 0");
  if (o.world_size == 0) return Status::Ok();
  if (o.world_name.empty() || o.world_name.size() > kMaxKeyBytes) {
    return bad("world_name must have 1..4096 bytes when world_size > 0");
  }
  if (o.heartbeat_timeout < milliseconds(10)) {
    return bad("heartbeat_timeout " + std::to_string(o.heartbeat_timeout.count()) +
               " ms is below the minimum of 10 ms");
  }
  return Status::Ok();
}

class Server final : public StoreServer {
 public:
  Server(const StoreServerOptions& options, Fd listen_fd, Fd wake_fd, uint16_t port)
      : options_(options),
        listen_fd_(std::move(listen_fd)),
        wake_fd_(std::move(wake_fd)),
        port_(port),
        timeout_(options.heartbeat_timeout),
        interval_(std::max(milliseconds(1), options.heartbeat_timeout / 10)),
        serve_slice_(std::clamp(interval_ / 2, milliseconds(1), milliseconds(5))),
        members_(static_cast<size_t>(options.world_size), 0),
        clients_(static_cast<size_t>(options.world_size), 0) {}
  ~Server() override { stop(); }

  void startThread() {
    next_ping_ = Clock::now() + interval_;
    MutexLock lock(stop_mu_);
    thread_ = std::jthread([this](const std::stop_token& st) { run(st); });
  }
  uint16_t port() const override { return port_; }
  StoreServerStats stats() const override {
    StoreServerStats s;
    s.buffered_bytes = stat_buffered_.load();
    s.peak_buffered_bytes = stat_peak_.load();
    s.connections = stat_connections_.load();
    s.closed_over_budget = stat_closed_over_budget_.load();
    return s;
  }
  void stop() override MW_EXCLUDES(stop_mu_) {
    MutexLock lock(stop_mu_);
    if (!thread_.joinable()) return;
    thread_.request_stop();
    uint64_t one = 1;
    ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
    (void)n;  // a full eventfd counter already means "wake up"
    thread_.join();
  }

 private:
  void run(const std::stop_token& st);
  void pollOnce();
  Clock::time_point nextTimer() const;
  bool wantsRead(const Conn& c) const;
  bool runnable(const Conn& c) const;
  void acceptAll();
  void readAvailable(Conn& c);
  void flush(Conn& c);
  void failConn(Conn& c, const Status& io_error);
  void queue(Conn& c, const Message& m);
  // Queues one encoded frame for `c` and sends what the socket takes now.
  void queueFrame(Conn& c, std::string frame);
  void closeConn(Conn& c, Cause cause, const std::string& detail, bool linger);
  void refuse(Conn& c, Code code, const std::string& message);
  void protocolError(Conn& c, const std::string& what);
  void runTimers(Clock::time_point now);
  void checkSilence(Conn& c, Clock::time_point now);
  // Records that member `c` was heard from at `now`.
  void heard(Conn& c, Clock::time_point now) { c.last_heard = now; }
  // How long member `c` has been silent over time this thread ran on schedule.
  Clock::duration silence(const Conn& c, Clock::time_point now) const {
    return now - c.last_heard - lateness_.since(c.last_heard);
  }
  // The silence after which a member is declared lost: the timeout and its confirmation.
  Clock::duration silenceLimit() const {
    return timeout_ + detail::LatenessMeter::confirmation(timeout_);
  }
  void drainReady();
  void processFrames(Conn& c);
  void handle(Conn& c, Message& m);
  void handleKv(Conn& c, Message& m);
  // The handshake and the limits on connections (store_handshake.cc).
  void onHello(Conn& c, const msg::Hello& m);
  void onAuth(Conn& c, const msg::Auth& m);
  void handshakeDone(Conn& c);
  void admit(Fd fd);
  bool evictHandshaking(bool any_age);
  void handshakeTimers(Clock::time_point now);
  Clock::time_point handshakeDeadline() const;
  bool inHandshake(const Conn& c) const { return !c.authed || c.provisional; }
  void claimed(Conn& c);
  size_t reserved() const;
  // The first checks of MEMBER_JOIN and MEMBER_CLIENT: ERROR invalid_usage when this store hosts
  // no world or `c` already claimed a rank (false then), else true.
  bool mayClaim(Conn& c);
  void onMemberClient(Conn& c, const msg::MemberClient& m);
  std::string memberError(const std::string& world, int64_t size, int64_t rank) const;
  void account(Conn& c);
  void enforceBudget();
  Conn* budgetVictim();
  void onCompareSet(Conn& c, const msg::CompareSet& m);
  void startWait(Conn& c, std::vector<std::string> keys, bool is_get, int64_t timeout_ms);
  void endWait(Conn& c);
  bool tryCompleteWait(Conn& c);
  void setKey(const std::string& key, std::string value);
  void onJoin(Conn& c, const msg::MemberJoin& m);
  std::string joinError(const msg::MemberJoin& m) const;
  void onBroken(Conn& c, const msg::Broken& m);
  void onFormed(Conn& c);
  // Member `rank` was lost (`cause`, `detail`; called by closeConn). Before any member counted
  // itself in at the join barrier (join_keys.h) it does nothing: a later connection of that rank
  // may take its place. Once one has, every member's connections were up, so none can: a barrier
  // not yet open is shut for good (kJoinOpen := "lost: rank R <cause>: <detail>"), which ends
  // every other member's join at once instead of at its deadline. Once it opened, every join has
  // succeeded: the member's through key (joinThroughKey) is set to the same text when it is unset,
  // so that rank 0 waits no longer for that member to count itself through. Returns whether the
  // barrier had opened (kJoinOpen was kJoinOpenValue): then the loss is the formed world's.
  bool shutJoinBarrier(int rank, Cause cause, const std::string& detail);
  void flushEvents();
  void reap();
  Conn* find(uint64_t id);

  const StoreServerOptions options_;
  const Fd listen_fd_;
  const Fd wake_fd_;
  const uint16_t port_;
  const milliseconds timeout_;
  const milliseconds interval_;
  const milliseconds serve_slice_;  // the longest run of serving clients between timer passes
  Mutex stop_mu_;                   // serializes stop()
  std::jthread thread_ MW_GUARDED_BY(stop_mu_);

  // Loop thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  size_t open_conns_ = 0;
  size_t handshaking_ = 0;                // open connections whose handshake is not done
  std::deque<uint64_t> handshake_order_;  // their ids in accept order (closed ones linger here)
  size_t buffered_ = 0;                   // input buffered and output queued for every connection
  bool enforcing_ = false;                // enforceBudget() is running (it queues replies itself)
  uint64_t resume_id_ = 0;                // the connection the next serving slice starts at
  uint64_t next_id_ = 1;
  KvTable table_;
  std::vector<uint64_t> members_;  // rank -> conn id, 0 when not joined
  std::vector<uint64_t> clients_;  // rank -> its key-value conn id (MEMBER_CLIENT), 0 when none
  size_t joined_ = 0;              // ranks with a member link now
  size_t claimed_clients_ = 0;     // ranks with a key-value connection now
  // Every rank has joined once. Silence is judged only from then on: until the last member comes,
  // the others wait in the world's rendezvous and send nothing on their links.
  bool assembled_ = false;
  std::deque<MemberEvent> events_;  // member losses not yet announced
  bool broken_recorded_ = false;
  Clock::time_point next_ping_{};
  detail::LatenessMeter lateness_;
  Clock::time_point accept_paused_until_{};

  // What stats() reports (written by the loop thread only).
  std::atomic<size_t> stat_buffered_{0};
  std::atomic<size_t> stat_peak_{0};
  std::atomic<size_t> stat_connections_{0};
  std::atomic<uint64_t> stat_closed_over_budget_{0};
};

// ---- event loop ----

}  // namespace server_impl
}  // namespace store
}  // namespace mw
