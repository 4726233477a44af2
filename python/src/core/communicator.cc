// multiworld_native._core: Communicator, Work and wait_any.
//
// Every operation builds zero-copy views of its tensors, submits the C++ operation with the GIL
// released and either returns a Work (async_op=True) or waits for it with the GIL released and
// raises on failure. A Work keeps its tensors (the Python objects and their DLPack views) alive
// until the operation completes, even when the Python Work is dropped first (the parked list).
#include <Python.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <limits>
#include <string>

#include "binding.h"

namespace mwpy {

namespace {

struct PyWork {
  mw::Work work;
  Borrowed borrowed;
  bool interruptible;  // waits on the main thread let signal handlers run (waitReleased)

  PyWork(mw::Work w, Borrowed&& b, bool interruptible)
      : work(std::move(w)), borrowed(std::move(b)), interruptible(interruptible) {}
  PyWork(PyWork&&) = default;
  PyWork& operator=(PyWork&&) = delete;
  // Dropped while pending: the tensors go to the parked list (nanobind destroys with the GIL).
  ~PyWork() {
    if (work.valid() && !borrowed.objects.empty() && !work.test()) {
      park(work, std::move(borrowed));
    }
  }
};

struct PyCommunicator {
  nb::object owner;  // the WorldManager, kept alive
  mw::Communicator comm;
};

mw::ReduceOp reduceOpFrom(const std::string& op) {
  if (op == "sum") return mw::ReduceOp::kSum;
  if (op == "prod") return mw::ReduceOp::kProd;
  if (op == "min") return mw::ReduceOp::kMin;
  if (op == "max") return mw::ReduceOp::kMax;
  throw nb::value_error(("op must be 'sum', 'prod', 'min' or 'max', not '" + op + "'").c_str());
}

int tagFrom(int64_t tag) {
  if (tag < 0 || tag > std::numeric_limits<int32_t>::max()) {
    throw nb::value_error(("tag " + std::to_string(tag) + " is out of range 0..2^31-1").c_str());
  }
  return static_cast<int>(tag);
}

// Submits `submit` (GIL released), then returns a Work (async_op) or waits for it and returns
// None, raising the operation's error. Arguments rejected up front raise ValueError either way.
// A wait interrupted by a signal handler's exception parks the tensors.
// The cudaStream_t an operation is ordered after (multiworld/cuda_stream.h), from its `stream`
// argument: None is PyTorch's current stream of the tensors' device when torch is loaded, else
// the default stream; an int is a cudaStream_t; an object with an int `cuda_stream` (a
// torch.cuda.Stream) or `ptr` (a cupy Stream) attribute gives its stream. ValueError for a
// stream with CPU tensors, TypeError for anything else.
void* streamFrom(nb::handle stream, const Borrowed& b) {
  if (stream.is_none()) return b.cuda_device < 0 ? nullptr : torchCurrentStream(b.cuda_device);
  nb::handle value = stream;
  nb::object attr;
  if (nb::hasattr(stream, "cuda_stream")) {
    attr = stream.attr("cuda_stream");
    value = attr;
  } else if (nb::hasattr(stream, "ptr")) {
    attr = stream.attr("ptr");
    value = attr;
  }
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    throw nb::type_error(("argument 'stream': expected None, a torch.cuda.Stream or a "
                          "cudaStream_t as an int, got " +
                          std::string(nb::type_name(stream.type()).c_str()))
                             .c_str());
  }
  uintptr_t v = 0;
  if (!nb::try_cast(value, v)) {
    throw nb::value_error("argument 'stream': the stream handle is not a pointer value");
  }
  if (b.cpu_tensors) {
    throw nb::value_error(
        "argument 'stream': operations on CPU tensors take no stream (stream= orders operations "
        "on CUDA tensors)");
  }
  return reinterpret_cast<void*>(v);
}

template <typename F>
nb::object run(Borrowed&& b, nb::handle stream, bool async_op, bool interruptible, F&& submit) {
  pruneParked();
  void* cuda_stream = streamFrom(stream, b);
  mw::Work w;
  {
    GilRelease release;
    mw::CudaStreamScope scope(cuda_stream);
    w = submit();
  }
  if (async_op) {
    // Arguments the runtime rejected up front raise here, as in a blocking call.
    if (mw::Status now = w.status(); now.code() == mw::Code::kInvalidArgument) raiseStatus(now);
    return makeWork(std::move(w), std::move(b), interruptible);
  }
  mw::Status s;
  try {
    // On a stream-ordered nccl world, the stream the operation was submitted on waits for it.
    s = waitReleased(w, mw::Deadline::max(), interruptible, false, cuda_stream);
  } catch (...) {
    if (!w.test()) park(w, std::move(b));
    throw;
  }
  check(s);
  return nb::none();
}

// The empty tensor a non-root rank may pass to gather (out) or scatter (in).
mw::Tensor viewOrEmpty(nb::handle obj, const char* arg, const mw::Tensor& like, Borrowed& b) {
  if (obj.is_none()) return mw::Tensor{nullptr, like.dtype, 0, like.device};
  return tensorView(obj, arg, b);
}

}  // namespace

void* torchCurrentStream(int device) {
  // torch only when the program imported it (a dictionary lookup, no import per operation).
  PyObject* torch_ptr = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (torch_ptr == nullptr) return nullptr;
  nb::handle torch(torch_ptr);
  nb::object stream = torch.attr("cuda").attr("current_stream")(device).attr("cuda_stream");
  return reinterpret_cast<void*>(nb::cast<uintptr_t>(stream));
}

nb::object makeWork(mw::Work w, Borrowed&& b, bool interruptible) {
  return nb::cast(PyWork(std::move(w), std::move(b), interruptible), nb::rv_policy::move);
}

void bindCommunicator(nb::module_& m) {
  nb::class_<PyWork>(m, "Work", "The handle of one asynchronous operation.")
      // Contract: on a Gloo world, and with host=True on every world, waits up to `timeout`
      // seconds (None: until done; the world's op_timeout bounds every operation) with the GIL
      // released until the operation completed. On an nccl world (cuda_wait="stream", the
      // default) it makes PyTorch's current stream of the tensors' device wait for the operation
      // on the GPU and returns without waiting for the GPU, as torch's NCCL groups do: what is
      // queued on that stream afterwards sees the results; a failure after that fails the Work
      // (is_completed(), exception(), wait(host=True)) and the outputs are undefined.
      // True on success; raises the operation's error (BrokenWorldError, MultiworldError,
      // ValueError) or TimeoutError when `timeout` passed first (the operation goes on).
      .def(
          "wait",
          [](PyWork& self, std::optional<double> timeout, bool host) {
            void* stream = nullptr;
            if (!host && self.borrowed.cuda_device >= 0) {
              stream = torchCurrentStream(self.borrowed.cuda_device);
            }
            check(waitReleased(self.work, deadlineFrom(timeout), self.interruptible, host, stream));
            return true;
          },
          nb::arg("timeout") = nb::none(), nb::arg("host") = false)
      // Contract: the CUDA device of the operation's tensors, or -1 for CPU tensors.
      .def_prop_ro("cuda_device", [](PyWork& self) { return self.borrowed.cuda_device; })
      // Contract: whether the operation completed (successfully or not); never blocks.
      .def("is_completed", [](PyWork& self) { return self.work.test(); })
      // Contract: None while pending or after success, else the exception wait() would raise.
      .def("exception",
           [](PyWork& self) -> nb::object {
             if (!self.work.test()) return nb::none();
             mw::Status s = self.work.status();
             return s.ok() ? nb::none() : exceptionFor(s);
           })
      .def_prop_ro("world", [](PyWork& self) { return self.work.world(); })
      // Contract: `await work` waits in the loop's default executor (a thread blocked in wait()
      // with the GIL released; no polling) and gives True or raises as wait() does.
      .def("__await__",
           [](nb::handle self) {
             nb::object loop = nb::module_::import_("asyncio").attr("get_running_loop")();
             nb::object fut = loop.attr("run_in_executor")(nb::none(), self.attr("wait"));
             return fut.attr("__await__")();
           })
      .def("__repr__", [](PyWork& self) {
        return "Work(world='" + self.work.world() + "', " +
               (self.work.test() ? "completed" : "pending") + ")";
      });

  // Contract: waits (GIL released) until one of `works` completed and returns the lowest index of
  // those complete; ValueError for an empty list, TimeoutError when `timeout` passed first.
  m.def(
      "wait_any",
      [](const std::vector<PyWork*>& works, std::optional<double> timeout) {
        std::vector<mw::Work> ws;
        for (PyWork* w : works) {
          if (w == nullptr) throw nb::type_error("wait_any: works must be Work objects");
          ws.push_back(w->work);
        }
        mw::Result<size_t> r = mw::Status(mw::Code::kInvalidUsage, "unset");
        waitInSlices(deadlineFrom(timeout), [&](mw::Deadline slice) {
          r = mw::waitAny(ws, slice);
          return r.ok() || r.status().code() != mw::Code::kTimeout;
        });
        check(r.status());
        return *r;
      },
      nb::arg("works"), nb::arg("timeout") = nb::none());

  using C = PyCommunicator;
  const auto a_async = nb::arg("async_op") = false;
  const auto a_stream = nb::arg("stream") = nb::none();
  nb::class_<C>(m, "Communicator",
                "Tensor operations inside the worlds of one WorldManager, addressed by world name.")
      // Contract: a communicator over `manager`'s worlds; keeps `manager` alive.
      .def(
          "__init__",
          [](C* self, nb::handle manager) {
            if (!nb::isinstance<PyManager>(manager)) {
              throw nb::type_error("Communicator(manager): manager must be a WorldManager");
            }
            PyManager& pm = nb::cast<PyManager&>(manager);
            new (self) C{nb::borrow(manager), mw::Communicator(pm.get())};
          },
          nb::arg("manager"))
      // Contract (all operations): tensors are used in place, never copied, and kept alive until
      // the operation completes. Blocking unless async_op=True (then a Work is returned); bad
      // arguments raise ValueError at the call in both modes.
      // Errors: ValueError for bad arguments (rank, size, dtype, non-contiguous tensor),
      // MultiworldError code 'not_found' for an unknown world, BrokenWorldError when the world
      // breaks, MultiworldError 'aborted' when it is removed.
      // isend/irecv: always asynchronous; match by (peer, tag).
      .def(
          "isend",
          [](C& c, const std::string& world, nb::handle tensor, int64_t dst, int64_t tag,
             nb::handle stream) {
            Borrowed b;
            mw::Tensor t = tensorView(tensor, "tensor", b);
            const int d = toInt(dst, "dst"), g = tagFrom(tag);
            return run(std::move(b), stream, true, true,
                       [&] { return c.comm.isend(world, t, d, g); });
          },
          nb::arg("world"), nb::arg("tensor"), nb::arg("dst"), nb::arg("tag") = 0, a_stream)
      .def(
          "irecv",
          [](C& c, const std::string& world, nb::handle tensor, int64_t src, int64_t tag,
             nb::handle stream) {
            Borrowed b;
            mw::Tensor t = tensorView(tensor, "tensor", b);
            const int s = toInt(src, "src"), g = tagFrom(tag);
            return run(std::move(b), stream, true, true,
                       [&] { return c.comm.irecv(world, t, s, g); });
          },
          nb::arg("world"), nb::arg("tensor"), nb::arg("src"), nb::arg("tag") = 0, a_stream)
      .def(
          "send",
          [](C& c, const std::string& world, nb::handle tensor, int64_t dst, int64_t tag,
             bool async_op, nb::handle stream) {
            Borrowed b;
            mw::Tensor t = tensorView(tensor, "tensor", b);
            const int d = toInt(dst, "dst"), g = tagFrom(tag);
            return run(std::move(b), stream, async_op, true,
                       [&] { return c.comm.isend(world, t, d, g); });
          },
          nb::arg("world"), nb::arg("tensor"), nb::arg("dst"), nb::arg("tag") = 0, a_async,
          a_stream)
      .def(
          "recv",
          [](C& c, const std::string& world, nb::handle tensor, int64_t src, int64_t tag,
             bool async_op, nb::handle stream) {
            Borrowed b;
            mw::Tensor t = tensorView(tensor, "tensor", b);
            const int s = toInt(src, "src"), g = tagFrom(tag);
            return run(std::move(b), stream, async_op, true,
                       [&] { return c.comm.irecv(world, t, s, g); });
          },
          nb::arg("world"), nb::arg("tensor"), nb::arg("src"), nb::arg("tag") = 0, a_async,
          a_stream)
      // In place: root's tensor lands in every member's.
      .def(
          "broadcast",
          [](C& c, const std::string& world, nb::handle tensor, int64_t root, bool async_op,
             nb::handle stream) {
            Borrowed b;
            mw::Tensor t = tensorView(tensor, "tensor", b);
            const int r = toInt(root, "root");
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.broadcast(world, t, r); });
          },
          nb::arg("world"), nb::arg("tensor"), nb::arg("root"), a_async, a_stream)
      // In place; op: 'sum', 'prod', 'min', 'max'.
      .def(
          "all_reduce",
          [](C& c, const std::string& world, nb::handle tensor, const std::string& op,
             bool async_op, nb::handle stream) {
            Borrowed b;
            mw::Tensor t = tensorView(tensor, "tensor", b);
            const mw::ReduceOp o = reduceOpFrom(op);
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.allReduce(world, t, o); });
          },
          nb::arg("world"), nb::arg("tensor"), nb::arg("op") = "sum", a_async, a_stream)
      // The result lands in `tensor` at root; other ranks' tensor is scratch (undefined after).
      .def(
          "reduce",
          [](C& c, const std::string& world, nb::handle tensor, int64_t root, const std::string& op,
             bool async_op, nb::handle stream) {
            Borrowed b;
            mw::Tensor t = tensorView(tensor, "tensor", b);
            const int r = toInt(root, "root");
            const mw::ReduceOp o = reduceOpFrom(op);
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.reduce(world, t, r, o); });
          },
          nb::arg("world"), nb::arg("tensor"), nb::arg("root"), nb::arg("op") = "sum", a_async,
          a_stream)
      // output.numel() == input.numel() * size; rank i's input lands in block i of output.
      .def(
          "all_gather",
          [](C& c, const std::string& world, nb::handle output, nb::handle input, bool async_op,
             nb::handle stream) {
            Borrowed b;
            mw::Tensor out = tensorView(output, "output", b), in = tensorView(input, "input", b);
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.allGather(world, in, out); });
          },
          nb::arg("world"), nb::arg("output"), nb::arg("input"), a_async, a_stream)
      // At root output.numel() == input.numel() * size; other ranks may pass output=None.
      .def(
          "gather",
          [](C& c, const std::string& world, nb::handle output, nb::handle input, int64_t root,
             bool async_op, nb::handle stream) {
            Borrowed b;
            mw::Tensor in = tensorView(input, "input", b);
            mw::Tensor out = viewOrEmpty(output, "output", in, b);
            const int r = toInt(root, "root");
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.gather(world, in, out, r); });
          },
          nb::arg("world"), nb::arg("output").none(), nb::arg("input"), nb::arg("root"), a_async,
          a_stream)
      // At root input.numel() == output.numel() * size; other ranks may pass input=None.
      .def(
          "scatter",
          [](C& c, const std::string& world, nb::handle output, nb::handle input, int64_t root,
             bool async_op, nb::handle stream) {
            Borrowed b;
            mw::Tensor out = tensorView(output, "output", b);
            mw::Tensor in = viewOrEmpty(input, "input", out, b);
            const int r = toInt(root, "root");
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.scatter(world, in, out, r); });
          },
          nb::arg("world"), nb::arg("output"), nb::arg("input").none(), nb::arg("root"), a_async,
          a_stream)
      // input.numel() == output.numel() * size; block i of the reduced input lands in rank i.
      .def(
          "reduce_scatter",
          [](C& c, const std::string& world, nb::handle output, nb::handle input,
             const std::string& op, bool async_op, nb::handle stream) {
            Borrowed b;
            mw::Tensor out = tensorView(output, "output", b), in = tensorView(input, "input", b);
            const mw::ReduceOp o = reduceOpFrom(op);
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.reduceScatter(world, in, out, o); });
          },
          nb::arg("world"), nb::arg("output"), nb::arg("input"), nb::arg("op") = "sum", a_async,
          a_stream)
      // input.numel() == output.numel() == block * size; block j of rank i's input lands in
      // block i of rank j's output.
      .def(
          "all_to_all",
          [](C& c, const std::string& world, nb::handle output, nb::handle input, bool async_op,
             nb::handle stream) {
            Borrowed b;
            mw::Tensor out = tensorView(output, "output", b), in = tensorView(input, "input", b);
            return run(std::move(b), stream, async_op, false,
                       [&] { return c.comm.allToAll(world, in, out); });
          },
          nb::arg("world"), nb::arg("output"), nb::arg("input"), a_async, a_stream)
      .def(
          "barrier",
          [](C& c, const std::string& world, bool async_op, nb::handle stream) {
            return run(Borrowed{}, stream, async_op, false, [&] { return c.comm.barrier(world); });
          },
          nb::arg("world"), a_async, a_stream)
      .def_prop_ro("manager", [](C& c) { return c.owner; });

  // Contract: runs `iters` blocking calls of `op` ('send', 'recv', 'all_reduce', 'broadcast'
  // from rank 0, 'barrier') on `tensor` in a C++ loop with the GIL released, the way a C++
  // program calls the runtime: the baseline of bench/python/bench_python.py, which times the
  // same calls made from Python. Raises the first failure; ValueError for an unknown op.
  m.def(
      "_cpp_loop",
      [](C& c, const std::string& op, const std::string& world, nb::handle tensor, int64_t peer,
         int64_t iters) {
        Borrowed b;
        mw::Tensor t = tensorView(tensor, "tensor", b);
        const int p = toInt(peer, "peer");
        std::function<mw::Status()> call;
        if (op == "send") {
          call = [&] { return c.comm.send(world, t, p); };
        } else if (op == "recv") {
          call = [&] { return c.comm.recv(world, t, p); };
        } else if (op == "all_reduce") {
          call = [&] { return c.comm.allReduce(world, t).wait(); };
        } else if (op == "broadcast") {
          call = [&] { return c.comm.broadcast(world, t, 0).wait(); };
        } else if (op == "barrier") {
          call = [&] { return c.comm.barrier(world).wait(); };
        } else {
          throw nb::value_error(("_cpp_loop: unknown op '" + op + "'").c_str());
        }
        mw::Status s;
        {
          GilRelease release;
          for (int64_t i = 0; i < iters && s.ok(); ++i) s = call();
        }
        check(s);
      },
      nb::arg("communicator"), nb::arg("op"), nb::arg("world"), nb::arg("tensor"),
      nb::arg("peer") = 0, nb::arg("iters") = 1);
}

}  // namespace mwpy
