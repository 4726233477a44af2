// Work: the handle of one asynchronous world operation.
//
// Every operation of the Communicator returns a Work at once; its result arrives later. A Work
// completes exactly once, with OK or with the error that ended the operation: kWorldBroken (with
// BrokenInfo) when its world failed, kAborted when the world was removed, kInvalidArgument for
// arguments rejected before anything was sent. Waiting never blocks past the caller's deadline
// (except by an injected delay, docs/failpoints.md).
//
// Two ways to wait (docs/design.md, "Completion"):
// - synchronize() blocks the calling thread until the operation has completed, on every world.
// - wait() does the same on Gloo worlds and on nccl worlds made with CudaWait::kHost. On nccl
//   worlds (CudaWait::kStream, the default) it is stream-ordered, as PyTorch's NCCL groups are:
//   it makes the calling thread's current CUDA stream (multiworld/cuda_stream.h) wait for the
//   operation on the GPU and returns without waiting for the GPU. Work the caller queues on that
//   stream afterwards sees the operation's results. A fault still fails the Work (test(),
//   status(), synchronize() and later operations of the world say so, within the world's
//   detection time), but the stream has gone on: the outputs of an operation that failed are
//   undefined, and so is anything computed from them.
//
// When an operation starts: a world runs its operations one at a time, in submission order.
// - Gloo: the thread that calls wait() runs the operation itself when no other operation of the
//   world is running (so `allReduce(...).wait()` costs no thread hand-off); otherwise, and for
//   test() and waitAny, the world's executor thread starts it at once. An operation nobody waits
//   for starts on the executor 5 ms after it was submitted. Point-to-point messages are posted to
//   the network at submission either way; the thread that waits for one completes it itself, also
//   with a deadline shorter than the operation's (until that deadline; the world's completer
//   thread carries it on after), and sends and receives never wait behind a collective.
// - NCCL: the submitting thread launches the operation itself (no thread hand-off) when the
//   world has nothing queued and no other thread is launching on it; otherwise the world's
//   executor thread launches it, in order. A world keeps at most 1024 operations launched and not
//   yet complete: a submission beyond that waits on the host for room, as CUDA's own launch queue
//   makes a launch wait.
//
// Thread rules: a Work is a cheap shared handle; copies may be waited on from any thread.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "multiworld/status.h"

namespace mw {

namespace detail {
struct WorkState;
struct WorkAccess;  // the library's own access to a Work's state (not part of the API)
}  // namespace detail

class Work {
 public:
  // An empty handle; wait() and status() return kInvalidUsage.
  Work() = default;

  // A Work that is already complete with `status` (used for arguments rejected up front).
  static Work done(const std::string& world, Status status);

  // Host-waited worlds (Gloo; nccl with CudaWait::kHost): synchronize(). Stream-ordered worlds
  // (nccl, the default): orders the calling thread's current CUDA stream after the operation and
  // returns OK without waiting for the GPU, or the operation's error when it has already failed;
  // kTimeout when the operation was not yet launched by `deadline` (it waits on the host only for
  // the launch of an operation queued behind others); kInvalidArgument, naming CUDA's error, when
  // CUDA refuses the current stream (the world stays healthy).
  Status wait(Deadline deadline = Deadline::max()) const;

  // Blocks until the operation completes or `deadline` passes, on every world. Returns the
  // operation's status, or kTimeout when the deadline passed first (the operation goes on; wait
  // again or let its world's operation deadline end it). On an nccl world the operation is
  // complete once the GPU has finished it: any stream may use its results then.
  Status synchronize(Deadline deadline = Deadline::max()) const;

  // True once the operation has completed (successfully or not). Never blocks; an operation that
  // has not started yet is started on the world's executor at once.
  bool test() const;

  // The final status once complete; kInvalidUsage ("not complete") before.
  Status status() const;

  // The world the operation belongs to ("" for an empty handle).
  const std::string& world() const;

  bool valid() const { return state_ != nullptr; }
  // Whether two handles refer to the same operation (copies share it).
  bool sameAs(const Work& other) const { return state_ == other.state_; }

 private:
  friend struct detail::WorkAccess;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::WorkState> state_;
};

// Waits until at least one of `works` has completed and returns the index of one that has (the
// lowest index among those complete when the call returns). A leader uses it to take whichever
// world has data next. Returns kInvalidArgument for an empty span or an empty handle, kTimeout when
// `deadline` passes first. Thread rules: any thread; the works may belong to different worlds.
Result<size_t> waitAny(std::span<const Work> works, Deadline deadline = Deadline::max());

}  // namespace mw
