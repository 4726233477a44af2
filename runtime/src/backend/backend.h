// Backend: the per-world transport behind the Communicator (Gloo today, NCCL next).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "backend/work_state.h"
#include "base/failpoint.h"
#include "multiworld/status.h"
#include "multiworld/tensor.h"

namespace mw::detail {

enum class OpKind : uint8_t {
  kSend,
  kRecv,
  kBroadcast,
  kAllReduce,
  kReduce,
  kAllGather,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kBarrier,
};
inline constexpr int kNumOpKinds = 11;
const char* opKindName(OpKind k);

// The failpoints "mw/<backend>/<op>/<world>" of one world's backend, one per operation kind,
// "mw/<backend>/init/<world>" for its creation, and "mw/<backend>/delay/<world>", which delays
// each operation, and the Gloo backend's connection of the members, by failnum milliseconds
// (latency where the kernel cannot simulate it). And three that make an operation deliver wrong
// data while it succeeds, for the chaos harness's data_intact verdict (docs/failpoints.md; the
// Gloo backend has them): "mw/<backend>/corrupt/<world>" flips a bit of what a receiving
// operation got, "mw/<backend>/drop/<world>" loses a send, "mw/<backend>/repeat/<world>" sends it
// twice.
class OpFailPoints {
 public:
  OpFailPoints(std::string_view backend, std::string_view world)
      : init_(std::string("mw/") + std::string(backend) + "/init", world),
        delay_(std::string("mw/") + std::string(backend) + "/delay", world),
        corrupt_(std::string("mw/") + std::string(backend) + "/corrupt", world),
        drop_(std::string("mw/") + std::string(backend) + "/drop", world),
        repeat_(std::string("mw/") + std::string(backend) + "/repeat", world) {
    for (int k = 0; k < kNumOpKinds; ++k) {
      points_[k] = FailPoint(
          std::string("mw/") + std::string(backend) + "/" + opKindName(static_cast<OpKind>(k)),
          world);
    }
  }
  const FailPoint& operator[](OpKind k) const { return points_[static_cast<int>(k)]; }
  const FailPoint& init() const { return init_; }
  const FailPoint& corrupt() const { return corrupt_; }
  const FailPoint& drop() const { return drop_; }
  const FailPoint& repeat() const { return repeat_; }
  // Sleeps failnum milliseconds (at most 60 s) when the delay point fires.
  void delayIfAsked() const {
    if (auto d = delay_.check()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp(d->failnum, 0, 60000)));
    }
  }

 private:
  FailPoint init_;
  FailPoint delay_;
  FailPoint corrupt_, drop_, repeat_;
  std::array<FailPoint, kNumOpKinds> points_;
};

// One validated operation. `in`/`out` follow the Communicator's conventions; for in-place
// operations (send, recv, broadcast, all_reduce, reduce) only `in` is used.
struct OpRequest {
  OpKind kind = OpKind::kBarrier;
  Tensor in{};
  Tensor out{};
  int peer = -1;  // dst for send, src for recv, root for rooted collectives
  int tag = 0;
  ReduceOp reduce = ReduceOp::kSum;
  Deadline deadline{};
  // The submitting thread's current CUDA stream (multiworld/cuda_stream.h), which nccl worlds
  // order the operation after; Gloo ignores it.
  void* stream = nullptr;
  // NCCL: the event recorded on `stream` at submission (a cudaEvent_t), owned by the backend.
  void* ready = nullptr;
  std::shared_ptr<WorkState> work;
};

// Called by a backend when it sees the world fail (from the thread running the operation). Breaks
// the world (unless it broke already) and returns the status the world's operations fail with.
using BackendErrorHandler = std::function<Status(Cause cause, int peer, const std::string& detail)>;

// Thread rules: submit/abort from any thread; shutdown from one thread, once. Operations run one at
// a time in submission order, either on the backend's executor thread or inline in a thread that
// waits for one of them (Work::wait), which saves two thread hand-offs per blocking call.
class Backend {
 public:
  virtual ~Backend() = default;
  // Queues `op`; never blocks on the network. Its work completes later. `caller_waits` promises
  // that the submitting thread waits for the work at once with no deadline (blocking send/recv):
  // it will run the operation itself when it reaches the head of the queue.
  virtual void submit(OpRequest op, bool caller_waits) = 0;
  // Fails every queued and running operation with `reason` and unblocks them; later submits fail at
  // once with `reason`. Idempotent: the first reason wins. Never blocks on the network.
  virtual void abort(const Status& reason) = 0;
  // abort(kAborted) unless aborted already, then joins threads and releases sockets and memory.
  virtual void shutdown() = 0;
  // Called by the watchdog thread about every heartbeat_timeout / 10 while the world is healthy,
  // for the backend's own periodic checks. Never blocks on the network.
  virtual void tick(Clock::time_point now) { (void)now; }
};

}  // namespace mw::detail
