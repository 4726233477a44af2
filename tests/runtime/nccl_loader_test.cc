// NCCL and the CUDA runtime opened at run time (nccl/nccl_loader.h). This binary links neither.
//
// The loader loads once per process, so the cases that need a fresh process or another
// environment are hidden ([.]) and run as a child of a case here or by ctest with their own
// environment (tests/runtime/CMakeLists.txt, cuda_hidden_test.sh).
#include "nccl/nccl_loader.h"

#include <dlfcn.h>
#include <link.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/child.h"
#include "support/util.h"

using namespace std::chrono_literals;
using mw::test::scaled;

namespace {

// The files of NCCL or the CUDA runtime this process has loaded.
std::vector<std::string> loadedCudaFiles() {
  std::vector<std::string> found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        if (name.find("libnccl") != std::string::npos ||
            name.find("libcudart") != std::string::npos) {
          static_cast<std::vector<std::string>*>(out)->push_back(name);
        }
        return 0;
      },
      &found);
  return found;
}

// Runs this binary's hidden case `tag` in a fresh process; returns its "<tag>: " line.
std::string runChild(const std::string& tag) {
  mw::test::Child child({"/proc/self/exe", "-w", "NoTests", "[" + tag + "]"});
  auto line = child.waitFor(tag + ": ", scaled(60000));
  const int status = child.reap();
  REQUIRE(line);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return *line;
}

mw::WorldOptions oneRankWorld(const std::string& name, mw::BackendKind backend) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = 0;
  o.size = 1;
  o.backend = backend;
  o.device = backend == mw::BackendKind::kNccl ? mw::Device::cuda(0) : mw::Device::cpu();
  return o;
}

}  // namespace

TEST_CASE("NCCL and the CUDA runtime load at run time, and NCCL reports its version",
          "[runtime][nccl]") {
  if (std::getenv("MW_NCCL_LIBRARY") == nullptr) {
    void* present = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
    if (present == nullptr) {
      std::fprintf(stderr, "SKIPPED: libnccl.so.2 is not on this machine (%s)\n", dlerror());
      std::fflush(stderr);
      std::_Exit(77);
    }
    dlclose(present);
  }
  auto api = mw::detail::loadNcclApi();
  INFO(api.status().toString());
  REQUIRE(api.ok());
  const mw::detail::NcclApi& loaded = **api;
  INFO("NCCL " << loaded.nccl_file << " version " << loaded.nccl_version << ", CUDA runtime "
               << loaded.cudart_file);
  CHECK(loaded.nccl_file.find("libnccl") != std::string::npos);
  CHECK(loaded.nccl_file.front() == '/');  // the path the dynamic linker resolved
  CHECK(loaded.cudart_file.find("libcudart") != std::string::npos);
  CHECK(loaded.nccl_version >= mw::detail::kMinNcclVersion);
  // At least the release of the nccl.h this was built with (2.28 here: 22800).
  CHECK(loaded.nccl_version >= NCCL_MAJOR * 10000 + NCCL_MINOR * 100);
  int version = 0;
  CHECK(loaded.ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == loaded.nccl_version);
  CHECK(&mw::detail::ncclApi() == &loaded);  // loaded once
  CHECK(mw::detail::loadNcclApi().value() == &loaded);
}

TEST_CASE("a program with CPU worlds only never loads NCCL or the CUDA runtime", "[runtime]") {
  CHECK(runChild("cpu_only_child") == "cpu_only_child: ok");
}

// A CPU world works and leaves NCCL and the CUDA runtime unloaded; prints "cpu_only_child: ok".
TEST_CASE("cpu_only_child", "[.][cpu_only_child]") {
  REQUIRE(loadedCudaFiles().empty());
  mw::WorldManager m;
  REQUIRE(
      m.initWorld(oneRankWorld("cpu", mw::BackendKind::kGloo), mw::deadlineIn(scaled(10000))).ok());
  mw::Communicator comm(m);
  float values[4] = {1, 2, 3, 4};
  REQUIRE(comm.allReduce("cpu", mw::Tensor::cpu(values, 4)).wait().ok());
  CHECK(values[3] == 4);
  REQUIRE(m.removeWorld("cpu").ok());
  const auto loaded = loadedCudaFiles();
  INFO((loaded.empty() ? std::string() : loaded.front()));
  CHECK(loaded.empty());
  std::printf("cpu_only_child: %s\n", loaded.empty() ? "ok" : loaded.front().c_str());
  std::fflush(stdout);
}

// Run by ctest with MW_CUDART_LIBRARY or MW_NCCL_LIBRARY naming a file that cannot serve, or with
// the CUDA libraries hidden (neither set): an nccl world fails with kUnavailable naming the file
// (and $MW_TEST_EXPECT when set), nothing of it is left behind, and a CPU world still works.
TEST_CASE("missing_library_child", "[.][missing_library_child]") {
  const char* cudart = std::getenv("MW_CUDART_LIBRARY");
  const char* nccl = std::getenv("MW_NCCL_LIBRARY");
  const char* expect = std::getenv("MW_TEST_EXPECT");
  const std::string file = cudart != nullptr ? cudart
                           : nccl != nullptr
                               ? nccl
                               : "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  mw::WorldManager m;
  mw::Status s =
      m.initWorld(oneRankWorld("gpu", mw::BackendKind::kNccl), mw::deadlineIn(scaled(10000)));
  INFO(s.toString());
  CHECK(s.code() == mw::Code::kUnavailable);
  CHECK(s.message().find("world 'gpu'") != std::string::npos);
  CHECK(s.message().find("cuda:0") != std::string::npos);
  CHECK(s.message().find(file) != std::string::npos);
  CHECK(s.message().find(expect != nullptr ? expect : "cannot open") != std::string::npos);
  CHECK(m.world("gpu").status().code() == mw::Code::kNotFound);
  CHECK(mw::detail::loadNcclApi().status().code() == mw::Code::kUnavailable);
  REQUIRE(
      m.initWorld(oneRankWorld("cpu", mw::BackendKind::kGloo), mw::deadlineIn(scaled(10000))).ok());
  std::printf("missing_library_child: %s\n", s.toString().c_str());
}

// Run by ctest with MW_TEST_PRELOAD naming an NCCL (a too-old one, named libnccl.so.2) that this
// process loads before its first nccl world, as PyTorch does: the world uses that NCCL, not the
// one the dynamic linker would find, and so fails naming it and its version.
TEST_CASE("preloaded_child", "[.][preloaded_child]") {
  const char* preload = std::getenv("MW_TEST_PRELOAD");
  REQUIRE(preload != nullptr);
  REQUIRE(std::getenv("MW_NCCL_LIBRARY") == nullptr);
  void* h = dlopen(preload, RTLD_NOW | RTLD_LOCAL);
  INFO((h == nullptr ? dlerror() : "loaded"));
  REQUIRE(h != nullptr);
  mw::WorldManager m;
  mw::Status s =
      m.initWorld(oneRankWorld("gpu", mw::BackendKind::kNccl), mw::deadlineIn(scaled(10000)));
  INFO(s.toString());
  CHECK(s.code() == mw::Code::kUnavailable);
  CHECK(s.message().find(std::string(preload) + " is NCCL 2.18.3") != std::string::npos);
  std::printf("preloaded_child: %s\n", s.toString().c_str());
}
