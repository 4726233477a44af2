// CudaStreamScope: which CUDA stream the operations on an nccl world are ordered after.
//
// The contract for CUDA tensors (docs/design.md "CUDA streams"):
// - Input side. An operation that a thread submits to an nccl world starts on the GPU only after
//   all the work queued, before the submission, on that thread's *current stream*: the stream of
//   the innermost CudaStreamScope alive in the thread, else the legacy default stream (stream 0)
//   of the world's device. The runtime records a CUDA event on that stream at submission and makes
//   the world's own stream wait for it, so the caller's kernels that write an input (or still read
//   an output) are finished first, without blocking the host.
// - Output side. Work::wait() on an nccl world (CudaWait::kStream, the default) makes the waiting
//   thread's current stream wait for the operation on the GPU and returns without waiting for
//   the GPU: work queued on that stream afterwards sees the results. A Work completes (test()
//   true, synchronize() returns) only once the GPU has finished the operation: after that, any
//   stream may use the results. Until then the tensors are the runtime's (communicator.h: keep
//   them alive and untouched until the Work completes).
// - A stream that is not a valid stream of the world's device fails the operation with
//   kInvalidArgument naming the stream and CUDA's error; the world stays healthy.
// Gloo worlds (CPU tensors) ignore the current stream.
#pragma once

namespace mw {

class CudaStreamScope {
 public:
  // Makes `stream` (a cudaStream_t; nullptr is the legacy default stream) the calling thread's
  // current stream until this scope ends. Scopes nest; each must end in the thread that made it,
  // in reverse order (a scoped object does that).
  explicit CudaStreamScope(void* stream) noexcept;
  ~CudaStreamScope();
  CudaStreamScope(const CudaStreamScope&) = delete;
  CudaStreamScope& operator=(const CudaStreamScope&) = delete;

 private:
  void* previous_;
};

// The calling thread's current stream: that of its innermost live CudaStreamScope, else nullptr
// (the legacy default stream). Never blocks; costs a thread-local read.
void* currentCudaStream() noexcept;

}  // namespace mw
