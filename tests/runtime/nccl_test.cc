// NCCL worlds. The first cases run everywhere (a GPU world where none can run fails clearly);
// the [gpu] cases need a GPU and exit with code 77 (ctest: skipped) saying why when there is none.
// The same cases run twice: nccl_test on the machine's CUDA and NCCL, and nccl_sim_test on the
// simulated GPU of sim_cuda.cc (two devices, one-rank NCCL), which every machine has.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/util.h"

using namespace std::chrono_literals;
using mw::test::scaled;

namespace {

#ifdef MW_SIM_DEVICE
// nccl_sim_test: the runtime opens the simulated GPU this binary links (sim_cuda.cc), with two
// devices, before main and so before any world loads NCCL.
const bool kSimulated = [] {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) == 0 || !info.dli_fname) {
    std::fprintf(stderr, "nccl_sim_test: cannot find its simulated GPU library\n");
    std::abort();
  }
  setenv("MW_CUDART_LIBRARY", info.dli_fname, 1);
  setenv("MW_NCCL_LIBRARY", info.dli_fname, 1);
  setenv("MW_SIM_DEVICES", "2", 1);
  return true;
}();
#endif

// Exits the test process with ctest's skip code when this machine has no GPU, saying why.
void requireGpu() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::fprintf(stderr, "SKIPPED: no GPU on this machine (cudaGetDeviceCount: %s, %d devices)\n",
                 cudaGetErrorString(e), count);
    std::fflush(stderr);
    std::_Exit(77);
  }
}

mw::WorldOptions ncclWorld(const std::string& name, int device = 0) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = 0;
  o.size = 1;
  o.backend = mw::BackendKind::kNccl;
  o.device = mw::Device::cuda(device);
  return o;
}

// A device buffer of n elements of T, freed at scope exit.
template <typename T>
struct DeviceBuf {
  T* p = nullptr;
  size_t n;
  explicit DeviceBuf(size_t count) : n(count) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * (n ? n : 1)) == cudaSuccess);
  }
  ~DeviceBuf() { cudaFree(p); }
  void put(const std::vector<T>& v) {
    REQUIRE(cudaMemcpy(p, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<T> get() const {
    std::vector<T> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
  mw::Tensor tensor(int device = 0) const {
    return mw::Tensor{p, mw::DType::kFloat32, n, mw::Device::cuda(device)};
  }
};

}  // namespace

TEST_CASE("an nccl world that cannot run here fails at creation, saying why", "[nccl]") {
  mw::WorldManager m;
  int count = 0;
  bool gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  // A device this process does not have: always unavailable; without a GPU, so is cuda:0.
  for (int device : {999, 0}) {
    if (device == 0 && gpu) continue;
    auto o = ncclWorld("gpu_missing", device);
    mw::Status s = m.initWorld(o, mw::deadlineIn(scaled(5000)));
    INFO(s.toString());
    CHECK(s.code() == mw::Code::kUnavailable);
    CHECK(s.message().find("world 'gpu_missing'") != std::string::npos);
    CHECK(s.message().find("cuda:" + std::to_string(device)) != std::string::npos);
    if (!gpu) {
      CHECK(s.message().find("cudaGetDeviceCount") != std::string::npos);
    } else {
      CHECK(s.message().find("does not exist") != std::string::npos);
    }
    CHECK(m.world("gpu_missing").status().code() == mw::Code::kNotFound);  // nothing left behind
  }
}

TEST_CASE("backend and device must agree", "[nccl]") {
  mw::WorldManager m;
  auto o = ncclWorld("mismatch");
  o.device = mw::Device::cpu();
  mw::Status s = m.initWorld(o, mw::deadlineIn(1s));
  CHECK(s.code() == mw::Code::kInvalidArgument);
  CHECK(s.message().find("nccl backend needs a cuda:N device") != std::string::npos);
  o.backend = mw::BackendKind::kGloo;
  o.device = mw::Device::cuda(0);
  s = m.initWorld(o, mw::deadlineIn(1s));
  CHECK(s.code() == mw::Code::kInvalidArgument);
  CHECK(s.message().find("gloo backend moves CPU tensors only") != std::string::npos);
  CHECK(mw::parseBackend("nccl").value() == mw::BackendKind::kNccl);
  CHECK(mw::parseBackend("mpi").status().message().find("unknown backend 'mpi'") !=
        std::string::npos);
}

TEST_CASE("every operation runs in a one-rank nccl world", "[nccl][gpu]") {
  requireGpu();
  mw::WorldManager m;
  mw::Communicator c(m);
  REQUIRE(m.initWorld(ncclWorld("g1"), mw::deadlineIn(30s)).ok());
  const size_t n = 1 << 20;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  DeviceBuf<float> a(n), b(n);
  auto ok = [](mw::Work w) { return w.wait(mw::deadlineIn(30s)); };
  a.put(host);
  REQUIRE(ok(c.allReduce("g1", a.tensor())).ok());
  CHECK(a.get() == host);  // one member: the sum is the input
  REQUIRE(ok(c.broadcast("g1", a.tensor(), 0)).ok());
  REQUIRE(ok(c.reduce("g1", a.tensor(), 0, mw::ReduceOp::kMax)).ok());
  CHECK(a.get() == host);
  REQUIRE(ok(c.allGather("g1", a.tensor(), b.tensor())).ok());
  CHECK(b.get() == host);
  REQUIRE(ok(c.gather("g1", a.tensor(), b.tensor(), 0)).ok());
  REQUIRE(ok(c.scatter("g1", a.tensor(), b.tensor(), 0)).ok());
  REQUIRE(ok(c.reduceScatter("g1", a.tensor(), b.tensor())).ok());
  REQUIRE(ok(c.allToAll("g1", a.tensor(), b.tensor())).ok());
  CHECK(b.get() == host);
  REQUIRE(ok(c.barrier("g1")).ok());
  // A CPU tensor is refused, naming the device.
  std::vector<float> cpu(4);
  auto bad = c.allReduce("g1", mw::Tensor::cpu(cpu.data(), cpu.size())).wait();
  CHECK(bad.code() == mw::Code::kInvalidArgument);
  CHECK(bad.message().find("is on cpu but this world (nccl) is on cuda:0") != std::string::npos);
}

TEST_CASE("an injected NCCL error breaks its world while another nccl world keeps running",
          "[nccl][gpu][failpoint]") {
  requireGpu();
  if (!mw::failpoints::compiledIn()) FAIL("this test needs a runtime built with failpoints");
  mw::WorldManager m;
  mw::Communicator c(m);
  REQUIRE(m.initWorld(ncclWorld("victim"), mw::deadlineIn(30s)).ok());
  REQUIRE(m.initWorld(ncclWorld("survivor"), mw::deadlineIn(30s)).ok());
  DeviceBuf<float> a(1 << 20), b(1 << 20);
  std::atomic<long> survivor_ops{0};
  std::atomic<bool> stop{false};
  mw::Status survivor_status;
  std::thread loop([&] {
    while (!stop) {
      survivor_status = c.allReduce("survivor", b.tensor()).wait(mw::deadlineIn(30s));
      if (!survivor_status.ok()) return;
      ++survivor_ops;
    }
  });
  for (uintptr_t async : {0u, 1u}) {
    std::string name = async ? "victim_async" : "victim";
    if (async) REQUIRE(m.initWorld(ncclWorld(name), mw::deadlineIn(30s)).ok());
    mw::failpoints::Mode mode;
    mode.failnum = 6;  // ncclRemoteError
    mode.failinfo = async;
    mode.once = true;
    REQUIRE(mw::failpoints::enable("mw/nccl/all_reduce/" + name, mode).ok());
    auto t0 = mw::Clock::now();
    mw::Status s = c.allReduce(name, a.tensor()).wait(mw::deadlineIn(30s));
    CHECK(mw::Clock::now() - t0 < 10s);
    CHECK(s.code() == mw::Code::kWorldBroken);
    auto info = m.world(name)->broken;
    REQUIRE(info);
    CHECK(info->cause == mw::Cause::kPeerDied);
    CHECK(info->detail.find("ncclRemoteError") != std::string::npos);
  }
  long before = survivor_ops.load();
  std::this_thread::sleep_for(500ms);
  CHECK(survivor_ops.load() > before);
  CHECK(m.world("survivor")->state == mw::WorldState::kHealthy);
  stop = true;
  loop.join();
  CHECK(survivor_status.ok());
}

TEST_CASE("removing an nccl world with operations in flight never hangs", "[nccl][gpu]") {
  requireGpu();
  mw::WorldManager m;
  mw::Communicator c(m);
  REQUIRE(m.initWorld(ncclWorld("busy"), mw::deadlineIn(30s)).ok());
  DeviceBuf<float> a(16 << 20);
  std::vector<mw::Work> works;
  for (int i = 0; i < 32; ++i) works.push_back(c.allReduce("busy", a.tensor()));
  auto t0 = mw::Clock::now();
  REQUIRE(m.removeWorld("busy").ok());
  CHECK(mw::Clock::now() - t0 < 10s);
  for (auto& w : works) {
    mw::Status s = w.wait(mw::deadlineIn(1s));
    bool done = s.ok() || s.code() == mw::Code::kAborted;
    CHECK(done);
  }
}

TEST_CASE("100 create/remove cycles keep GPU memory and descriptors flat", "[nccl][gpu]") {
  requireGpu();
  mw::WorldManager m;
  mw::Communicator c(m);
  DeviceBuf<float> a(1 << 16);
  auto cycle = [&] {
    REQUIRE(m.initWorld(ncclWorld("cycled"), mw::deadlineIn(30s)).ok());
    REQUIRE(c.allReduce("cycled", a.tensor()).wait(mw::deadlineIn(30s)).ok());
    REQUIRE(m.removeWorld("cycled").ok());
  };
  for (int i = 0; i < 3; ++i) cycle();  // warm-up: CUDA and NCCL set themselves up once
  size_t free0 = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
  int fds0 = mw::test::openFds();
  for (int i = 0; i < 100; ++i) cycle();
  size_t free1 = 0;
  REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
  INFO("free before " << free0 << ", after " << free1);
  CHECK(free1 + (64u << 20) >= free0);  // within 64 MiB: allocator slack, no per-cycle leak
  CHECK(mw::test::openFds() <= fds0 + 2);
}

TEST_CASE("CUDA stream scopes nest and restore the thread's current stream", "[nccl]") {
  CHECK(mw::currentCudaStream() == nullptr);
  int a = 0, b = 0;
  {
    mw::CudaStreamScope outer(&a);
    CHECK(mw::currentCudaStream() == &a);
    {
      mw::CudaStreamScope inner(&b);
      CHECK(mw::currentCudaStream() == &b);
      std::thread([] { CHECK(mw::currentCudaStream() == nullptr); }).join();  // per thread
    }
    CHECK(mw::currentCudaStream() == &a);
  }
  CHECK(mw::currentCudaStream() == nullptr);
}

namespace {

// Host work queued on a stream: holds the stream for `ms` milliseconds, as a long kernel does.
void CUDART_CB sleepOnStream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<uintptr_t>(ms)));
}

// Queues, on `stream`, a 500 ms hold and then a fill of `buf` with byte `value`.
void slowFill(DeviceBuf<float>& buf, int value, cudaStream_t stream) {
  const auto hold = static_cast<uintptr_t>(scaled(500).count());  // sanitizers: longer
  REQUIRE(cudaLaunchHostFunc(stream, sleepOnStream, reinterpret_cast<void*>(hold)) ==
          cudaSuccess);
  REQUIRE(cudaMemsetAsync(buf.p, value, sizeof(float) * buf.n, stream) == cudaSuccess);
}

bool allBytes(const std::vector<float>& v, int value) {
  std::vector<float> want(v.size());
  std::memset(want.data(), value, sizeof(float) * want.size());
  return std::memcmp(v.data(), want.data(), sizeof(float) * v.size()) == 0;
}

}  // namespace

TEST_CASE("an operation on CUDA tensors starts after the caller's stream and completes after the "
          "GPU is done",
          "[nccl][gpu]") {
  requireGpu();
  mw::WorldManager m;
  mw::Communicator c(m);
  REQUIRE(m.initWorld(ncclWorld("ordered"), mw::deadlineIn(30s)).ok());
  const size_t n = 1 << 18;
  DeviceBuf<float> in(n), out(n);

  // A stream of the caller's: the input is written there, 500 ms late; all_gather (one rank:
  // out = in) must read the written input, without the host waiting for the stream first.
  cudaStream_t mine = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking) == cudaSuccess);
  slowFill(in, 0x11, mine);
  mw::Work w;
  {
    mw::CudaStreamScope scope(mine);
    auto t0 = mw::Clock::now();
    w = c.allGather("ordered", in.tensor(), out.tensor());
    CHECK(mw::Clock::now() - t0 < scaled(400));  // submission does not wait for the stream
  }
  CHECK_FALSE(w.test());  // output side: not complete while the GPU has not run it
  REQUIRE(w.wait(mw::deadlineIn(30s)).ok());
  CHECK(allBytes(out.get(), 0x11));

  // No scope: the legacy default stream (stream 0) of the world's device.
  slowFill(in, 0x22, nullptr);
  REQUIRE(c.allGather("ordered", in.tensor(), out.tensor()).wait(mw::deadlineIn(30s)).ok());
  CHECK(allBytes(out.get(), 0x22));

  // Every kind of operation is ordered, barrier included (it waits, then completes).
  slowFill(in, 0x33, mine);
  {
    mw::CudaStreamScope scope(mine);
    mw::Work b = c.barrier("ordered");
    std::this_thread::sleep_for(100ms);
    CHECK_FALSE(b.test());
    REQUIRE(b.wait(mw::deadlineIn(30s)).ok());
    REQUIRE(c.broadcast("ordered", out.tensor(), 0).wait(mw::deadlineIn(30s)).ok());
  }
  REQUIRE(cudaStreamSynchronize(mine) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(mine) == cudaSuccess);
  CHECK(m.world("ordered")->state == mw::WorldState::kHealthy);
}

TEST_CASE("a stream of another device fails the operation, not the world, and the caller's device "
          "is left as it was",
          "[nccl][gpu]") {
  requireGpu();
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  if (count < 2) {
    std::fprintf(stderr, "SKIPPED: needs two GPUs, this machine has %d\n", count);
    std::_Exit(77);
  }
  mw::WorldManager m;
  mw::Communicator c(m);
  REQUIRE(m.initWorld(ncclWorld("dev0", 0), mw::deadlineIn(30s)).ok());
  DeviceBuf<float> a(1024);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t other = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  {
    mw::CudaStreamScope scope(other);
    mw::Status s = c.allReduce("dev0", a.tensor(0)).wait(mw::deadlineIn(30s));
    INFO(s.toString());
    CHECK(s.code() == mw::Code::kInvalidArgument);
    CHECK(s.message().find("cannot be ordered after the caller's CUDA stream") !=
          std::string::npos);
    CHECK(s.message().find("cudaEventRecord") != std::string::npos);
    CHECK(s.message().find("cuda:0") != std::string::npos);
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // the refusal left no error behind
  // With the caller's current device 1, the default stream is still the world's device's.
  REQUIRE(c.allReduce("dev0", a.tensor(0)).wait(mw::deadlineIn(30s)).ok());
  int now = -1;
  REQUIRE(cudaGetDevice(&now) == cudaSuccess);
  CHECK(now == 1);
  CHECK(m.world("dev0")->state == mw::WorldState::kHealthy);
  REQUIRE(cudaStreamDestroy(other) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}
