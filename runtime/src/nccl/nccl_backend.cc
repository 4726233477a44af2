#include "nccl/nccl_backend.h"

#include <sys/prctl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_name.h"
#include "nccl/nccl_loader.h"
#include "nccl/nccl_ops.h"
#include "nccl/nccl_resources.h"

namespace mw::detail {

namespace {

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
// Pollers (the completer, a synchronize()) query an event at most this often: back to back,
// queries may contend with the launching thread for CUDA's locks. MW_NCCL_POLL_GAP_NS (read once,
// 0 to 100000) replaces it, for measurements.
std::chrono::nanoseconds pollGapLength() {
  static const std::chrono::nanoseconds gap = [] {
    const char* v = std::getenv("MW_NCCL_POLL_GAP_NS");
    long ns = v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : 1000;
    return std::chrono::nanoseconds(std::clamp(ns, 0L, 100000L));
  }();
  return gap;
}
// While the completer polls, it checks the communicator's error and the deadline this often.
constexpr auto kSpinCheck = 10us;
// Sleeps of a poll that makes no progress (settle, drain): from kPollSleepMin doubling to
// kPollSleepMax.
constexpr auto kPollSleepMin = std::chrono::microseconds(20);
constexpr auto kPollSleepMax = std::chrono::milliseconds(1);

std::chrono::microseconds backOff(std::chrono::microseconds sleep) {
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
std::mutex& launchMutex(int device) {
  static std::array<std::mutex, 64> mutexes;
  return mutexes[static_cast<size_t>(device) & 63];
}

std::atomic<long> caller_launches{0};
std::atomic<long> executor_launches{0};

// How the completer learns that the oldest operation's event completed (docs/design.md,
// "Completion"): MW_NCCL_COMPLETION=spin|blocking|hybrid, read once; hybrid by default;
// setNcclCompletionMode replaces it for the worlds created after.
std::atomic<NcclCompletion>& completionMode() {
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
  // `settle_until`. kDone: the done event is recorded. *failure is set for kFailed.
  Launched startLaunch(OpRequest& op, cudaEvent_t done, Clock::time_point settle_until,
                       std::optional<Failure>* failure);
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
  // Waits, as mode_ says, until `e` completed; false when the completer must stop.
  bool awaitEvent(const std::shared_ptr<CompleterState>& st, const InFlight& front);
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
  bool launching_ MW_GUARDED_BY(mu_) = false;  // the launch token is held
  // The completer waits blocked: the executor checks the world every kSupervise meanwhile.
  bool supervising_ MW_GUARDED_BY(mu_) = false;
  // The completer waits for an operation to be launched (finishLaunch wakes it only then).
  bool completer_idle_ MW_GUARDED_BY(mu_) = false;
  std::optional<Settling> settling_ MW_GUARDED_BY(mu_);
  std::optional<Injection> async_injection_ MW_GUARDED_BY(mu_);  // failinfo 1: at the next check
  std::optional<Status> abort_reason_ MW_GUARDED_BY(mu_);
  bool failed_ MW_GUARDED_BY(mu_) = false;  // a failure was seen; the abort follows
  bool shut_down_ MW_GUARDED_BY(mu_) = false;

  // The completer's own: when it saw the last operation complete, and (predict mode) how long
  // the world's operations take on the GPU, averaged.
  Clock::time_point last_done_{};
  Clock::duration estimate_{};
  const std::shared_ptr<CompleterState> completer_state_;
  std::thread completer_;
  std::thread executor_;
};

cudaEvent_t NcclBackend::takeEvent() {
  MutexLock lock(events_mu_);
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  // Blocking sync: a completer that waits in cudaEventSynchronize sleeps until the GPU's
  // interrupt instead of spinning (the other modes only query).
  const unsigned flags = cudaEventDisableTiming |
                         (mode_ == NcclCompletion::kSpin ? 0u : unsigned{cudaEventBlockingSync});
  // The pool's events are the world's device's: the calling thread may be on another one.
  int previous = -1;
  const bool switched = api_.cudaGetDevice(&previous) != cudaSuccess || previous != cfg_.device;
  if (switched) api_.cudaSetDevice(cfg_.device);
  const cudaError_t r = api_.cudaEventCreateWithFlags(&e, flags);
  if (switched && previous >= 0) api_.cudaSetDevice(previous);
  if (r != cudaSuccess) {
    api_.cudaGetLastError();
    return nullptr;
  }
  events_.push_back(e);
  return e;
}

void NcclBackend::giveEvent(cudaEvent_t e) {
  if (e == nullptr) return;
  MutexLock lock(events_mu_);
  free_events_.push_back(e);
}

std::string NcclBackend::streamName(void* stream) const {
  if (stream == nullptr) return "(the default stream)";
  char s[32];
  std::snprintf(s, sizeof s, "%p", stream);
  return s;
}

Status NcclBackend::orderAfterCaller(OpRequest& op) {
  int previous = -1;
  const bool switched = api_.cudaGetDevice(&previous) != cudaSuccess || previous != cfg_.device;
  cudaError_t e = switched ? api_.cudaSetDevice(cfg_.device) : cudaSuccess;
  // A stream being captured into a CUDA graph would pull the world's stream into the capture
  // (cudaStreamWaitEvent on an event recorded there): the world's work would be recorded, not
  // run, and the caller's capture broken.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const char* call = "cudaStreamIsCapturing";
  if (e == cudaSuccess) {
    e = api_.cudaStreamIsCapturing(static_cast<cudaStream_t>(op.stream), &capture);
  }
  cudaEvent_t ready = nullptr;
  if (e == cudaSuccess && capture == cudaStreamCaptureStatusNone) {
    call = "cudaEventRecord";
    ready = takeEvent();
    e = ready == nullptr ? cudaErrorMemoryAllocation
                         : api_.cudaEventRecord(ready, static_cast<cudaStream_t>(op.stream));
  }
  if (switched && previous >= 0) api_.cudaSetDevice(previous);
  if (e == cudaSuccess && capture == cudaStreamCaptureStatusNone) {
    op.ready = ready;
    return Status::Ok();
  }
  if (e != cudaSuccess) api_.cudaGetLastError();  // not sticky: the caller's CUDA calls go on
  giveEvent(ready);
  const std::string prefix = "world '" + cfg_.world + "': " + opKindName(op.kind) +
                             " cannot be ordered after the caller's CUDA stream " +
                             streamName(op.stream);
  if (e == cudaSuccess) {
    return Status(Code::kInvalidArgument,
                  prefix +
                      ": it is being captured into a CUDA graph, and an nccl world's "
                      "operations cannot be captured (submit outside the capture)");
  }
  return Status(Code::kInvalidArgument, prefix + ": " + call + ": " + cudaText(e) +
                                            " (the current stream must be a live stream of cuda:" +
                                            std::to_string(cfg_.device) + ")");
}

Status NcclBackend::abortReason() {
  MutexLock lock(mu_);
  return abort_reason_ ? *abort_reason_
                       : Status(Code::kBackendError, "world '" + cfg_.world + "' failed");
}

// ---- submission and launch ----

void NcclBackend::submit(OpRequest op, bool /*caller_waits*/) {
  op.work->driver = weak_from_this();
  MutexLock lock(mu_);
  // Room: a caller that runs ahead of the GPU waits here, as a launch waits when CUDA's queue is
  // full. The abort, or the completion of the oldest operation, ends the wait.
  room_cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) {
    return abort_reason_ || inflight_.size() + queue_.size() < kMaxInFlight;
  });
  if (abort_reason_) {
    Status s = *abort_reason_;
    lock.unlock();
    op.work->complete(std::move(s));
    return;
  }
  if (!launching_ && queue_.empty()) {
    launching_ = true;  // the token: this thread launches, nobody else enqueues meanwhile
    lock.unlock();
    launchInline(std::move(op));
    return;
  }
  // Behind another launch: ordered after the caller's stream now, launched by the executor.
  // Under mu_: the drain destroys the events only after the abort, which this sees.
  Status s = orderAfterCaller(op);
  if (!s.ok()) {
    lock.unlock();
    op.work->complete(std::move(s));
    return;
  }
  queue_.push_back(std::move(op));
  lock.unlock();
  cv_.notify_one();
}

void NcclBackend::launchInline(OpRequest op) {
  Status s = orderAfterCaller(op);
  if (!s.ok()) {
    {
      MutexLock lock(mu_);
      launching_ = false;
    }
    cv_.notify_one();                 // the executor: ops may have queued meanwhile
    room_cv_.notify_all();            // the drain may wait for the token
    op.work->complete(std::move(s));  // a refused stream fails the operation, not the world
    return;
  }
  std::unique_lock gpu(launchMutex(cfg_.device), std::try_to_lock);
  if (!gpu.owns_lock()) {
    // Another world is launching on this GPU: the executor launches this one when it can.
    std::optional<Status> aborted;
    {
      MutexLock lock(mu_);
      if (abort_reason_) {
        aborted = *abort_reason_;  // the queue was dropped already
      } else {
        queue_.push_front(std::move(op));  // first: submitted before any queued behind it
      }
      launching_ = false;
    }
    cv_.notify_one();
    room_cv_.notify_all();
    if (aborted) {
      giveEvent(static_cast<cudaEvent_t>(op.ready));
      op.work->complete(*aborted);
    }
    return;
  }
  cudaEvent_t done = takeEvent();
  InFlight f{op.work, op.kind, op.deadline, done, false};
  if (done == nullptr) {
    giveEvent(static_cast<cudaEvent_t>(op.ready));
    gpu.unlock();
    launchFailed(std::move(f), {Cause::kBackendError, -1, "cudaEventCreateWithFlags failed"});
    return;
  }
  std::optional<Failure> failure;
  const Launched l = startLaunch(op, done, Clock::now() + kInlineSettle, &failure);
  gpu.unlock();
  caller_launches.fetch_add(1, std::memory_order_relaxed);
  if (l == Launched::kDone) {
    finishLaunch(std::move(f));
  } else if (l == Launched::kSettling) {
    {
      MutexLock lock(mu_);
      settling_ = Settling{std::move(f), Clock::now()};  // the token goes with it
    }
    cv_.notify_one();
    room_cv_.notify_all();  // the drain may wait for the token
  } else {
    launchFailed(std::move(f), *failure);
  }
}

void NcclBackend::launchQueued(OpRequest op) {
  cudaEvent_t done = takeEvent();
  InFlight f{op.work, op.kind, op.deadline, done, false};
  if (done == nullptr) {
    giveEvent(static_cast<cudaEvent_t>(op.ready));
    launchFailed(std::move(f), {Cause::kBackendError, -1, "cudaEventCreateWithFlags failed"});
    return;
  }
  executor_launches.fetch_add(1, std::memory_order_relaxed);
  std::optional<Failure> failure;
  Launched l;
  const auto started = Clock::now();
  {
    std::unique_lock gpu(launchMutex(cfg_.device));
    l = startLaunch(op, done, std::min(op.deadline, started + kLaunchLockLimit), &failure);
  }
  if (l == Launched::kSettling) {
    // The other worlds on this GPU need not wait for this one's peers.
    finishSettling(Settling{std::move(f), started});
    return;
  }
  if (l == Launched::kDone) {
    finishLaunch(std::move(f));
  } else {
    launchFailed(std::move(f), *failure);
  }
}

NcclBackend::Launched NcclBackend::startLaunch(OpRequest& op, cudaEvent_t done,
                                               Clock::time_point settle_until,
                                               std::optional<Failure>* failure) {
  const char* what = opKindName(op.kind);
  if (op.ready != nullptr) {  // after the caller's stream, as it was at submission
    cudaEvent_t ready = static_cast<cudaEvent_t>(op.ready);
    op.ready = nullptr;
    cudaError_t e = api_.cudaStreamWaitEvent(stream_, ready, 0);
    giveEvent(ready);  // the wait took the event's state: it may be recorded again
    if (e != cudaSuccess) {
      *failure = Failure{Cause::kBackendError, -1,
                         std::string(what) + ": cudaStreamWaitEvent: " + cudaText(e)};
      return Launched::kFailed;
    }
  }
  failpoints_.delayIfAsked();
  auto injected = failpoints_[op.kind].check();
  if (injected && injected->failinfo == 0) {
    *failure =
        ncclFailure(what, static_cast<ncclResult_t>(injected->failnum), true, injected->suffix());
    return Launched::kFailed;
  }
  ncclResult_t r = enqueue(op);
  if (injected && (r == ncclSuccess || r == ncclInProgress)) {
    // failinfo 1: the launch goes on; the error surfaces at the next check of the communicator.
    MutexLock lock(mu_);
    async_injection_ = injected;
  }
  bool aborted = false;
  const bool settled = r == ncclInProgress;
  if (settled) r = settle(std::min(op.deadline, settle_until), &aborted);
  if (aborted) {
    *failure = Failure{Cause::kBackendError, -1, "", true};
    return Launched::kFailed;
  }
  if (r == ncclInProgress) {
    if (Clock::now() >= op.deadline) {
      *failure = Failure{Cause::kOpTimeout, -1,
                         std::string(what) + " passed its deadline while NCCL was launching it"};
      return Launched::kFailed;
    }
    return Launched::kSettling;
  }
  if (r != ncclSuccess) {
    *failure = ncclFailure(what, r, !settled);
    return Launched::kFailed;
  }
  if (cudaError_t e = api_.cudaEventRecord(done, stream_); e != cudaSuccess) {
    *failure =
        Failure{Cause::kBackendError, -1, std::string(what) + ": cudaEventRecord: " + cudaText(e)};
    return Launched::kFailed;
  }
  return Launched::kDone;
}

void NcclBackend::finishSettling(Settling s) {
  const char* what = opKindName(s.op.kind);
  bool aborted = false;
  ncclResult_t r = ncclInProgress;
  {
    // The rest of the launch lock's time first (a caller's hand-over let it go for a moment).
    std::unique_lock gpu(launchMutex(cfg_.device));
    r = settle(std::min(s.op.deadline, s.started + kLaunchLockLimit), &aborted);
  }
  if (r == ncclInProgress && !aborted) r = settle(s.op.deadline, &aborted);
  if (aborted) return launchFailed(std::move(s.op), Failure{Cause::kBackendError, -1, "", true});
  if (r == ncclInProgress) {
    return launchFailed(std::move(s.op),
                        {Cause::kOpTimeout, -1,
                         std::string(what) + " passed its deadline while NCCL was launching it"});
  }
  if (r != ncclSuccess) return launchFailed(std::move(s.op), ncclFailure(what, r, false));
  if (cudaError_t e = api_.cudaEventRecord(s.op.done, stream_); e != cudaSuccess) {
    return launchFailed(std::move(s.op), {Cause::kBackendError, -1,
                                          std::string(what) + ": cudaEventRecord: " + cudaText(e)});
  }
  finishLaunch(std::move(s.op));
}

void NcclBackend::finishLaunch(InFlight f) {
  f.work->markLaunched(f.done);  // before anyone can complete it and reuse the event
  f.launched = Clock::now();
  bool queued = false, idle = false;
  {
    MutexLock lock(mu_);
    inflight_.push_back(std::move(f));
    launching_ = false;
    queued = !queue_.empty();
    idle = completer_idle_;
  }
  if (idle) done_cv_.notify_one();  // a system call: only when the completer waits for work
  if (queued) cv_.notify_one();
  room_cv_.notify_all();  // the drain may wait for the token
}

void NcclBackend::launchFailed(InFlight f, const Failure& failure) {
  // A failed launch may have left part of its work on the stream: it is drained with the rest,
  // never completed OK.
  f.failed = true;
  {
    MutexLock lock(mu_);
    inflight_.push_back(std::move(f));
    launching_ = false;
  }
  cv_.notify_one();
  room_cv_.notify_all();
  if (!failure.aborting) fail(failure);
}

ncclResult_t NcclBackend::settle(Clock::time_point until, bool* aborted) {
  ncclComm_t comm;
  {
    MutexLock lock(mu_);
    comm = comm_;  // the token holder's: the drain takes it only once the token is free
  }
  ncclResult_t r = ncclInProgress;
  std::chrono::microseconds sleep = kPollSleepMin;
  while (r == ncclInProgress) {
    if (api_.ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    if (r != ncclInProgress || Clock::now() >= until) break;
    // A peer that died before the connections formed keeps NCCL in progress forever: the
    // world's abort (its removal, or its break by the store) ends the wait.
    if (aborting_.load()) {
      *aborted = true;
      return ncclInProgress;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, until - Clock::now()));
    sleep = backOff(sleep);
  }
  return r;
}

ncclResult_t NcclBackend::enqueue(const OpRequest& op) {
  ncclComm_t comm;
  {
    MutexLock lock(mu_);
    comm = comm_;
  }
  return enqueueOp(op, NcclTarget{comm, stream_, scratch_, cfg_.rank, cfg_.size});
}

// ---- waiting ----

std::optional<Status> NcclBackend::orderStream(WorkState* target, void* stream, Deadline deadline) {
  if (cfg_.host_wait) return std::nullopt;
  MutexLock lock(target->mu);
  // An operation queued behind others: its done event exists once it is launched.
  if (!target->cv.wait_until(lock.native(), deadline, [&]() MW_REQUIRES(target->mu) {
        return target->done || target->launched;
      })) {
    return Status(Code::kTimeout, "operation in world '" + cfg_.world +
                                      "' was not launched before the caller's deadline");
  }
  if (target->done) return target->status;
  // Under target->mu: the event is not reused before the work completes (complete() takes it).
  int previous = -1;
  const bool switched = api_.cudaGetDevice(&previous) != cudaSuccess || previous != cfg_.device;
  cudaError_t e = switched ? api_.cudaSetDevice(cfg_.device) : cudaSuccess;
  if (e == cudaSuccess) {
    e = api_.cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                 static_cast<cudaEvent_t>(target->gpu_done), 0);
  }
  if (switched && previous >= 0) api_.cudaSetDevice(previous);
  if (e == cudaSuccess) return Status::Ok();
  api_.cudaGetLastError();  // not sticky: the caller's CUDA calls go on
  return Status(Code::kInvalidArgument,
                "world '" + cfg_.world + "': the caller's CUDA stream " + streamName(stream) +
                    " cannot be ordered after the operation: cudaStreamWaitEvent: " + cudaText(e) +
                    " (the current stream must be a live stream of cuda:" +
                    std::to_string(cfg_.device) + "; synchronize() waits on the host instead)");
}

void NcclBackend::driveUntil(const WorkState* target, Deadline deadline) {
  const auto until = std::min(deadline, Clock::now() + kHostSpin);
  for (;;) {
    cudaError_t q = cudaErrorNotReady;
    {
      MutexLock lock(target->mu);
      if (target->done) return;
      // Under target->mu: the event is not reused before the work completes.
      if (target->launched) q = api_.cudaEventQuery(static_cast<cudaEvent_t>(target->gpu_done));
    }
    if (q == cudaSuccess) return completeThrough(target);
    if (q != cudaErrorNotReady) {
      api_.cudaGetLastError();  // the executor reports the event's error
      return;
    }
    if (Clock::now() >= until) return;  // the completer completes it; synchronize sleeps
    pollGap();
  }
}

void NcclBackend::completeThrough(const WorkState* target) {
  if (auto f = asyncFailure()) {
    if (!f->aborting) fail(*f);
    return;
  }
  std::vector<std::shared_ptr<WorkState>> works;
  {
    MutexLock lock(mu_);
    if (abort_reason_ || failed_) return;
    for (const InFlight& f : inflight_) {
      if (f.failed) return;
      works.push_back(f.work);
      if (f.work.get() == target) break;
    }
    if (works.empty() || works.back().get() != target) return;  // completed already
  }
  // In stream order: every operation launched before target is complete on the GPU too.
  for (auto& w : works) w->complete(Status::Ok());
}

// ---- the executor: hand-overs, queued launches, supervision ----

void NcclBackend::run() {
  nameThisThread("mw-nccl", cfg_.world);
  api_.cudaSetDevice(cfg_.device);
  for (;;) {
    std::optional<Settling> settling;
    std::optional<OpRequest> next;
    bool supervising = false;
    {
      MutexLock lock(mu_);
      auto work = [&]() MW_REQUIRES(mu_) {
        return abort_reason_.has_value() || settling_.has_value() ||
               (!launching_ && !queue_.empty());
      };
      if (inflight_.empty()) supervising_ = false;
      if (supervising_) {
        cv_.wait_for(lock.native(), kSupervise, work);
      } else {  // until there is work, or the completer asks for supervision
        // (supervising_ alone: the operation may be complete by the time this thread runs, and
        // the flag, left set, would then keep the completer from asking again)
        cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) { return work() || supervising_; });
      }
      if (abort_reason_) break;
      if (settling_) {
        settling.swap(settling_);  // the token came with it
      } else if (!launching_ && !queue_.empty()) {
        launching_ = true;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      supervising = supervising_ && !inflight_.empty();
    }
    if (settling) {
      finishSettling(std::move(*settling));
    } else if (next) {
      launchQueued(std::move(*next));
    }
    if (supervising) supervise();
  }
  drain();
}

void NcclBackend::supervise() {
  cudaEvent_t front = nullptr;
  OpKind kind = OpKind::kBarrier;
  Clock::time_point deadline{};
  {
    MutexLock lock(mu_);
    if (abort_reason_ || inflight_.empty() || inflight_.front().failed) return;
    front = inflight_.front().done;
    kind = inflight_.front().kind;
    deadline = inflight_.front().deadline;
    // Under mu_: the completer gives the event back only after taking it off the list (under
    // mu_), and it can be recorded again only after that.
    const cudaError_t q = api_.cudaEventQuery(front);
    if (q == cudaSuccess) front = nullptr;  // the completer's to complete
    if (q != cudaSuccess && q != cudaErrorNotReady) {
      api_.cudaGetLastError();
      lock.unlock();
      return fail(
          {Cause::kBackendError, -1, std::string(opKindName(kind)) + ": CUDA: " + cudaText(q)});
    }
  }
  if (auto f = asyncFailure()) {
    if (!f->aborting) fail(*f);
    return;
  }
  if (front != nullptr && Clock::now() > deadline) {
    fail({Cause::kOpTimeout, -1,
          std::string(opKindName(kind)) + " passed its deadline (NCCL has not completed it)"});
  }
}

// ---- the completer ----

bool NcclBackend::awaitEvent(const std::shared_ptr<CompleterState>& st, const InFlight& front) {
  // When the operation starts on the GPU: once the one before it ended (stream order), and not
  // before its launch.
  const auto began = std::max(front.launched, last_done_);
  auto poll_until = Clock::time_point::max();  // spin
  if (mode_ == NcclCompletion::kHybrid) poll_until = Clock::now() + kHybridSpin;
  if (mode_ == NcclCompletion::kPredict) {
    if (estimate_.count() > 0) {
      const auto wake = began + estimate_ - kPredictMargin;
      if (wake - Clock::now() > kMinSleep) {
        MutexLock lock(mu_);
        if (done_cv_.wait_until(lock.native(), wake,
                                [&]() MW_REQUIRES(mu_) { return abort_reason_.has_value(); })) {
          return false;
        }
      }
    }
    poll_until = std::max(Clock::now(), began + estimate_) +
                 std::max<Clock::duration>(kHybridSpin, estimate_ / 4);
  }
  if (mode_ != NcclCompletion::kBlocking) {
    // Polling: the completer watches the world itself (the communicator's error and the
    // deadline, every kSpinCheck), so the executor need not wake.
    auto check = Clock::now() + kSpinCheck;
    for (bool first = true;; first = false) {
      if (aborting_.load(std::memory_order_relaxed)) return false;
      if (api_.cudaEventQuery(front.done) != cudaErrorNotReady) {
        // Done at the first look: it ended at some time before now, so the estimate shrinks
        // to look earlier next time; seen ending while polled: its duration, within a gap.
        if (mode_ == NcclCompletion::kPredict) learn(Clock::now() - began, !first, false);
        return true;
      }
      const auto now = Clock::now();
      if (now >= check) {
        check = now + kSpinCheck;
        if (auto f = asyncFailure()) {
          if (!f->aborting) fail(*f);
          return false;
        }
        if (now > front.deadline) {
          fail({Cause::kOpTimeout, -1,
                std::string(opKindName(front.kind)) +
                    " passed its deadline (NCCL has not completed it)"});
          return false;
        }
      }
      if (now > poll_until) break;
      pollGap();
    }
  }
  // Blind while blocked: the executor watches the world meanwhile, every kSupervise.
  bool wake = false;
  {
    MutexLock lock(mu_);
    if (!supervising_) supervising_ = wake = true;
  }
  if (wake) cv_.notify_one();
  {
    MutexLock lock(st->mu);
    if (st->stop) return false;
    st->blocked_on = front.done;
  }
  // Returns once the GPU has passed the event (an abort ends the kernels of the world's
  // communicator, so a failure ends the wait too), or with the event's error.
  api_.cudaEventSynchronize(front.done);
  MutexLock lock(st->mu);
  st->blocked_on = nullptr;
  if (st->stop) return false;
  // Longer than expected and seen late (the interrupt's delay on top).
  if (mode_ == NcclCompletion::kPredict) learn(Clock::now() - began, false, true);
  return true;
}

void NcclBackend::learn(Clock::duration took, bool exact, bool late) {
  if (estimate_.count() == 0) {
    estimate_ = took;
  } else if (exact) {  // an average, so that one odd operation moves it a quarter
    estimate_ = (3 * estimate_ + took) / 4;
  } else if (late) {  // half way to what was seen, which overstates it by the wake-up's delay
    estimate_ += (took - estimate_) / 2;
  } else {  // done before the first look: look earlier next time
    estimate_ = estimate_ * 7 / 8;
  }
}

void NcclBackend::complete(const std::shared_ptr<CompleterState>& st) {
  nameThisThread("mw-ncclc", cfg_.world);
  // Timed sleeps (predict mode) end within a microsecond of their time, not the default 50 us.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  api_.cudaSetDevice(cfg_.device);
  for (;;) {
    InFlight front;
    {
      MutexLock lock(mu_);
      completer_idle_ = true;
      done_cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) {
        return abort_reason_.has_value() || (!inflight_.empty() && !inflight_.front().failed);
      });
      completer_idle_ = false;
      if (abort_reason_) break;
      const InFlight& f = inflight_.front();  // only this thread takes operations off the list
      front = InFlight{nullptr, f.kind, f.deadline, f.done, false, f.launched};
    }
    const cudaEvent_t e = front.done;
    if (!awaitEvent(st, front)) break;  // stopped: the backend may be gone; touch nothing of it
    const cudaError_t q = api_.cudaEventQuery(e);
    if (q == cudaErrorNotReady) continue;
    if (q != cudaSuccess) {
      api_.cudaGetLastError();
      fail({Cause::kBackendError, -1, std::string("operation's event: CUDA: ") + cudaText(q)});
      break;
    }
    // A completed event is not yet a success: NCCL's kernels also end when a peer or the network
    // failed under them. The communicator's error is read before any success is given.
    if (auto f = asyncFailure()) {
      if (!f->aborting) fail(*f);
      break;
    }
    std::vector<InFlight> done;
    {
      MutexLock lock(mu_);
      if (abort_reason_ || failed_) break;
      while (!inflight_.empty() && !inflight_.front().failed) {
        InFlight& f = inflight_.front();
        if (f.done != e && api_.cudaEventQuery(f.done) != cudaSuccess) break;
        done.push_back(std::move(f));
        inflight_.pop_front();
      }
    }
    last_done_ = Clock::now();
    room_cv_.notify_all();
    for (InFlight& f : done) {
      f.work->complete(Status::Ok());  // first: the event is reused only after
      giveEvent(f.done);
    }
  }
  MutexLock lock(st->mu);
  st->exited = true;
  st->cv.notify_all();
}

// ---- failure and the end ----

void NcclBackend::abort(const Status& reason) {
  std::deque<OpRequest> dropped;  // never launched: nothing on the GPU uses their memory
  {
    MutexLock lock(mu_);
    if (abort_reason_) return;
    abort_reason_ = reason;
    aborting_.store(true);  // a launch in progress sees it (settle)
    dropped.swap(queue_);
  }
  cv_.notify_all();
  done_cv_.notify_all();
  room_cv_.notify_all();
  for (auto& op : dropped) {
    giveEvent(static_cast<cudaEvent_t>(op.ready));
    op.work->complete(reason);
  }
}

void NcclBackend::shutdown() {
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  abort(Status(Code::kAborted, "world '" + cfg_.world + "' was removed"));
  // The executor hands the communicator to its abort, drains the stream and releases the
  // world's CUDA objects, on its own thread (its current device is the world's): nothing here
  // may wait for the GPU.
  if (executor_.joinable()) executor_.join();
}

std::optional<Failure> NcclBackend::asyncFailure() {
  ncclComm_t comm;
  {
    MutexLock lock(mu_);
    // Once a failure was seen, nothing may be reported successful, even before the abort.
    if (abort_reason_ || failed_) return Failure{Cause::kBackendError, -1, "", true};
    if (async_injection_) {
      Injection inj = *async_injection_;
      async_injection_.reset();
      failed_ = true;
      lock.unlock();
      return ncclFailure("asynchronous error", static_cast<ncclResult_t>(inj.failnum), false,
                         inj.suffix());
    }
    comm = comm_;
    // Read under mu_: the drain takes the communicator to its abort under mu_.
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t r = api_.ncclCommGetAsyncError(comm, &async); r != ncclSuccess) async = r;
    if (async == ncclSuccess || async == ncclInProgress) return std::nullopt;
    failed_ = true;
    lock.unlock();
    return ncclFailure("asynchronous error", async, false);
  }
}

Failure NcclBackend::ncclFailure(const char* what, ncclResult_t r, bool synchronous,
                                 const std::string& suffix) {
  std::string detail = std::string("nccl ") + what + ": " + ncclText(r);
  if (synchronous && suffix.empty()) {
    // One buffer for the whole process: right after this thread's failed call it is most likely,
    // not surely, this call's text.
    const char* last = api_.ncclGetLastError(nullptr);
    if (last != nullptr && *last != '\0') {
      detail += " (NCCL's last error, one buffer for the whole process: " + std::string(last) + ")";
    }
  }
  detail += suffix;
  // A remote error means a peer exited or the network failed: the member is lost to us.
  return Failure{r == ncclRemoteError ? Cause::kPeerDied : Cause::kBackendError, -1, detail};
}

void NcclBackend::fail(const Failure& f) {
  {
    MutexLock lock(mu_);
    failed_ = true;  // from now on no operation completes OK
  }
  Status s = on_error_(f.cause, f.peer, f.detail);  // breaks the world, which aborts us
  abort(s);                                         // in case the world was already on its way out
}

void NcclBackend::drain() {
  ncclComm_t comm = nullptr;
  {
    MutexLock lock(mu_);
    // A caller launching in its own thread ends soon (its settle sees the abort), or hands its
    // launch over (settling_), whose token is then ours.
    for (;;) {
      if (settling_) {
        settling_->op.failed = true;
        inflight_.push_back(std::move(settling_->op));
        settling_.reset();
        launching_ = false;
      }
      if (!launching_) break;
      room_cv_.wait(lock.native(),
                    [&]() MW_REQUIRES(mu_) { return !launching_ || settling_.has_value(); });
    }
    comm = comm_;
    comm_ = nullptr;
  }
  // Never finalize or destroy a communicator whose peer may be dead: abort it, on a thread of its
  // own. NCCL's kernels then exit, and the stream's work ends.
  std::shared_ptr<AbortTicket> aborted;
  if (comm != nullptr) aborted = startAbort(comm, cfg_.device);
  {
    MutexLock lock(completer_state_->mu);
    completer_state_->stop = true;
  }
  done_cv_.notify_all();
  const Status reason = abortReason();
  const auto until = deadlineIn(kDrainLimit);
  bool gpu_done = true;
  std::deque<InFlight> inflight;
  {
    MutexLock lock(mu_);
    inflight.swap(inflight_);
  }
  for (auto& f : inflight) {
    // Completing the work hands the caller's memory back: only once the GPU is done with it.
    std::chrono::microseconds sleep = kPollSleepMin;
    while (f.done != nullptr && api_.cudaEventQuery(f.done) == cudaErrorNotReady &&
           Clock::now() < until) {
      std::this_thread::sleep_for(sleep);
      sleep = backOff(sleep);
    }
    if (f.done != nullptr && api_.cudaEventQuery(f.done) == cudaErrorNotReady) {
      gpu_done = false;
      f.work->complete(Status(
          Code::kBackendError,
          "world '" + cfg_.world + "': " + opKindName(f.kind) + " was not finished by the GPU " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(kDrainLimit).count()) +
              " s after the world's abort (" + reason.message() +
              "): its communicator and memory are left behind, never freed under it"));
      continue;
    }
    f.work->complete(reason);
  }
  inflight.clear();
  api_.cudaGetLastError();
  // The completer ends at once unless it waits in cudaEventSynchronize for an event the GPU has
  // not passed: then it is left behind with that event, which is never destroyed under it.
  cudaEvent_t keep = nullptr;
  {
    MutexLock lock(completer_state_->mu);
    completer_state_->cv.wait(lock.native(), [&]() MW_REQUIRES(completer_state_->mu) {
      return completer_state_->exited || completer_state_->blocked_on != nullptr;
    });
    if (!completer_state_->exited) {
      const bool ended = completer_state_->cv.wait_for(
          lock.native(), gpu_done ? kDrainLimit : 10ms,
          [&]() MW_REQUIRES(completer_state_->mu) { return completer_state_->exited; });
      if (!ended) keep = completer_state_->blocked_on;
    }
  }
  if (keep == nullptr) {
    if (completer_.joinable()) completer_.join();
  } else {
    gpu_done = false;
    completer_.detach();  // it touches only its CompleterState from now on
  }
  // Usually done within microseconds; an abort that waits for another world's stuck kernel
  // finishes on its own thread.
  if (aborted) aborted->waitUntil(deadlineIn(kAbortWait));
  releaseCudaObjects(gpu_done, keep);
}

void NcclBackend::releaseCudaObjects(bool gpu_done, cudaEvent_t keep) {
  // Neither call waits for the GPU: queued work still runs, and the event's waits end.
  MutexLock lock(events_mu_);
  for (cudaEvent_t e : events_) {
    if (e != keep) api_.cudaEventDestroy(e);
  }
  events_.clear();
  free_events_.clear();
  if (stream_ != nullptr) api_.cudaStreamDestroy(stream_);
  stream_ = nullptr;
  // The barrier's int goes back to the pool only when nothing on the GPU can still write it.
  if (gpu_done) giveScratch(cfg_.device, scratch_);
  scratch_ = nullptr;
}

}  // namespace

NcclLaunchCounts ncclLaunchCounts() { return {caller_launches.load(), executor_launches.load()}; }

NcclCompletion ncclCompletionMode() { return completionMode().load(); }

void setNcclCompletionMode(NcclCompletion m) { completionMode().store(m); }

const char* ncclCompletionName(NcclCompletion m) {
  switch (m) {
    case NcclCompletion::kSpin:
      return "spin";
    case NcclCompletion::kBlocking:
      return "blocking";
    case NcclCompletion::kHybrid:
      return "hybrid";
    case NcclCompletion::kPredict:
      return "predict";
  }
  return "unknown";
}

std::shared_ptr<Backend> makeNcclBackend(NcclConfig cfg, ncclComm_t comm, cudaStream_t stream,
                                         int* scratch, BackendErrorHandler on_error,
                                         OpFailPoints failpoints) {
  auto b = std::make_shared<NcclBackend>(std::move(cfg), comm, stream, scratch, std::move(on_error),
                                         std::move(failpoints));
  b->start();
  return b;
}

}  // namespace mw::detail
