// libmw_sim_cuda.so: a simulated GPU for machines without one. It exports the CUDA runtime
// functions that the NCCL backend and the NCCL tests call, and NCCL's functions, so that the
// backend's own logic (stream ordering, completion events, aborts, failpoints, create/remove
// cycles) runs in CI here. The runtime opens it through MW_CUDART_LIBRARY and MW_NCCL_LIBRARY; a
// test binary links it in place of libcudart.
//
// The model:
// - "device memory" is host memory from malloc; MW_SIM_DEVICES devices (default 1, 0..8).
// - A stream is a thread running its queue in order; stream 0, cudaStreamLegacy and
//   cudaStreamPerThread are the current device's default stream. The default stream is not
//   synchronized with the other streams (as if every stream were cudaStreamNonBlocking).
//   cudaStreamDestroy returns at once; queued work still runs, as on a GPU.
// - An event records a point of a stream's queue; cudaStreamWaitEvent holds a stream until then.
// - cudaMalloc and cudaFree wait for all the work queued on every stream of the device, as they
//   may on a GPU (NVIDIA/nccl #549, #564): one stuck kernel holds every allocation of the device.
// - Stream capture: cudaStreamBeginCapture/EndCapture/IsCapturing. Work queued on a capturing
//   stream is recorded, not run; an event recorded there pulls a stream that waits for it into the
//   capture, and EndCapture then fails with cudaErrorStreamCaptureUnjoined; querying an event
//   recorded in a capture fails with cudaErrorStreamCaptureUnsupported.
// - MW_SIM_DRIVER_VERSION (say 12080): the driver's CUDA version; below 13000, CUDA 13's runtime
//   finds no usable driver (cudaErrorInsufficientDriver), as on a machine with a driver < 580.
// - NCCL (MW_SIM_NCCL_VERSION, default 22809): communicators of one rank run; their collectives
//   copy their input to their output on the stream, and sends and receives to self pair up in
//   order inside an ncclGroupStart/End. As NCCL does:
//   - a non-blocking init returns ncclInProgress, and keeps in the communicator a pointer to a job
//     record in the initializing thread's thread-local storage, freed when that thread exits. The
//     first operation or ncclCommCount (ncclCommEnsureReady) touches and clears it; from 2.26,
//     ncclCommGetAsyncError clears it on success too. Touching it after its thread exited aborts
//     the process ("use after free"), as ASan would on NCCL 2.22-2.25;
//   - the first operation of a communicator returns ncclInProgress while connections form (2 ms);
//   - ncclCommAbort stops the communicator's kernels, waits until every one of them ended, then
//     frees its device memory: a cudaFree, which waits for every kernel on the device. Inside a
//     group, the aborts run at ncclGroupEnd, all stopped first;
//   - ncclGetLastError is one buffer for the whole process;
//   - a communicator of more than one rank never completes its init (no peer ever comes), and its
//     rank 0 leaves a "BootstrapR" thread and a socket pair behind for good, as NCCL 2.28.9 does
//     when a member never joins (counted by mwSimBootstrapLeaks).
// - Data faults, for the chaos harness's data_intact verdict: libfiu points
//   "mw/sim/nccl/corrupt/<name>" (a collective's result has the lowest bit of one byte flipped:
//   the failnum-th, counted from 1, modulo its size) and "mw/sim/nccl/repeat/<name>" (the result
//   is delivered again as the next collective's result, in place of that one's). A message lost
//   is not modelled: in a one-rank communicator a member is its own only sender, so the message
//   that would take the lost one's place is sent only once the lost one's operation has completed.
// - Controls for tests, by communicator name (ncclConfig_t::commName; the runtime uses the
//   world's name): mwSimSetStuck (a peer is gone: kernels spin until their communicator is
//   aborted, and a first operation never connects), mwSimSetAsyncError (the result that
//   ncclCommGetAsyncError reports), mwSimFailNextCall (the next enqueue fails synchronously),
//   mwSimLiveComms, mwSimAsyncErrorPolls, mwSimBootstrapLeaks.
// - Counters for tests: each thread's NCCL launches and host waits (synchronize calls, and queries
//   of events the GPU has not passed), mwSimThreadCounts; every thread's launches, mwSimLaunches.
// - Streams, events and communicators carry their device: using one with another device's object
//   fails as a real GPU does (cudaErrorInvalidResourceHandle).
// What it is not: a model of GPU timing, of memory spaces, or of NCCL between processes.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using SimClock = std::chrono::steady_clock;

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

int deviceCount() {
  static const int n = [] {
    int d = envInt("MW_SIM_DEVICES", 1);
    return d < 0 ? 0 : (d > 8 ? 8 : d);
  }();
  return n;
}

// Read at every call: a test may change it between worlds.
int driverVersion() { return envInt("MW_SIM_DRIVER_VERSION", 13000); }

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

// What each thread asked of the simulated GPU (mwSimThreadCounts): its NCCL launches (one per
// collective call outside a group, one per group with operations) and its host waits (a
// synchronize call, or a query of an event the GPU had not passed yet).
thread_local long thread_launches = 0;
thread_local long thread_host_waits = 0;
std::atomic<long> all_launches{0};
void countLaunch() {
  ++thread_launches;
  all_launches.fetch_add(1);
}

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// A point in a stream's queue: set when the stream has run everything before it.
struct Mark {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void set() {
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  bool test() {
    std::lock_guard lock(mu);
    return done;
  }
};

struct Stream;
void registerStream(const std::shared_ptr<Stream>& s);
void unregisterStream(Stream* s);

// A stream's thread holds the stream: cudaStreamDestroy only asks it to end once its queue is run.
struct Stream {
  const int device;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;  // GUARDED_BY(mu)
  bool stopping = false;                    // GUARDED_BY(mu)
  bool capturing = false;                   // GUARDED_BY(mu)
  bool ended = false;                       // GUARDED_BY(mu): its thread ran its last task

  explicit Stream(int d) : device(d) {}

  static Stream* make(int device) {
    auto s = std::make_shared<Stream>(device);
    registerStream(s);
    std::thread([s] { s->run(); }).detach();
    return s.get();
  }
  // Notifies under the lock: once it is released, the thread may end and free the stream.
  void destroy() {
    std::lock_guard lock(mu);
    stopping = true;
    cv.notify_all();
  }
  // Queues `task`; on a capturing stream it is recorded in the capture instead (never run): then
  // false.
  bool push(std::function<void()> task) {
    std::lock_guard lock(mu);
    if (capturing || ended) return false;
    queue.push_back(std::move(task));
    cv.notify_all();
    return true;
  }
  bool isCapturing() {
    std::lock_guard lock(mu);
    return capturing;
  }
  std::shared_ptr<Mark> mark() {
    auto m = std::make_shared<Mark>();
    std::lock_guard lock(mu);
    if (ended) {
      m->done = true;  // nothing is left to run on it
    } else if (!capturing) {
      queue.push_back([m] { m->set(); });
      cv.notify_all();
    } else {
      m.reset();  // a point inside a capture: nothing will ever run it
    }
    return m;
  }
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) {
          ended = true;  // a mark asked for from now on is already reached
          break;
        }
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
    unregisterStream(this);
  }
};

// Every live stream, by device (the default streams included): what a device-wide wait waits for.
// Never destroyed: detached stream threads may use it until the process ends.
struct Streams {
  std::mutex mu;
  std::map<Stream*, std::shared_ptr<Stream>> all;  // GUARDED_BY(mu)
  std::map<int, Stream*> defaults;                 // GUARDED_BY(mu)
};
Streams& streams() {
  static auto* s = new Streams;
  return *s;
}

void registerStream(const std::shared_ptr<Stream>& s) {
  std::lock_guard lock(streams().mu);
  streams().all[s.get()] = s;
}

void unregisterStream(Stream* s) {
  std::lock_guard lock(streams().mu);
  streams().all.erase(s);
}

// The default stream of each device; never destroyed (its thread idles until exit).
Stream* defaultStream(int device) {
  Stream* made = nullptr;
  {
    std::lock_guard lock(streams().mu);
    auto it = streams().defaults.find(device);
    if (it != streams().defaults.end()) return it->second;
  }
  made = Stream::make(device);
  std::lock_guard lock(streams().mu);
  auto [it, inserted] = streams().defaults.emplace(device, made);
  if (!inserted) {
    streams().all.erase(made);  // another thread made it first
    made->destroy();
  }
  return it->second;
}

Stream* streamOf(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    return defaultStream(current_device);
  }
  return reinterpret_cast<Stream*>(s);
}

// Waits until every stream of `device` has run all the work queued on it now (what a device-wide
// synchronizing call does).
void waitForDevice(int device) {
  std::vector<std::shared_ptr<Stream>> live;
  {
    std::lock_guard lock(streams().mu);
    for (auto& [p, s] : streams().all) {
      if (s->device == device) live.push_back(s);
    }
  }
  std::vector<std::shared_ptr<Mark>> marks;
  for (auto& s : live) {
    if (auto m = s->mark()) marks.push_back(std::move(m));
  }
  for (auto& m : marks) m->wait();
}

// Allocation sizes, for cudaMemGetInfo.
struct Allocations {
  std::mutex mu;
  std::map<void*, std::pair<size_t, int>> sizes;  // GUARDED_BY(mu): bytes, device
  size_t allocated = 0;                           // GUARDED_BY(mu)
};
Allocations& allocations() {
  static auto* a = new Allocations;
  return *a;
}
constexpr size_t kTotalMemory = size_t{16} << 30;

// A mark of an event recorded inside a capture: never set, and an error to query.
const std::shared_ptr<Mark>& capturedMark() {
  static auto* m = new std::shared_ptr<Mark>(std::make_shared<Mark>());
  return *m;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (driverVersion() < 13000) {
    *count = 0;
    return fail(cudaErrorInsufficientDriver);
  }
  *count = deviceCount();
  return deviceCount() == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = driverVersion();
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= deviceCount()) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureUnjoined:
      return "cudaErrorStreamCaptureUnjoined";
    default:
      return "cudaError";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "error reported by the simulated device";
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(Stream::make(current_device));
  return cudaSuccess;
}

// Returns at once; the work queued on it still runs, as on a GPU.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  reinterpret_cast<Stream*>(stream)->destroy();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ++thread_host_waits;
  auto m = streamOf(stream)->mark();
  if (!m) return fail(cudaErrorStreamCaptureUnsupported);
  m->wait();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode) {
  Stream* s = streamOf(stream);
  std::lock_guard lock(s->mu);
  if (s->capturing) return fail(cudaErrorIllegalState);
  s->capturing = true;
  return cudaSuccess;
}

// Streams that joined the capture through an event and never came back: the capture is
// unjoined, as CUDA says.
std::map<Stream*, std::weak_ptr<Stream>>& joinedStreams() {
  static auto* s = new std::map<Stream*, std::weak_ptr<Stream>>;
  return *s;
}
std::mutex& joinedMutex() {
  static auto* m = new std::mutex;
  return *m;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  Stream* s = streamOf(stream);
  *graph = nullptr;
  {
    std::lock_guard lock(s->mu);
    if (!s->capturing) return fail(cudaErrorIllegalState);
    s->capturing = false;
  }
  bool unjoined = false;
  {
    std::lock_guard lock(joinedMutex());
    for (auto& [p, weak] : joinedStreams()) {
      unjoined = true;
      if (auto other = weak.lock()) {
        std::lock_guard olock(other->mu);
        other->capturing = false;
      }
    }
    joinedStreams().clear();
  }
  return unjoined ? fail(cudaErrorStreamCaptureUnjoined) : cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  *status =
      streamOf(stream)->isCapturing() ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user) {
  streamOf(stream)->push([fn, user] { fn(user); });
  return cudaSuccess;
}

// May synchronize the device, as on a GPU: waits for every kernel on it.
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  waitForDevice(current_device);
  {
    std::lock_guard lock(allocations().mu);  // the device's memory is kTotalMemory
    if (bytes > kTotalMemory - allocations().allocated) return fail(cudaErrorMemoryAllocation);
  }
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(allocations().mu);
  allocations().sizes[p] = {bytes, current_device};
  allocations().allocated += bytes;
  *ptr = p;
  return cudaSuccess;
}

// Synchronizes the device the memory is on: waits for every kernel on it.
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  int device = 0;
  {
    std::lock_guard lock(allocations().mu);
    auto it = allocations().sizes.find(ptr);
    if (it == allocations().sizes.end()) return fail(cudaErrorInvalidValue);
    device = it->second.second;
  }
  waitForDevice(device);
  {
    std::lock_guard lock(allocations().mu);
    auto it = allocations().sizes.find(ptr);
    if (it == allocations().sizes.end()) return fail(cudaErrorInvalidValue);
    allocations().allocated -= it->second.first;
    allocations().sizes.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard lock(allocations().mu);
  *total = kTotalMemory;
  *free_bytes = kTotalMemory - allocations().allocated;
  return cudaSuccess;
}

// Synchronous with the host, as cudaMemset and cudaMemcpy are for pageable memory.
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (auto m = defaultStream(current_device)->mark()) m->wait();
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind) {
  if (auto m = defaultStream(current_device)->mark()) m->wait();
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind,
                            cudaStream_t stream) {
  streamOf(stream)->push([=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  streamOf(stream)->push([=] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

struct SimEvent {
  const int device;
  std::mutex mu;
  std::shared_ptr<Mark> mark;  // GUARDED_BY(mu); null: never recorded (complete)
};

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(new SimEvent{current_device, {}, {}});
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<SimEvent*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  SimEvent* e = reinterpret_cast<SimEvent*>(event);
  Stream* s = streamOf(stream);
  if (s->device != e->device) return fail(cudaErrorInvalidResourceHandle);
  auto m = s->mark();
  std::lock_guard lock(e->mu);
  e->mark = m ? std::move(m) : capturedMark();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  SimEvent* e = reinterpret_cast<SimEvent*>(event);
  std::lock_guard lock(e->mu);
  if (e->mark == capturedMark()) return fail(cudaErrorStreamCaptureUnsupported);
  if (e->mark == nullptr || e->mark->test()) return cudaSuccess;
  ++thread_host_waits;
  return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  ++thread_host_waits;
  SimEvent* e = reinterpret_cast<SimEvent*>(event);
  std::shared_ptr<Mark> m;
  {
    std::lock_guard lock(e->mu);
    m = e->mark;
  }
  if (m == capturedMark()) return fail(cudaErrorStreamCaptureUnsupported);
  if (m) m->wait();
  return cudaSuccess;
}

// Like a real GPU: the wait is for the event's record at the time of this call, and waiting on
// another device's event is allowed. An event recorded in a capture pulls `stream` into it.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  SimEvent* e = reinterpret_cast<SimEvent*>(event);
  std::shared_ptr<Mark> m;
  {
    std::lock_guard lock(e->mu);
    m = e->mark;
  }
  Stream* s = streamOf(stream);
  if (m == capturedMark()) {
    {
      std::lock_guard lock(s->mu);
      s->capturing = true;
    }
    std::weak_ptr<Stream> weak;
    {
      std::lock_guard lock(streams().mu);
      auto it = streams().all.find(s);
      if (it != streams().all.end()) weak = it->second;
    }
    std::lock_guard lock(joinedMutex());
    joinedStreams()[s] = weak;
    return cudaSuccess;
  }
  if (m) s->push([m] { m->wait(); });
  return cudaSuccess;
}

}  // extern "C"

// ---- NCCL -----------------------------------------------------------------------------------

namespace {

int ncclVersion() {
  static const int v = envInt("MW_SIM_NCCL_VERSION", 22809);
  return v;
}

// ncclGetLastError's text: one buffer for the process, as in NCCL.
struct LastError {
  std::mutex mu;
  char text[1024] = {0};
};
LastError& lastError() {
  static auto* e = new LastError;
  return *e;
}

ncclResult_t ncclFail(ncclResult_t r, const std::string& why) {
  std::lock_guard lock(lastError().mu);
  std::snprintf(lastError().text, sizeof lastError().text, "simulated NCCL: %s", why.c_str());
  return r;
}

// The job record of a non-blocking init, in the initializing thread's storage (NCCL 2.22-2.25's
// ncclGroupJobMain): freed when that thread exits.
struct JobRecord {
  uint64_t magic = 0x6a6f62;
};
struct Jobs {
  std::mutex mu;
  std::set<JobRecord*> live;  // GUARDED_BY(mu)
};
Jobs& jobs() {
  static auto* j = new Jobs;
  return *j;
}
struct ThreadJob {
  JobRecord* record = nullptr;
  ~ThreadJob() {
    if (record == nullptr) return;
    {
      std::lock_guard lock(jobs().mu);
      jobs().live.erase(record);
    }
    delete record;
  }
};
thread_local ThreadJob thread_job;

JobRecord* threadJob() {
  if (thread_job.record == nullptr) {
    thread_job.record = new JobRecord;
    std::lock_guard lock(jobs().mu);
    jobs().live.insert(thread_job.record);
  }
  return thread_job.record;
}

// What tests ask of the communicators of one name.
struct Controls {
  bool stuck = false;
  ncclResult_t async_error = ncclSuccess;
  ncclResult_t fail_next = ncclSuccess;
  std::string fail_text;
};

struct Comm {
  int device = 0;
  int nranks = 1;
  int rank = 0;
  std::string name;
  bool init_done = false;  // a communicator of more than one rank never completes
  bool blocking = true;    // its calls finish their work before they return
  std::atomic<JobRecord*> job{nullptr};
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;                    // GUARDED_BY(mu): kernels queued and not ended
  bool connecting = false;            // GUARDED_BY(mu)
  bool connected = false;             // GUARDED_BY(mu)
  SimClock::time_point connected_at;  // GUARDED_BY(mu)
  void* memory = nullptr;             // its "device memory", freed by the abort
  std::vector<char> repeat;           // GUARDED_BY(mu): the next result, when a message repeats
  bool repeating = false;             // GUARDED_BY(mu)
};

struct Comms {
  std::mutex mu;
  std::map<Comm*, std::shared_ptr<Comm>> live;  // GUARDED_BY(mu)
  std::map<std::string, Controls> controls;     // GUARDED_BY(mu)
  std::atomic<long> polls{0};
  std::atomic<int> bootstrap_leaks{0};
};
Comms& comms() {
  static auto* c = new Comms;
  return *c;
}

std::shared_ptr<Comm> commOf(ncclComm_t comm) {
  std::lock_guard lock(comms().mu);
  auto it = comms().live.find(reinterpret_cast<Comm*>(comm));
  return it == comms().live.end() ? nullptr : it->second;
}

Controls controlsOf(const std::string& name) {
  std::lock_guard lock(comms().mu);
  auto it = comms().controls.find(name);
  return it == comms().controls.end() ? Controls{} : it->second;
}

// ncclCommEnsureReady: touches the init's job record and clears it.
void ensureReady(Comm& c) {
  JobRecord* job = c.job.exchange(nullptr);
  if (job == nullptr) return;
  bool live = false;
  {
    std::lock_guard lock(jobs().mu);
    live = jobs().live.count(job) != 0;
  }
  if (!live) {
    std::fprintf(stderr,
                 "simulated NCCL %d: use after free: communicator '%s' touched the job record "
                 "of the thread that initialized it, which has exited (NCCL 2.22-2.25 clear it "
                 "only in ncclCommEnsureReady)\n",
                 ncclVersion(), c.name.c_str());
    std::fflush(stderr);
    std::abort();
  }
  volatile uint64_t touched = job->magic;
  (void)touched;
}

size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

// Queues one kernel of `c` on `s`: it runs `body`, unless its communicator is stuck (then it
// spins until the communicator is aborted) or already aborted.
void queueKernel(const std::shared_ptr<Comm>& c, Stream* s, const std::function<void()>& body) {
  {
    std::lock_guard lock(c->mu);
    ++c->running;
  }
  const bool queued = s->push([c, body] {
    while (!c->aborted.load() && controlsOf(c->name).stuck) std::this_thread::sleep_for(200us);
    if (!c->aborted.load()) body();
    {
      std::lock_guard lock(c->mu);
      --c->running;
    }
    c->cv.notify_all();
  });
  if (!queued) {  // recorded in a capture: it never runs
    std::lock_guard lock(c->mu);
    --c->running;
  }
}

// The first operation forms the connections: ncclInProgress for 2 ms (forever when stuck) on a
// non-blocking communicator; a blocking one waits for them in the call.
ncclResult_t connectionState(Comm& c) {
  if (c.blocking) {
    {
      std::lock_guard lock(c.mu);
      if (c.connected) return ncclSuccess;
    }
    const auto until = SimClock::now() + 2ms;
    while ((SimClock::now() < until || controlsOf(c.name).stuck) && !c.aborted.load()) {
      std::this_thread::sleep_for(200us);
    }
    std::lock_guard lock(c.mu);
    c.connected = true;
    return ncclSuccess;
  }
  std::lock_guard lock(c.mu);
  if (c.connected) return ncclSuccess;
  if (!c.connecting) {
    c.connecting = true;
    c.connected_at = SimClock::now() + 2ms;
  }
  if (SimClock::now() >= c.connected_at && !controlsOf(c.name).stuck) c.connected = true;
  return c.connected ? ncclSuccess : ncclInProgress;
}

// Point-to-point calls inside a group, paired at ncclGroupEnd, and aborts deferred to it.
struct P2p {
  bool send;
  void* buf;
  size_t bytes;
  Stream* stream;
  std::shared_ptr<Comm> comm;
};
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_ops;
thread_local std::vector<std::shared_ptr<Comm>> group_aborts;

// The checks every call makes: a live, initialized communicator of this device, a stream of its
// device; then the first call's readiness (ncclCommEnsureReady) and a failure a test asked for.
ncclResult_t checkCall(ncclComm_t comm, cudaStream_t stream, Stream** s,
                       std::shared_ptr<Comm>* out) {
  if (comm == nullptr) return ncclFail(ncclInvalidArgument, "null communicator");
  auto c = commOf(comm);
  if (!c) return ncclFail(ncclInvalidArgument, "a communicator that was aborted");
  if (!c->init_done) return ncclFail(ncclInvalidUsage, "the communicator's init has not completed");
  ensureReady(*c);
  *s = streamOf(stream);
  if ((*s)->device != c->device) {
    return ncclFail(ncclInvalidArgument, "the stream is not on the communicator's device");
  }
  {
    std::lock_guard lock(comms().mu);
    Controls& k = comms().controls[c->name];
    if (k.fail_next != ncclSuccess) {
      ncclResult_t r = k.fail_next;
      k.fail_next = ncclSuccess;
      return ncclFail(r, k.fail_text);  // lastError().mu is only ever taken inside comms().mu
    }
  }
  *out = std::move(c);
  return ncclSuccess;
}

// The simulated NCCL's data faults: libfiu points "mw/sim/nccl/<fault>/<communicator name>",
// switched like the runtime's (a process without libfiu has none). fiu_fail's failnum when the
// point fires now, else 0.
int dataFault(const char* fault, const std::string& comm) {
  using FiuInit = int (*)(unsigned);
  using FiuFail = int (*)(const char*);
  static const FiuFail fail = [] {
    auto init = reinterpret_cast<FiuInit>(dlsym(RTLD_DEFAULT, "fiu_init"));
    auto f = reinterpret_cast<FiuFail>(dlsym(RTLD_DEFAULT, "fiu_fail"));
    return init != nullptr && f != nullptr && init(0) == 0 ? f : nullptr;
  }();
  if (fail == nullptr) return 0;
  return fail(("mw/sim/nccl/" + std::string(fault) + "/" + comm).c_str());
}

ncclResult_t copyOn(const void* src, void* dst, size_t count, ncclDataType_t dt, ncclComm_t comm,
                    cudaStream_t stream) {
  Stream* s = nullptr;
  std::shared_ptr<Comm> c;
  if (ncclResult_t r = checkCall(comm, stream, &s, &c); r != ncclSuccess) return r;
  const size_t bytes = count * typeSize(dt);
  // A result corrupted (the lowest bit of byte failnum, counted from 1, modulo its size), or
  // delivered again in place of the next one's (as a message sent twice would be).
  const int corrupt = bytes > 0 ? dataFault("corrupt", c->name) : 0;
  const bool repeat = dataFault("repeat", c->name) != 0;
  Comm* raw = c.get();
  queueKernel(c, s, [=] {
    std::vector<char> held;
    {
      std::lock_guard lock(raw->mu);
      if (raw->repeating && raw->repeat.size() == bytes) held.swap(raw->repeat);
      raw->repeating = false;
    }
    if (!held.empty()) {
      std::memcpy(dst, held.data(), bytes);
    } else if (src != dst) {
      std::memmove(dst, src, bytes);
    }
    if (corrupt != 0) {
      static_cast<unsigned char*>(dst)[static_cast<size_t>(corrupt - 1) % bytes] ^= 1;
    }
    if (repeat) {
      std::lock_guard lock(raw->mu);
      raw->repeat.assign(static_cast<const char*>(dst), static_cast<const char*>(dst) + bytes);
      raw->repeating = true;
    }
  });
  if (group_depth > 0) return ncclSuccess;
  countLaunch();
  return connectionState(*c);
}

ncclResult_t p2p(bool send, void* buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                 cudaStream_t stream) {
  Stream* s = nullptr;
  std::shared_ptr<Comm> c;
  if (ncclResult_t r = checkCall(comm, stream, &s, &c); r != ncclSuccess) return r;
  if (peer != 0) return ncclFail(ncclInvalidArgument, "peer " + std::to_string(peer));
  if (group_depth == 0) {
    return ncclFail(ncclInvalidUsage, "a send or receive to self outside a group never completes");
  }
  group_ops.push_back({send, buf, count * typeSize(dt), s, std::move(c)});
  return ncclSuccess;
}

// Stops every communicator in `batch`, waits until each one's kernels ended, then frees each
// one's device memory (cudaFree: waits for every kernel on the device).
void abortAll(const std::vector<std::shared_ptr<Comm>>& batch) {
  for (auto& c : batch) c->aborted.store(true);
  for (auto& c : batch) {
    std::unique_lock lock(c->mu);
    c->cv.wait(lock, [&] { return c->running == 0; });
  }
  for (auto& c : batch) {
    const int saved = current_device;
    current_device = c->device;
    cudaFree(c->memory);
    current_device = saved;
    std::lock_guard lock(comms().mu);
    comms().live.erase(c.get());
  }
}

// NCCL's bootstrap thread of rank 0, left behind when a member never joins: it holds a socket
// until the process ends. NCCL names its threads only when NCCL_SET_THREAD_NAME=1 (default 0):
// otherwise, as seen with NCCL 2.28.9 on an H200, the thread keeps the name of the thread that
// called the init (the runtime's mw-nccl-init).
void leakBootstrapThread() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  comms().bootstrap_leaks.fetch_add(1);
  const char* named = std::getenv("NCCL_SET_THREAD_NAME");
  const bool set_name = named != nullptr && std::string(named) == "1";
  std::thread([fds, set_name] {
    if (set_name) pthread_setname_np(pthread_self(), "NCCL BootstrapR");
    char byte;
    while (::read(fds[0], &byte, 1) != 0) {
    }
  }).detach();
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = ncclVersion();
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, "mw-sim", 6);
  return ncclSuccess;
}

// Non-blocking configs see ncclInProgress first, as with a real NCCL.
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                    ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    *comm = nullptr;
    return ncclFail(ncclInvalidArgument,
                    "rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  }
  auto c = std::make_shared<Comm>();
  c->device = current_device;
  c->nranks = nranks;
  c->rank = rank;
  c->name = config != nullptr && config->commName != nullptr ? config->commName : "";
  c->init_done = nranks == 1;
  {
    // Its device memory, allocated without waiting (freed by the abort, which waits).
    void* p = std::malloc(64);
    std::lock_guard lock(allocations().mu);
    allocations().sizes[p] = {64, current_device};
    allocations().allocated += 64;
    c->memory = p;
  }
  const bool blocking = config == nullptr || config->blocking != 0;
  c->blocking = blocking;
  if (!blocking) c->job.store(threadJob());
  if (nranks > 1 && rank == 0) leakBootstrapThread();
  *comm = reinterpret_cast<ncclComm_t>(c.get());
  {
    std::lock_guard lock(comms().mu);
    comms().live[c.get()] = c;
  }
  if (!blocking) return ncclInProgress;
  return c->init_done ? ncclSuccess : ncclFail(ncclInternalError, "a peer never came");
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  comms().polls.fetch_add(1);
  auto c = commOf(comm);
  if (!c) return ncclInvalidArgument;
  if (!c->init_done) {
    *async = ncclInProgress;
    return ncclSuccess;
  }
  const Controls k = controlsOf(c->name);
  if (k.async_error != ncclSuccess) {
    *async = k.async_error;
    return ncclSuccess;
  }
  {
    std::lock_guard lock(c->mu);
    if (c->connecting && !c->connected) {
      if (SimClock::now() >= c->connected_at && !k.stuck) c->connected = true;
      if (!c->connected) {
        *async = ncclInProgress;
        return ncclSuccess;
      }
    }
  }
  if (ncclVersion() >= 22600) ensureReady(*c);  // 2.26 clears the job record on success
  *async = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  auto c = commOf(comm);
  if (!c) return ncclInvalidArgument;
  ensureReady(*c);
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  auto c = commOf(comm);
  if (!c) return comm == nullptr ? ncclSuccess : ncclInvalidArgument;
  ensureReady(*c);  // an unfinished init's job record is the abort's to stop
  if (group_depth > 0) {
    group_aborts.push_back(std::move(c));
    return ncclSuccess;
  }
  abortAll({c});
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : "error reported by the simulated NCCL";
}

// The process-wide text as it is now, in a copy of the calling thread's (a pointer into the
// shared buffer would race with the next failure's write).
const char* ncclGetLastError(ncclComm_t) {
  thread_local char copy[sizeof(LastError::text)];
  std::lock_guard lock(lastError().mu);
  std::memcpy(copy, lastError().text, sizeof copy);
  return copy;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclFail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<std::shared_ptr<Comm>> aborts;
  aborts.swap(group_aborts);
  if (!aborts.empty()) abortAll(aborts);
  std::vector<P2p> ops;
  ops.swap(group_ops);
  if (ops.empty()) return ncclSuccess;
  std::deque<P2p> sends, recvs;
  for (const P2p& op : ops) (op.send ? sends : recvs).push_back(op);
  if (sends.size() != recvs.size()) {
    return ncclFail(ncclInvalidUsage, std::to_string(sends.size()) + " sends to self against " +
                                          std::to_string(recvs.size()) + " receives");
  }
  countLaunch();
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].bytes != recvs[i].bytes) {
      return ncclFail(ncclInvalidUsage, "a send and its receive differ in size");
    }
    const P2p s = sends[i], r = recvs[i];
    queueKernel(r.comm, r.stream, [s, r] { std::memmove(r.buf, s.buf, r.bytes); });
  }
  return connectionState(*ops.front().comm);
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p(true, const_cast<void*>(buf), count, dt, peer, comm, stream);
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p(false, buf, count, dt, peer, comm, stream);
}

ncclResult_t ncclBroadcast(const void* src, void* dst, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (root != 0) return ncclFail(ncclInvalidArgument, "root " + std::to_string(root));
  return copyOn(src, dst, count, dt, comm, stream);
}

ncclResult_t ncclAllReduce(const void* src, void* dst, size_t count, ncclDataType_t dt, ncclRedOp_t,
                           ncclComm_t comm, cudaStream_t stream) {
  return copyOn(src, dst, count, dt, comm, stream);
}

ncclResult_t ncclReduce(const void* src, void* dst, size_t count, ncclDataType_t dt, ncclRedOp_t,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (root != 0) return ncclFail(ncclInvalidArgument, "root " + std::to_string(root));
  return copyOn(src, dst, count, dt, comm, stream);
}

ncclResult_t ncclAllGather(const void* src, void* dst, size_t count, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t stream) {
  return copyOn(src, dst, count, dt, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* src, void* dst, size_t count, ncclDataType_t dt,
                               ncclRedOp_t, ncclComm_t comm, cudaStream_t stream) {
  return copyOn(src, dst, count, dt, comm, stream);
}

// ---- controls for tests ---------------------------------------------------------------------

// From now on, the kernels of communicators named `name` spin until their communicator is
// aborted, and a first operation never connects (a peer is gone); `stuck` 0 ends that.
void mwSimSetStuck(const char* name, int stuck) {
  std::lock_guard lock(comms().mu);
  comms().controls[name].stuck = stuck != 0;
}

// The result ncclCommGetAsyncError reports for communicators named `name` from now on.
void mwSimSetAsyncError(const char* name, int result) {
  std::lock_guard lock(comms().mu);
  comms().controls[name].async_error = static_cast<ncclResult_t>(result);
}

// The next enqueue on a communicator named `name` fails with `result`, and ncclGetLastError says
// `text`.
void mwSimFailNextCall(const char* name, int result, const char* text) {
  std::lock_guard lock(comms().mu);
  comms().controls[name].fail_next = static_cast<ncclResult_t>(result);
  comms().controls[name].fail_text = text;
}

// Communicators named `name` that are not aborted.
int mwSimLiveComms(const char* name) {
  std::lock_guard lock(comms().mu);
  int n = 0;
  for (auto& [p, c] : comms().live) n += c->name == name;
  return n;
}

long mwSimAsyncErrorPolls(void) { return comms().polls.load(); }

int mwSimBootstrapLeaks(void) { return comms().bootstrap_leaks.load(); }

// The calling thread's NCCL launches and host waits so far (see countLaunch); null pointers are
// skipped.
void mwSimThreadCounts(long* launches, long* host_waits) {
  if (launches != nullptr) *launches = thread_launches;
  if (host_waits != nullptr) *host_waits = thread_host_waits;
}

// NCCL launches of every thread so far.
long mwSimLaunches(void) { return all_launches.load(); }

}  // extern "C"
