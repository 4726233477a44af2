// CallCheck: names members whose calls disagree, at no cost to operations that complete.
//
// Every message of an operation travels on a slot derived from the call itself (dtype, count,
// root, reduce op, and a sequence number), so members whose calls disagree never match each
// other's messages: their operations stall instead. An operation that has waited longer than
// `after` is such a suspect. Its member then publishes its call in the world's store, under a key
// its peers derive for the same operation, and compares it with theirs; the first member that sees
// a disagreement breaks the world with a protocol error naming both calls. A healthy operation
// that waits for a slow peer finds equal calls, or none yet, and goes on waiting (checked again
// with a backoff up to 1 s); it deletes what it published when it ends.
//
// Store traffic happens on a thread of its own, started at the first suspect; the watchdog's
// tick() decides when, so a fast operation costs two map updates and no message, no wake-up.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "base/mutex.h"
#include "multiworld/store.h"

namespace mw::detail {

class CallCheck {
 public:
  // `store` must outlive this object (stop() joins the thread that uses it). `on_error` is called
  // from that thread when calls disagree. This member is `rank` of `size`.
  CallCheck(StoreClient& store, int rank, int size, BackendErrorHandler on_error,
            Clock::duration after = std::chrono::milliseconds(100));
  ~CallCheck();
  CallCheck(const CallCheck&) = delete;
  CallCheck& operator=(const CallCheck&) = delete;

  // Operation `op` of this member started waiting for its peers. `number` is what both sides count
  // alike: the n-th message from its sender to its receiver on its tag (send/recv), or the world's
  // collective sequence number (collectives). Returns an id for end(). Never blocks on the network.
  uint64_t begin(const OpRequest& op, uint64_t number) MW_EXCLUDES(mu_);
  // The operation completed or failed. Never blocks on the network.
  void end(uint64_t id) MW_EXCLUDES(mu_);
  // Called often (by the watchdog, about every heartbeat_timeout / 10): starts the checks that are
  // due. Never blocks on the network.
  void tick(Clock::time_point now) MW_EXCLUDES(mu_);
  // Ends the checks and joins their thread (waits at most for one store call). Idempotent.
  void stop() MW_EXCLUDES(mu_);

  // What of a call its peers must agree on.
  struct Call {
    OpKind kind = OpKind::kBarrier;
    DType dtype = DType::kFloat32;
    uint64_t count = 0;
    int peer = -1;    // dst (send), src (recv), root (rooted collectives), or -1
    int tag = 0;      // send/recv only
    int reduce = -1;  // reducing collectives only
    uint64_t number = 0;
  };
  static Call callOf(const OpRequest& op, uint64_t number);
  // The call as a member publishes it, e.g. "all_reduce(float32 x 100, sum)" or "10 x int32";
  // equal across members exactly when their calls agree.
  static std::string describe(const Call& c);

 private:
  struct Suspect {
    Call call;
    Clock::time_point since;
    Clock::time_point next;
    Clock::duration backoff;
    bool published = false;
  };

  // The key under which `rank` publishes its side of `c` (a call of this member).
  std::string keyOf(const Call& c, int rank) const;
  void run(std::stop_token st);
  // Publishes and compares one suspect's call. Returns false once the world is broken.
  bool probe(Suspect& s);
  std::string disagreement(const Call& c, const std::string& mine, int rank,
                           const std::string& theirs) const;

  StoreClient& store_;
  const int rank_;
  const int size_;
  BackendErrorHandler on_error_;
  const Clock::duration after_;

  Mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ MW_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Suspect> running_ MW_GUARDED_BY(mu_);
  std::vector<std::string> unpublish_ MW_GUARDED_BY(mu_);  // keys of ended operations
  bool due_ MW_GUARDED_BY(mu_) = false;
  bool stopped_ MW_GUARDED_BY(mu_) = false;
  std::jthread thread_;  // started by the first tick with work
};

}  // namespace mw::detail
