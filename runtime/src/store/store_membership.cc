// StoreServer membership: members join, heartbeat and are declared lost (link closed, silent, or
// reporting the world broken); every loss is announced to the other members.
#include "store/server_impl.h"

namespace mw {
namespace store {
namespace server_impl {

void Server::runTimers(Clock::time_point now) {
  handshakeTimers(now);
  for (auto& [id, c] : conns_) {
    if (c->state == ConnState::kLingering && now >= c->linger_until) c->state = ConnState::kDead;
    if (c->wait && now >= c->wait->deadline) {
      PendingWait w = *c->wait;
      endWait(*c);
      std::string what = w.is_get ? "key '" + w.keys[0] + "' was not set"
                                  : "keys " + quoteKeys(w.keys) + " were not all set";
      queue(*c, msg::Timeout{what + " within " + std::to_string(w.timeout_ms) + " ms"});
    }
    if (assembled_ && c->rank >= 0 && silence(*c, now) >= silenceLimit()) checkSilence(*c, now);
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
  if (!assembled_ || c.state != ConnState::kOpen || c.rank < 0 ||
      silence(c, now) < silenceLimit()) {
    return;
  }
  // Counted over time this thread ran on schedule (lateness.h); the wall time is said beside it.
  auto silent = std::chrono::duration_cast<milliseconds>(silence(c, now)).count();
  auto wall = std::chrono::duration_cast<milliseconds>(Clock::now() - c.last_heard).count();
  closeConn(c, Cause::kPeerSilent,
            "rank " + std::to_string(c.rank) + " silent for " + std::to_string(silent) +
                " ms (last heard " + std::to_string(wall) + " ms ago)",
            true);
}

bool Server::mayClaim(Conn& c) {
  if (options_.world_size <= 0) {
    queue(c, msg::Error{Code::kInvalidUsage, "this store hosts no world membership"});
    return false;
  }
  if (c.rank >= 0 || c.client_rank >= 0) {
    queue(c, msg::Error{Code::kInvalidUsage, "this connection already joined as rank " +
                                                 std::to_string(std::max(c.rank, c.client_rank))});
    return false;
  }
  return true;
}

void Server::onJoin(Conn& c, const msg::MemberJoin& m) {
  if (!mayClaim(c)) return;
  if (m.rank >= 0 && m.rank < options_.world_size) {
    // The rank's earlier connection may have closed in this very wake-up: notice that first, so
    // that a member restarted before the world formed takes its place (closeConn frees it).
    if (Conn* old = find(members_[static_cast<size_t>(m.rank)]); old != nullptr && old != &c) {
      readAvailable(*old);
    }
    if (c.state != ConnState::kOpen) return;  // closed meanwhile (the store's budget)
  }
  std::string error = joinError(m);
  if (!error.empty()) return queue(c, msg::Error{Code::kInvalidArgument, error});
  c.rank = static_cast<int>(m.rank);
  heard(c, Clock::now());
  members_[static_cast<size_t>(c.rank)] = c.id;
  ++joined_;
  claimed(c);
  if (!assembled_ && std::find(members_.begin(), members_.end(), 0) == members_.end()) {
    // The world is complete: every member's silence is timed from now.
    assembled_ = true;
    const auto now = Clock::now();
    for (uint64_t id : members_) {
      if (Conn* m = find(id)) heard(*m, now);
    }
  }
  setKey("mw/member/" + std::to_string(c.rank), "1");
  queue(c, msg::JoinOk{interval_.count(), timeout_.count()});
}

std::string Server::memberError(const std::string& world_name, int64_t size,
                                int64_t rank_number) const {
  const std::string world = "world '" + options_.world_name + "'";
  const std::string rank = std::to_string(rank_number);
  if (world_name != options_.world_name) {
    return "this store hosts " + world + ", member rank " + rank + " says world '" + world_name +
           "'";
  }
  if (size != options_.world_size) {
    return world + " has size " + std::to_string(options_.world_size) + ", member rank " + rank +
           " says " + std::to_string(size);
  }
  if (rank_number < 0 || rank_number >= options_.world_size) {
    return "rank " + rank + " is out of range for " + world + " of size " +
           std::to_string(options_.world_size);
  }
  return {};
}

std::string Server::joinError(const msg::MemberJoin& m) const {
  if (std::string error = memberError(m.world, m.size, m.rank); !error.empty()) return error;
  const std::string world = "world '" + options_.world_name + "'";
  const std::string rank = std::to_string(m.rank);
  if (members_[static_cast<size_t>(m.rank)] != 0) {
    return "rank " + rank + " already joined " + world;
  }
  if (m.heartbeat_timeout_ms != 0 && m.heartbeat_timeout_ms != timeout_.count()) {
    return world + " has heartbeat_timeout " + std::to_string(timeout_.count()) +
           " ms (set by rank 0), member rank " + rank + " says " +
           std::to_string(m.heartbeat_timeout_ms) + " ms";
  }
  return {};
}

void Server::onMemberClient(Conn& c, const msg::MemberClient& m) {
  if (!mayClaim(c)) return;
  std::string error = memberError(m.world, m.size, m.rank);
  if (error.empty()) {
    const auto rank = static_cast<size_t>(m.rank);
    // As for MEMBER_JOIN: the rank's earlier connection may have closed in this very wake-up.
    if (Conn* old = find(clients_[rank]); old != nullptr && old != &c) readAvailable(*old);
    if (c.state != ConnState::kOpen) return;  // closed meanwhile (the store's budget)
    if (clients_[rank] != 0) {
      error = "rank " + std::to_string(m.rank) + " already joined world '" + options_.world_name +
              "' (its key-value client is connected)";
    }
  }
  if (!error.empty()) return queue(c, msg::Error{Code::kInvalidArgument, error});
  c.client_rank = static_cast<int>(m.rank);
  clients_[static_cast<size_t>(m.rank)] = c.id;
  ++claimed_clients_;
  claimed(c);
  queue(c, msg::Ok{});
}

void Server::onFormed(Conn& c) {
  if (c.rank < 0) return protocolError(c, "FORMED from a connection that has not joined");
  // Its rendezvous completed, which needs every rank: the members joined now are the ones that
  // formed the world (a ghost that went before is not among them). Their losses and reports
  // count from now on, whichever of them says so first.
  for (uint64_t id : members_) {
    if (Conn* m = find(id)) m->formed = true;
  }
}

bool Server::shutJoinBarrier(int rank, Cause cause, const std::string& detail) {
  if (table_.find(std::string(kJoinConnected)) == nullptr) return false;  // a ghost: may rejoin
  const auto why = [&] {
    return std::string(kJoinLostPrefix) + "rank " + std::to_string(rank) + " " + causeName(cause) +
           ": " + detail;
  };
  const std::string open(kJoinOpen);
  if (const std::string* value = table_.find(open); value != nullptr) {
    if (*value != kJoinOpenValue) return false;  // shut already, by an earlier loss
    // Opened: every member's join has succeeded, and this loss is the formed world's (closeConn
    // announces it). Rank 0 waits for every other member to count itself through; this one, if
    // it had not, never will now: it is counted through as lost.
    const std::string through = joinThroughKey(rank);
    if (rank != 0 && table_.find(through) == nullptr) setKey(through, why());
    return true;
  }
  setKey(open, why());
  return false;
}

void Server::onBroken(Conn& c, const msg::Broken& m) {
  if (c.rank < 0) return protocolError(c, "BROKEN from a connection that has not joined");
  if (m.cause == Cause::kPeerLeft) {
    // A member that leaves is no longer one: its link's close that follows is no death.
    return closeConn(c, Cause::kPeerLeft, "rank " + std::to_string(c.rank) + " left the world",
                     true);
  }
  // Before its world formed a member's report is ignored, like its loss: a connection that joined
  // and went before the world formed (a ghost) must not break it (store-protocol.md).
  if (c.reported_broken || !c.formed) return;  // and one report per member is enough
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

}  // namespace server_impl
}  // namespace store
}  // namespace mw
