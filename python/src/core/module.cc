// multiworld_native._core: WorldManager, world info, events and the module itself.
#include <Python.h>
#include <cxxabi.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "binding.h"

namespace mwpy {

namespace {

bool interpreterFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

[[noreturn]] void parkForever() {
  for (;;) ::pause();
}

}  // namespace

void GilRelease::reacquireOrPark(PyThreadState* state) noexcept {
  // Checked first (the flag is an atomic, readable without the GIL) so that the common case
  // never starts an unwind; the catch is for a thread that began waiting for the GIL just
  // before finalization started and is then ended by PyEval_RestoreThread's pthread_exit.
  // The main thread is the one finalizing (it exits normally): only other threads park.
  if (interpreterFinalizing() && PyThread_get_thread_ident() != mainThreadIdent()) parkForever();
  try {
    PyEval_RestoreThread(state);
  } catch (abi::__forced_unwind&) {
    parkForever();  // never rethrown: the unwind would reach a noexcept frame and terminate
  }
}

PyManager::PyManager() : manager(std::make_unique<mw::WorldManager>()) {}

PyManager::~PyManager() {
  // ~WorldManager joins the runtime's threads, none of which needs the GIL; while the interpreter
  // is finalizing the GIL is kept (other threads may no longer take it).
  if (Py_IsInitialized() && !interpreterFinalizing()) {
    GilRelease release;
    manager.reset();
  } else {
    manager.reset();
  }
}

int toInt(int64_t v, const char* what) {
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    throw nb::value_error(
        (std::string(what) + " " + std::to_string(v) + " is out of range").c_str());
  }
  return static_cast<int>(v);
}

namespace {

// Seconds -> milliseconds for a WorldOptions duration; the runtime checks the range (its
// kInvalidArgument names the field). NaN and values past the range map to out-of-range ones.
std::chrono::milliseconds millisFrom(double seconds) {
  if (std::isnan(seconds) || seconds < -1e12) return std::chrono::milliseconds(-1);
  if (seconds > 1e12) return std::chrono::milliseconds(std::numeric_limits<int64_t>::max() / 2);
  return std::chrono::milliseconds(std::llround(seconds * 1000.0));
}

// Builds the WorldOptions of initialize_world. Raises ValueError for a bad backend, device or port.
mw::WorldOptions optionsFrom(const std::string& name, int64_t rank, int64_t size,
                             const std::string& backend, const std::string& addr, int64_t port,
                             std::optional<std::string> token, double heartbeat_timeout,
                             nb::handle device, double op_timeout,
                             std::optional<double> executor_grace, bool host_store,
                             const std::string& cuda_wait) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = toInt(rank, "rank");
  o.size = toInt(size, "size");
  auto b = mw::parseBackend(backend);
  check(b.status());
  o.backend = *b;
  if (device.is_none()) {
    o.device = o.backend == mw::BackendKind::kNccl ? mw::Device::cuda(0) : mw::Device::cpu();
  } else {
    auto d = mw::parseDevice(nb::str(device).c_str());  // "cpu", "cuda:N" or a torch.device
    check(d.status());
    o.device = *d;
  }
  if (port < 0 || port > 65535) {
    throw nb::value_error(("port " + std::to_string(port) + " is out of range 0..65535").c_str());
  }
  o.store.host = addr;
  o.store.port = static_cast<uint16_t>(port);
  o.host_store = host_store;
  o.token = token.value_or("");
  auto w = mw::parseCudaWait(cuda_wait);
  check(w.status());
  o.cuda_wait = *w;
  o.heartbeat_timeout = millisFrom(heartbeat_timeout);
  o.op_timeout = millisFrom(op_timeout);
  if (executor_grace) {
    const double us = *executor_grace * 1e6;
    o.executor_grace = std::chrono::microseconds(
        std::isnan(us) ? -1 : static_cast<int64_t>(std::clamp(us, -1.0, 1e15)));
  }
  return o;
}

nb::object brokenDict(const std::optional<mw::BrokenInfo>& b) {
  if (!b) return nb::none();
  nb::dict d;
  d["world"] = b->world;
  d["cause"] = mw::causeName(b->cause);
  d["rank"] = b->peer_rank;
  d["detail"] = b->detail;
  d["detected_at"] = monotonicSeconds(b->detected_at);
  return d;
}

// The Python Events: one mw::Subscription, keeping its manager alive.
struct PyEvents {
  nb::object owner;
  std::shared_ptr<mw::Subscription> sub;
};

}  // namespace

void bindManager(nb::module_& m) {
  nb::class_<mw::WorldInfo>(m, "WorldInfo",
                            "A world of this process, as WorldManager.worlds() reports it.")
      .def_ro("name", &mw::WorldInfo::name)
      .def_ro("rank", &mw::WorldInfo::rank)
      .def_ro("size", &mw::WorldInfo::size)
      .def_prop_ro("backend", [](const mw::WorldInfo& w) { return mw::backendName(w.backend); })
      .def_prop_ro("device", [](const mw::WorldInfo& w) { return w.device.str(); })
      .def_prop_ro(
          "state", [](const mw::WorldInfo& w) { return mw::worldStateName(w.state); },
          "'joining', 'healthy', 'broken' or 'removed'")
      .def_ro("generation", &mw::WorldInfo::generation)
      .def_ro("store_port", &mw::WorldInfo::store_port)
      .def_prop_ro(
          "broken", [](const mw::WorldInfo& w) { return brokenDict(w.broken); },
          "None, or a dict (world, cause, rank, detail, detected_at) once broken")
      .def("__repr__", [](const mw::WorldInfo& w) {
        return "WorldInfo(name='" + w.name + "', rank=" + std::to_string(w.rank) +
               ", size=" + std::to_string(w.size) + ", state='" + mw::worldStateName(w.state) +
               "', generation=" + std::to_string(w.generation) + ")";
      });

  nb::class_<mw::WorldEvent>(m, "WorldEvent", "A created/broken/removed event of one world.")
      .def_prop_ro(
          "kind", [](const mw::WorldEvent& e) { return mw::eventKindName(e.kind); },
          "'created', 'broken' or 'removed'")
      .def_ro("world", &mw::WorldEvent::world)
      .def_ro("generation", &mw::WorldEvent::generation)
      .def_prop_ro(
          "cause",
          [](const mw::WorldEvent& e) -> nb::object {
            if (!e.broken) return nb::none();
            return nb::str(mw::causeName(e.broken->cause));
          },
          "the cause name for a broken event ('peer_died', ...), else None")
      .def_prop_ro(
          "peer", [](const mw::WorldEvent& e) { return e.broken ? e.broken->peer_rank : -1; },
          "the rank blamed for a break, or -1")
      .def_prop_ro(
          "detail",
          [](const mw::WorldEvent& e) { return e.broken ? e.broken->detail : std::string(); })
      .def_prop_ro(
          "at", [](const mw::WorldEvent& e) { return monotonicSeconds(e.at); },
          "monotonic time of the event (comparable with time.monotonic())")
      .def("__repr__", [](const mw::WorldEvent& e) {
        std::string r = std::string("WorldEvent(kind='") + mw::eventKindName(e.kind) +
                        "', world='" + e.world + "', generation=" + std::to_string(e.generation);
        if (e.broken) r += std::string(", cause='") + mw::causeName(e.broken->cause) + "'";
        return r + ")";
      });

  nb::class_<PyEvents>(m, "Events", "A queue of world events from the moment it was created.")
      // Contract: the next event, waiting up to `timeout` seconds (None: until one comes) with
      // the GIL released; None when none arrived in time. Ctrl-C interrupts a long wait.
      .def(
          "next",
          [](PyEvents& self, std::optional<double> timeout) -> nb::object {
            std::optional<mw::WorldEvent> e;
            waitInSlices(deadlineFrom(timeout), [&](mw::Deadline slice) {
              e = self.sub->next(slice);
              return e.has_value();
            });
            return e ? nb::cast(std::move(*e)) : nb::none();
          },
          nb::arg("timeout") = nb::none());

  nb::class_<PyManager>(m, "WorldManager", "The worlds this process belongs to.")
      // Contract: starts the runtime's watchdog thread; nothing blocks.
      .def(nb::init<>())
      // Contract: joins world `name` as `rank` of `size`, blocking (GIL released) until every
      // member joined or `timeout` seconds passed. Rank 0 hosts the world's store at addr:port
      // (port 0: a free one, see store_port()); the others connect there. Raises ValueError for
      // bad arguments, TimeoutError when the members did not all join in time,
      // MultiworldError otherwise (code: 'invalid_usage' for a name in use, 'io_error',
      // 'permission_denied', 'unavailable', ...). With async_op=True it returns at once a Work
      // that completes when the world is up (the name is reserved before it returns).
      // cuda_wait (nccl worlds): "stream" (default) makes Work.wait() and the blocking calls
      // order PyTorch's current stream after the operation without waiting for the GPU; "host"
      // makes them wait on the host until the GPU is done. ValueError for anything else.
      .def(
          "initialize_world",
          [](PyManager& self, const std::string& name, int64_t rank, int64_t size,
             const std::string& backend, const std::string& addr, int64_t port, double timeout,
             std::optional<std::string> token, double heartbeat_timeout, nb::handle device,
             double op_timeout, std::optional<double> executor_grace, bool host_store,
             bool async_op, const std::string& cuda_wait) -> nb::object {
            mw::WorldOptions o =
                optionsFrom(name, rank, size, backend, addr, port, token, heartbeat_timeout, device,
                            op_timeout, executor_grace, host_store, cuda_wait);
            const mw::Deadline deadline = deadlineFrom(timeout);
            if (async_op) {
              mw::Work w;
              {
                GilRelease release;
                w = self.get().initWorldAsync(o, deadline);
              }
              return makeWork(std::move(w), Borrowed{}, /*interruptible=*/true);
            }
            mw::Status s;
            {
              GilRelease release;
              s = self.get().initWorld(o, deadline);
            }
            check(s);
            return nb::none();
          },
          nb::arg("name"), nb::arg("rank"), nb::arg("size"), nb::arg("backend") = "gloo",
          nb::arg("addr") = "127.0.0.1", nb::arg("port") = 0, nb::arg("timeout") = 60.0,
          nb::arg("token") = nb::none(), nb::arg("heartbeat_timeout") = 1.0,
          nb::arg("device") = nb::none(), nb::arg("op_timeout") = 60.0,
          nb::arg("executor_grace") = nb::none(), nb::arg("host_store") = true,
          nb::arg("async_op") = false, nb::arg("cuda_wait") = "stream")
      // Contract: leaves world `name` (pending operations fail with MultiworldError code
      // 'aborted'; a joining world is cancelled). GIL released. MultiworldError code
      // 'not_found' for an unknown name.
      .def(
          "remove_world",
          [](PyManager& self, const std::string& name) {
            mw::Status s;
            {
              GilRelease release;
              s = self.get().removeWorld(name);
            }
            check(s);
          },
          nb::arg("name"))
      // Contract: every world not yet removed, in name order (never blocks for long).
      .def("worlds",
           [](PyManager& self) {
             GilRelease release;
             return self.get().worlds();
           })
      // Contract: one world's info; MultiworldError code 'not_found' for an unknown name.
      .def(
          "world",
          [](PyManager& self, const std::string& name) {
            mw::Result<mw::WorldInfo> r = mw::Status(mw::Code::kInvalidUsage, "unset");
            {
              GilRelease release;
              r = self.get().world(name);
            }
            check(r.status());
            return std::move(r).value();
          },
          nb::arg("name"))
      // Contract: the port of world `name`'s store, waiting (GIL released) up to `timeout`
      // seconds until rank 0 has bound it. TimeoutError, or MultiworldError 'not_found' /
      // 'invalid_usage' (the initialization failed first).
      .def(
          "store_port",
          [](PyManager& self, const std::string& name, std::optional<double> timeout) {
            const mw::Deadline deadline = deadlineFrom(timeout);
            mw::Result<uint16_t> r = mw::Status(mw::Code::kInvalidUsage, "unset");
            {
              GilRelease release;
              r = self.get().storePort(name, deadline);
            }
            check(r.status());
            return *r;
          },
          nb::arg("name"), nb::arg("timeout") = 10.0)
      // Contract: a new event queue, filled from now on.
      .def("events",
           [](nb::handle self) {
             return PyEvents{nb::borrow(self), nb::cast<PyManager&>(self).get().subscribe()};
           })
      // Contract: removes every world (GIL released); the manager stays usable.
      .def("close",
           [](PyManager& self) {
             GilRelease release;
             for (const auto& w : self.get().worlds()) self.get().removeWorld(w.name).ignore();
           })
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyManager& self, nb::args) {
        GilRelease release;
        for (const auto& w : self.get().worlds()) self.get().removeWorld(w.name).ignore();
      });
}

}  // namespace mwpy

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "libmultiworld, natively: the thin nanobind layer under multiworld_native.";
  mwpy::mainThreadIdent();  // known before any thread may need it without the GIL
  mwpy::bindManager(m);
  mwpy::bindCommunicator(m);
  m.def("_parked_count", &mwpy::parkedCount,
        "Operations whose Work was dropped while pending and whose tensors are still held.");
  m.def(
      "_tensor_info",
      [](nb::handle t) {
        mwpy::Borrowed keep;
        mw::Tensor v = mwpy::tensorView(t, "tensor", keep);
        return nb::make_tuple(reinterpret_cast<uintptr_t>(v.data), mw::dtypeName(v.dtype), v.count,
                              v.device.str());
      },
      "(data pointer, dtype, count, device) of the view an operation would get: for tests.");
  // Contract: adds `amount` to this process's application metric `name`, reported to the chaos
  // harness every 100 ms when it started this program (multiworld/telemetry.h); a no-op
  // otherwise. ValueError for a name that is not 1-64 characters of A-Z a-z 0-9 _ . - or an
  // amount that is not finite. Never blocks on I/O.
  m.def(
      "report_metric",
      [](const std::string& name, double amount) { mwpy::check(mw::reportMetric(name, amount)); },
      nb::arg("name"), nb::arg("amount") = 1.0);
  // Contract: reports one outcome of the program's own check `name` (ok: it held; else `detail`
  // says what was wrong), counted per 100 ms window for the chaos harness's expect.app_checks when
  // it started this program (multiworld/telemetry.h, reportCheck); a no-op otherwise. ValueError
  // for a name that is not 1-64 characters of A-Z a-z 0-9 _ . -. Never blocks on I/O.
  m.def(
      "report_check",
      [](const std::string& name, bool ok, const std::string& detail) {
        mwpy::check(mw::reportCheck(name, ok, detail));
      },
      nb::arg("name"), nb::arg("ok"), nb::arg("detail") = "");
  m.def(
      "_monotonic", [] { return mwpy::monotonicSeconds(mw::Clock::now()); },
      "The runtime's monotonic clock in seconds.");
  m.attr("__version__") = MW_VERSION;
  m.attr("WITH_NCCL") = bool(MW_CONFIG_WITH_NCCL);
}
