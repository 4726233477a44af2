// multiworld/gpu.h: the GPU count and device memory, through the CUDA runtime the library loads.
// This binary links neither the CUDA runtime nor NCCL.
//
// The library loads them once per process, so the cases that need another environment are hidden
// ([.]) and run by ctest with their own (tests/runtime/CMakeLists.txt): the CUDA runtime missing
// (gpu_api.no_cudart), and the simulated GPU of sim_cuda.cc with two devices (gpu_api.sim).
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "multiworld/config.h"
#include "multiworld/gpu.h"

#if MW_CONFIG_WITH_NCCL
#include <cuda_runtime_api.h>  // types only: the functions are reached through dlsym
#endif

namespace {

bool mentions(const mw::Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("an empty DeviceBuffer copies nothing, and says so past its end", "[gpu_api]") {
  mw::DeviceBuffer empty;
  char byte = 0;
  CHECK(empty.write(0, &byte, 0).ok());
  CHECK(empty.read(0, &byte, 0).ok());
  const mw::Status w = empty.write(0, &byte, 1);
  const mw::Status r = empty.read(2, &byte, 1);
  INFO(w.toString() << " / " << r.toString());
  CHECK(w.code() == mw::Code::kInvalidArgument);
  CHECK(mentions(w, "DeviceBuffer::write: bytes [0, +1)"));
  CHECK(r.code() == mw::Code::kInvalidArgument);
  CHECK(mentions(r, "DeviceBuffer::read: bytes [2, +1)"));
}

TEST_CASE("DeviceBuffer::allocate refuses a CPU device", "[gpu_api]") {
  auto buf = mw::DeviceBuffer::allocate(mw::Device::cpu(), 64);
  REQUIRE_FALSE(buf.ok());
  INFO(buf.status().toString());
  CHECK(buf.status().code() == mw::Code::kInvalidArgument);
  CHECK(mentions(buf.status(), "cpu is not a CUDA device"));
}

// On any machine: the GPUs counted are the ones a buffer can be allocated on. Here (no GPU, or no
// NCCL backend) that is none, and an allocation says why.
TEST_CASE("visibleGpuCount and DeviceBuffer::allocate agree", "[gpu_api]") {
  const int gpus = mw::visibleGpuCount();
  CHECK(gpus >= 0);
  CHECK(mw::visibleGpuCount() == gpus);
  auto past = mw::DeviceBuffer::allocate(mw::Device::cuda(gpus), 64);
  REQUIRE_FALSE(past.ok());
  INFO(past.status().toString());
  CHECK(past.status().code() == mw::Code::kUnavailable);
  CHECK(mentions(past.status(), "cuda:" + std::to_string(gpus)));
  // No GPU: no driver, no CUDA runtime, or no NCCL backend in this build, each said as such.
  CHECK((mentions(past.status(), "cannot be used: ") || mentions(past.status(), "does not exist")));
  if (gpus > 0) {
    auto buf = mw::DeviceBuffer::allocate(mw::Device::cuda(0), 4096);
    INFO(buf.status().toString());
    REQUIRE(buf.ok());
    CHECK(buf->data() != nullptr);
    CHECK(buf->fill(7).ok());
  }
}

// Run by ctest with MW_CUDART_LIBRARY naming a file that does not exist: no GPU is counted, and an
// allocation fails with kUnavailable naming the file and the dynamic linker's reason.
TEST_CASE("no_cudart_child", "[.][no_cudart_child]") {
  const char* cudart = std::getenv("MW_CUDART_LIBRARY");
  REQUIRE(cudart != nullptr);
  CHECK(mw::visibleGpuCount() == 0);
  for (int i = 0; i < 2; ++i) {  // the loader's failure is kept: the same answer every time
    auto buf = mw::DeviceBuffer::allocate(mw::Device::cuda(0), 64);
    REQUIRE_FALSE(buf.ok());
    INFO(buf.status().toString());
    CHECK(buf.status().code() == mw::Code::kUnavailable);
    CHECK(mentions(buf.status(), "cuda:0 cannot be used"));
#if MW_CONFIG_WITH_NCCL
    CHECK(mentions(buf.status(), cudart));
    CHECK(mentions(buf.status(), "cannot open shared object"));
#endif
  }
}

// Run by ctest with MW_CUDART_LIBRARY and MW_NCCL_LIBRARY naming libmw_sim_cuda.so and
// MW_SIM_DEVICES=2: two GPUs; a buffer on cuda:1 allocates, fills and frees there, and the calling
// thread's current device stays what it was. The simulated runtime is reached here through the
// same file (dlopen of a loaded library returns it), for what the test checks behind the API.
TEST_CASE("sim_child", "[.][sim_child]") {
  const char* sim = std::getenv("MW_CUDART_LIBRARY");
  REQUIRE(sim != nullptr);
  REQUIRE(mw::visibleGpuCount() == 2);
  void* lib = dlopen(sim, RTLD_NOW | RTLD_NOLOAD);  // loaded by visibleGpuCount
  REQUIRE(lib != nullptr);
  auto sym = [&](const char* name) {
    void* f = dlsym(lib, name);
    REQUIRE(f != nullptr);
    return f;
  };
  // With their exact types (UBSan checks calls through function pointers).
  auto setDevice = reinterpret_cast<decltype(&::cudaSetDevice)>(sym("cudaSetDevice"));
  auto getDevice = reinterpret_cast<decltype(&::cudaGetDevice)>(sym("cudaGetDevice"));
  auto copy = reinterpret_cast<cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind)>(
      sym("cudaMemcpy"));
  auto memInfo = reinterpret_cast<decltype(&::cudaMemGetInfo)>(sym("cudaMemGetInfo"));
  const cudaMemcpyKind kDeviceToHost = cudaMemcpyDeviceToHost;
  size_t free_before = 0, total = 0;
  REQUIRE(memInfo(&free_before, &total) == 0);
  int current = -1;

  {
    auto made = mw::DeviceBuffer::allocate(mw::Device::cuda(1), 1000);
    INFO(made.status().toString());
    REQUIRE(made.ok());
    mw::DeviceBuffer buf = std::move(made).value();
    CHECK(buf.data() != nullptr);
    CHECK(buf.size() == 1000);
    CHECK(buf.device() == mw::Device::cuda(1));
    REQUIRE(getDevice(&current) == 0);
    CHECK(current == 0);  // allocated on cuda:1, the caller's device restored

    REQUIRE(setDevice(0) == 0);
    REQUIRE(buf.fill(0xab).ok());
    REQUIRE(getDevice(&current) == 0);
    CHECK(current == 0);
    std::vector<unsigned char> host(1000, 0);
    REQUIRE(copy(host.data(), buf.data(), host.size(), kDeviceToHost) == 0);
    CHECK(host == std::vector<unsigned char>(1000, 0xab));

    // write and read: bytes to the device and back, the current device kept; out of bounds is
    // an argument error that names the range and the size, and nothing is copied.
    REQUIRE(setDevice(0) == 0);
    const std::vector<unsigned char> part = {1, 2, 3, 4, 5};
    REQUIRE(buf.write(990, part.data(), part.size()).ok());
    std::vector<unsigned char> back(7, 0);
    REQUIRE(buf.read(989, back.data(), back.size()).ok());
    CHECK(back == std::vector<unsigned char>{0xab, 1, 2, 3, 4, 5, 0xab});
    REQUIRE(getDevice(&current) == 0);
    CHECK(current == 0);
    for (auto [offset, bytes] : {std::pair<size_t, size_t>{996, 5}, {1001, 0}, {1, SIZE_MAX}}) {
      const mw::Status w = buf.write(offset, part.data(), bytes);
      const mw::Status r = buf.read(offset, back.data(), bytes);
      INFO(w.toString() << " / " << r.toString());
      CHECK(w.code() == mw::Code::kInvalidArgument);
      CHECK(r.code() == mw::Code::kInvalidArgument);
      CHECK(mentions(w, "DeviceBuffer::write: bytes [" + std::to_string(offset) + ", +" +
                            std::to_string(bytes) + ") of a buffer of 1000"));
      CHECK(mentions(r, "DeviceBuffer::read: bytes [" + std::to_string(offset)));
    }
    REQUIRE(buf.read(995, back.data(), 5).ok());  // 1000 exactly: inside
    CHECK(back[4] == 0xab);

    size_t free_now = 0;
    REQUIRE(memInfo(&free_now, &total) == 0);
    CHECK(free_before - free_now == 1000);

    mw::DeviceBuffer moved = std::move(buf);  // NOLINT: the moved-from buffer is checked
    CHECK(buf.data() == nullptr);             // NOLINT(bugprone-use-after-move)
    CHECK(buf.size() == 0);
    CHECK(moved.size() == 1000);
  }  // freed on cuda:1 while the thread's current device is 0
  size_t free_after = 0;
  REQUIRE(memInfo(&free_after, &total) == 0);
  CHECK(free_after == free_before);
  REQUIRE(getDevice(&current) == 0);
  CHECK(current == 0);

  // An empty buffer: nothing to fill or free.
  auto empty = mw::DeviceBuffer::allocate(mw::Device::cuda(0), 0);
  REQUIRE(empty.ok());
  CHECK(empty->data() == nullptr);
  CHECK(empty->fill(1).ok());
  CHECK(empty->write(0, nullptr, 0).ok());
  CHECK(empty->read(0, nullptr, 0).ok());
  CHECK(empty->read(0, &current, 1).code() == mw::Code::kInvalidArgument);

  // A device past the two, and more memory than the device has.
  auto third = mw::DeviceBuffer::allocate(mw::Device::cuda(2), 64);
  INFO(third.status().toString());
  CHECK(third.status().code() == mw::Code::kUnavailable);
  CHECK(mentions(third.status(), "cuda:2 does not exist: this process sees 2 GPU(s)"));
  auto huge = mw::DeviceBuffer::allocate(mw::Device::cuda(1), mw::kMaxTensorBytes / 2);
  INFO(huge.status().toString());
  CHECK(huge.status().code() == mw::Code::kUnavailable);
  CHECK(mentions(huge.status(), "cudaMalloc of"));
  CHECK(mentions(huge.status(), "cudaErrorMemoryAllocation"));
  CHECK(mw::visibleGpuCount() == 2);  // the failure was cleared
}
