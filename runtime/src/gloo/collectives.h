// CPU collectives over Gloo unbound buffers, cancellable through the Channel.
//
// Every message of an operation travels on slots derived from the operation's call (kind, dtype,
// count, root, reduce op) and a per-world sequence number, so members whose calls disagree never
// match each other's messages (Gloo would abort the process on a size overflow): their operations
// stall, and CallCheck (gloo/call_check.h) names the disagreement. No message but the data's.
//
// all_reduce on float32, float64, int32 and int64 runs Gloo's own ring algorithm (measured 1.7x
// faster than ours on these machines), with the call's hash in its tag. Gloo's internal buffers
// cannot be reached by abortWaitRecv/abortWaitSend: an abort cuts the world's sockets instead (see
// pair_sockets.h), which fails Gloo's waits at once.
#pragma once

#include <gloo/allreduce.h>
#include <gloo/context.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "gloo/channel.h"

namespace mw::detail {

// Gloo's all_reduce options (and the buffer Gloo creates over the tensor with them) kept from one
// call to the next over the same tensor, the way a program using Gloo directly keeps them:
// creating and dropping them per call cost up to 40% of 1 MiB all_reduce throughput on 2 cores
// (dropping a Gloo buffer waits for Gloo's loop to let go of it). Holds the most recent few; owned
// by the thread running operations, like CollectiveEnv's scratch space.
class NativeOptionsCache {
 public:
  NativeOptionsCache();
  ~NativeOptionsCache();
  NativeOptionsCache(const NativeOptionsCache&) = delete;
  NativeOptionsCache& operator=(const NativeOptionsCache&) = delete;
  // The options for all_reduce `op` (its tensor, dtype and reduce op; ring algorithm) over
  // `context`: kept ones, or new ones that are kept. Tag and timeout are the caller's to set.
  // Their output buffer is adopted by `channel` (its aborts interrupt waits on it) until dropped.
  // Throws AbortedError when the channel is aborted.
  gloo::AllreduceOptions& get(const OpRequest& op, const std::shared_ptr<gloo::Context>& context,
                              Channel& channel);
  // Drops every kept option set (and its buffers). Call before the Gloo context goes, and after a
  // failed all_reduce (a transfer may be outstanding on the buffer).
  void clear();

 private:
  static constexpr size_t kKeep = 8;
  struct Entry;
  std::vector<std::unique_ptr<Entry>> entries_;  // most recently used last
};

struct CollectiveEnv {
  std::shared_ptr<gloo::Context> context;  // for Gloo's own algorithms
  int rank = 0;
  int size = 1;
  uint64_t seq = 0;  // per world, increments per collective, same on every member
  Channel* channel = nullptr;
  std::vector<char>* scratch = nullptr;  // reusable receive space
  std::vector<char>* work = nullptr;     // reusable copy space
  NativeOptionsCache* native = nullptr;  // Gloo all_reduce options of recent calls
};

// One collective operation (not send/recv). It owns every buffer it posts and the small messages
// (descriptors, barrier tokens) those buffers point to, so it must outlive Gloo's use of them:
// destroy it only after run() returned, or, after a failure, once the world's connections are
// closed (Gloo's loop may still be writing from or into them until then). `op` must outlive it.
class Collective {
 public:
  Collective(const OpRequest& op, const CollectiveEnv& env);
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
  // Runs the operation to completion. Throws AbortedError, OpTimeoutError or
  // Gloo's exceptions. Call at most once.
  void run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The slot of the n-th message (n counted per sender, receiver and tag) with this tag, dtype and
// count. Sender and receiver derive the same slot exactly when they agree on all of them (up to a
// 40-bit hash), and the n-th send matches only the n-th receive (up to 65536 messages in flight on
// one tag), so messages on a tag never overtake each other.
uint64_t p2pSlot(int tag, DType dtype, size_t count, uint64_t n);

}  // namespace mw::detail
