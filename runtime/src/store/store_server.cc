// StoreServer: one event-loop thread multiplexing the listening socket, every connection and a
// wake-up eventfd with ppoll(). Nothing in the loop blocks: sockets are non-blocking, each
// connection has an input FrameReader and an output queue, and GET/WAIT are parked as waiters that
// a later write or their deadline completes. Membership (liveness) links share the same loop: the
// poll timeout is the earliest of the next ping, the earliest member staleness deadline, the
// earliest waiter deadline and the earliest lingering close, so silence is detected on time.
#include <algorithm>

#include "base/check.h"
#include "base/thread_name.h"
#include "store/server_impl.h"

namespace mw {
namespace store {
namespace server_impl {

void Server::run(const std::stop_token& st) {
  detail::nameThisThread("mw-store", options_.world_name);
  while (!st.stop_requested()) {
    pollOnce();
    const auto t = detail::LatenessMeter::Instant::now();
    lateness_.ran(t);  // time this thread was stopped or preempted is not members' silence
    runTimers(t.wall);
    drainReady();
    reap();
  }
  // What already arrived is served before the end, so that a member leaving (the store host's own
  // link says so just before the store stops) is announced as having left, not as dead.
  // All of it: drainReady serves in slices, and a slice cut short here (a preempted thread) left
  // the rest unserved, a leave included.
  for (auto& [id, c] : conns_) {
    if (c->state == ConnState::kOpen) readAvailable(*c);
  }
  auto anyRunnable = [&] {
    return std::any_of(conns_.begin(), conns_.end(),
                       [&](const auto& kv) { return runnable(*kv.second); });
  };
  while (anyRunnable()) drainReady();
  flushEvents();
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
  Clock::duration wait = busy ? Clock::duration::zero() : timeUntil(nextTimer());
  wait = std::clamp<Clock::duration>(wait, Clock::duration::zero(), std::chrono::seconds(1));
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const auto t = detail::LatenessMeter::Instant::now();
  lateness_.sleeping(t, t.wall + wait);
  const int ready = ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  lateness_.woke(detail::LatenessMeter::Instant::now());
  if (ready <= 0) return;  // timeout or EINTR
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
      if (assembled_) {
        next = std::min(next, c->last_heard + lateness_.since(c->last_heard) + silenceLimit());
      }
    }
  }
  if (has_members) next = std::min(next, next_ping_);
  next = std::min(next, handshakeDeadline());
  if (accept_paused_until_ > Clock::now()) next = std::min(next, accept_paused_until_);
  return next;
}

bool Server::wantsRead(const Conn& c) const {
  if (c.state == ConnState::kLingering) return true;  // drain and discard until EOF
  if (c.state != ConnState::kOpen || c.io.pending() >= kOutHighWater) return false;
  size_t cap = !c.authed       ? kMaxHandshakeFrameBytes + kFrameHeaderBytes
               : c.provisional ? kMaxClaimFrameBytes + kFrameHeaderBytes
               : c.wait        ? kInWhileWaiting
                               : options_.max_frame_bytes + kFrameHeaderBytes;
  return c.io.in().buffered() < cap;
}

bool Server::runnable(const Conn& c) const {
  return c.state == ConnState::kOpen && !c.wait && c.io.pending() < kOutHighWater &&
         c.io.in().ready();
}

void Server::acceptAll() {
  bool evicted = false;
  while (true) {
    int raw = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (raw < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors: the oldest connection still in its handshake gives its own up, once
      // per pass, so that a flood of idle sockets cannot keep members out; otherwise stop polling
      // the listener for a while instead of spinning.
      if ((errno == EMFILE || errno == ENFILE) && !evicted && evictHandshaking(true)) {
        evicted = true;
        continue;
      }
      accept_paused_until_ = Clock::now() + kAcceptPause;
      return;
    }
    Fd fd(raw);
    setNoDelay(fd.get()).ignore();
    admit(std::move(fd));
  }
}

void Server::readAvailable(Conn& c) {
  size_t got = 0;
  // Before its handshake a connection may hold one small frame, never more.
  const size_t budget = !c.authed       ? kMaxHandshakeFrameBytes + kFrameHeaderBytes
                        : c.provisional ? kMaxClaimFrameBytes + kFrameHeaderBytes
                                        : kReadBudget;
  Status read = c.io.readAvailable(budget, c.state == ConnState::kOpen, &got);
  if (got > 0 && c.rank >= 0) heard(c, Clock::now());
  account(c);
  enforceBudget();
  if (read.ok() || c.state == ConnState::kDead) return;
  // Requests that arrived just before the close still count (a BROKEN report, then exit).
  if (c.state == ConnState::kOpen) processFrames(c);
  failConn(c, read);
}

void Server::flush(Conn& c) {
  const size_t before = c.io.pending();
  Status sent = c.io.flush();
  if (!sent.ok()) return failConn(c, sent);
  if (c.io.pending() < before) c.out_since = Clock::now();  // the peer reads: not stalled
  account(c);
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

void Server::queue(Conn& c, const Message& m) { queueFrame(c, encodeFrame(m)); }

void Server::queueFrame(Conn& c, std::string frame) {
  if (c.state != ConnState::kOpen) return;
  if (c.io.pending() == 0) c.out_since = Clock::now();
  c.io.queue(std::move(frame));
  flush(c);
  enforceBudget();  // a reply nobody reads is memory like any request
}

// Ends a connection. A member's loss is queued for announcement; `linger` lets queued replies
// reach the peer (then FIN) before the socket is closed at EOF or after kLinger.
void Server::closeConn(Conn& c, Cause cause, const std::string& detail, bool linger) {
  if (c.state == ConnState::kDead) return;
  if (c.rank >= 0) {
    // A member whose world has not formed (it sent no FORMED) that goes is no loss: its slot is
    // free for a new connection of that rank (store-protocol.md, "Membership"). Unless the join
    // barrier has begun: then the others' joins fail now (shutJoinBarrier); or it has opened:
    // then every join has succeeded, and the loss is the formed world's.
    const bool opened = shutJoinBarrier(c.rank, cause, detail);
    if (c.formed || opened) events_.push_back({c.rank, cause, detail});
    members_[static_cast<size_t>(c.rank)] = 0;
    --joined_;
    c.rank = -1;
  }
  if (c.client_rank >= 0) {
    clients_[static_cast<size_t>(c.client_rank)] = 0;
    --claimed_clients_;
    c.client_rank = -1;
  }
  if (c.wait) endWait(c);
  if (c.state == ConnState::kOpen) {
    --open_conns_;
    if (inHandshake(c)) --handshaking_;
  }
  c.io.in().clear();  // nothing more is served from it
  if (!linger) c.io.dropQueued();
  account(c);
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

void Server::drainReady() {
  // Serving is cut into slices, so that however much work clients queue (each GET of a large
  // value is a copy of it), the timers run in between: the members' pings go out on time, and
  // their silence is judged on time. The next slice starts where this one stopped.
  const auto until = Clock::now() + serve_slice_;
  // Serving one connection can complete another's wait and make it runnable again.
  bool progress = true;
  while (progress) {
    progress = false;
    auto it = conns_.find(resume_id_);
    if (it == conns_.end()) it = conns_.begin();
    for (size_t n = conns_.size(); n > 0; --n, ++it) {  // nothing is added or erased here
      if (it == conns_.end()) it = conns_.begin();
      Conn& c = *it->second;
      if (!runnable(c)) continue;
      if (Clock::now() >= until) {
        resume_id_ = c.id;  // runnable: the poll does not wait, the timers run first
        return;
      }
      processFrames(c);
      progress = true;
    }
  }
}

void Server::processFrames(Conn& c) {
  std::string payload;
  while (c.state == ConnState::kOpen && !c.wait && c.io.pending() < kOutHighWater) {
    auto next = c.io.in().next(&payload);
    if (!next.ok()) return protocolError(c, next.status().message());
    if (!*next) break;
    auto m = decodePayload(payload);
    if (!m.ok()) return protocolError(c, m.status().message());
    handle(c, *m);
  }
  account(c);
}

void Server::reap() {
  flushEvents();
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second->state != ConnState::kDead) {
      ++it;
      continue;
    }
    MW_CHECK(buffered_ >= it->second->counted_in + it->second->counted_out);
    buffered_ -= it->second->counted_in + it->second->counted_out;
    it = conns_.erase(it);
  }
  stat_buffered_.store(buffered_);
  stat_connections_.store(open_conns_);
}

Conn* Server::find(uint64_t id) {
  if (id == 0) return nullptr;
  auto it = conns_.find(id);
  return it == conns_.end() || it->second->state != ConnState::kOpen ? nullptr : it->second.get();
}

// ---- requests ----

void Server::handle(Conn& c, Message& m) {
  MsgType type = typeOf(m);
  if (!c.authed) {
    if (type == MsgType::kHello) return onHello(c, std::get<msg::Hello>(m));
    if (type == MsgType::kAuth) return onAuth(c, std::get<msg::Auth>(m));
    return refuse(c, Code::kPermissionDenied,
                  std::string("the handshake comes first: send HELLO") +
                      (options_.token.empty() ? "" : " and AUTH") + " before " + msgTypeName(type));
  }
  if (type == MsgType::kHello || type == MsgType::kAuth) {
    return protocolError(c, std::string("duplicate ") + msgTypeName(type));
  }
  if (c.provisional && type != MsgType::kMemberJoin && type != MsgType::kMemberClient) {
    return refuse(c, Code::kUnavailable,
                  "store has reached its limit of " + std::to_string(options_.max_connections) +
                      " connections, less the room kept for the members of world '" +
                      options_.world_name + "' not yet joined: a connection beyond it must " +
                      "join the world (MEMBER_JOIN or MEMBER_CLIENT) before " + msgTypeName(type));
  }
  switch (type) {
    case MsgType::kMemberJoin:
      return onJoin(c, std::get<msg::MemberJoin>(m));
    case MsgType::kMemberClient:
      return onMemberClient(c, std::get<msg::MemberClient>(m));
    case MsgType::kFormed:
      return onFormed(c);
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
      if (const std::string* value = table_.find(get.key)) {
        return queueFrame(c, encodeValueFrame(*value));
      }
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

void Server::onCompareSet(Conn& c, const msg::CompareSet& m) {
  const std::string* current = table_.find(m.key);
  bool match = m.expected_absent ? current == nullptr : current && *current == m.expected;
  if (!match) return queueFrame(c, encodeValueFrame(current ? *current : std::string()));
  setKey(m.key, m.desired);
  queueFrame(c, encodeValueFrame(m.desired));
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
  std::string reply =
      c.wait->is_get ? encodeValueFrame(*table_.find(c.wait->keys[0])) : encodeFrame(msg::Ok{});
  endWait(c);
  queueFrame(c, std::move(reply));
  return true;
}

// ---- membership ----

}  // namespace server_impl
}  // namespace store

Result<std::unique_ptr<StoreServer>> StoreServer::start(const StoreServerOptions& options) {
  MW_RETURN_IF_ERROR(store::server_impl::validate(options));
  int backlog = static_cast<int>(std::min<size_t>(options.max_connections, SOMAXCONN));
  auto listen_fd = store::listenTcp(options.host, options.port, backlog);
  if (!listen_fd.ok()) return listen_fd.status();
  auto port = store::localPort(listen_fd->get());
  if (!port.ok()) return port.status();
  store::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return Status(Code::kIoError, "cannot create eventfd: " + store::errnoText(errno));
  }
  auto server = std::make_unique<store::server_impl::Server>(options, std::move(*listen_fd),
                                                             std::move(wake), *port);
  server->startThread();
  return std::unique_ptr<StoreServer>(std::move(server));
}

}  // namespace mw
