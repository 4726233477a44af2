// mw_bench nccl: the runtime's NCCL worlds against raw NCCL on one GPU, in one process.
//
// NCCL refuses two ranks of one communicator on one GPU, so on a one-GPU machine both sides are
// one-rank communicators: what is compared is the runtime's own path around NCCL (argument checks,
// the Work, the stream ordering, the launch, completion) against the same NCCL calls made
// directly, and the bandwidth each delivers. Raw NCCL goes through the runtime's loader
// (nccl_loader.h), so both sides use the very same NCCL and CUDA runtime files.
#include <dirent.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent.h"
#include "base/failpoint.h"
#include "bench_util.h"
#include "multiworld/failpoints.h"
#include "multiworld/multiworld.h"
#include "nccl/nccl_backend.h"
#include "nccl/nccl_loader.h"
#include "subcommands.h"

namespace mwb {

const char* const kNcclHelp =
    "mw_bench nccl [--device N] [--parts LIST] [--sizes LIST] [--calls N] [--reps N]\n"
    "              [--bytes-per-rep SIZE] [--lag-sizes LIST] [--samples N] [--busy-seconds S]\n"
    "              [--json PATH]\n"
    "\n"
    "One process, one GPU: one-rank nccl worlds of the runtime against a one-rank raw NCCL\n"
    "communicator (the same NCCL and CUDA runtime files, through the runtime's loader). Parts:\n"
    "  costs       each CUDA and NCCL call of the launch path alone (ns per call), the runtime's\n"
    "              submission, and two calls beside a thread that polls an event\n"
    "  calls       all_reduce of 4 floats, per operation (us), runtime against raw NCCL:\n"
    "              launch: allReduce + wait() (stream-ordered), host time per call, against the\n"
    "                raw NCCL call alone and against raw NCCL with c10d's ordering (an event on\n"
    "                the caller's stream, the NCCL stream waiting for it, an event after, the\n"
    "                caller's stream waiting for that); submit: allReduce alone;\n"
    "              waited: allReduce + synchronize() against NCCL + an event polled until done;\n"
    "              back to back: N operations issued, then the last waited for; wall time / N.\n"
    "              Targets (issue 39): launch <= raw + 1.5 us, waited <= raw + 5 us, back to\n"
    "              back <= 1.5 us per operation. Also: launches made by the submitting thread\n"
    "              against the executor (thread hand-offs).\n"
    "  bandwidth   per size, all_reduce and broadcast issued back to back and waited for at the\n"
    "              end; bytes / time, and runtime/raw per rep (variants alternate rep by rep)\n"
    "  completion  per completion mode of the runtime (hybrid, predict, blocking, spin): the\n"
    "              lag between the GPU finishing an operation (an all_gather that copies\n"
    "              --lag-sizes bytes) and its Work completing, and the CPU the world's threads\n"
    "              use while the world is busy with such operations back to back (fraction of\n"
    "              one core). Target: lag <= 10 us at a few percent of a core.\n"
    "  mechanisms  the same lag measured on raw CUDA for the three ways to learn of completion:\n"
    "              polling an event, a blocking-sync event (cudaEventSynchronize) and a host\n"
    "              function (cudaLaunchHostFunc); lag = latency - the polled latency.\n"
    "  isolation   two worlds on the GPU, each all-reducing 1 MiB in a thread of its own; an NCCL\n"
    "              error injected into one (failpoint, asynchronous ncclRemoteError): the other's\n"
    "              rate after the fault over its rate before. Target: >= 0.95. Needs failpoints.\n"
    "One GPU cannot show isolation between processes (see docs/design.md). Without a CUDA GPU it\n"
    "exits 3 and says why.\n"
    "\n"
    "  --device N          the CUDA device (default 0)\n"
    "  --parts LIST        parts to run (default all: costs,calls,bandwidth,completion,\n"
    "                      mechanisms,isolation)\n"
    "  --sizes LIST        bandwidth message sizes (default 1M,16M,64M)\n"
    "  --calls N           operations per calls block (default 2000)\n"
    "  --reps N            blocks / reps per variant (default 5)\n"
    "  --bytes-per-rep S   data moved per bandwidth rep (default 1G)\n"
    "  --lag-sizes LIST    bytes each lag operation copies (default 1M,64M,1G)\n"
    "  --samples N         lag samples per size and variant (default 50)\n"
    "  --busy-seconds S    length of each busy window for the CPU measure (default 1)\n"
    "  --json PATH         write raw samples, medians and spreads\n";

namespace {

using Api = mw::detail::NcclApi;

void cudaOk(const Api& a, cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw BenchError(std::string(what) + ": " + a.cudaGetErrorName(e) + " (" +
                     a.cudaGetErrorString(e) + ")");
  }
}

void ncclOk(const Api& a, ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw BenchError(std::string(what) + ": " + a.ncclGetErrorString(r));
}

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

enum Kind { kAllReduce, kBroadcast, kKinds };
const char* const kKindKey[] = {"all_reduce", "broadcast"};
constexpr char kWorld[] = "nccl-bench";

// A one-rank raw NCCL communicator with its stream and events.
struct Raw {
  const Api& a;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  cudaEvent_t ready = nullptr;

  Raw(const Api& api, int device) : a(api) {
    cudaOk(a, a.cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    ncclOk(a, a.ncclGetUniqueId(&id), "ncclGetUniqueId");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;  // blocking: returns once the communicator is up
    ncclOk(a, a.ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), "ncclCommInitRankConfig");
    cudaOk(a, a.cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaOk(a, a.cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cudaOk(a, a.cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Raw() {
    if (ready) a.cudaEventDestroy(ready);
    if (done) a.cudaEventDestroy(done);
    if (stream) a.cudaStreamDestroy(stream);
    if (comm) a.ncclCommAbort(comm);  // a one-rank communicator: nothing to wait for
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  void issue(Kind k, void* buf, size_t count) {
    ncclResult_t r = k == kAllReduce
                         ? a.ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream)
                         : a.ncclBroadcast(buf, buf, count, ncclFloat32, 0, comm, stream);
    ncclOk(a, r, kKindKey[k]);
  }
  // What c10d's NCCL group does for an operation and its wait(): the NCCL stream waits for an
  // event on `caller`, an event is recorded after the call, and `caller` waits for that one.
  void issueOrdered(void* buf, size_t count, cudaStream_t caller) {
    cudaOk(a, a.cudaEventRecord(ready, caller), "cudaEventRecord");
    cudaOk(a, a.cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    issue(kAllReduce, buf, count);
    cudaOk(a, a.cudaEventRecord(done, stream), "cudaEventRecord");
    cudaOk(a, a.cudaStreamWaitEvent(caller, done, 0), "cudaStreamWaitEvent");
  }
  // Waits for everything issued so far, polling an event as the runtime does.
  void wait() {
    cudaOk(a, a.cudaEventRecord(done, stream), "cudaEventRecord");
    cudaError_t e;
    while ((e = a.cudaEventQuery(done)) == cudaErrorNotReady) {
    }
    cudaOk(a, e, "cudaEventQuery");
  }
};

// A flag in pinned, mapped host memory that a stream writes when it reaches a point
// (cuStreamWriteValue32, the driver's stream memory operation): the host learns of the point by
// reading memory, with no CUDA call. Optional: where libcuda or the calls are missing (the
// simulated GPU), ok() is false.
struct HostFlag {
  using WriteFn = int (*)(cudaStream_t, unsigned long long, unsigned, unsigned);
  using HostAllocFn = cudaError_t (*)(void**, size_t, unsigned);
  using DevicePtrFn = cudaError_t (*)(void**, void*, unsigned);
  using FreeHostFn = cudaError_t (*)(void*);
  WriteFn write = nullptr;
  FreeHostFn free_host = nullptr;
  volatile unsigned* host = nullptr;
  unsigned long long device = 0;
  unsigned seq = 0;
  std::string why;

  explicit HostFlag(const Api& a) {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void* rt = dlopen(a.cudart_file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (cuda == nullptr || rt == nullptr) {
      why = "libcuda.so.1 or the CUDA runtime cannot be opened";
      return;
    }
    write = reinterpret_cast<WriteFn>(dlsym(cuda, "cuStreamWriteValue32_v2"));
    auto alloc = reinterpret_cast<HostAllocFn>(dlsym(rt, "cudaHostAlloc"));
    auto dptr = reinterpret_cast<DevicePtrFn>(dlsym(rt, "cudaHostGetDevicePointer"));
    free_host = reinterpret_cast<FreeHostFn>(dlsym(rt, "cudaFreeHost"));
    if (write == nullptr || alloc == nullptr || dptr == nullptr || free_host == nullptr) {
      why = "cuStreamWriteValue32_v2 or cudaHostAlloc missing";
      write = nullptr;
      return;
    }
    void* p = nullptr;
    void* d = nullptr;
    if (alloc(&p, 4096, cudaHostAllocMapped) != cudaSuccess || dptr(&d, p, 0) != cudaSuccess) {
      why = "cudaHostAlloc(mapped) failed";
      write = nullptr;
      return;
    }
    host = static_cast<volatile unsigned*>(p);
    *host = 0;
    device = reinterpret_cast<unsigned long long>(d);
  }
  ~HostFlag() {
    if (host != nullptr) free_host(const_cast<unsigned*>(host));
  }
  bool ok() const { return write != nullptr; }
  // Queues the write of the next value on `stream`; returns it (0 when the call failed).
  unsigned mark(cudaStream_t stream) {
    ++seq;
    return write(stream, device, seq, 0) == 0 ? seq : 0;
  }
  bool reached(unsigned v) const { return *host >= v; }
};

mw::Work issue(mw::Communicator& comm, Kind k, const mw::Tensor& t, const char* world = kWorld) {
  return k == kAllReduce ? comm.allReduce(world, t) : comm.broadcast(world, t, 0);
}

// Seconds for `n` calls of kind `k` on `count` floats, each waited for (`each`) or all waited for
// at the end.
double timeRaw(Raw& raw, Kind k, void* buf, size_t count, long n, bool each) {
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    raw.issue(k, buf, count);
    if (each) raw.wait();
  }
  if (!each) raw.wait();
  return seconds(Clock::now() - t0);
}

// Seconds for `n` operations, each synchronized (`each`: the host waits), or each stream-ordered
// (wait()) and the last synchronized at the end.
double timeRuntime(mw::Communicator& comm, Kind k, const mw::Tensor& t, long n, bool each) {
  std::vector<mw::Work> pending;
  pending.reserve(static_cast<size_t>(n));
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    mw::Work w = issue(comm, k, t);
    if (each) {
      expectOk(w.synchronize(), kKindKey[k]);
    } else {
      expectOk(w.wait(), kKindKey[k]);
      pending.push_back(std::move(w));
    }
  }
  if (!pending.empty()) expectOk(pending.back().synchronize(), kKindKey[k]);
  const double s = seconds(Clock::now() - t0);
  for (auto& w : pending) expectOk(w.synchronize(), kKindKey[k]);
  return s;
}

// Host microseconds per launch: blocks of 64 launches timed, the GPU caught up between blocks.
template <typename Launch, typename CatchUp>
double launchUs(long calls, Launch launch, CatchUp catch_up) {
  constexpr long kBlock = 64;
  Clock::duration spent{};
  for (long done = 0; done < calls;) {
    const long n = std::min(kBlock, calls - done);
    const auto t0 = Clock::now();
    for (long i = 0; i < n; ++i) launch();
    spent += Clock::now() - t0;
    catch_up();
    done += n;
  }
  return us(spent) / static_cast<double>(calls);
}

Json summaryJson(const std::vector<double>& v) { return sampleJson(v); }

void printRow(const char* name, const Summary& r, const Summary& m, const char* unit) {
  std::printf("  %-26s %8.2f [%.2f..%.2f] %8.2f [%.2f..%.2f] %+8.2f %s\n", name, r.median, r.min,
              r.max, m.median, m.min, m.max, m.median - r.median, unit);
}

// ---- CPU of the world's threads ----

// CPU seconds that this process's threads whose name starts with one of `prefixes` have run
// (/proc/self/task/*/schedstat, nanoseconds).
double threadsCpuSeconds(const std::vector<std::string>& prefixes) {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) throw BenchError("cannot read /proc/self/task");
  double total = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(base + "/comm");
    std::string name;
    std::getline(comm, name);
    bool match = false;
    for (const auto& p : prefixes) match = match || name.rfind(p, 0) == 0;
    if (!match) continue;
    std::ifstream stat(base + "/schedstat");
    double ns = 0;
    if (stat >> ns) total += ns / 1e9;
  }
  closedir(d);
  return total;
}

// ---- a world per completion mode ----

struct ModeWorld {
  mw::detail::NcclCompletion mode;
  std::string name;
};

mw::WorldOptions ncclOptions(const std::string& name, int device) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = 0;
  o.size = 1;
  o.backend = mw::BackendKind::kNccl;
  o.device = mw::Device::cuda(device);
  return o;
}

}  // namespace

int runNccl(int argc, char** argv, int first) {
  Flags f(argc, argv, first,
          {"--device", "--parts", "--sizes", "--calls", "--reps", "--bytes-per-rep", "--lag-sizes",
           "--samples", "--busy-seconds", "--json"},
          {});
  const int device = static_cast<int>(f.integer("--device", 0, 0, 1023));
  const std::string parts =
      "," + f.str("--parts", "costs,calls,bandwidth,completion,mechanisms,isolation") + ",";
  {
    std::string rest = parts;
    for (const char* known :
         {"costs", "calls", "bandwidth", "completion", "mechanisms", "isolation"}) {
      const std::string k = std::string(",") + known + ",";
      for (size_t at; (at = rest.find(k)) != std::string::npos;) rest.erase(at, k.size() - 1);
    }
    if (rest.find_first_not_of(',') != std::string::npos) {
      throw UsageError("--parts: unknown part in '" + f.str("--parts", "") +
                       "' (costs, calls, bandwidth, completion, mechanisms, isolation)");
    }
  }
  const auto want = [&](const char* p) {
    return parts.find(std::string(",") + p + ",") != std::string::npos;
  };
  const std::vector<size_t> sizes = parseSizes(f.str("--sizes", "1M,16M,64M"));
  const long calls = f.integer("--calls", 2000, 1, 100000000);
  const int reps = static_cast<int>(f.integer("--reps", 5, 1, 10000));
  const size_t per_rep = parseSize(f.str("--bytes-per-rep", "1G"));
  const std::vector<size_t> lag_sizes = parseSizes(f.str("--lag-sizes", "1M,64M,1G"));
  const int samples = static_cast<int>(f.integer("--samples", 50, 2, 100000));
  const double busy_s = f.number("--busy-seconds", 1.0, 0.05, 600);

  auto loaded = mw::detail::loadNcclApi();
  if (!loaded.ok()) throw BenchError("no NCCL to run: " + loaded.status().message());
  const Api& a = **loaded;
  int gpus = 0;
  if (cudaError_t e = a.cudaGetDeviceCount(&gpus); e != cudaSuccess || gpus <= device) {
    throw BenchError("no CUDA GPU " + std::to_string(device) + " on this machine (" +
                     (e != cudaSuccess ? std::string(a.cudaGetErrorName(e))
                                       : std::to_string(gpus) + " device(s)") +
                     "): mw_bench nccl needs one");
  }
  size_t largest = 16;
  for (size_t s : sizes) largest = std::max(largest, s);
  size_t lag_largest = 16;
  if (want("completion") || want("mechanisms")) {
    for (size_t s : lag_sizes) lag_largest = std::max(lag_largest, s);
  }
  void* raw_buf = nullptr;
  void* mw_buf = nullptr;
  void* lag_in = nullptr;
  void* lag_out = nullptr;
  cudaOk(a, a.cudaSetDevice(device), "cudaSetDevice");
  cudaOk(a, a.cudaMalloc(&raw_buf, largest), "cudaMalloc");
  cudaOk(a, a.cudaMalloc(&mw_buf, largest), "cudaMalloc");
  cudaOk(a, a.cudaMalloc(&lag_in, lag_largest), "cudaMalloc");
  cudaOk(a, a.cudaMalloc(&lag_out, lag_largest), "cudaMalloc");
  cudaOk(a, a.cudaMemset(raw_buf, 0, largest), "cudaMemset");
  cudaOk(a, a.cudaMemset(mw_buf, 0, largest), "cudaMemset");
  cudaOk(a, a.cudaMemset(lag_in, 1, lag_largest), "cudaMemset");
  Raw raw(a, device);
  cudaStream_t mine = nullptr;  // the runtime side's current stream (as torch's would be)
  cudaOk(a, a.cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), "cudaStreamCreate");
  mw::WorldManager manager;
  const auto defaultMode = mw::detail::ncclCompletionMode();
  expectOk(manager.initWorld(ncclOptions(kWorld, device), mw::deadlineIn(std::chrono::seconds(60))),
           "joining the nccl world");
  mw::Communicator comm(manager);
  const auto tensor = [&](size_t bytes) {
    return mw::Tensor{mw_buf, mw::DType::kFloat32, bytes / 4, mw::Device::cuda(device)};
  };
  mw::CudaStreamScope on_mine(mine);
  for (int k = 0; k < kKinds; ++k) {  // warm-up: NCCL connects and sets up on first use
    timeRaw(raw, static_cast<Kind>(k), raw_buf, 4, 20, true);
    timeRuntime(comm, static_cast<Kind>(k), tensor(16), 20, true);
  }

  Json doc = Json::object();
  doc.set("benchmark", "nccl").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("device", device).set("calls", calls).set("reps", reps).set("samples", samples);
  cfg.set("nccl_file", a.nccl_file).set("nccl_version", a.nccl_version);
  cfg.set("completion_default", mw::detail::ncclCompletionName(defaultMode));
  doc.set("config", cfg);
  std::printf("\nNCCL %d (%s), device %d: runtime one-rank world vs raw one-rank communicator\n",
              a.nccl_version, a.nccl_file.c_str(), device);

  if (want("costs")) {
    // What each call of the launch path costs alone on this machine (ns per call, the median of
    // --reps blocks of --calls calls): the floor of what the runtime adds around NCCL.
    std::printf(
        "\ncosts: each CUDA/NCCL call of the launch path alone, ns per call, median "
        "[min..max]\n");
    cudaEvent_t ev = nullptr;
    cudaOk(a, a.cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    cudaEvent_t evb = nullptr;
    cudaOk(a, a.cudaEventCreateWithFlags(&evb, cudaEventDisableTiming | cudaEventBlockingSync),
           "cudaEventCreate");
    Json costs = Json::object();
    mw::Work last;
    const long per_block = std::min<long>(calls, 512);  // under the world's 1024 in flight
    const auto each = [&](const char* name, const auto& call) {
      std::vector<double> ns;
      for (int b = 0; b < reps; ++b) {
        const auto t0 = Clock::now();
        for (long i = 0; i < per_block; ++i) call();
        ns.push_back(1e3 * us(Clock::now() - t0) / static_cast<double>(per_block));
        raw.wait();
        if (last.valid()) expectOk(last.synchronize(), "all_reduce");
      }
      const Summary m = summarize(ns);
      std::printf("  %-44s %8.1f [%.1f..%.1f]\n", name, m.median, m.min, m.max);
      costs.set(name, sampleJson(ns));
    };
    int dev = 0;
    cudaStreamCaptureStatus cap;
    each("cudaGetDevice", [&] { a.cudaGetDevice(&dev); });
    each("cudaStreamIsCapturing", [&] { a.cudaStreamIsCapturing(mine, &cap); });
    each("cudaEventRecord (caller's stream)", [&] { a.cudaEventRecord(ev, mine); });
    each("cudaEventRecord (blocking-sync event)", [&] { a.cudaEventRecord(evb, raw.stream); });
    each("cudaStreamWaitEvent", [&] { a.cudaStreamWaitEvent(raw.stream, ev, 0); });
    each("ncclAllReduce (4 floats)", [&] { raw.issue(kAllReduce, raw_buf, 4); });
    each("cudaEventQuery (done)", [&] { a.cudaEventQuery(ev); });
    ncclResult_t async_err;
    each("ncclCommGetAsyncError", [&] { a.ncclCommGetAsyncError(raw.comm, &async_err); });
    const mw::detail::FailPoint point("mw/nccl/all_reduce", kWorld);
    each("a failpoint check (libfiu, none enabled)", [&] { (void)point.check(); });
    each("runtime submit, no wait (allReduce)", [&] { last = comm.allReduce(kWorld, tensor(16)); });
    HostFlag flag(a);
    if (flag.ok()) {
      each("cuStreamWriteValue32 (a host flag)", [&] { flag.mark(raw.stream); });
      std::atomic<bool> stop_read{false};
      std::thread reader([&] {
        while (!stop_read.load()) (void)flag.reached(flag.seq);
      });
      each("ncclAllReduce, a thread reading host memory",
           [&] { raw.issue(kAllReduce, raw_buf, 4); });
      stop_read = true;
      reader.join();
    } else {
      std::printf("  (a host flag: not available here: %s)\n", flag.why.c_str());
    }
    // The same with a thread polling an event beside it, as a spinning completer does.
    std::atomic<bool> stop_poll{false};
    std::thread poller([&] {
      while (!stop_poll.load()) a.cudaEventQuery(ev);
    });
    each("ncclAllReduce, a thread polling an event", [&] { raw.issue(kAllReduce, raw_buf, 4); });
    each("cudaEventRecord, a thread polling an event", [&] { a.cudaEventRecord(ev, mine); });
    stop_poll = true;
    poller.join();
    expectOk(comm.allReduce(kWorld, tensor(16)).synchronize(), "all_reduce");
    a.cudaEventDestroy(ev);
    a.cudaEventDestroy(evb);
    doc.set("costs", costs);
  }

  if (want("calls")) {
    std::printf(
        "\nper operation, all_reduce of 4 floats, %ld calls x %d blocks (us): median "
        "[min..max]\n",
        calls, reps);
    std::printf("  %-26s %-24s %-24s %s\n", "", "raw NCCL", "runtime", "runtime - raw");
    std::vector<double> raw_launch, raw_ordered, mw_launch, mw_submit, raw_wait, mw_wait, raw_b2b,
        mw_b2b;
    const auto before = mw::detail::ncclLaunchCounts();
    long runtime_ops = 0;
    for (int b = 0; b < reps; ++b) {
      for (int side = 0; side < 2; ++side) {
        if ((side == 0) == (b % 2 == 0)) {
          raw_launch.push_back(launchUs(
              calls, [&] { raw.issue(kAllReduce, raw_buf, 4); }, [&] { raw.wait(); }));
          raw_ordered.push_back(launchUs(
              calls, [&] { raw.issueOrdered(raw_buf, 4, mine); }, [&] { raw.wait(); }));
          raw_wait.push_back(1e6 * timeRaw(raw, kAllReduce, raw_buf, 4, calls, true) /
                             static_cast<double>(calls));
          raw_b2b.push_back(1e6 * timeRaw(raw, kAllReduce, raw_buf, 4, calls, false) /
                            static_cast<double>(calls));
        } else {
          std::vector<mw::Work> block;
          block.reserve(64);
          mw_launch.push_back(launchUs(
              calls,
              [&] {
                block.push_back(comm.allReduce(kWorld, tensor(16)));
                expectOk(block.back().wait(), "all_reduce");
              },
              [&] {
                expectOk(block.back().synchronize(), "all_reduce");
                block.clear();
              }));
          mw_submit.push_back(launchUs(
              calls, [&] { block.push_back(comm.allReduce(kWorld, tensor(16))); },
              [&] {
                expectOk(block.back().synchronize(), "all_reduce");
                block.clear();
              }));
          mw_wait.push_back(1e6 * timeRuntime(comm, kAllReduce, tensor(16), calls, true) /
                            static_cast<double>(calls));
          mw_b2b.push_back(1e6 * timeRuntime(comm, kAllReduce, tensor(16), calls, false) /
                           static_cast<double>(calls));
          runtime_ops += 4 * calls;
        }
      }
    }
    const auto after = mw::detail::ncclLaunchCounts();
    const Summary rl = summarize(raw_launch), ro = summarize(raw_ordered),
                  ml = summarize(mw_launch);
    const Summary ms = summarize(mw_submit);
    const Summary rw = summarize(raw_wait), mwt = summarize(mw_wait);
    const Summary rb = summarize(raw_b2b), mb = summarize(mw_b2b);
    printRow("launch (vs the NCCL call)", rl, ml, "us");
    printRow("launch (vs c10d's ordering)", ro, ml, "us");
    printRow("submit only (vs NCCL call)", rl, ms, "us");
    printRow("waited (synchronize)", rw, mwt, "us");
    printRow("back to back, per op", rb, mb, "us");
    const long by_caller = after.caller - before.caller, by_exec = after.executor - before.executor;
    std::printf("  launches: %ld by the submitting thread, %ld by the executor (of %ld)\n",
                by_caller, by_exec, runtime_ops);
    const bool launch_ok = ml.median <= rl.median + 1.5;
    const bool wait_ok = mwt.median <= rw.median + 5.0;
    const bool b2b_ok = mb.median <= 1.5;
    std::printf(
        "  targets: launch <= raw + 1.5 us %s (%+.2f); waited <= raw + 5 us %s (%+.2f); "
        "back to back <= 1.5 us %s (%.2f)\n",
        verdict(launch_ok), ml.median - rl.median, verdict(wait_ok), mwt.median - rw.median,
        verdict(b2b_ok), mb.median);
    Json x = Json::object();
    x.set("raw_launch_us", summaryJson(raw_launch))
        .set("raw_ordered_launch_us", summaryJson(raw_ordered));
    x.set("runtime_launch_us", summaryJson(mw_launch))
        .set("runtime_submit_us", summaryJson(mw_submit));
    x.set("raw_waited_us", summaryJson(raw_wait)).set("runtime_waited_us", summaryJson(mw_wait));
    x.set("raw_back_to_back_us", summaryJson(raw_b2b))
        .set("runtime_back_to_back_us", summaryJson(mw_b2b));
    x.set("launches_by_caller", by_caller).set("launches_by_executor", by_exec);
    x.set("launch_ok", launch_ok).set("waited_ok", wait_ok).set("back_to_back_ok", b2b_ok);
    doc.set("calls", x);
  }

  if (want("bandwidth")) {
    std::printf(
        "\nbandwidth, operations back to back (GB/s of the message size; runtime/raw per rep)\n");
    std::printf("  %-12s %8s  %-22s %-22s %s\n", "call", "size", "raw median [min..max]",
                "runtime median [min..max]", "runtime/raw median [min..max]");
    Json bw = Json::array();
    for (size_t size : sizes) {
      const long n = std::max<long>(3, static_cast<long>(per_rep / size));
      for (int k = 0; k < kKinds; ++k) {
        std::vector<double> raw_gbps, mw_gbps, ratio;
        for (int rep = 0; rep < reps; ++rep) {
          double r = 0, m = 0;
          for (int side = 0; side < 2; ++side) {
            if ((side == 0) == (rep % 2 == 0)) {
              r = static_cast<double>(size) * static_cast<double>(n) /
                  timeRaw(raw, static_cast<Kind>(k), raw_buf, size / 4, n, false) / 1e9;
            } else {
              m = static_cast<double>(size) * static_cast<double>(n) /
                  timeRuntime(comm, static_cast<Kind>(k), tensor(size), n, false) / 1e9;
            }
          }
          raw_gbps.push_back(r);
          mw_gbps.push_back(m);
          ratio.push_back(m / r);
        }
        const Summary r = summarize(raw_gbps), m = summarize(mw_gbps), q = summarize(ratio);
        std::printf("  %-12s %8s  %7.1f [%.1f..%.1f]%4s %7.1f [%.1f..%.1f]%4s %.3f [%.3f..%.3f]\n",
                    kKindKey[k], sizeName(size).c_str(), r.median, r.min, r.max, "", m.median,
                    m.min, m.max, "", q.median, q.min, q.max);
        Json x = Json::object();
        x.set("kind", kKindKey[k]).set("size", static_cast<long>(size)).set("ops_per_rep", n);
        x.set("raw_gbps", sampleJson(raw_gbps)).set("runtime_gbps", sampleJson(mw_gbps));
        x.set("runtime_over_raw", sampleJson(ratio));
        bw.push(x);
      }
    }
    doc.set("bandwidth", bw);
  }

  if (want("completion")) {
    std::printf(
        "\ncompletion: lag from the GPU finishing an all_gather to its Work completing "
        "(us, median [p10..p90]), and the world's threads' CPU while busy (share of a "
        "core)\n");
    std::printf("  %-9s %8s %10s %-28s %s\n", "mode", "size", "op, us", "lag, us", "cpu busy");
    Json modes = Json::array();
    cudaEvent_t seen = nullptr;
    cudaOk(a, a.cudaEventCreateWithFlags(&seen, cudaEventDisableTiming), "cudaEventCreate");
    using mw::detail::NcclCompletion;
    for (NcclCompletion mode : {NcclCompletion::kHybrid, NcclCompletion::kPredict,
                                NcclCompletion::kBlocking, NcclCompletion::kSpin}) {
      const std::string name = std::string("lag-") + mw::detail::ncclCompletionName(mode);
      mw::detail::setNcclCompletionMode(mode);
      expectOk(
          manager.initWorld(ncclOptions(name, device), mw::deadlineIn(std::chrono::seconds(60))),
          "joining " + name);
      mw::detail::setNcclCompletionMode(defaultMode);
      for (size_t size : lag_sizes) {
        const mw::Tensor in{lag_in, mw::DType::kUInt8, size, mw::Device::cuda(device)};
        const mw::Tensor out{lag_out, mw::DType::kUInt8, size, mw::Device::cuda(device)};
        expectOk(comm.allGather(name, in, out).synchronize(), "warm-up");
        std::vector<double> lag, op;
        for (int i = 0; i < samples; ++i) {
          const auto t0 = Clock::now();
          mw::Work w = comm.allGather(name, in, out);
          expectOk(w.wait(), "all_gather");  // `mine` waits for it
          cudaOk(a, a.cudaEventRecord(seen, mine), "cudaEventRecord");
          cudaError_t e;
          while ((e = a.cudaEventQuery(seen)) == cudaErrorNotReady) {
          }
          cudaOk(a, e, "cudaEventQuery");
          const auto t_gpu = Clock::now();
          while (!w.test()) {
          }
          const auto t_done = Clock::now();
          expectOk(w.status(), "all_gather");
          op.push_back(us(t_gpu - t0));
          lag.push_back(std::max(0.0, us(t_done - t_gpu)));
        }
        // Busy: operations back to back, at most 4 in flight, for busy_s seconds.
        const std::vector<std::string> threads = {"mw-nccl:" + name.substr(0, 7),
                                                  "mw-ncclc:" + name.substr(0, 6)};
        std::vector<mw::Work> ring;
        const double cpu0 = threadsCpuSeconds(threads);
        const auto b0 = Clock::now();
        long ops = 0;
        while (seconds(Clock::now() - b0) < busy_s) {
          if (ring.size() >= 4) {
            expectOk(ring.front().synchronize(), "all_gather");
            ring.erase(ring.begin());
          }
          ring.push_back(comm.allGather(name, in, out));
          ++ops;
        }
        for (auto& w : ring) expectOk(w.synchronize(), "all_gather");
        const double wall = seconds(Clock::now() - b0);
        const double cpu = (threadsCpuSeconds(threads) - cpu0) / wall;
        const Summary l = summarize(lag), o = summarize(op);
        std::printf("  %-9s %8s %10.1f %7.2f [%.2f..%.2f]%10s %.3f (%ld ops)\n",
                    mw::detail::ncclCompletionName(mode), sizeName(size).c_str(), o.median,
                    l.median, l.p10, l.p90, "", cpu, ops);
        Json x = Json::object();
        x.set("mode", mw::detail::ncclCompletionName(mode)).set("size", static_cast<long>(size));
        x.set("op_us", sampleJson(op)).set("lag_us", sampleJson(lag));
        x.set("busy_cpu_share", cpu).set("busy_ops", ops).set("busy_seconds", wall);
        modes.push(x);
      }
      expectOk(manager.removeWorld(name), "removing " + name);
    }
    a.cudaEventDestroy(seen);
    doc.set("completion", modes);
  }

  if (want("mechanisms")) {
    std::printf(
        "\nmechanisms on raw CUDA: latency from a D2D copy's submission to the host "
        "learning it finished (us, median [p10..p90])\n");
    std::printf("  %8s %-24s %-24s %-24s %-24s\n", "size", "polled event", "blocking-sync event",
                "host function", "host flag (stream write)");
    HostFlag flag(a);
    cudaEvent_t polled = nullptr, blocking = nullptr;
    cudaOk(a, a.cudaEventCreateWithFlags(&polled, cudaEventDisableTiming), "cudaEventCreate");
    cudaOk(a, a.cudaEventCreateWithFlags(&blocking, cudaEventDisableTiming | cudaEventBlockingSync),
           "cudaEventCreate");
    struct Callback {
      std::atomic<long> at{0};
    } cb;
    auto host_fn = [](void* p) {
      static_cast<Callback*>(p)->at.store(Clock::now().time_since_epoch().count());
    };
    Json mech = Json::array();
    for (size_t size : lag_sizes) {
      std::vector<double> poll_us, block_us, fn_us, flag_us;
      const int kinds = flag.ok() ? 4 : 3;
      for (int i = 0; i < samples; ++i) {
        for (int m = 0; m < kinds; ++m) {
          const int which = (m + i) % kinds;
          cb.at.store(0);
          const auto t0 = Clock::now();
          cudaOk(a, a.cudaMemcpyAsync(lag_out, lag_in, size, cudaMemcpyDeviceToDevice, raw.stream),
                 "cudaMemcpyAsync");
          if (which == 0) {
            cudaOk(a, a.cudaEventRecord(polled, raw.stream), "cudaEventRecord");
            cudaError_t e;
            while ((e = a.cudaEventQuery(polled)) == cudaErrorNotReady) {
            }
            cudaOk(a, e, "cudaEventQuery");
            poll_us.push_back(us(Clock::now() - t0));
          } else if (which == 1) {
            cudaOk(a, a.cudaEventRecord(blocking, raw.stream), "cudaEventRecord");
            cudaOk(a, a.cudaEventSynchronize(blocking), "cudaEventSynchronize");
            block_us.push_back(us(Clock::now() - t0));
          } else if (which == 3) {
            const unsigned v = flag.mark(raw.stream);
            if (v == 0) throw BenchError("cuStreamWriteValue32 failed");
            while (!flag.reached(v)) {
            }
            flag_us.push_back(us(Clock::now() - t0));
          } else {
            cudaOk(a, a.cudaLaunchHostFunc(raw.stream, host_fn, &cb), "cudaLaunchHostFunc");
            while (cb.at.load() == 0) {
            }
            fn_us.push_back(us(Clock::duration(cb.at.load()) - t0.time_since_epoch()));
          }
        }
      }
      const Summary p = summarize(poll_us), b = summarize(block_us), h = summarize(fn_us);
      std::printf("  %8s %7.2f [%.2f..%.2f]%5s %7.2f [%.2f..%.2f]%5s %7.2f [%.2f..%.2f]\n",
                  sizeName(size).c_str(), p.median, p.p10, p.p90, "", b.median, b.p10, b.p90, "",
                  h.median, h.p10, h.p90);
      std::printf("  %8s lag: blocking-sync %+.2f us, host function %+.2f us", "",
                  b.median - p.median, h.median - p.median);
      Json x = Json::object();
      x.set("size", static_cast<long>(size)).set("polled_us", sampleJson(poll_us));
      x.set("blocking_us", sampleJson(block_us)).set("host_function_us", sampleJson(fn_us));
      if (!flag_us.empty()) {
        const Summary q = summarize(flag_us);
        std::printf(", host flag %7.2f [%.2f..%.2f] (%+.2f us)", q.median, q.p10, q.p90,
                    q.median - p.median);
        x.set("host_flag_us", sampleJson(flag_us));
      }
      std::printf("\n");
      mech.push(x);
    }
    a.cudaEventDestroy(polled);
    a.cudaEventDestroy(blocking);
    doc.set("mechanisms", mech);
  }

  if (want("isolation")) {
    if (!mw::failpoints::compiledIn()) {
      std::printf("\nisolation: skipped (this build has no failpoints: -DMW_FAILPOINTS=ON)\n");
    } else {
      std::printf(
          "\nisolation: two worlds, 1 MiB all_reduce each in a thread of its own; an "
          "asynchronous ncclRemoteError injected into 'victim'\n");
      void* bufs[2] = {nullptr, nullptr};
      for (auto& b : bufs) cudaOk(a, a.cudaMalloc(&b, 1 << 20), "cudaMalloc");
      const char* names[2] = {"victim", "survivor"};
      for (const char* n : names) {
        expectOk(
            manager.initWorld(ncclOptions(n, device), mw::deadlineIn(std::chrono::seconds(60))),
            std::string("joining ") + n);
      }
      constexpr auto kWindow = std::chrono::milliseconds(50);
      constexpr int kWindows = 60;  // 3 s: the fault at 1.5 s
      std::vector<std::atomic<long>> counts(2 * kWindows);
      std::atomic<bool> stop{false};
      const auto start = Clock::now();
      std::vector<std::thread> loops;
      for (int w = 0; w < 2; ++w) {
        loops.emplace_back([&, w] {
          cudaStream_t s = nullptr;
          a.cudaSetDevice(device);
          a.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
          mw::CudaStreamScope scope(s);
          const mw::Tensor t{bufs[w], mw::DType::kFloat32, (1 << 20) / 4, mw::Device::cuda(device)};
          while (!stop.load()) {
            if (!comm.allReduce(names[w], t).synchronize().ok()) break;
            const long idx = static_cast<long>((Clock::now() - start) / kWindow);
            if (idx < kWindows) counts[static_cast<size_t>(w * kWindows + idx)].fetch_add(1);
          }
          a.cudaStreamDestroy(s);
        });
      }
      std::this_thread::sleep_until(start + kWindow * (kWindows / 2));
      mw::failpoints::Mode mode;
      mode.failnum = 6;   // ncclRemoteError
      mode.failinfo = 1;  // asynchronous
      mode.once = true;
      const auto fault_at = Clock::now();
      expectOk(mw::failpoints::enable("mw/nccl/all_reduce/victim", mode), "failpoint");
      mw::Clock::time_point broken_at{};
      for (auto until = fault_at + std::chrono::seconds(5); Clock::now() < until;) {
        auto info = manager.world("victim");
        if (info.ok() && info->state == mw::WorldState::kBroken) {
          broken_at = info->broken ? info->broken->detected_at : Clock::now();
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      std::this_thread::sleep_until(start + kWindow * kWindows);
      stop = true;
      for (auto& t : loops) t.join();
      std::vector<double> before, after;
      for (int i = 2; i < kWindows / 2; ++i) before.push_back(counts[kWindows + i].load());
      for (int i = kWindows / 2 + 1; i < kWindows - 1; ++i)
        after.push_back(counts[kWindows + i].load());
      const Summary b = summarize(before), af = summarize(after);
      const double ratio = b.median > 0 ? af.median / b.median : 0;
      const double worst = b.median > 0 ? af.min / b.median : 0;
      const double detect_ms =
          broken_at == mw::Clock::time_point{} ? -1 : millis(broken_at - fault_at);
      std::printf("  survivor ops per 50 ms: before %.0f [%.0f..%.0f], after %.0f [%.0f..%.0f]\n",
                  b.median, b.min, b.max, af.median, af.min, af.max);
      std::printf(
          "  survivor rate after/before: median %.3f, worst window %.3f; victim broken "
          "%.2f ms after the injection; target >= 0.95 %s\n",
          ratio, worst, detect_ms, verdict(ratio >= 0.95));
      Json x = Json::object();
      x.set("before_ops_per_window", sampleJson(before))
          .set("after_ops_per_window", sampleJson(after));
      x.set("window_ms", 50).set("ratio", ratio).set("worst_window_ratio", worst);
      x.set("victim_detect_ms", detect_ms).set("ok", ratio >= 0.95);
      doc.set("isolation", x);
      for (const char* n : names) expectOk(manager.removeWorld(n), std::string("removing ") + n);
      for (auto& b : bufs) a.cudaFree(b);
    }
  }

  expectOk(manager.removeWorld(kWorld), "removing the nccl world");
  a.cudaStreamDestroy(mine);
  a.cudaFree(raw_buf);
  a.cudaFree(mw_buf);
  a.cudaFree(lag_in);
  a.cudaFree(lag_out);
  writeJson(f.str("--json", ""), doc);
  return 0;
}

}  // namespace mwb
