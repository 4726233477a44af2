// libmw_sim_cuda.so: a simulated GPU for machines without one. It exports the CUDA runtime
// functions that the NCCL backend and the NCCL tests call, and NCCL's functions for one-rank
// communicators, so that the backend's own logic (stream ordering, completion events, aborts,
// failpoints, create/remove cycles) runs in CI here. The runtime opens it through
// MW_CUDART_LIBRARY and MW_NCCL_LIBRARY; a test binary links it in place of libcudart.
//
// The model:
// - "device memory" is host memory from malloc; MW_SIM_DEVICES devices (default 1, 0..8).
// - A stream is a thread running its queue in order; stream 0, cudaStreamLegacy and
//   cudaStreamPerThread are the current device's default stream. The default stream is not
//   synchronized with the other streams (as if every stream were cudaStreamNonBlocking).
// - An event records a point of a stream's queue; cudaStreamWaitEvent holds a stream until then.
// - NCCL: communicators of one rank; collectives copy their input to their output on the stream;
//   sends and receives to self pair up in order inside an ncclGroupStart/End.
// - Streams, events and communicators carry their device: using one with another device's object
//   fails as a real GPU does (cudaErrorInvalidResourceHandle).
// What it is not: a model of GPU timing, of memory spaces, or of NCCL between processes.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

int deviceCount() {
  static const int n = [] {
    const char* v = std::getenv("MW_SIM_DEVICES");
    int d = v != nullptr ? std::atoi(v) : 1;
    return d < 0 ? 0 : (d > 8 ? 8 : d);
  }();
  return n;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

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

struct Stream {
  const int device;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;  // GUARDED_BY(mu)
  bool stopping = false;                    // GUARDED_BY(mu)
  std::thread thread;

  explicit Stream(int d) : device(d), thread([this] { run(); }) {}
  ~Stream() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    thread.join();  // after the queue has run: cudaStreamDestroy lets queued work finish
  }
  void push(std::function<void()> task) {
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(task));
    }
    cv.notify_all();
  }
  std::shared_ptr<Mark> mark() {
    auto m = std::make_shared<Mark>();
    push([m] { m->set(); });
    return m;
  }
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  }
};

struct Event {
  const int device;
  std::mutex mu;
  std::shared_ptr<Mark> mark;  // GUARDED_BY(mu); null: never recorded (complete)
};

// The default stream of each device; never destroyed (its thread idles until exit).
Stream* defaultStream(int device) {
  static std::mutex mu;
  static std::map<int, Stream*> streams;
  std::lock_guard lock(mu);
  Stream*& s = streams[device];
  if (s == nullptr) s = new Stream(device);
  return s;
}

Stream* streamOf(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    return defaultStream(current_device);
  }
  return reinterpret_cast<Stream*>(s);
}

// Allocation sizes, for cudaMemGetInfo.
std::mutex alloc_mu;
std::map<void*, size_t> allocations;  // GUARDED_BY(alloc_mu)
size_t allocated = 0;                 // GUARDED_BY(alloc_mu)
constexpr size_t kTotalMemory = size_t{16} << 30;

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = deviceCount();
  return deviceCount() == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
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
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    default:
      return "cudaError";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "error reported by the simulated device";
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(new Stream(current_device));
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  delete reinterpret_cast<Stream*>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  streamOf(stream)->mark()->wait();
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user) {
  streamOf(stream)->push([fn, user] { fn(user); });
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(alloc_mu);
  allocations[p] = bytes;
  allocated += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard lock(alloc_mu);
    auto it = allocations.find(ptr);
    if (it == allocations.end()) return fail(cudaErrorInvalidValue);
    allocated -= it->second;
    allocations.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard lock(alloc_mu);
  *total = kTotalMemory;
  *free_bytes = kTotalMemory - allocated;
  return cudaSuccess;
}

// Synchronous with the host, as cudaMemset and cudaMemcpy are for pageable memory.
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  defaultStream(current_device)->mark()->wait();
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind) {
  defaultStream(current_device)->mark()->wait();
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  streamOf(stream)->push([=] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(new Event{current_device, {}, {}});
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  Event* e = reinterpret_cast<Event*>(event);
  Stream* s = streamOf(stream);
  if (s->device != e->device) return fail(cudaErrorInvalidResourceHandle);
  auto m = s->mark();
  std::lock_guard lock(e->mu);
  e->mark = std::move(m);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Event* e = reinterpret_cast<Event*>(event);
  std::lock_guard lock(e->mu);
  return e->mark == nullptr || e->mark->test() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Event* e = reinterpret_cast<Event*>(event);
  std::shared_ptr<Mark> m;
  {
    std::lock_guard lock(e->mu);
    m = e->mark;
  }
  if (m) m->wait();
  return cudaSuccess;
}

// Like a real GPU: the wait is for the event's record at the time of this call, and waiting on
// another device's event is allowed.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  Event* e = reinterpret_cast<Event*>(event);
  std::shared_ptr<Mark> m;
  {
    std::lock_guard lock(e->mu);
    m = e->mark;
  }
  if (m) streamOf(stream)->push([m] { m->wait(); });
  return cudaSuccess;
}

}  // extern "C"

// ---- NCCL, one rank -------------------------------------------------------------------------

namespace {

struct Comm {
  int device;
};

thread_local std::string nccl_last_error;

ncclResult_t ncclFail(ncclResult_t r, const std::string& why) {
  nccl_last_error = "simulated NCCL: " + why;
  return r;
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

// Point-to-point calls inside a group, paired at ncclGroupEnd.
struct P2p {
  bool send;
  void* buf;
  size_t bytes;
  Stream* stream;
};
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_ops;

// The checks every call makes: a live communicator of this device, a stream of its device.
ncclResult_t checkCall(ncclComm_t comm, cudaStream_t stream, Stream** s) {
  if (comm == nullptr) return ncclFail(ncclInvalidArgument, "null communicator");
  Comm* c = reinterpret_cast<Comm*>(comm);
  *s = streamOf(stream);
  if ((*s)->device != c->device) {
    return ncclFail(ncclInvalidArgument, "the stream is not on the communicator's device");
  }
  return ncclSuccess;
}

ncclResult_t copyOn(const void* src, void* dst, size_t count, ncclDataType_t dt, ncclComm_t comm,
                    cudaStream_t stream) {
  Stream* s = nullptr;
  if (ncclResult_t r = checkCall(comm, stream, &s); r != ncclSuccess) return r;
  const size_t bytes = count * typeSize(dt);
  if (src != dst) s->push([=] { std::memmove(dst, src, bytes); });
  return ncclSuccess;
}

ncclResult_t p2p(bool send, void* buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                 cudaStream_t stream) {
  Stream* s = nullptr;
  if (ncclResult_t r = checkCall(comm, stream, &s); r != ncclSuccess) return r;
  if (peer != 0) return ncclFail(ncclInvalidArgument, "peer " + std::to_string(peer));
  if (group_depth == 0) {
    return ncclFail(ncclInvalidUsage, "a send or receive to self outside a group never completes");
  }
  group_ops.push_back({send, buf, count * typeSize(dt), s});
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = 22809;
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
  if (nranks != 1 || rank != 0) {
    *comm = nullptr;
    return ncclFail(ncclInvalidUsage, "communicators of one rank only (asked for rank " +
                                          std::to_string(rank) + " of " +
                                          std::to_string(nranks) + ")");
  }
  *comm = reinterpret_cast<ncclComm_t>(new Comm{current_device});
  return config != nullptr && config->blocking == 0 ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  if (comm == nullptr) return ncclInvalidArgument;
  *async = ncclSuccess;
  return ncclSuccess;
}

// Work already on a stream runs to its end (copies finish by themselves).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete reinterpret_cast<Comm*>(comm);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : "error reported by the simulated NCCL";
}

const char* ncclGetLastError(ncclComm_t) { return nccl_last_error.c_str(); }

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclFail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(group_ops);
  std::deque<P2p> sends, recvs;
  for (const P2p& op : ops) (op.send ? sends : recvs).push_back(op);
  if (sends.size() != recvs.size()) {
    return ncclFail(ncclInvalidUsage, std::to_string(sends.size()) + " sends to self against " +
                                          std::to_string(recvs.size()) + " receives");
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].bytes != recvs[i].bytes) {
      return ncclFail(ncclInvalidUsage, "a send and its receive differ in size");
    }
    const P2p s = sends[i], r = recvs[i];
    r.stream->push([s, r] { std::memmove(r.buf, s.buf, r.bytes); });
  }
  return ncclSuccess;
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

ncclResult_t ncclAllReduce(const void* src, void* dst, size_t count, ncclDataType_t dt,
                           ncclRedOp_t, ncclComm_t comm, cudaStream_t stream) {
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

}  // extern "C"
