// StoreServer: one event-loop thread multiplexing the listening socket, every connection and a
// wake-up eventfd with ppoll(). Nothing in the loop blocks: sockets are non-blocking, each
// connection has an input FrameReader and an output queue, and GET/WAIT are parked as waiters that
// a later write or their deadline completes. Membership (liveness) links share the same loop: the
// poll timeout is the earliest of the next ping, the earliest member staleness deadline, the
// earliest waiter deadline and the earliest lingering close, so silence is detected on time.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <unordered_map>

#include "multiworld/store.h"
#include "store/kv_table.h"
#include "store/socket.h"
#include "store/wire.h"

namespace mw {
namespace store {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLinger{500};        // how long a closing connection may drain
constexpr milliseconds kAcceptPause{100};   // back-off after EMFILE and friends
constexpr size_t kOutHighWater = 1u << 20;  // stop serving a client that does not read replies
constexpr size_t kInWhileWaiting = 64u << 10;
constexpr size_t kReadBudget = 1u << 20;  // bytes read from one connection per wake-up
constexpr int64_t kMaxTimeoutMs = 30LL * 24 * 3600 * 1000;

enum class ConnState { kOpen, kLingering, kDead };

struct PendingWait {
  std::vector<std::string> keys;
  bool is_get = false;
  int64_t timeout_ms = 0;
  Deadline deadline;
};

struct Conn {
  Conn(uint64_t conn_id, Fd socket, size_t max_frame, bool need_token)
      : id(conn_id), io(std::move(socket), max_frame), authed(!need_token) {}

  uint64_t id;
  FramedConn io;
  ConnState state = ConnState::kOpen;
  bool authed;
  bool hello_seen = false;
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

bool tokenEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;  // constant time for equal lengths
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string quoteKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 8) out += ", ... (" + std::to_string(keys.size()) + " keys)";
  return out;
}

Status validate(const StoreServerOptions& o) {
  auto bad = [](std::string what) { return Status(Code::kInvalidArgument, std::move(what)); };
  if (o.max_frame_bytes < 64 || o.max_frame_bytes > UINT32_MAX) {
    return bad("max_frame_bytes " + std::to_string(o.max_frame_bytes) + " is outside [64, 2^32)");
  }
  if (o.max_connections < 1) return bad("max_connections must be at least 1");
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
        members_(static_cast<size_t>(options.world_size), 0) {}
  ~Server() override { stop(); }

  void startThread() {
    next_ping_ = Clock::now() + interval_;
    thread_ = std::jthread([this](const std::stop_token& st) { run(st); });
  }
  uint16_t port() const override { return port_; }
  void stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
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
  void closeConn(Conn& c, Cause cause, const std::string& detail, bool linger);
  void refuse(Conn& c, Code code, const std::string& message);
  void protocolError(Conn& c, const std::string& what);
  void runTimers(Clock::time_point now);
  void checkSilence(Conn& c, Clock::time_point now);
  void drainReady();
  void processFrames(Conn& c);
  void handle(Conn& c, Message& m);
  void handleKv(Conn& c, Message& m);
  void onHello(Conn& c, const msg::Hello& m);
  void onCompareSet(Conn& c, const msg::CompareSet& m);
  void startWait(Conn& c, std::vector<std::string> keys, bool is_get, int64_t timeout_ms);
  void endWait(Conn& c);
  bool tryCompleteWait(Conn& c);
  void setKey(const std::string& key, std::string value);
  void onJoin(Conn& c, const msg::MemberJoin& m);
  std::string joinError(const msg::MemberJoin& m) const;
  void onBroken(Conn& c, const msg::Broken& m);
  void flushEvents();
  void reap();
  Conn* find(uint64_t id);

  const StoreServerOptions options_;
  const Fd listen_fd_;
  const Fd wake_fd_;
  const uint16_t port_;
  const milliseconds timeout_;
  const milliseconds interval_;
  std::mutex stop_mu_;  // serializes stop()
  std::jthread thread_;

  // Loop thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  size_t open_conns_ = 0;
  uint64_t next_id_ = 1;
  KvTable table_;
  std::vector<uint64_t> members_;   // rank -> conn id, 0 when not joined
  std::deque<MemberEvent> events_;  // member losses not yet announced
  bool broken_recorded_ = false;
  Clock::time_point next_ping_{};
  Clock::time_point accept_paused_until_{};
};

// ---- event loop ----

void Server::run(const std::stop_token& st) {
  while (!st.stop_requested()) {
    pollOnce();
    runTimers(Clock::now());
    drainReady();
    reap();
  }
  conns_.clear();  // closes every connection; members see EOF
}

void Server::pollOnce() {
  std::vector<pollfd> fds;
  std::vector<Conn*> owners;
  fds.reserve(conns_.size() + 2);
  fds.push_back({wake_fd_.get(), POLLIN, 0});
  bool accepting = Clock::now() >= accept_paused_until_;
  fds.push_back({listen_fd_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
  bool busy = false;
  for (auto& [id, c] : conns_) {
    short events = POLLRDHUP;
    if (wantsRead(*c)) events |= POLLIN;
    if (c->io.pending() > 0) events |= POLLOUT;
    fds.push_back({c->io.fd(), events, 0});
    owners.push_back(c.get());
    busy = busy || runnable(*c);
  }
  Clock::duration wait = busy ? Clock::duration::zero() : nextTimer() - Clock::now();
  wait = std::clamp<Clock::duration>(wait, Clock::duration::zero(), std::chrono::seconds(1));
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  if (::ppoll(fds.data(), fds.size(), &ts, nullptr) <= 0) return;  // timeout or EINTR
  if (fds[0].revents) {
    uint64_t count;
    ssize_t n = ::read(wake_fd_.get(), &count, sizeof(count));
    (void)n;
  }
  if (fds[1].revents & POLLIN) acceptAll();
  for (size_t i = 0; i < owners.size(); ++i) {
    short ev = fds[i + 2].revents;
    if ((ev & POLLOUT) && owners[i]->state != ConnState::kDead) flush(*owners[i]);
    if ((ev & ~POLLOUT) && owners[i]->state != ConnState::kDead) readAvailable(*owners[i]);
  }
}

Clock::time_point Server::nextTimer() const {
  auto next = Clock::time_point::max();
  bool has_members = false;
  for (const auto& [id, c] : conns_) {
    if (c->wait) next = std::min(next, c->wait->deadline);
    if (c->state == ConnState::kLingering) next = std::min(next, c->linger_until);
    if (c->rank >= 0) {
      has_members = true;
      next = std::min(next, c->last_heard + timeout_);
    }
  }
  if (has_members) next = std::min(next, next_ping_);
  if (accept_paused_until_ > Clock::now()) next = std::min(next, accept_paused_until_);
  return next;
}

bool Server::wantsRead(const Conn& c) const {
  if (c.state == ConnState::kLingering) return true;  // drain and discard until EOF
  if (c.state != ConnState::kOpen || c.io.pending() >= kOutHighWater) return false;
  size_t cap = c.wait ? kInWhileWaiting : options_.max_frame_bytes + kFrameHeaderBytes;
  return c.io.in().buffered() < cap;
}

bool Server::runnable(const Conn& c) const {
  return c.state == ConnState::kOpen && !c.wait && c.io.pending() < kOutHighWater &&
         c.io.in().ready();
}

void Server::acceptAll() {
  while (true) {
    int raw = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (raw < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors or memory: stop polling the listener for a while instead of spinning.
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        accept_paused_until_ = Clock::now() + kAcceptPause;
      }
      return;
    }
    Fd fd(raw);
    setNoDelay(fd.get()).ignore();
    uint64_t id = next_id_++;
    auto conn = std::make_unique<Conn>(id, std::move(fd), options_.max_frame_bytes,
                                       !options_.token.empty());
    Conn& c = *conn;
    conns_.emplace(id, std::move(conn));
    ++open_conns_;
    if (open_conns_ > options_.max_connections) {
      refuse(c, Code::kUnavailable,
             "store has reached its limit of " + std::to_string(options_.max_connections) +
                 " connections");
    }
  }
}

void Server::readAvailable(Conn& c) {
  size_t got = 0;
  Status read = c.io.readAvailable(kReadBudget, c.state == ConnState::kOpen, &got);
  if (got > 0 && c.rank >= 0) c.last_heard = Clock::now();
  if (read.ok()) return;
  // Requests that arrived just before the close still count (a BROKEN report, then exit).
  if (c.state == ConnState::kOpen) processFrames(c);
  failConn(c, read);
}

void Server::flush(Conn& c) {
  Status sent = c.io.flush();
  if (!sent.ok()) return failConn(c, sent);
  if (c.io.pending() == 0 && c.state == ConnState::kLingering && !c.write_shut) {
    ::shutdown(c.io.fd(), SHUT_WR);  // FIN after the last reply, then drain until EOF
    c.write_shut = true;
  }
}

// The connection closed or broke under us: no reply can reach the peer any more.
void Server::failConn(Conn& c, const Status& io_error) {
  closeConn(c, Cause::kPeerDied,
            "connection to rank " + std::to_string(c.rank) + " " + io_error.message(), false);
}

void Server::queue(Conn& c, const Message& m) {
  if (c.state != ConnState::kOpen) return;
  c.io.queue(encodeFrame(m));
  flush(c);
}

// Ends a connection. A member's loss is queued for announcement; `linger` lets queued replies
// reach the peer (then FIN) before the socket is closed at EOF or after kLinger.
void Server::closeConn(Conn& c, Cause cause, const std::string& detail, bool linger) {
  if (c.state == ConnState::kDead) return;
  if (c.rank >= 0) {
    events_.push_back({c.rank, cause, detail});
    members_[static_cast<size_t>(c.rank)] = 0;
    c.rank = -1;
  }
  if (c.wait) endWait(c);
  if (c.state == ConnState::kOpen) --open_conns_;
  if (linger && c.state == ConnState::kOpen) {
    c.state = ConnState::kLingering;
    c.linger_until = Clock::now() + kLinger;
    flush(c);
    return;
  }
  c.state = ConnState::kDead;
}

void Server::refuse(Conn& c, Code code, const std::string& message) {
  queue(c, msg::Error{code, message});
  closeConn(c, Cause::kPeerDied, "protocol error: " + message, true);
}

void Server::protocolError(Conn& c, const std::string& what) {
  refuse(c, Code::kInvalidArgument, what);
}

void Server::runTimers(Clock::time_point now) {
  for (auto& [id, c] : conns_) {
    if (c->state == ConnState::kLingering && now >= c->linger_until) c->state = ConnState::kDead;
    if (c->wait && now >= c->wait->deadline) {
      PendingWait w = *c->wait;
      endWait(*c);
      std::string what = w.is_get ? "key '" + w.keys[0] + "' was not set"
                                  : "keys " + quoteKeys(w.keys) + " were not all set";
      queue(*c, msg::Timeout{what + " within " + std::to_string(w.timeout_ms) + " ms"});
    }
    if (c->rank >= 0 && now - c->last_heard >= timeout_) checkSilence(*c, now);
  }
  if (now < next_ping_) return;
  for (uint64_t id : members_) {
    if (Conn* c = find(id)) queue(*c, msg::Ping{});
  }
  next_ping_ += interval_;
  if (next_ping_ <= now) next_ping_ = now + interval_;
}

void Server::checkSilence(Conn& c, Clock::time_point now) {
  readAvailable(c);  // bytes that arrived since the last poll still count
  if (c.state != ConnState::kOpen || c.rank < 0 || now - c.last_heard < timeout_) return;
  auto silent = std::chrono::duration_cast<milliseconds>(Clock::now() - c.last_heard).count();
  closeConn(c, Cause::kPeerSilent,
            "rank " + std::to_string(c.rank) + " silent for " + std::to_string(silent) + " ms",
            true);
}

void Server::drainReady() {
  // Serving one connection can complete another's wait and make it runnable again.
  bool progress = true;
  while (progress) {
    progress = false;
    for (auto& [id, c] : conns_) {
      if (!runnable(*c)) continue;
      processFrames(*c);
      progress = true;
    }
  }
}

void Server::processFrames(Conn& c) {
  std::string payload;
  while (c.state == ConnState::kOpen && !c.wait && c.io.pending() < kOutHighWater) {
    auto next = c.io.in().next(&payload);
    if (!next.ok()) return protocolError(c, next.status().message());
    if (!*next) return;
    auto m = decodePayload(payload);
    if (!m.ok()) return protocolError(c, m.status().message());
    handle(c, *m);
  }
}

void Server::reap() {
  flushEvents();
  for (auto it = conns_.begin(); it != conns_.end();) {
    it = it->second->state == ConnState::kDead ? conns_.erase(it) : std::next(it);
  }
}

Conn* Server::find(uint64_t id) {
  if (id == 0) return nullptr;
  auto it = conns_.find(id);
  return it == conns_.end() || it->second->state != ConnState::kOpen ? nullptr : it->second.get();
}

// ---- requests ----

void Server::handle(Conn& c, Message& m) {
  MsgType type = typeOf(m);
  if (type == MsgType::kHello) return onHello(c, std::get<msg::Hello>(m));
  if (!c.authed) {
    return refuse(
        c, Code::kPermissionDenied,
        std::string("the store requires a token: send HELLO before ") + msgTypeName(type));
  }
  switch (type) {
    case MsgType::kMemberJoin:
      return onJoin(c, std::get<msg::MemberJoin>(m));
    case MsgType::kHeartbeat:
      return;  // arrival time already recorded
    case MsgType::kBroken:
      return onBroken(c, std::get<msg::Broken>(m));
    default:
      return handleKv(c, m);
  }
}

void Server::handleKv(Conn& c, Message& m) {
  switch (typeOf(m)) {
    case MsgType::kSet: {
      auto& set = std::get<msg::Set>(m);
      setKey(set.key, std::move(set.value));
      return queue(c, msg::Ok{});
    }
    case MsgType::kGet: {
      auto& get = std::get<msg::Get>(m);
      if (const std::string* value = table_.find(get.key)) return queue(c, msg::Value{*value});
      return startWait(c, {std::move(get.key)}, true, get.timeout_ms);
    }
    case MsgType::kWait: {
      auto& wait = std::get<msg::Wait>(m);
      if (table_.allExist(wait.keys)) return queue(c, msg::Ok{});
      return startWait(c, std::move(wait.keys), false, wait.timeout_ms);
    }
    case MsgType::kCheck:
      return queue(c, msg::Bool{table_.allExist(std::get<msg::Check>(m).keys)});
    case MsgType::kAdd: {
      auto& add = std::get<msg::Add>(m);
      auto sum = table_.sum(add.key, add.delta);
      if (!sum.ok()) return queue(c, msg::Error{sum.status().code(), sum.status().message()});
      setKey(add.key, std::to_string(*sum));
      return queue(c, msg::Int{*sum});
    }
    case MsgType::kCompareSet:
      return onCompareSet(c, std::get<msg::CompareSet>(m));
    case MsgType::kDelete:
      return queue(c, msg::Bool{table_.remove(std::get<msg::Delete>(m).key)});
    default:
      return protocolError(
          c, std::string("unexpected ") + msgTypeName(typeOf(m)) + " frame from a client");
  }
}

void Server::onHello(Conn& c, const msg::Hello& m) {
  if (c.hello_seen) return protocolError(c, "duplicate HELLO");
  c.hello_seen = true;
  if (m.version != kProtocolVersion) {
    return protocolError(c, "client speaks store protocol version " + std::to_string(m.version) +
                                ", this store speaks " + std::to_string(kProtocolVersion));
  }
  if (!options_.token.empty() && !tokenEquals(m.token, options_.token)) {
    return refuse(c, Code::kPermissionDenied, "wrong store token");
  }
  c.authed = true;
  queue(c, msg::Ok{});
}

void Server::onCompareSet(Conn& c, const msg::CompareSet& m) {
  const std::string* current = table_.find(m.key);
  bool match = m.expected_absent ? current == nullptr : current && *current == m.expected;
  if (!match) return queue(c, msg::Value{current ? *current : std::string()});
  setKey(m.key, m.desired);
  queue(c, msg::Value{m.desired});
}

void Server::setKey(const std::string& key, std::string value) {
  for (uint64_t id : table_.set(key, std::move(value))) {
    Conn* c = find(id);
    // Still missing another key (possibly deleted again): park it once more.
    if (c != nullptr && c->wait && !tryCompleteWait(*c)) table_.park(c->id, c->wait->keys);
  }
}

void Server::startWait(Conn& c, std::vector<std::string> keys, bool is_get, int64_t timeout_ms) {
  timeout_ms = std::clamp<int64_t>(timeout_ms, 0, kMaxTimeoutMs);
  c.wait =
      PendingWait{std::move(keys), is_get, timeout_ms, Clock::now() + milliseconds(timeout_ms)};
  table_.park(c.id, c.wait->keys);  // a zero timeout expires in the next timer pass
}

void Server::endWait(Conn& c) {
  table_.unpark(c.id, c.wait->keys);
  c.wait.reset();
}

bool Server::tryCompleteWait(Conn& c) {
  if (!table_.allExist(c.wait->keys)) return false;
  Message reply = msg::Ok{};
  if (c.wait->is_get) reply = msg::Value{*table_.find(c.wait->keys[0])};
  endWait(c);
  queue(c, reply);
  return true;
}

// ---- membership ----

void Server::onJoin(Conn& c, const msg::MemberJoin& m) {
  if (options_.world_size <= 0) {
    return queue(c, msg::Error{Code::kInvalidUsage, "this store hosts no world membership"});
  }
  if (c.rank >= 0) {
    return queue(c, msg::Error{Code::kInvalidUsage,
                               "this connection already joined as rank " + std::to_string(c.rank)});
  }
  std::string error = joinError(m);
  if (!error.empty()) return queue(c, msg::Error{Code::kInvalidArgument, error});
  c.rank = static_cast<int>(m.rank);
  c.last_heard = Clock::now();
  members_[static_cast<size_t>(c.rank)] = c.id;
  setKey("mw/member/" + std::to_string(c.rank), "1");
  queue(c, msg::JoinOk{interval_.count(), timeout_.count()});
}

std::string Server::joinError(const msg::MemberJoin& m) const {
  const std::string world = "world '" + options_.world_name + "'";
  const std::string rank = std::to_string(m.rank);
  if (m.world != options_.world_name) {
    return "this store hosts " + world + ", member rank " + rank + " says world '" + m.world + "'";
  }
  if (m.size != options_.world_size) {
    return world + " has size " + std::to_string(options_.world_size) + ", member rank " + rank +
           " says " + std::to_string(m.size);
  }
  if (m.rank < 0 || m.rank >= options_.world_size) {
    return "rank " + rank + " is out of range for " + world + " of size " +
           std::to_string(options_.world_size);
  }
  if (members_[static_cast<size_t>(m.rank)] != 0)
    return "rank " + rank + " already joined " + world;
  return {};
}

void Server::onBroken(Conn& c, const msg::Broken& m) {
  if (c.rank < 0) return protocolError(c, "BROKEN from a connection that has not joined");
  if (c.reported_broken) return;  // one report per member is enough
  c.reported_broken = true;
  events_.push_back(
      {c.rank, Cause::kRemoteBroken, "rank " + std::to_string(c.rank) + ": " + m.detail});
}

void Server::flushEvents() {
  while (!events_.empty()) {
    MemberEvent e = std::move(events_.front());
    events_.pop_front();
    if (!broken_recorded_) {
      broken_recorded_ = true;
      setKey("mw/broken",
             "rank " + std::to_string(e.rank) + " " + causeName(e.cause) + ": " + e.detail);
    }
    // Sending can fail and queue further losses; members_ never reallocates here.
    for (uint64_t id : members_) {
      Conn* c = find(id);
      if (c != nullptr && c->rank != e.rank) queue(*c, msg::Notice{e.rank, e.cause, e.detail});
    }
  }
}

}  // namespace
}  // namespace store

Result<std::unique_ptr<StoreServer>> StoreServer::start(const StoreServerOptions& options) {
  MW_RETURN_IF_ERROR(store::validate(options));
  int backlog = static_cast<int>(std::min<size_t>(options.max_connections, SOMAXCONN));
  auto listen_fd = store::listenTcp(options.host, options.port, backlog);
  if (!listen_fd.ok()) return listen_fd.status();
  auto port = store::localPort(listen_fd->get());
  if (!port.ok()) return port.status();
  store::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return Status(Code::kIoError, "cannot create eventfd: " + store::errnoText(errno));
  }
  auto server =
      std::make_unique<store::Server>(options, std::move(*listen_fd), std::move(wake), *port);
  server->startThread();
  return std::unique_ptr<StoreServer>(std::move(server));
}

}  // namespace mw
