// Entry points CPython calls directly, without pybind11's dispatcher, for the calls a watched
// training step makes many times: through pybind11 each call looks up its C++ types by name
// and packs *args and **kwargs into new objects, ~0.2-0.5 us a call in the training loop,
// where the code is cold (docs/watch.md, "The training thread's budget"). They take CPython's
// arguments as they come; the method descriptors they are installed as (InstallMethods)
// check that self is an instance of the class.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <exception>
#include <string_view>
#include <vector>

namespace trainscope::python {

// The C++ object of a pybind11 instance, or nullptr with TypeError set (not initialised).
template <typename T>
T* ValueOf(PyObject* self) {
  auto holder = reinterpret_cast<pybind11::detail::instance*>(self)->get_value_and_holder();
  if (!holder.holder_constructed()) {
    PyErr_SetString(PyExc_TypeError, "trainscope: the object was not initialised");
    return nullptr;
  }
  return static_cast<T*>(holder.value_ptr());
}

// Runs body, turning a C++ exception into the Python error it carries (nullptr returned).
template <typename Body>
PyObject* Guard(Body&& body) {
  try {
    return body();
  } catch (pybind11::error_already_set& error) {
    error.restore();
  } catch (pybind11::builtin_exception& error) {
    error.set_error();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  }
  return nullptr;
}

// The new reference a CPython call returned, or the error it raised, thrown (for Guard).
inline pybind11::object Owned(PyObject* result) {
  if (result == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::object>(result);
}

// defs (ended by a null name) as methods of cls. The table must outlive the class.
inline void InstallMethods(const pybind11::object& cls, PyMethodDef* defs) {
  for (PyMethodDef* def = defs; def->ml_name != nullptr; ++def) {
    auto method = pybind11::reinterpret_steal<pybind11::object>(
        PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def));
    if (!method) throw pybind11::error_already_set();
    pybind11::setattr(cls, def->ml_name, method);
  }
}

template <typename Function>
PyCFunction AsMethod(Function* f) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

// The arguments of a METH_FASTCALL entry point, read in order: each Read* returns false with
// a Python error set (the caller returns nullptr). No keywords: the Python callers pass
// positionally.
class FastArgs {
 public:
  FastArgs(const char* signature, PyObject* const* args, Py_ssize_t nargs, Py_ssize_t least, Py_ssize_t most)
      : signature_(signature), args_(args), nargs_(nargs) {
    if (nargs < least || nargs > most) {
      PyErr_Format(PyExc_TypeError, "trainscope: %s takes %zd to %zd arguments (%zd given)", signature, least, most,
                   nargs);
      ok_ = false;
    }
  }
  bool ok() const { return ok_; }
  Py_ssize_t size() const { return nargs_; }
  PyObject* Object(Py_ssize_t i) const { return args_[i]; }
  // Argument i, or None when the call stopped before it (a trailing argument that defaults to None).
  pybind11::object OrNone(Py_ssize_t i) const {
    return i < nargs_ ? pybind11::reinterpret_borrow<pybind11::object>(args_[i]) : pybind11::none();
  }

  bool Int(Py_ssize_t i, int64_t* out) const {
    *out = PyLong_AsLongLong(args_[i]);
    return !(*out == -1 && PyErr_Occurred());
  }
  bool Unsigned(Py_ssize_t i, uint64_t* out) const {
    *out = PyLong_AsUnsignedLongLong(args_[i]);
    return !(*out == static_cast<uint64_t>(-1) && PyErr_Occurred());
  }
  bool Id(Py_ssize_t i, uint32_t* out) const {
    uint64_t value = 0;
    if (!Unsigned(i, &value)) return false;
    if (value > UINT32_MAX) return Fail("a series id over 2^32");
    *out = static_cast<uint32_t>(value);
    return true;
  }
  bool Double(Py_ssize_t i, double* out) const {
    *out = PyFloat_AsDouble(args_[i]);
    return !(*out == -1.0 && PyErr_Occurred());
  }
  bool Bool(Py_ssize_t i, bool* out) const {
    const int truth = PyObject_IsTrue(args_[i]);
    *out = truth > 0;
    return truth >= 0;
  }
  bool Str(Py_ssize_t i, std::string_view* out) const {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_Check(args_[i]) ? PyUnicode_AsUTF8AndSize(args_[i], &size) : nullptr;
    if (text == nullptr) return PyErr_Occurred() ? false : Fail("expected a str");
    *out = std::string_view(text, static_cast<size_t>(size));
    return true;
  }
  // A sequence of ints (a list, a tuple, a torch.Size).
  bool Ints(Py_ssize_t i, std::vector<int64_t>* out) const {
    auto seq = pybind11::reinterpret_steal<pybind11::object>(PySequence_Fast(args_[i], "expected a sequence"));
    if (!seq) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    out->resize(static_cast<size_t>(n));
    for (Py_ssize_t k = 0; k < n; ++k) {
      (*out)[k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq.ptr(), k));
      if ((*out)[k] == -1 && PyErr_Occurred()) return false;
    }
    return true;
  }

 private:
  bool Fail(const char* what) const {
    PyErr_Format(PyExc_TypeError, "trainscope: %s: %s", signature_, what);
    return false;
  }
  const char* signature_;
  PyObject* const* args_;
  Py_ssize_t nargs_;
  bool ok_ = true;
};

}  // namespace trainscope::python
