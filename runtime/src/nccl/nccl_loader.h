// The NCCL backend's link to NCCL and the CUDA runtime, made at run time: both libraries are
// opened (dlopen) when the first NCCL world is created, never linked, so a program that uses only
// CPU worlds needs neither of them, at build or at run time, even with the NCCL backend built in.
//
// Files: NCCL is $MW_NCCL_LIBRARY when set, else the libnccl.so* the process has loaded already
// (PyTorch's, when torch.cuda came first: one NCCL per process), else "libnccl.so.2"; the CUDA
// runtime is $MW_CUDART_LIBRARY when set, else a libcudart.so* already loaded, else
// "libcudart.so.<major>" of the toolkit this library was built with, else "libcudart.so".
// nccl.h and cuda_runtime_api.h are used for their types and constants only.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "multiworld/status.h"

namespace mw::detail {

// The oldest NCCL the backend runs on: the oldest its code was reviewed against (2.22.3 to 2.28.9;
// docs/design.md, "The NCCL backend"). Non-blocking communicators (ncclCommInitRankConfig with
// blocking = 0) need 2.14, splitShare 2.18, and 2.22 moved connection setup to the first operation
// (handled: the launch polls ncclInProgress). 2.22-2.25 keep a pointer into the initializing
// thread's storage until ncclCommEnsureReady (handled: ncclCommCount on that thread).
inline constexpr int kMinNcclVersion = 22200;

// The functions the backend calls, by library. Each becomes a member of NcclApi of the same name
// and type.
// clang-format off
#define MW_CUDART_FUNCTIONS(X)                                                                   \
  X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetLastError) X(cudaGetErrorName)                 \
  X(cudaGetErrorString) X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaFree)            \
  X(cudaMemset) X(cudaEventCreateWithFlags) X(cudaEventRecord) X(cudaEventQuery)                 \
  X(cudaEventDestroy) X(cudaGetDevice) X(cudaStreamWaitEvent) X(cudaStreamIsCapturing)           \
  X(cudaDriverGetVersion) X(cudaRuntimeGetVersion) X(cudaEventSynchronize) X(cudaMemcpyAsync)   \
  X(cudaLaunchHostFunc) X(cudaStreamSynchronize) X(cudaMemcpy)
#define MW_NCCL_FUNCTIONS(X)                                                                     \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommGetAsyncError)        \
  X(ncclCommAbort) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGroupStart) X(ncclGroupEnd)   \
  X(ncclSend) X(ncclRecv) X(ncclBroadcast) X(ncclAllReduce) X(ncclReduce) X(ncclAllGather)       \
  X(ncclReduceScatter) X(ncclCommCount)
// clang-format on

// The loaded functions and what was loaded. Immutable once loadNcclApi has returned it.
struct NcclApi {
#define MW_NCCL_API_MEMBER(name) decltype(&::name) name = nullptr;
  MW_CUDART_FUNCTIONS(MW_NCCL_API_MEMBER)
  MW_NCCL_FUNCTIONS(MW_NCCL_API_MEMBER)
#undef MW_NCCL_API_MEMBER
  // cuda_runtime.h overloads cudaMalloc with a template: the C function's type is spelled out.
  cudaError_t (*cudaMalloc)(void** ptr, size_t bytes) = nullptr;

  std::string cudart_file;  // the files opened, as the dynamic linker resolved them
  std::string nccl_file;
  int nccl_version = 0;  // ncclGetVersion: major * 10000 + minor * 100 + patch
};

// Opens the CUDA runtime and NCCL and checks NCCL's version, on the first call only: every later
// call returns the first one's result, a failure included. Thread-safe. kUnavailable naming the
// file and the reason when a file cannot be opened (dlerror's text), lacks a function, or holds an
// NCCL older than kMinNcclVersion (the version found and the one needed). Never closes them.
Result<const NcclApi*> loadNcclApi();

// The loaded functions. REQUIRES: loadNcclApi() has returned OK in this process.
const NcclApi& ncclApi();

}  // namespace mw::detail
