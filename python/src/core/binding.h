// Shared pieces of the multiworld_native._core binding: timeouts, errors, tensor views, waits.
// The binding is thin: every decision about worlds, tensors and failures is the C++ runtime's.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "multiworld/multiworld.h"

namespace mwpy {

namespace nb = nanobind;

// Releases the GIL for its lifetime, like nb::gil_scoped_release, but a thread that comes back
// while the interpreter is finalizing (a daemon thread inside a call when the program exits:
// sys.exit, the end of main, Ctrl-C) never takes the GIL again and stays parked until the process
// ends. Python 3.11-3.13 end such a thread with pthread_exit, whose unwinding through a
// destructor is std::terminate: the program aborted (SIGABRT, exit 134) instead of exiting with
// its own status. Python 3.14 parks such threads itself. Use this instead of
// nb::gil_scoped_release in every call that can block. GIL held on construction.
class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() { reacquireOrPark(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  // Takes the GIL back, or parks this thread for good when the interpreter is finalizing.
  static void reacquireOrPark(PyThreadState* state) noexcept;
  PyThreadState* state_;
};

// The deadline `timeout` seconds from now: None is never; 0 or negative is already past.
// Raises ValueError for NaN.
mw::Deadline deadlineFrom(std::optional<double> timeout);

// A steady_clock time as float seconds, comparable with Python's time.monotonic() (both read
// CLOCK_MONOTONIC on Linux).
double monotonicSeconds(mw::Clock::time_point t);

// The Python exception object for a non-OK status (GIL held):
//   kWorldBroken -> multiworld_native.BrokenWorldError(world, cause, rank, detected_at, detail)
//   kTimeout -> TimeoutError, kInvalidArgument -> ValueError,
//   anything else -> multiworld_native.MultiworldError(code=<codeName>).
// Every one carries `code` (the runtime's code name) and the status text as its message.
nb::object exceptionFor(const mw::Status& s);
// Raises exceptionFor(s) (GIL held). REQUIRES: !s.ok().
[[noreturn]] void raiseStatus(const mw::Status& s);
inline void check(const mw::Status& s) {
  if (!s.ok()) raiseStatus(s);
}

// What a submitted operation borrows from Python: the argument objects and their DLPack views.
// Held by the Work wrapper (or the parked list) until the operation has completed.
struct Borrowed {
  std::vector<nb::object> objects;
  std::vector<nb::ndarray<>> arrays;
  int cuda_device = -1;      // the CUDA device of the tensors, if any is on one
  bool cpu_tensors = false;  // whether any tensor is in CPU memory
};

// A zero-copy view of the tensor `obj` (a torch tensor or anything with __dlpack__ or the buffer
// protocol): data pointer, dtype, element count and device of its memory. Appends what must stay
// alive to `keep`. Raises TypeError when `obj` is no tensor, ValueError naming `arg` when it is
// not contiguous, has a dtype libmultiworld lacks, or lives on a device other than cpu/cuda:N.
mw::Tensor tensorView(nb::handle obj, const char* arg, Borrowed& keep);

// Waits for `w` until `deadline` with the GIL released. Returns the operation's status, or
// kTimeout when `deadline` passed first. Throws nb::python_error when a signal handler raised.
// `interruptible` (point-to-point operations) on Python's main thread: waits in 200 ms slices so
// that signal handlers run (Ctrl-C raises KeyboardInterrupt); the runtime runs a send or receive
// in the waiting thread for each slice and hands it to the world's completer when the slice ends.
// Otherwise one wait, which runs the operation in this thread when the runtime lets it (no thread
// hand-off; 0.4 against 40 us per call): Python runs signal handlers only on the main thread,
// and a collective cannot be left half-run, so a Ctrl-C during a blocking collective takes effect
// when it ends (at the latest its world's op_timeout).
// `host` false: Work::wait, which on a stream-ordered nccl world orders `stream` (a cudaStream_t,
// the calling thread's current stream for the wait) after the operation and returns without
// waiting for the GPU; `host` true: Work::synchronize, the host waits on every world.
mw::Status waitReleased(const mw::Work& w, mw::Deadline deadline, bool interruptible,
                        bool host = false, void* stream = nullptr);

// PyTorch's current stream (a cudaStream_t) of CUDA device `device` when the program imported
// torch, else nullptr (the legacy default stream). GIL held.
void* torchCurrentStream(int device);

// Whether this is Python's main thread, the one that runs signal handlers (GIL held).
bool onMainThread();
// The main thread's identifier (PyThread_get_thread_ident). GIL held on the first call (the
// module's initialization makes it); any thread after that.
unsigned long mainThreadIdent();

// The one waiting loop of the binding's blocking calls: calls `attempt(slice)` with the GIL
// released, where `slice` is `deadline` or 200 ms from now if sooner, until it returns true (done)
// or `deadline` has passed; between slices Python's signal handlers run (Ctrl-C raises
// KeyboardInterrupt as nb::python_error; they run on the main thread only). Returns the last
// attempt's result. GIL held on entry and exit.
template <typename Attempt>
bool waitInSlices(mw::Deadline deadline, Attempt&& attempt) {
  for (;;) {
    const mw::Deadline slice = std::min(deadline, mw::deadlineIn(std::chrono::milliseconds(200)));
    bool done = false;
    {
      GilRelease release;
      done = attempt(slice);
    }
    if (done || mw::Clock::now() >= deadline) return done;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

// Hands `b` to the module's parked list while `w` is pending (a Work wrapper dropped early, a
// blocking call interrupted); parked entries are released once their operation has completed.
// GIL held.
void park(const mw::Work& w, Borrowed&& b);
// Releases the parked entries whose operation completed. GIL held.
void pruneParked();
size_t parkedCount();

// The Python WorldManager: owns one mw::WorldManager (module.cc).
struct PyManager {
  std::unique_ptr<mw::WorldManager> manager;
  PyManager();
  // Destroys the manager (removing every world) with the GIL released.
  ~PyManager();
  mw::WorldManager& get() const { return *manager; }
};

// `v` as an int; ValueError naming `what` when it does not fit.
int toInt(int64_t v, const char* what);

// A Python Work for `w` that holds `b` until the operation completes; its waits are
// `interruptible` as in waitReleased (communicator.cc).
nb::object makeWork(mw::Work w, Borrowed&& b, bool interruptible);

// Registers WorldManager, WorldInfo, WorldEvent and Events (module.cc).
void bindManager(nb::module_& m);
// Registers Communicator, Work and wait_any (communicator.cc).
void bindCommunicator(nb::module_& m);

}  // namespace mwpy
