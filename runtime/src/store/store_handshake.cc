// StoreServer: the handshake (HELLO, CHALLENGE, AUTH: store/auth.h) and the limits that keep
// clients which have not authenticated from starving the members: a small frame bound before the
// handshake is done, a deadline for it, a cap on such connections, room kept for the world's own
// members, and a budget for the memory held for all connections, their unserved requests and
// their unread replies (docs/store-protocol.md, "Limits").
#include "base/check.h"
#include "store/auth.h"
#include "store/server_impl.h"

namespace mw {
namespace store {
namespace server_impl {
namespace {

// A connection in its handshake younger than this is not closed to make room for a newer one: a
// client needs a round trip or two to finish, and a flood of new sockets must not cut it short.
constexpr milliseconds kMinHandshakeAge{50};

}  // namespace

void Server::admit(Fd fd) {
  const auto now = Clock::now();
  uint64_t id = next_id_++;
  auto conn = std::make_unique<Conn>(id, std::move(fd), now);
  Conn& c = *conn;
  conns_.emplace(id, std::move(conn));
  ++open_conns_;
  ++handshaking_;
  handshake_order_.push_back(id);
  // Past the room not kept for the world's members, a connection must claim a member's place
  // before anything else; until then it is one in its handshake, evicted first.
  c.provisional = open_conns_ + reserved() > options_.max_connections;
  if (handshaking_ > options_.max_handshaking && !evictHandshaking(false)) {
    // Every connection in its handshake is younger than kMinHandshakeAge: the newest waits its
    // turn (it may connect again), the others finish theirs.
    return closeConn(c, Cause::kNone, {}, false);
  }
  // Full: a connection that has not finished its handshake (or claimed a member's place) in
  // kMinHandshakeAge makes room; otherwise the newest is told to come back.
  if (open_conns_ > options_.max_connections && !evictHandshaking(false)) {
    refuse(c, Code::kUnavailable,
           "store has reached its limit of " + std::to_string(options_.max_connections) +
               " connections");
  }
}

size_t Server::reserved() const {
  if (options_.world_size <= 0) return 0;
  const auto size = static_cast<size_t>(options_.world_size);
  MW_CHECK(joined_ <= size && claimed_clients_ <= size);  // one place per rank
  return (size - joined_) + (size - claimed_clients_);
}

void Server::claimed(Conn& c) {
  if (!c.provisional) return;
  c.provisional = false;
  MW_CHECK(handshaking_ > 0);
  --handshaking_;
  c.io.in().setMaxFrameBytes(options_.max_frame_bytes);
}

bool Server::evictHandshaking(bool any_age) {
  const auto now = Clock::now();
  while (!handshake_order_.empty()) {
    Conn* oldest = find(handshake_order_.front());
    if (oldest == nullptr || !inHandshake(*oldest)) {  // closed or done since: forget it
      handshake_order_.pop_front();
      continue;
    }
    if (!any_age && now - oldest->accepted_at < kMinHandshakeAge) return false;
    handshake_order_.pop_front();
    // Closed at once, without a reply: it holds a descriptor someone else needs.
    closeConn(*oldest, Cause::kNone, {}, false);
    return true;
  }
  return false;
}

void Server::handshakeTimers(Clock::time_point now) {
  while (!handshake_order_.empty()) {
    Conn* oldest = find(handshake_order_.front());
    if (oldest == nullptr || !inHandshake(*oldest)) {
      handshake_order_.pop_front();
      continue;
    }
    if (now < oldest->accepted_at + options_.handshake_timeout) return;
    handshake_order_.pop_front();
    queue(*oldest, msg::Error{Code::kTimeout,
                              "handshake not completed within " +
                                  std::to_string(options_.handshake_timeout.count()) + " ms"});
    closeConn(*oldest, Cause::kNone, {}, false);
  }
}

Clock::time_point Server::handshakeDeadline() const {
  // Connections are admitted in order, so the first one still in its handshake is due first.
  for (uint64_t id : handshake_order_) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->state != ConnState::kOpen || !inHandshake(*it->second)) {
      continue;
    }
    return it->second->accepted_at + options_.handshake_timeout;
  }
  return Clock::time_point::max();
}

void Server::onHello(Conn& c, const msg::Hello& m) {
  if (c.hello_seen) return protocolError(c, "duplicate HELLO");
  c.hello_seen = true;
  if (m.version != kProtocolVersion) {
    return protocolError(c, "client speaks store protocol version " + std::to_string(m.version) +
                                ", this store speaks " + std::to_string(kProtocolVersion));
  }
  if (options_.token.empty()) {
    handshakeDone(c);
    return queue(c, msg::Ok{});
  }
  if (m.client_nonce.size() != auth::kNonceBytes) {
    return refuse(c, Code::kPermissionDenied,
                  "HELLO carries a client nonce of " + std::to_string(m.client_nonce.size()) +
                      " bytes; this store requires a token and a nonce of " +
                      std::to_string(auth::kNonceBytes));
  }
  auto nonce = auth::randomBytes(auth::kNonceBytes);
  if (!nonce.ok()) return refuse(c, nonce.status().code(), nonce.status().message());
  c.client_nonce = m.client_nonce;
  c.server_nonce = *nonce;
  queue(c, msg::Challenge{c.server_nonce,
                          auth::serverProof(options_.token, c.client_nonce, c.server_nonce)});
}

void Server::onAuth(Conn& c, const msg::Auth& m) {
  if (c.server_nonce.empty()) {
    return refuse(c, Code::kPermissionDenied, "AUTH before this store's CHALLENGE");
  }
  if (!auth::equalProofs(m.client_proof,
                         auth::clientProof(options_.token, c.client_nonce, c.server_nonce))) {
    return refuse(c, Code::kPermissionDenied, "wrong store token");
  }
  handshakeDone(c);
  queue(c, msg::Ok{});
}

void Server::handshakeDone(Conn& c) {
  c.authed = true;
  if (c.provisional) {
    // Still in its handshake until it claims a member's place, with a frame bound to match.
    c.io.in().setMaxFrameBytes(kMaxClaimFrameBytes);
    return;
  }
  MW_CHECK(handshaking_ > 0);
  --handshaking_;
  c.io.in().setMaxFrameBytes(options_.max_frame_bytes);
}

void Server::account(Conn& c) {
  const size_t in = c.io.in().buffered();
  const size_t out = c.io.outHeld();
  MW_CHECK(buffered_ >= c.counted_in + c.counted_out);  // it counts every connection's last count
  buffered_ = buffered_ - c.counted_in - c.counted_out + in + out;
  c.counted_in = in;
  c.counted_out = out;
  if (buffered_ > stat_peak_.load(std::memory_order_relaxed)) stat_peak_.store(buffered_);
}

Conn* Server::budgetVictim() {
  // The reply left unread longest (a client that never reads holds it for good), else the
  // connection holding the most (unserved requests). A member link's few pending pings are no
  // stalled reply: it is judged by its heartbeats.
  Conn* stalled = nullptr;
  Conn* largest = nullptr;
  for (auto& [id, c] : conns_) {
    if (c->state != ConnState::kOpen) continue;
    if (c->io.pending() > FramedConn::kKeptOutCapacity &&
        (!stalled || c->out_since < stalled->out_since)) {
      stalled = c.get();
    }
    const size_t held = c->counted_in + c->counted_out;
    if (held > 0 && (!largest || held > largest->counted_in + largest->counted_out)) {
      largest = c.get();
    }
  }
  return stalled ? stalled : largest;
}

void Server::enforceBudget() {
  if (enforcing_) return;  // refusing a connection queues a reply, which comes back here
  enforcing_ = true;
  while (buffered_ > options_.max_buffered_bytes) {
    Conn* victim = budgetVictim();
    if (victim == nullptr) break;
    const size_t held = victim->counted_in + victim->counted_out;
    const bool between_frames = victim->io.dropQueued();
    victim->io.in().clear();
    account(*victim);
    stat_closed_over_budget_.fetch_add(1);
    const std::string why = "this connection's " + std::to_string(held) +
                            " bytes of unread replies and unserved requests put the store over "
                            "its budget of " +
                            std::to_string(options_.max_buffered_bytes) + " bytes";
    if (between_frames) {
      refuse(*victim, Code::kUnavailable, why);
    } else {
      closeConn(*victim, Cause::kPeerDied, "closed: " + why, false);  // no frame can follow
    }
  }
  enforcing_ = false;
}

}  // namespace server_impl
}  // namespace store
}  // namespace mw
