// WorldManager: the worlds one process belongs to.
//
// A world is an independent communicator group with its own ranks, backend, store and fate. Its
// state goes joining -> healthy -> broken -> removed (or joining -> removed when initialization
// fails). A world breaks when a member dies (its store connection closes), goes silent longer than
// the heartbeat timeout, an operation passes its deadline, or the backend reports an error; then
// every pending operation of that world fails with kWorldBroken and subscribers get an event. No
// other world of the process changes state.
//
// Thread rules: every method may be called from any thread. The manager owns one watchdog thread
// and, per world, the threads of its backend and (at the store host) its store server.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "multiworld/status.h"
#include "multiworld/store.h"
#include "multiworld/tensor.h"
#include "multiworld/work.h"

namespace mw {

namespace detail {
struct ManagerAccess;
}

// gloo: CPU tensors over TCP. nccl: CUDA tensors of one GPU (the world's device), in a library
// built with the NCCL backend (multiworld/config.h: MW_CONFIG_WITH_NCCL).
enum class BackendKind : uint8_t { kGloo = 0, kNccl = 1 };
// "gloo", "nccl".
const char* backendName(BackendKind b);
// Parses "gloo" or "nccl". kInvalidArgument otherwise.
Result<BackendKind> parseBackend(const std::string& name);

// Whether `name` follows the rule for world names: 1..128 characters of [A-Za-z0-9_.-]. Pure.
bool validWorldName(std::string_view name);

// How Work::wait() waits on an nccl world (work.h): kStream orders the caller's current CUDA stream
// after the operation and returns without waiting for the GPU (as PyTorch's NCCL groups do);
// kHost blocks the calling thread until the GPU has finished the operation (synchronize()).
enum class CudaWait : uint8_t { kStream = 0, kHost = 1 };
// "stream", "host".
const char* cudaWaitName(CudaWait w);
// Parses "stream" or "host". kInvalidArgument otherwise.
Result<CudaWait> parseCudaWait(const std::string& name);

enum class WorldState : uint8_t { kJoining = 0, kHealthy = 1, kBroken = 2, kRemoved = 3 };
// "joining", "healthy", "broken", "removed".
const char* worldStateName(WorldState s);

// The largest world: initialization is bounded by its deadline up to this size; a larger size is
// refused with kInvalidArgument (docs/design.md, "Limits known today", has the measurement).
inline constexpr int kMaxWorldSize = 4096;

struct WorldOptions {
  std::string name;  // 1..128 characters of [A-Za-z0-9_.-]
  int rank = -1;     // this process's rank, 0 <= rank < size
  // Number of members, 1 .. kMaxWorldSize. A gloo member holds a socket per other member (twice
  // that while connecting): a world the process's descriptor limit cannot hold is refused with
  // kUnavailable before anything starts.
  int size = 0;
  BackendKind backend = BackendKind::kGloo;
  // Where the world's tensors live: cpu for gloo; cuda:N for nccl (N as this process sees its GPUs
  // through CUDA_VISIBLE_DEVICES). A missing driver or GPU fails initialization with kUnavailable.
  // NCCL and the CUDA runtime are opened when the first nccl world is created ($MW_NCCL_LIBRARY,
  // else the libnccl.so* the process has loaded already (PyTorch's), else libnccl.so.2; the same
  // for $MW_CUDART_LIBRARY, libcudart.so*, libcudart.so.<major>): a file that is missing, lacks a
  // function or holds an NCCL older than 2.22 fails it with kUnavailable naming the file.
  // Operations on its tensors are ordered after the caller's CUDA stream (cuda_stream.h).
  Device device{};
  // The world's store. Rank 0 hosts it there when host_store is true (port 0 lets rank 0 pick a
  // free port, reported by WorldInfo::store_port; other ranks then need that port).
  StoreAddress store{};
  bool host_store = true;
  std::string token;  // shared secret every member presents to the store ("" for none)
  // A member silent for longer than this (plus a confirmation of min(timeout/5, 100 ms)) breaks the
  // world; silence is counted only over time the judging process itself ran, so a process that was
  // not scheduled blames no peer for it. 50 ms .. 1 h; default 1 s. Every member
  // must give the same value: the store (rank 0's) refuses a member with another one at join, with
  // kInvalidArgument naming both values.
  std::chrono::milliseconds heartbeat_timeout{1000};
  // Deadline of each operation from its submission; passing it breaks the world. 1 ms .. 30 days;
  // default 60 s.
  std::chrono::milliseconds op_timeout{60000};
  // Gloo worlds: how long an operation that nobody waits for stays queued before the world's
  // executor thread starts it (see Work for when operations start). 0 .. 10 s; default 5 ms.
  // Shorter starts unwaited operations sooner, at a price for every asynchronous call: below the
  // scheduler tick the executor's timer is the CPU's earliest, and arming and cancelling it
  // reprograms the CPU's timer (docs/design.md, "The Gloo backend", has the cost measured).
  std::chrono::microseconds executor_grace{5000};
  // nccl worlds: what Work::wait() does (CudaWait above); Gloo worlds wait on the host always.
  CudaWait cuda_wait = CudaWait::kStream;
};

struct WorldInfo {
  std::string name;
  int rank = -1;
  int size = 0;
  BackendKind backend = BackendKind::kGloo;
  Device device{};
  WorldState state = WorldState::kJoining;
  uint64_t generation = 0;           // counts initializations of this name in this process, from 1
  uint16_t store_port = 0;           // the store's port (the chosen one when rank 0 picked it)
  std::optional<BrokenInfo> broken;  // set once broken
};

struct WorldEvent {
  enum class Kind : uint8_t { kCreated = 0, kBroken = 1, kRemoved = 2 };
  Kind kind = Kind::kCreated;
  std::string world;
  uint64_t generation = 0;
  std::optional<BrokenInfo> broken;  // for kBroken
  Clock::time_point at{};            // monotonic time of the event
};
// "created", "broken", "removed".
const char* eventKindName(WorldEvent::Kind k);

// A queue of world events, filled by the manager from the moment of subscribe().
// Thread rules: any thread. Events queue without bound until read; read them or drop the handle.
class Subscription {
 public:
  virtual ~Subscription() = default;
  // The next event, waiting until `deadline`; nullopt when none arrived in time.
  virtual std::optional<WorldEvent> next(Deadline deadline) = 0;
};

class WorldManager {
 public:
  // Starts the watchdog thread. The first manager of the process sets SIGPIPE to ignored when it
  // is at its default action (a handler the program installed is kept): Gloo writes with writev,
  // so a peer that closed its connection would otherwise kill the whole process, every world in
  // it, instead of failing one write with EPIPE.
  WorldManager();
  // Cancels every initialization still joining (as removeWorld), removes every world and joins
  // every thread; then waits up to 2 s for the process's nccl communicator aborts still running
  // (see removeWorld), and leaves those that take longer to finish on their own threads.
  ~WorldManager();
  WorldManager(const WorldManager&) = delete;
  WorldManager& operator=(const WorldManager&) = delete;

  // Joins world options.name and blocks until every member has joined or `deadline` passes.
  // Errors: kInvalidArgument for bad options (each names the field and value), kInvalidUsage when
  // a world of that name exists and is not removed, kTimeout when the members did not all join in
  // time, kIoError when the store address cannot be bound or reached, kPermissionDenied for a wrong
  // token, kUnavailable when the backend cannot run here (no NCCL backend in this build, NCCL or
  // the CUDA runtime missing or too old, no CUDA driver or GPU, a device this process does not
  // see), kBackendError when it fails to start, kRemoteError when a member was lost (its process
  // ended, it went silent, or its own join failed and it left) after every member's connections
  // were up and before the world formed (the message names it: "a member was lost before every
  // member was connected: rank 2 peer_died: ..."). On error nothing of the world is left behind
  // and the name is free again.
  Status initWorld(const WorldOptions& options, Deadline deadline);

  // As initWorld, without blocking: the returned Work completes when the world is healthy or its
  // initialization failed. The name is reserved (state joining) before this returns.
  Work initWorldAsync(const WorldOptions& options, Deadline deadline);

  // Leaves world `name`: fails its pending operations with kAborted (unless already broken), joins
  // its threads, closes its sockets and frees its memory, then frees the name. Blocks at most a few
  // milliseconds beyond the backend's teardown. kNotFound for an unknown name.
  // A world still joining is cancelled: its initWorld / initWorldAsync ends with kAborted ("was
  // removed while it was joining") at its next wait for the store or for the other members'
  // addresses (within milliseconds), and removeWorld returns once it has, the name free again.
  // Only the connection of Gloo's pairs, after every member has published its address, is not
  // cancellable; Gloo bounds it by the join's deadline. A world that came up just before the
  // cancel is removed as a healthy one. An nccl world's communicator is aborted on a thread of its
  // own, which may outlive this call: NCCL's abort frees device memory, which can wait for another
  // world's stuck kernel, and this call waits for it 20 ms at most (docs/design.md, "Failure").
  Status removeWorld(const std::string& name);

  // Every world not yet removed, in name order.
  std::vector<WorldInfo> worlds() const;
  // One world; kNotFound for an unknown name. A joining world's store_port is set as soon as its
  // store is bound (rank 0 hosting on port 0 picks a free port), before the other members join.
  Result<WorldInfo> world(const std::string& name) const;
  // The port of world `name`'s store, waiting until it is known: what rank 0, after
  // initWorldAsync with store.port 0, tells the other members. Errors: kNotFound for an unknown
  // name, kInvalidUsage when the world is no longer joining and has none (its initialization
  // failed first), kTimeout at `deadline`.
  Result<uint16_t> storePort(const std::string& name, Deadline deadline) const;

  // A new event queue.
  std::shared_ptr<Subscription> subscribe();

 private:
  struct Impl;
  friend struct detail::ManagerAccess;  // the Communicator's way to the worlds (not the API)
  std::unique_ptr<Impl> impl_;
};

}  // namespace mw
