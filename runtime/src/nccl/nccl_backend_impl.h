// The NCCL backend's implementation, shared by nccl_backend.cc (submission, launches, events) and
// nccl_completion.cc (waiting, the executor, the completer, failure and the drain). Internal to
// the runtime: nccl_backend.h is the interface.
#pragma once

#include <sys/prctl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_name.h"
#include "nccl/nccl_backend.h"
#include "nccl/nccl_loader.h"
#include "nccl/nccl_ops.h"
#include "nccl/nccl_resources.h"

namespace mw::detail::nccl_impl {

using namespace std::chrono_literals;

// A world keeps at most this many operations launched and not yet complete (each holds a CUDA
// event); a submission beyond that waits for room.
constexpr size_t kMaxInFlight = 1024;
// While the completer waits blocked for an operation, the executor checks the communicator's
// asynchronous error, the oldest operation's event and its deadline this often (what detects a
// failure under a kernel that never ends).
constexpr auto kSupervise = 1ms;
// A caller whose launch NCCL is still completing in the background (ncclInProgress: connections
// forming) polls it this long, then hands the launch to the executor.
constexpr auto kInlineSettle = 1ms;
// How long a launch may hold its GPU's launch lock while NCCL finishes it in the background
// (connection setup on a first operation can take long, and forever when the peer is gone): after
// this the other worlds on the GPU may launch again.
constexpr auto kLaunchLockLimit = 100ms;
// After an abort, how long to wait for the stream's work to end before failing its operations and
// leaving the world's memory behind.
constexpr auto kDrainLimit = 10s;
// synchronize(): the waiting thread polls its operation's event itself this long (no thread
// hand-off for the completion of a short operation), then sleeps until the completer completes it.
constexpr auto kHostSpin = 200us;
// The completer's hybrid mode: it polls the oldest operation's event this long, then blocks.
constexpr auto kHybridSpin = 20us;
// The predict mode: the completer sleeps until this long before the oldest operation's expected
// end (the average of the world's recent operations, from their start on the GPU), then polls
// until this long past it (at least kHybridSpin), then blocks. A sleep shorter than kMinSleep is
// polled instead.
constexpr auto kPredictMargin = 10us;
constexpr auto kMinSleep = 20us;
// A length in nanoseconds from environment variable `name`: `fallback` when it is unset or empty,
// else its number clamped to [0, most]. For the measurement knobs below, each read once.
inline std::chrono::nanoseconds envNanoseconds(const char* name, long fallback, long most) {
  const char* v = std::getenv(name);
  const long ns = v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
  return std::chrono::nanoseconds(std::clamp(ns, 0L, most));
}
// Pollers (the completer, a synchronize()) query an event at most this often: back to back,
// queries may contend with the launching thread for CUDA's locks. MW_NCCL_POLL_GAP_NS (read once,
// 0 to 100000) replaces it, for measurements.
inline std::chrono::nanoseconds pollGapLength() {
  static const std::chrono::nanoseconds gap = envNanoseconds("MW_NCCL_POLL_GAP_NS", 1000, 100000);
  return gap;
}
// A completer that completed everything in flight watches for the next launch this long (a
// counter read, no lock, no system call) before it sleeps: back to back, the next operation comes
// within microseconds, and waking a sleeping completer costs the launching thread a system call
// (in a virtual machine, an interrupt to another processor too: microseconds).
// MW_NCCL_IDLE_SPIN_NS (read once, 0 to 1000000) replaces it, for measurements.
inline std::chrono::nanoseconds idleSpinLength() {
  static const std::chrono::nanoseconds spin =
      envNanoseconds("MW_NCCL_IDLE_SPIN_NS", 50000, 1000000);
  return spin;
}
// While the completer polls, it checks the communicator's error and the deadline this often.
constexpr auto kSpinCheck = 10us;
// Sleeps of a poll that makes no progress (settle, drain): from kPollSleepMin doubling to
// kPollSleepMax.
constexpr auto kPollSleepMin = std::chrono::microseconds(20);
constexpr auto kPollSleepMax = std::chrono::milliseconds(1);

inline std::chrono::microseconds backOff(std::chrono::microseconds sleep) {
  return std::min<std::chrono::microseconds>(sleep * 2, kPollSleepMax);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins (no system call) for the poll gap.
inline void pollGap() {
  const auto gap = pollGapLength();
  if (gap.count() == 0) return cpuRelax();
  const auto until = Clock::now() + gap;
  while (Clock::now() < until) cpuRelax();
}

// Launches on one GPU are serialized across worlds (indexes alias modulo 64).
inline std::mutex& launchMutex(int device) {
  static std::array<std::mutex, 64> mutexes;
  return mutexes[static_cast<size_t>(device) & 63];
}

inline std::atomic<long> caller_launches{0};
inline std::atomic<long> executor_launches{0};

// How the completer learns that the oldest operation's event completed (docs/design.md,
// "Completion"): MW_NCCL_COMPLETION=spin|blocking|hybrid, read once; hybrid by default;
// setNcclCompletionMode replaces it for the worlds created after.
inline std::atomic<NcclCompletion>& completionMode() {
  static std::atomic<NcclCompletion> mode{[] {
    const char* v = std::getenv("MW_NCCL_COMPLETION");
    if (v != nullptr && std::strcmp(v, "spin") == 0) return NcclCompletion::kSpin;
    if (v != nullptr && std::strcmp(v, "blocking") == 0) return NcclCompletion::kBlocking;
    if (v != nullptr && std::strcmp(v, "predict") == 0) return NcclCompletion::kPredict;
    return NcclCompletion::kHybrid;
  }()};
  return mode;
}

struct Failure {
  Cause cause;
  int peer;
  std::string detail;
  bool aborting = false;  // the world was aborted meanwhile: nothing to report
};

// One operation launched (or whose launch failed), in launch order.
struct InFlight {
  std::shared_ptr<WorkState> work;
  OpKind kind = OpKind::kBarrier;
  Clock::time_point deadline{};
  cudaEvent_t done = nullptr;    // recorded on the world's stream after the operation
  bool failed = false;           // the launch failed: never completed OK (the drain fails it)
  Clock::time_point launched{};  // when its done event was recorded
};

// A launch that NCCL completes in the background (ncclInProgress), handed to the executor.
struct Settling {
  InFlight op;
  Clock::time_point started;
};

// What the completer thread shares with the backend that may outlive it: a completer blocked in
// cudaEventSynchronize on a kernel that never ends is left behind (detached) at the world's
// removal, and from then on touches nothing but this.
struct CompleterState {
  Mutex mu;
  std::condition_variable cv;
  bool stop MW_GUARDED_BY(mu) = false;
  bool exited MW_GUARDED_BY(mu) = false;
  cudaEvent_t blocked_on MW_GUARDED_BY(mu) = nullptr;  // in cudaEventSynchronize on it
};

class NcclBackend final : public Backend,
                          public WorkDriver,
                          public std::enable_shared_from_this<NcclBackend> {
 public:
  NcclBackend(NcclConfig cfg, ncclComm_t comm, cudaStream_t stream, int* scratch,
              BackendErrorHandler on_error, OpFailPoints failpoints)
      : cfg_(std::move(cfg)),
        mode_(completionMode().load()),
        comm_(comm),
        launch_comm_(comm),
        stream_(stream),
        scratch_(scratch),
        on_error_(std::move(on_error)),
        failpoints_(std::move(failpoints)),
        completer_state_(std::make_shared<CompleterState>()) {}

  // Starts the threads: after construction, once the object is owned by a shared_ptr.
  void start() {
    executor_ = std::thread([this] { run(); });
    completer_ = std::thread([this, st = completer_state_] { complete(st); });
  }

  ~NcclBackend() override { shutdown(); }

  void submit(OpRequest op, bool caller_waits) override MW_EXCLUDES(mu_);
  void abort(const Status& reason) override MW_EXCLUDES(mu_);
  void shutdown() override MW_EXCLUDES(mu_);

  // WorkDriver: synchronize() polls the operation's event in the calling thread for a while.
  void driveUntil(const WorkState* target, Deadline deadline) override MW_EXCLUDES(mu_);
  void expedite(const WorkState* /*target*/) override {}  // launches never wait for a waiter
  std::optional<Status> orderStream(WorkState* target, void* stream, Deadline deadline) override;

 private:
  // The outcome of a launch's first part (startLaunch).
  enum class Launched { kDone, kSettling, kFailed };

  // Launches `op` in the calling thread, which holds the launch token; gives the token back.
  void launchInline(OpRequest op) MW_EXCLUDES(mu_);
  // The executor's launch of a queued operation (it holds the token); gives the token back.
  void launchQueued(OpRequest op) MW_EXCLUDES(mu_);
  // Orders the world's stream after op.ready, asks NCCL to launch the operation (the caller holds
  // the GPU's launch lock) and, when NCCL completes the launch in the background, polls it until
  // `settle_until`. kDone: the done event is recorded. *failure is set for kFailed. `done` is
  // op.ready itself (the wait takes the event's state, so it may be recorded again at once): one
  // event per operation, taken from the pool once.
  Launched startLaunch(OpRequest& op, cudaEvent_t done, Clock::time_point settle_until,
                       std::optional<Failure>* failure);
  // The event an operation's launch records when done: its ready event (see startLaunch), or one
  // from the pool when it has none.
  cudaEvent_t doneEventFor(OpRequest& op);
  // The executor finishing a launch a caller handed over (settling_).
  void finishSettling(Settling s) MW_EXCLUDES(mu_);
  // Records `f` as launched (the work learns its done event) and gives the launch token back;
  // a failed one is kept for the drain. Wakes the completer, and the executor when ops are queued.
  void finishLaunch(InFlight f) MW_EXCLUDES(mu_);
  // A failed launch: kept for the drain, the token given back, the world failed.
  void launchFailed(InFlight f, const Failure& failure) MW_EXCLUDES(mu_);
  ncclResult_t enqueue(const OpRequest& op);
  // Polls the communicator until the last call is no longer in progress, `until` passes (then
  // returns ncclInProgress) or the world is aborted (then sets *aborted, returns ncclInProgress).
  ncclResult_t settle(Clock::time_point until, bool* aborted);

  void run() MW_EXCLUDES(mu_);
  void supervise() MW_EXCLUDES(mu_);
  void complete(const std::shared_ptr<CompleterState>& st) MW_EXCLUDES(mu_);
  // Waits, as mode_ says, until `e` completed; false when the completer must stop. *seen is the
  // event's state when a poll saw it complete (no need to query it again), else
  // cudaErrorNotReady.
  bool awaitEvent(const std::shared_ptr<CompleterState>& st, const InFlight& front,
                  cudaError_t* seen);
  // Predict mode: an operation took `took` from its start on the GPU until it was seen complete:
  // `exact` when it was seen ending while polled, `late` when seen after a blocked wait, neither
  // when it was complete at the first look.
  void learn(Clock::duration took, bool exact, bool late);
  // Completes, OK, the operations in flight up to and including `target` (whose event completed),
  // unless the communicator reports an error (then fails the world). Any thread.
  void completeThrough(const WorkState* target) MW_EXCLUDES(mu_);

  // The communicator's asynchronous error (or an injected one), as a failure; `aborting` when the
  // world is being aborted (nothing may be reported successful then).
  std::optional<Failure> asyncFailure() MW_EXCLUDES(mu_);
  // An NCCL result as a failure. A synchronous one (an NCCL call's own result) carries NCCL's
  // last error text, labelled as the process-wide buffer it is; an asynchronous one never does
  // (that text may be any thread's, long after).
  Failure ncclFailure(const char* what, ncclResult_t r, bool synchronous,
                      const std::string& suffix = "");
  void fail(const Failure& f) MW_EXCLUDES(mu_);
  // Hands the communicator to its abort, stops the completer, waits (bounded) for the stream's
  // work, completes every operation in flight, and releases the world's CUDA objects. On the
  // executor thread, last.
  void drain() MW_EXCLUDES(mu_);
  void releaseCudaObjects(bool gpu_done, cudaEvent_t keep);
  // Records op.ready on op.stream in the submitting thread (the CUDA stream contract,
  // multiworld/cuda_stream.h). kInvalidArgument when CUDA refuses the stream.
  Status orderAfterCaller(OpRequest& op);
  // An event of this world's device from the pool (nullptr when CUDA cannot make one).
  // giveEvent(nullptr) does nothing.
  cudaEvent_t takeEvent() MW_EXCLUDES(events_mu_);
  void giveEvent(cudaEvent_t e) MW_EXCLUDES(events_mu_);
  Status abortReason() MW_EXCLUDES(mu_);
  std::string streamName(void* stream) const;

  const NcclConfig cfg_;
  const NcclCompletion mode_;
  const NcclApi& api_ = ncclApi();  // loaded before any backend is built
  // The launch token's holder (launching_) alone enqueues on these; the drain takes the
  // communicator (under mu_, once no thread holds the token) to abort it.
  ncclComm_t comm_ MW_GUARDED_BY(mu_);
  // comm_ as the token holder reads it, without mu_: the drain aborts the communicator only once
  // no thread holds the token, and after the abort no thread takes it again (submit and the
  // executor see abort_reason_ first).
  const ncclComm_t launch_comm_;
  cudaStream_t stream_;                // the token holder's; the drain's at the end
  int* scratch_;                       // one int on the device, for barrier (takeScratch)
  std::atomic<bool> aborting_{false};  // abort_reason_ is set: read without mu_ while launching
  BackendErrorHandler on_error_;
  const OpFailPoints failpoints_;
  Mutex events_mu_;                                            // taken inside mu_, never around it
  std::vector<cudaEvent_t> events_ MW_GUARDED_BY(events_mu_);  // all, for shutdown
  std::vector<cudaEvent_t> free_events_ MW_GUARDED_BY(events_mu_);

  Mutex mu_;
  std::condition_variable cv_;       // the executor: queued work, a hand-over, the abort
  std::condition_variable done_cv_;  // the completer: an operation launched, the abort
  std::condition_variable room_cv_;  // submitters waiting for room; drain waiting for the token
  std::deque<OpRequest> queue_ MW_GUARDED_BY(mu_);
  std::deque<InFlight> inflight_ MW_GUARDED_BY(mu_);
  // What the completer took off inflight_ and may not have completed yet: they come before
  // inflight_'s, and completeThrough completes them first. Cleared when the completer next looks.
  std::vector<std::shared_ptr<WorkState>> completing_ MW_GUARDED_BY(mu_);
  bool launching_ MW_GUARDED_BY(mu_) = false;  // the launch token is held
  // The completer waits blocked: the executor checks the world every kSupervise meanwhile.
  bool supervising_ MW_GUARDED_BY(mu_) = false;
  // The completer waits for an operation to be launched (finishLaunch wakes it only then).
  bool completer_idle_ MW_GUARDED_BY(mu_) = false;
  // Operations put in flight (counted under mu_): what the idle completer watches before it sleeps.
  std::atomic<uint64_t> launches_{0};
  std::optional<Settling> settling_ MW_GUARDED_BY(mu_);
  std::optional<Injection> async_injection_ MW_GUARDED_BY(mu_);  // failinfo 1: at the next check
  std::optional<Status> abort_reason_ MW_GUARDED_BY(mu_);
  bool failed_ MW_GUARDED_BY(mu_) = false;  // a failure was seen; the abort follows
  bool shut_down_ MW_GUARDED_BY(mu_) = false;

  // The completer's own: when it saw the last operation complete, and (predict mode) how long
  // the world's operations take on the GPU, averaged.
  Clock::time_point last_done_{};
  Clock::duration estimate_{};
  // The completer's batch of operations seen complete, kept between batches (no allocation per
  // operation).
  std::vector<InFlight> batch_;
  const std::shared_ptr<CompleterState> completer_state_;
  std::thread completer_;
  std::thread executor_;
};

}  // namespace mw::detail::nccl_impl
