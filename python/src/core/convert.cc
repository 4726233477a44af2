// Conversions between Python and libmultiworld: timeouts, statuses to exceptions, tensors to
// zero-copy mw::Tensor views, GIL-released waits and the parked list of early-dropped operations.
#include <Python.h>

#include <algorithm>
#include <cmath>
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

namespace {

// DLPack dtype -> mw::DType; nullopt for the ones libmultiworld lacks.
std::optional<mw::DType> dtypeOf(nb::dlpack::dtype t) {
  using Code = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  switch (static_cast<Code>(t.code)) {
    case Code::Float:
      if (t.bits == 32) return mw::DType::kFloat32;
      if (t.bits == 64) return mw::DType::kFloat64;
      if (t.bits == 16) return mw::DType::kFloat16;
      return std::nullopt;
    case Code::Bfloat:
      if (t.bits == 16) return mw::DType::kBFloat16;
      return std::nullopt;
    case Code::Int:
      if (t.bits == 32) return mw::DType::kInt32;
      if (t.bits == 64) return mw::DType::kInt64;
      return std::nullopt;
    case Code::UInt:
      if (t.bits == 8) return mw::DType::kUInt8;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::string dtypeText(nb::dlpack::dtype t) {
  static const char* names[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string n = t.code < 7 ? names[t.code] : "code" + std::to_string(t.code);
  n += std::to_string(t.bits);
  if (t.lanes != 1) n += "x" + std::to_string(t.lanes);
  return n;
}

}  // namespace

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
  const auto dt = dtypeOf(a.dtype());
  if (!dt) {
    throw nb::value_error(("argument '" + std::string(arg) + "': dtype " + dtypeText(a.dtype()) +
                           " is not supported (float32, float64, int32, int64, float16, "
                           "bfloat16, uint8)")
                              .c_str());
  }
  // Row-major contiguity; dimensions of extent 1 may carry any stride.
  size_t count = 1;
  bool contiguous = true;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.stride_ptr() != nullptr && a.shape(i) != 1 &&
        a.stride(i) != static_cast<int64_t>(count)) {
      contiguous = false;
    }
    count *= a.shape(i);
  }
  if (!contiguous && count > 0) {
    throw nb::value_error(("argument '" + std::string(arg) +
                           "' is not contiguous: pass tensor.contiguous() (operations work on "
                           "the tensor's memory in place, without copies)")
                              .c_str());
  }
  mw::Device dev;
  if (a.device_type() == nb::device::cpu::value) {
    dev = mw::Device::cpu();
  } else if (a.device_type() == nb::device::cuda::value) {
    dev = mw::Device::cuda(a.device_id());
  } else {
    throw nb::value_error(("argument '" + std::string(arg) + "': DLPack device type " +
                           std::to_string(a.device_type()) + " is not supported (cpu, cuda:N)")
                              .c_str());
  }
  mw::Tensor t{a.data(), *dt, count, dev};
  keep.objects.push_back(nb::borrow(obj));
  keep.arrays.push_back(std::move(a));
  return t;
}

bool onMainThread() {
  static const unsigned long main_ident = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  return PyThread_get_thread_ident() == main_ident;
}

mw::Status waitReleased(const mw::Work& w, mw::Deadline deadline, bool interruptible) {
  if (!interruptible || !onMainThread()) {
    nb::gil_scoped_release release;
    return w.wait(deadline);
  }
  for (;;) {
    const mw::Deadline slice = std::min(deadline, mw::deadlineIn(200ms));
    mw::Status s;
    bool done = false;
    {
      nb::gil_scoped_release release;
      s = w.wait(slice);
      done = s.code() != mw::Code::kTimeout || w.test();
    }
    // A completed operation reports its own status (which may itself be a timeout).
    if (done) return done && s.code() == mw::Code::kTimeout ? w.status() : s;
    if (mw::Clock::now() >= deadline) return s;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
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
