// mw_bench nccl: the runtime's NCCL worlds against raw NCCL on one GPU, in one process.
//
// NCCL refuses two ranks of one communicator on one GPU, so on a one-GPU machine both sides are
// one-rank communicators: what is compared is the runtime's own path around NCCL (argument checks,
// the Work, the stream ordering, completion by event polling) against the same NCCL calls made
// directly, and the bandwidth each delivers. Raw NCCL goes through the runtime's loader
// (nccl_loader.h), so both sides use the very same NCCL and CUDA runtime files.
#include <cstdio>
#include <string>
#include <vector>

#include "agent.h"
#include "bench_util.h"
#include "multiworld/multiworld.h"
#include "nccl/nccl_loader.h"
#include "subcommands.h"

namespace mwb {

const char* const kNcclHelp =
    "mw_bench nccl [--device N] [--sizes LIST] [--calls N] [--reps N] [--bytes-per-rep SIZE]\n"
    "              [--json PATH]\n"
    "\n"
    "One process, one GPU: a one-rank nccl world of the runtime against a one-rank raw NCCL\n"
    "communicator (the same NCCL and CUDA runtime files, through the runtime's loader).\n"
    "  overhead   per-call time of all_reduce and broadcast of 4 floats, each call waited for\n"
    "             (raw: the NCCL call, an event recorded, polled until done); runtime - raw\n"
    "  bandwidth  per size, all_reduce and broadcast issued back to back and waited for at the\n"
    "             end; bytes / time, and runtime/raw per rep (variants alternate rep by rep)\n"
    "Information, no targets: one GPU cannot show isolation between processes (see\n"
    "docs/design.md). Without a CUDA GPU it exits 3 and says why.\n"
    "\n"
    "  --device N          the CUDA device (default 0)\n"
    "  --sizes LIST        message sizes (default 1M,16M,64M)\n"
    "  --calls N           calls per overhead block (default 2000)\n"
    "  --reps N            blocks / reps per variant (default 5)\n"
    "  --bytes-per-rep S   data moved per bandwidth rep (default 1G)\n"
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

enum Kind { kAllReduce, kBroadcast, kKinds };
const char* const kKindKey[] = {"all_reduce", "broadcast"};
constexpr char kWorld[] = "nccl-bench";

// A one-rank raw NCCL communicator with its stream and an event to wait on.
struct Raw {
  const Api& a;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;

  Raw(const Api& api, int device) : a(api) {
    cudaOk(a, a.cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    ncclOk(a, a.ncclGetUniqueId(&id), "ncclGetUniqueId");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;  // blocking: returns once the communicator is up
    ncclOk(a, a.ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), "ncclCommInitRankConfig");
    cudaOk(a, a.cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaOk(a, a.cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Raw() {
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
  // Waits for everything issued so far, polling an event as the runtime does.
  void wait() {
    cudaOk(a, a.cudaEventRecord(done, stream), "cudaEventRecord");
    cudaError_t e;
    while ((e = a.cudaEventQuery(done)) == cudaErrorNotReady) {
    }
    cudaOk(a, e, "cudaEventQuery");
  }
};

mw::Work issue(mw::Communicator& comm, Kind k, const mw::Tensor& t) {
  return k == kAllReduce ? comm.allReduce(kWorld, t) : comm.broadcast(kWorld, t, 0);
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

double timeRuntime(mw::Communicator& comm, Kind k, const mw::Tensor& t, long n, bool each) {
  std::vector<mw::Work> pending;
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    mw::Work w = issue(comm, k, t);
    if (each) {
      expectOk(w.wait(), kKindKey[k]);
    } else {
      pending.push_back(std::move(w));
    }
  }
  for (auto& w : pending) expectOk(w.wait(), kKindKey[k]);
  return seconds(Clock::now() - t0);
}

}  // namespace

int runNccl(int argc, char** argv, int first) {
  Flags f(argc, argv, first,
          {"--device", "--sizes", "--calls", "--reps", "--bytes-per-rep", "--json"}, {});
  const int device = static_cast<int>(f.integer("--device", 0, 0, 1023));
  const std::vector<size_t> sizes = parseSizes(f.str("--sizes", "1M,16M,64M"));
  const long calls = f.integer("--calls", 2000, 1, 100000000);
  const int reps = static_cast<int>(f.integer("--reps", 5, 1, 10000));
  const size_t per_rep = parseSize(f.str("--bytes-per-rep", "1G"));

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
  void* raw_buf = nullptr;
  void* mw_buf = nullptr;
  cudaOk(a, a.cudaSetDevice(device), "cudaSetDevice");
  cudaOk(a, a.cudaMalloc(&raw_buf, largest), "cudaMalloc");
  cudaOk(a, a.cudaMalloc(&mw_buf, largest), "cudaMalloc");
  cudaOk(a, a.cudaMemset(raw_buf, 0, largest), "cudaMemset");
  cudaOk(a, a.cudaMemset(mw_buf, 0, largest), "cudaMemset");
  Raw raw(a, device);
  mw::WorldManager manager;
  mw::WorldOptions o;
  o.name = kWorld;
  o.rank = 0;
  o.size = 1;
  o.backend = mw::BackendKind::kNccl;
  o.device = mw::Device::cuda(device);
  expectOk(manager.initWorld(o, mw::deadlineIn(std::chrono::seconds(60))),
           "joining the nccl world");
  mw::Communicator comm(manager);
  const auto tensor = [&](size_t bytes) {
    return mw::Tensor{mw_buf, mw::DType::kFloat32, bytes / 4, mw::Device::cuda(device)};
  };
  for (int k = 0; k < kKinds; ++k) {  // warm-up: NCCL connects and sets up on first use
    timeRaw(raw, static_cast<Kind>(k), raw_buf, 4, 20, true);
    timeRuntime(comm, static_cast<Kind>(k), tensor(16), 20, true);
  }

  Json doc = Json::object();
  doc.set("benchmark", "nccl").set("host", hostJson());
  Json cfg = Json::object();
  cfg.set("device", device).set("calls", calls).set("reps", reps);
  cfg.set("nccl_file", a.nccl_file).set("nccl_version", a.nccl_version);
  doc.set("config", cfg);

  std::printf("\nNCCL %d (%s), device %d: runtime one-rank world vs raw one-rank communicator\n",
              a.nccl_version, a.nccl_file.c_str(), device);
  std::printf("per-call time, 4 floats, each call waited for, %ld calls x %d blocks (us)\n", calls,
              reps);
  std::printf("  %-12s %-24s %-24s %s\n", "call", "raw median [min..max]",
              "runtime median [min..max]", "runtime - raw");
  Json overhead = Json::object();
  for (int k = 0; k < kKinds; ++k) {
    std::vector<double> raw_us, mw_us;
    for (int b = 0; b < reps; ++b) {
      const bool raw_first = b % 2 == 0;
      for (int side = 0; side < 2; ++side) {
        if ((side == 0) == raw_first) {
          raw_us.push_back(1e6 * timeRaw(raw, static_cast<Kind>(k), raw_buf, 4, calls, true) /
                           static_cast<double>(calls));
        } else {
          mw_us.push_back(1e6 * timeRuntime(comm, static_cast<Kind>(k), tensor(16), calls, true) /
                          static_cast<double>(calls));
        }
      }
    }
    const Summary r = summarize(raw_us), m = summarize(mw_us);
    std::printf("  %-12s %7.2f [%.2f..%.2f]%5s %7.2f [%.2f..%.2f]%5s %+.2f\n", kKindKey[k],
                r.median, r.min, r.max, "", m.median, m.min, m.max, "", m.median - r.median);
    Json x = Json::object();
    x.set("raw_us_per_call", sampleJson(raw_us)).set("runtime_us_per_call", sampleJson(mw_us));
    x.set("runtime_minus_raw_us", m.median - r.median);
    overhead.set(kKindKey[k], x);
  }
  doc.set("overhead", overhead);

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
                  kKindKey[k], sizeName(size).c_str(), r.median, r.min, r.max, "", m.median, m.min,
                  m.max, "", q.median, q.min, q.max);
      Json x = Json::object();
      x.set("kind", kKindKey[k]).set("size", static_cast<long>(size)).set("ops_per_rep", n);
      x.set("raw_gbps", sampleJson(raw_gbps)).set("runtime_gbps", sampleJson(mw_gbps));
      x.set("runtime_over_raw", sampleJson(ratio));
      bw.push(x);
    }
  }
  doc.set("bandwidth", bw);
  expectOk(manager.removeWorld(kWorld), "removing the nccl world");
  a.cudaFree(raw_buf);
  a.cudaFree(mw_buf);
  writeJson(f.str("--json", ""), doc);
  return 0;
}

}  // namespace mwb
