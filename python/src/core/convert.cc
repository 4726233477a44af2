// Conversions between Python and libmultiworld: timeouts, statuses to exceptions, tensors to
// zero-copy mw::Tensor views, GIL-released waits and the parked list of early-dropped operations.
#include <Python.h>
#include <dlpack/dlpack.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "binding.h"

namespace mwpy {

using namespace std::chrono_literals;

mw::Deadline deadlineFrom(std::optional<double> timeout) {
  if (!timeout) return mw::Deadline::max();
  const double s = *timeout;
  if (std::isnan(s)) throw nb::value_error("timeout must be a number of seconds or None, not NaN");
  if (s <= 0) return mw::Clock::now();
  if (s > 1e9) return mw::Deadline::max();  // ~31 years: never, without overflow
  return mw::deadlineIn(
      std::chrono::duration_cast<mw::Clock::duration>(std::chrono::duration<double>(s)));
}

double monotonicSeconds(mw::Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

namespace {

nb::object errorsModule() {
  // Imported on first use: the module's own package imports _core first.
  return nb::module_::import_("multiworld_native.errors");
}

}  // namespace

nb::object exceptionFor(const mw::Status& s) {
  const std::string text = s.toString();
  const char* code = mw::codeName(s.code());
  nb::object exc;
  switch (s.code()) {
    case mw::Code::kTimeout:
      exc = nb::borrow(PyExc_TimeoutError)(text);
      break;
    case mw::Code::kInvalidArgument:
      exc = nb::borrow(PyExc_ValueError)(text);
      break;
    case mw::Code::kWorldBroken: {
      const auto& b = s.broken();
      if (b) {
        return errorsModule().attr("BrokenWorldError")(text, b->world, mw::causeName(b->cause),
                                                       b->peer_rank,
                                                       monotonicSeconds(b->detected_at), b->detail);
      }
      return errorsModule().attr("BrokenWorldError")(text, "", "none", -1, 0.0, "");
    }
    default:
      return errorsModule().attr("MultiworldError")(text, code);
  }
  nb::setattr(exc, "code", nb::str(code));
  return exc;
}

void raiseStatus(const mw::Status& s) {
  nb::object exc = exceptionFor(s);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

mw::Tensor tensorView(nb::handle obj, const char* arg, Borrowed& keep) {
  nb::ndarray<> a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    if (nb::hasattr(obj, "__dlpack__")) {
      // A tensor its framework cannot export (torch 1.13: bool, requires_grad): say why.
      std::string why = "its DLPack export failed";
      PyObject* capsule = PyObject_CallMethod(obj.ptr(), "__dlpack__", nullptr);
      if (capsule != nullptr) {
        Py_DECREF(capsule);
      } else {
        PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (PyObject* text = value ? PyObject_Str(value) : nullptr) {
          if (const char* c = PyUnicode_AsUTF8(text)) why = c;
          Py_DECREF(text);
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        PyErr_Clear();
      }
      std::string dtype = "?";
      if (nb::hasattr(obj, "dtype")) {
        nb::object d = obj.attr("dtype");
        dtype = nb::str(nb::handle(d)).c_str();
      }
      throw nb::value_error(("argument '" + std::string(arg) + "' (dtype " + dtype +
                             ") cannot be exported through DLPack: " + why)
                                .c_str());
    }
    throw nb::type_error(("argument '" + std::string(arg) +
                          "': expected a tensor (torch.Tensor or an object with __dlpack__), got " +
                          nb::type_name(obj.type()).c_str())
                             .c_str());
  }
  // The runtime decides what it accepts (dtype, device, contiguity, size): the view is handed to
  // mw::fromDLPack as the DLTensor nanobind already holds.
  DLManagedTensor m{};
  m.dl_tensor.data = a.data();  // byte_offset already applied
  m.dl_tensor.device = {static_cast<DLDeviceType>(a.device_type()), a.device_id()};
  m.dl_tensor.ndim = static_cast<int32_t>(a.ndim());
  m.dl_tensor.dtype = {a.dtype().code, a.dtype().bits, a.dtype().lanes};
  m.dl_tensor.shape = const_cast<int64_t*>(a.shape_ptr());
  m.dl_tensor.strides = const_cast<int64_t*>(a.stride_ptr());
  char what[64];  // no allocation on the per-call path
  std::snprintf(what, sizeof what, "argument '%s'", arg);
  mw::Result<mw::Tensor> t = mw::fromDLPack(&m, what);
  if (!t.ok()) throw nb::value_error(t.status().message().c_str());
  if (t->device.kind == mw::Device::Kind::kCuda) {
    keep.cuda_device = t->device.index;
  } else {
    keep.cpu_tensors = true;
  }
  keep.objects.push_back(nb::borrow(obj));
  keep.arrays.push_back(std::move(a));
  return *t;
}

unsigned long mainThreadIdent() {
  static const unsigned long main_ident = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  return main_ident;
}

bool onMainThread() { return PyThread_get_thread_ident() == mainThreadIdent(); }

mw::Status waitReleased(const mw::Work& w, mw::Deadline deadline, bool interruptible, bool host,
                        void* stream) {
  const auto once = [&](mw::Deadline until) {
    if (host) return w.synchronize(until);
    mw::CudaStreamScope scope(stream);
    return w.wait(until);
  };
  if (!interruptible || !onMainThread()) {
    GilRelease release;
    return once(deadline);
  }
  mw::Status s;
  const bool done = waitInSlices(deadline, [&](mw::Deadline slice) {
    s = once(slice);
    return s.code() != mw::Code::kTimeout || w.test();
  });
  // A completed operation reports its own status (which may itself be a timeout).
  return done && s.code() == mw::Code::kTimeout ? w.status() : s;
}

namespace {

struct Parked {
  mw::Work work;
  Borrowed borrowed;
};

// Never destroyed: entries still pending at interpreter exit keep their memory to the end.
std::vector<Parked>& parked() {
  static auto* list = new std::vector<Parked>();
  return *list;
}

}  // namespace

void park(const mw::Work& w, Borrowed&& b) {
  pruneParked();
  parked().push_back(Parked{w, std::move(b)});
}

void pruneParked() {
  // Releasing a reference may run Python code (a __del__, a Work dropped in turn, a thread
  // switch), which may park or prune again: the list is rebuilt by moves only (moving releases
  // nothing), and the finished entries are released after it is consistent again.
  auto& list = parked();
  std::vector<Parked> keep, done;
  for (Parked& p : list) (p.work.test() ? done : keep).push_back(std::move(p));
  list.swap(keep);
}

size_t parkedCount() { return parked().size(); }

}  // namespace mwpy
