#include "gloo/call_check.h"

#include <sstream>

#include "base/thread_name.h"

namespace mw::detail {

namespace {

constexpr auto kMaxBackoff = std::chrono::seconds(1);
constexpr auto kStoreCall = std::chrono::seconds(1);

bool usesReduce(OpKind k) {
  return k == OpKind::kAllReduce || k == OpKind::kReduce || k == OpKind::kReduceScatter;
}
bool usesRoot(OpKind k) {
  return k == OpKind::kBroadcast || k == OpKind::kReduce || k == OpKind::kGather ||
         k == OpKind::kScatter;
}
bool isP2P(OpKind k) { return k == OpKind::kSend || k == OpKind::kRecv; }

}  // namespace

CallCheck::CallCheck(StoreClient& store, int rank, int size, BackendErrorHandler on_error,
                     Clock::duration after)
    : store_(store), rank_(rank), size_(size), on_error_(std::move(on_error)), after_(after) {}

CallCheck::~CallCheck() { stop(); }

CallCheck::Call CallCheck::callOf(const OpRequest& op, uint64_t number) {
  Call c;
  c.kind = op.kind;
  c.number = number;
  c.dtype = op.kind == OpKind::kScatter ? op.out.dtype : op.in.dtype;
  switch (op.kind) {
    case OpKind::kScatter:
    case OpKind::kReduceScatter:
      c.count = op.out.count;
      break;
    case OpKind::kBarrier:
      c.count = 0;
      break;
    default:
      c.count = op.in.count;
      break;
  }
  if (isP2P(op.kind)) {
    c.peer = op.peer;
    c.tag = op.tag;
  } else if (usesRoot(op.kind)) {
    c.peer = op.peer;
  }
  if (usesReduce(op.kind)) c.reduce = static_cast<int>(op.reduce);
  return c;
}

std::string CallCheck::describe(const Call& c) {
  std::ostringstream s;
  if (isP2P(c.kind)) {
    s << c.count << " x " << dtypeName(c.dtype);
    return s.str();
  }
  s << opKindName(c.kind) << "(";
  if (c.kind != OpKind::kBarrier) s << dtypeName(c.dtype) << " x " << c.count;
  if (c.reduce >= 0) s << ", " << reduceOpName(static_cast<ReduceOp>(c.reduce));
  if (usesRoot(c.kind)) s << ", root " << c.peer;
  s << ")";
  return s.str();
}

std::string CallCheck::keyOf(const Call& c, int rank) const {
  if (isP2P(c.kind)) {
    // Both sides name the message alike: sender, receiver, tag, number; then whose side it is.
    const bool mine = rank == rank_;
    const bool send = (c.kind == OpKind::kSend) == mine;
    const int src = c.kind == OpKind::kSend ? rank_ : c.peer;
    const int dst = c.kind == OpKind::kSend ? c.peer : rank_;
    return "mw/call/p2p/" + std::to_string(src) + "/" + std::to_string(dst) + "/" +
           std::to_string(c.tag) + "/" + std::to_string(c.number) + (send ? "/send" : "/recv");
  }
  return "mw/call/coll/" + std::to_string(c.number) + "/" + std::to_string(rank);
}

uint64_t CallCheck::begin(const OpRequest& op, uint64_t number) {
  auto now = Clock::now();
  MutexLock lock(mu_);
  uint64_t id = next_id_++;
  running_.emplace(id, Suspect{callOf(op, number), now, now + after_, after_, false});
  return id;
}

void CallCheck::end(uint64_t id) {
  MutexLock lock(mu_);
  auto it = running_.find(id);
  if (it == running_.end()) return;
  if (it->second.published) unpublish_.push_back(keyOf(it->second.call, rank_));
  running_.erase(it);
}

void CallCheck::tick(Clock::time_point now) {
  MutexLock lock(mu_);
  if (stopped_) return;
  bool work = !unpublish_.empty();
  for (const auto& [id, s] : running_) work = work || now >= s.next;
  if (!work) return;
  due_ = true;
  if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token st) { run(st); });
  cv_.notify_one();
}

void CallCheck::stop() {
  {
    MutexLock lock(mu_);
    stopped_ = true;
    thread_.request_stop();  // under mu_: read by run()'s wait predicate, under mu_
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CallCheck::run(std::stop_token st) {
  nameThisThread("mw-callcheck");
  MutexLock lock(mu_);
  for (;;) {
    cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) { return due_ || st.stop_requested(); });
    if (st.stop_requested()) return;
    due_ = false;
    std::vector<std::string> unpublish = std::move(unpublish_);
    unpublish_.clear();
    const auto now = Clock::now();
    std::vector<std::pair<uint64_t, Suspect>> due;
    for (auto& [id, s] : running_) {
      if (now < s.next) continue;
      s.next = now + s.backoff;
      s.backoff = std::min<Clock::duration>(s.backoff * 2, kMaxBackoff);
      due.emplace_back(id, s);
    }
    lock.unlock();
    for (const auto& key : unpublish) (void)store_.remove(key, deadlineIn(kStoreCall));
    bool broken = false;
    for (auto& [id, s] : due) {
      if (broken || st.stop_requested()) break;
      broken = !probe(s);
    }
    lock.lock();
    for (const auto& [id, s] : due) {
      if (!s.published) continue;
      auto it = running_.find(id);
      if (it != running_.end()) {
        it->second.published = true;
      } else {
        unpublish_.push_back(keyOf(s.call, rank_));  // ended while we published it
      }
    }
    if (broken) {
      stopped_ = true;  // the world is broken: nothing more to name
      return;
    }
  }
}

bool CallCheck::probe(Suspect& s) {
  const std::string mine = describe(s.call);
  if (!s.published) {
    if (!store_.set(keyOf(s.call, rank_), mine, deadlineIn(kStoreCall)).ok()) return true;
    s.published = true;
  }
  std::vector<int> others;
  if (isP2P(s.call.kind)) {
    others.push_back(s.call.peer);
  } else {
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) others.push_back(r);
    }
  }
  for (int r : others) {
    const std::string key = keyOf(s.call, r);
    auto present = store_.check({key}, deadlineIn(kStoreCall));
    if (!present.ok() || !*present) continue;
    auto theirs = store_.get(key, deadlineIn(kStoreCall));
    if (!theirs.ok() || *theirs == mine) continue;
    (void)on_error_(Cause::kProtocolError, r, disagreement(s.call, mine, r, *theirs));
    return false;
  }
  return true;
}

std::string CallCheck::disagreement(const Call& c, const std::string& mine, int rank,
                                    const std::string& theirs) const {
  if (isP2P(c.kind)) {
    const bool send = c.kind == OpKind::kSend;
    const int src = send ? rank_ : rank, dst = send ? rank : rank_;
    const std::string& sent = send ? mine : theirs;
    const std::string& expected = send ? theirs : mine;
    return "rank " + std::to_string(src) + " sent " + sent + " with tag " + std::to_string(c.tag) +
           " but the receive of rank " + std::to_string(dst) + " expects " + expected;
  }
  return "rank " + std::to_string(rank) + " called " + theirs + " but rank " +
         std::to_string(rank_) + " called " + mine;
}

}  // namespace mw::detail
