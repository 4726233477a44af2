// mw_submit_cost: what the runtime's part of one nccl-world operation costs, counted, not timed
// (issue 39; docs/benchmarks.md, "Submission, counted"), on the GPU the runtime's loader opens
// (bench/submit_cost.sh points it at the simulated GPU, tests/runtime/sim_cuda.cc). Modes:
//   runtime  a one-rank nccl world: OPS all_reduces of 4 floats, each submitted and waited for
//            stream-ordered (Work::wait: the caller's stream is made to wait; the host does not);
//   raw      the same on a one-rank NCCL communicator of its own, ordered as c10d's NCCL groups
//            order an operation and its wait(): an event recorded on the caller's stream, the
//            NCCL stream waiting for it, ncclAllReduce, an event recorded after it, the caller's
//            stream waiting for that one (the baseline: what any stream-ordered caller of NCCL
//            pays).
// Each first runs kWarmup operations and waits for them on the host (a world's event pool and
// lists reach their size), then the OPS counted ones, then waits for the last on the host.
// bench/submit_cost.sh runs it under callgrind at two values of OPS: the difference, per
// operation, is what one operation costs in user space, every thread of the process included.
//
// It also counts, itself, the C++ allocations (operator new, every thread) made during the OPS
// operations, and prints "allocations_per_op N" on stdout.
//
//   mw_submit_cost runtime|raw OPS
//
// Exit 0 after OPS operations; 2 on bad arguments; 3 when the world cannot be joined or an
// operation fails (the runtime's message: no GPU, say, when the loader finds none).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "multiworld/multiworld.h"
#include "nccl/nccl_loader.h"

namespace {

std::atomic<long> allocations{0};
// More than a world keeps in flight (1024): the counted operations find its event pool grown.
constexpr long kWarmup = 2048;

[[noreturn]] void die(int code, const std::string& why) {
  std::fprintf(stderr, "mw_submit_cost: %s\n", why.c_str());
  std::exit(code);
}

void check(const mw::Status& s, const char* what) {
  if (!s.ok()) die(3, std::string(what) + ": " + s.toString());
}

void cudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(3, std::string(what) + ": CUDA error " + std::to_string(e));
}

void ncclOk(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(3, std::string(what) + ": NCCL error " + std::to_string(r));
}

// The baseline: `ops` all_reduces of 4 floats on a one-rank communicator, each ordered as c10d
// orders an operation and its stream-ordered wait, after kWarmup of them; returns the C++
// allocations made during the counted ones.
long raw(long ops) {
  auto loaded = mw::detail::loadNcclApi();
  check(loaded.status(), "loading CUDA and NCCL");
  const mw::detail::NcclApi& a = **loaded;
  cudaOk(a.cudaSetDevice(0), "cudaSetDevice");
  ncclUniqueId id;
  ncclOk(a.ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclComm_t comm = nullptr;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;  // blocking: returns once the communicator is up
  ncclOk(a.ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), "ncclCommInitRankConfig");
  cudaStream_t stream = nullptr;
  cudaOk(a.cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t ready = nullptr, done = nullptr;
  cudaOk(a.cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  cudaOk(a.cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  void* buf = nullptr;
  cudaOk(a.cudaMalloc(&buf, 4 * sizeof(float)), "cudaMalloc");
  cudaOk(a.cudaMemset(buf, 0, 4 * sizeof(float)), "cudaMemset");
  const cudaStream_t caller = nullptr;  // the legacy default stream, as the runtime's callers
  auto one = [&] {
    cudaOk(a.cudaEventRecord(ready, caller), "cudaEventRecord");
    cudaOk(a.cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    ncclOk(a.ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce");
    cudaOk(a.cudaEventRecord(done, stream), "cudaEventRecord");
    cudaOk(a.cudaStreamWaitEvent(caller, done, 0), "cudaStreamWaitEvent");
  };
  for (long i = 0; i < kWarmup; ++i) one();
  cudaOk(a.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const long before = allocations.load();
  for (long i = 0; i < ops; ++i) one();
  cudaOk(a.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const long counted = allocations.load() - before;
  a.cudaFree(buf);
  a.cudaEventDestroy(ready);
  a.cudaEventDestroy(done);
  a.cudaStreamDestroy(stream);
  a.ncclCommAbort(comm);  // one rank: nothing to wait for
  return counted;
}

}  // namespace

// Every C++ allocation of the process, the runtime's included (it is linked into this program or
// resolves operator new to this definition).
void* operator new(size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

// The runtime: the same on a one-rank nccl world; returns the C++ allocations of the counted ones.
namespace {

long runtime(long ops) {
  using namespace std::chrono_literals;
  mw::WorldManager manager;
  mw::Communicator c(manager);
  mw::WorldOptions o;
  o.name = "w";
  o.rank = 0;
  o.size = 1;
  o.backend = mw::BackendKind::kNccl;
  o.device = mw::Device::cuda(0);
  // Generous: under callgrind everything runs about 50 times slower.
  o.heartbeat_timeout = 120s;
  o.op_timeout = 600s;
  check(manager.initWorld(o, mw::deadlineIn(600s)), "joining world 'w'");
  auto buffer = mw::DeviceBuffer::allocate(o.device, 4 * sizeof(float));
  check(buffer.status(), "allocating 4 floats on the device");
  check(buffer->fill(0), "filling them");
  const mw::Tensor t{buffer->data(), mw::DType::kFloat32, 4, o.device};
  mw::Work last;
  auto run = [&](long n) {
    for (long i = 0; i < n; ++i) {
      last = c.allReduce("w", t);
      check(last.wait(mw::deadlineIn(600s)), "a stream-ordered all_reduce");
    }
    check(last.synchronize(mw::deadlineIn(600s)), "synchronizing the last all_reduce");
  };
  // The first operations form NCCL's connections and grow the event pool.
  run(kWarmup);
  const long before = allocations.load();
  run(ops);
  return allocations.load() - before;
}

}  // namespace

int main(int argc, char** argv) {
  char* end = nullptr;
  const std::string mode = argc == 3 ? argv[1] : "";
  const long ops = argc == 3 ? std::strtol(argv[2], &end, 10) : 0;
  if (argc != 3 || (mode != "runtime" && mode != "raw") || end == argv[2] || *end != '\0' ||
      ops < 1 || ops > 10000000) {
    die(2, "usage: mw_submit_cost runtime|raw OPS (1 to 10000000)");
  }
  const long counted = mode == "raw" ? raw(ops) : runtime(ops);
  std::printf("allocations_per_op %.2f\n", static_cast<double>(counted) / static_cast<double>(ops));
  return 0;
}
