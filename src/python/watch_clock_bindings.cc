// The step clock's per-boundary work of run.watch() in one C++ object (_core.StepCore), and
// the guarded hooks torch calls (_core.GuardedHook): what python/trainscope/_watch/clock.py
// and hooks.py did in several Python functions per boundary.
//
// - Phase timing on the host: start(phase) / stop(phase) keep the phase's span and add its
//   seconds to the step's time/<phase>; add_phase() takes a phase timed elsewhere (the
//   batch's wait, a device timing landed late).
// - close(): the step's spans and time/<phase>, time/step, time/other in the recorder.
// - trainscope's own time (time/watch): enter() / leave() around its code (outermost calls
//   only), take() per step, and on_gc() (a gc.callbacks entry) leaves out the collections
//   Python starts while trainscope's code runs (the census's own one stays in: own_gc).
// - GuardedHook(fn, part, failures, core): fn as torch calls trainscope's hooks, skipped once
//   `part` failed, a failure reported once (failures.report) and never raised, its time
//   counted as trainscope's own. No Python frame of its own.
//
// Clocks as Python's: perf_counter is CLOCK_MONOTONIC, time.time() CLOCK_REALTIME, in
// seconds as double (ns / 1e9), so a value Python took (run.data()'s fetch start) and one
// taken here are on the same scale.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <time.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "python/direct_calls.h"
#include "recorder/recorder.h"

namespace py = pybind11;

namespace trainscope::python {

namespace {

double ClockSeconds(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  const int64_t ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  return static_cast<double>(ns) / 1e9;
}

double Monotonic() { return ClockSeconds(CLOCK_MONOTONIC); }
double Wall() { return ClockSeconds(CLOCK_REALTIME); }

class StepCore {
 public:
  // time_id(phase) -> the series id of time/<phase> (asked once per phase); run: a weak
  // reference to the run (its _step is the current step). thread_clock: time/watch as the
  // training thread's CPU time (bench/watch/overhead.py), else wall time.
  StepCore(Recorder& recorder, py::object run_ref, py::object time_id, bool thread_clock)
      : recorder_(recorder), run_ref_(std::move(run_ref)), time_id_(std::move(time_id)),
        self_clock_(thread_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC) {}

  // ---- phases ----

  void Start(std::string_view phase) {
    Phase& p = PhaseOf(phase);
    p.open = true;
    p.wall = Wall();
    p.start = Monotonic();
  }

  void Stop(std::string_view phase) {
    const int index = Find(phase);
    if (index < 0 || !phases_[index].open) return;
    Phase& p = phases_[index];
    p.open = false;
    const double seconds = Monotonic() - p.start;
    spans_.push_back({CurrentStep(), index, p.wall, seconds});
    AddSeconds(index, seconds);
  }

  bool IsOpen(std::string_view phase) const {
    const int index = Find(phase);
    return index >= 0 && phases_[index].open;
  }

  // A phase timed elsewhere: of this step, or of an earlier one (a device timing that
  // landed late: its own step's time/<phase>, logged now).
  void AddPhase(std::string_view phase, double start_wall, double seconds, py::object step_arg) {
    const int index = Index(phase);
    const int64_t current = CurrentStep();
    const int64_t step = step_arg.is_none() ? current : step_arg.cast<int64_t>();
    spans_.push_back({step, index, start_wall, seconds});
    if (step == current) {
      AddSeconds(index, seconds);
    } else {
      recorder_.LogScalar(TimeId(index), step, seconds);
    }
  }

  bool HasPhaseSeconds() const { return !step_phases_.empty(); }

  // The step's spans and time/<phase> (each phase of the step, in the order first timed),
  // then time/step = ended - started and, unless the phases are device times, time/other
  // (time/step less the phases, at least 0). started None: no time/step. ended None: now.
  void Close(int64_t step, py::object ended, py::object started, bool device_timed) {
    for (const SpanEntry& s : spans_) {
      recorder_.LogSpan(Span{s.step, phases_[s.phase].name, s.start, s.duration});
    }
    spans_.clear();
    double sum = 0;
    for (int index : step_phases_) {
      Phase& p = phases_[index];
      recorder_.LogScalar(TimeId(index), step, p.seconds);
      sum += p.seconds;
    }
    if (!started.is_none()) {
      const double end = ended.is_none() ? Monotonic() : ended.cast<double>();
      const double seconds = end - started.cast<double>();
      recorder_.LogScalar(TimeId(Index("step")), step, seconds);
      if (!device_timed) recorder_.LogScalar(TimeId(Index("other")), step, std::max(0.0, seconds - sum));
    }
    for (int index : step_phases_) {
      phases_[index].seconds = 0;
      phases_[index].in_step = false;
    }
    step_phases_.clear();
  }

  // ---- trainscope's own time ----

  void Enter() {
    if (++depth_ == 1) entered_ = SelfNow();
  }
  void Leave() {
    if (--depth_ == 0) seconds_ += SelfNow() - entered_;
  }
  // The seconds since the last take (a call still open counts up to now).
  double Take() {
    const double now = SelfNow();
    const double seconds = seconds_ + (depth_ ? now - entered_ : 0.0);
    seconds_ = 0;
    if (depth_) entered_ = now;
    return seconds;
  }
  void ResetSelfTime() {
    depth_ = 0;
    entered_ = 0;
    seconds_ = 0;
    gc_started_ = kNone;
    own_gc_ = false;
  }
  void OnGc(const std::string& phase, const py::object& /*info*/) {
    if (own_gc_) return;
    if (phase == "start") {
      gc_started_ = depth_ ? SelfNow() : kNone;
    } else if (!std::isnan(gc_started_)) {
      seconds_ -= SelfNow() - gc_started_;
      gc_started_ = kNone;
    }
  }

  int depth_ = 0;
  double entered_ = 0;
  double seconds_ = 0;
  bool own_gc_ = false;

  // GuardedHook's call: fn(*args, **kwargs) timed, unless part is in off; a failure reported.
  py::object CallGuarded(PyObject* off, PyObject* part, PyObject* failures, PyObject* fn, PyObject* args,
                         PyObject* kwargs) {
    const int is_off = PySet_Contains(off, part);
    if (is_off < 0) throw py::error_already_set();
    if (is_off) return py::none();
    Enter();
    PyObject* result = PyObject_Call(fn, args, kwargs);
    Leave();
    if (result != nullptr) return py::reinterpret_steal<py::object>(result);
    if (!PyErr_ExceptionMatches(PyExc_Exception)) throw py::error_already_set();  // KeyboardInterrupt, SystemExit
    py::error_already_set error;  // takes the raised exception
    // The monitor never kills the training: reported once, the part switched off.
    py::handle(failures).attr("report")(py::handle(part), error.value());
    return py::none();
  }

 private:
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

  struct Phase {
    std::string name;
    uint32_t time_id = 0;
    bool open = false;
    bool in_step = false;  // has time/<phase> this step (logged even when 0)
    double wall = 0, start = 0, seconds = 0;
  };
  struct SpanEntry {
    int64_t step;
    int phase;
    double start, duration;
  };

  double SelfNow() const { return ClockSeconds(self_clock_); }

  int Find(std::string_view phase) const {
    for (size_t i = 0; i < phases_.size(); ++i) {
      if (phases_[i].name == phase) return static_cast<int>(i);
    }
    return -1;
  }
  int Index(std::string_view phase) {
    int index = Find(phase);
    if (index >= 0) return index;
    phases_.push_back(Phase{std::string(phase)});
    return static_cast<int>(phases_.size()) - 1;
  }
  Phase& PhaseOf(std::string_view phase) { return phases_[Index(phase)]; }

  void AddSeconds(int index, double seconds) {
    Phase& p = phases_[index];
    if (!p.in_step) {
      p.in_step = true;
      step_phases_.push_back(index);
    }
    p.seconds += seconds;
  }

  uint32_t TimeId(int index) {
    Phase& p = phases_[index];
    if (p.time_id == 0) p.time_id = time_id_(p.name).cast<uint32_t>();
    return p.time_id;
  }

  int64_t CurrentStep() const {
    static const py::handle step_name = PyUnicode_InternFromString("_step");  // never freed
    PyObject* run = PyWeakref_GetObject(run_ref_.ptr());
    if (run == nullptr) throw py::error_already_set();
    if (run == Py_None) return 0;
    return py::reinterpret_borrow<py::object>(run).attr(step_name).cast<int64_t>();
  }

  Recorder& recorder_;
  py::object run_ref_;
  py::object time_id_;
  clockid_t self_clock_;
  std::vector<Phase> phases_;
  std::vector<int> step_phases_;
  std::vector<SpanEntry> spans_;
  double gc_started_ = kNone;
};

// A hook trainscope attaches to the user's modules (and the clock's listeners), as
// hooks.GuardedHook was: copies and pickles as an inert hook (hooks.Hook's __reduce__ and
// __deepcopy__), so a watched model saved or deep-copied is not watched.
class GuardedHook {
 public:
  GuardedHook(py::object fn, py::object part, py::object failures, std::shared_ptr<StepCore> core)
      : fn(std::move(fn)), part(std::move(part)), failures(std::move(failures)), core_(std::move(core)),
        off_(this->failures.attr("off")) {
    if (!PySet_Check(off_.ptr())) throw py::type_error("GuardedHook: failures.off must be a set");
  }

  // kwargs may be null (none given).
  py::object Call(PyObject* args, PyObject* kwargs) {
    if (fn.is_none()) return py::none();
    return core_->CallGuarded(off_.ptr(), part.ptr(), failures.ptr(), fn.ptr(), args, kwargs);
  }

  py::object fn, part, failures;

  // The garbage collector's view: a watcher holds its hooks and each hook the watcher's
  // bound method, a cycle that is collected only if the hook shows what it holds.
  int Traverse(visitproc visit, void* arg) {
    Py_VISIT(fn.ptr());
    Py_VISIT(part.ptr());
    Py_VISIT(failures.ptr());
    Py_VISIT(off_.ptr());
    return 0;
  }
  void Clear() {
    fn = py::none();
    failures = py::none();
    off_ = py::set();
  }

 private:
  std::shared_ptr<StepCore> core_;
  py::object off_;  // failures.off: the parts switched off
};

// ---- the per-step calls without pybind11's dispatcher (python/direct_calls.h) ----

// The phase name of a one-argument method (start, stop, is_open): the str's own UTF-8, no copy.
bool PhaseArgument(const char* method, PyObject* const* args, Py_ssize_t nargs, std::string_view* phase) {
  Py_ssize_t size = 0;
  const char* text = nargs == 1 && PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8AndSize(args[0], &size) : nullptr;
  if (text == nullptr) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "StepCore.%s takes one str (the phase)", method);
    return false;
  }
  *phase = std::string_view(text, static_cast<size_t>(size));
  return true;
}

PyObject* CoreStart(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  StepCore* core = ValueOf<StepCore>(self);
  std::string_view phase;
  if (core == nullptr || !PhaseArgument("start", args, nargs, &phase)) return nullptr;
  core->Start(phase);
  Py_RETURN_NONE;
}

PyObject* CoreStop(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  StepCore* core = ValueOf<StepCore>(self);
  std::string_view phase;
  if (core == nullptr || !PhaseArgument("stop", args, nargs, &phase)) return nullptr;
  return Guard([&] {
    core->Stop(phase);  // reads the run's step: may raise
    Py_RETURN_NONE;
  });
}

PyObject* CoreIsOpen(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  StepCore* core = ValueOf<StepCore>(self);
  std::string_view phase;
  if (core == nullptr || !PhaseArgument("is_open", args, nargs, &phase)) return nullptr;
  return PyBool_FromLong(core->IsOpen(phase));
}

PyObject* CoreEnter(PyObject* self, PyObject* /*unused*/) {
  StepCore* core = ValueOf<StepCore>(self);
  if (core == nullptr) return nullptr;
  core->Enter();
  Py_RETURN_NONE;
}

PyObject* CoreLeave(PyObject* self, PyObject* /*unused*/) {
  StepCore* core = ValueOf<StepCore>(self);
  if (core == nullptr) return nullptr;
  core->Leave();
  Py_RETURN_NONE;
}

PyObject* CoreTake(PyObject* self, PyObject* /*unused*/) {
  StepCore* core = ValueOf<StepCore>(self);
  return core == nullptr ? nullptr : PyFloat_FromDouble(core->Take());
}

// core.call(failures, part, fn, *args, **kwargs): fn as a GuardedHook calls it.
PyObject* CoreCall(PyObject* self, PyObject* args, PyObject* kwargs) {
  StepCore* core = ValueOf<StepCore>(self);
  if (core == nullptr) return nullptr;
  if (PyTuple_GET_SIZE(args) < 3) {
    PyErr_SetString(PyExc_TypeError, "StepCore.call takes (failures, part, fn, *args, **kwargs)");
    return nullptr;
  }
  return Guard([&] {
    PyObject* failures = PyTuple_GET_ITEM(args, 0);
    py::object off = py::handle(failures).attr("off");
    py::object rest = py::reinterpret_steal<py::object>(PyTuple_GetSlice(args, 3, PyTuple_GET_SIZE(args)));
    if (!rest) throw py::error_already_set();
    return core->CallGuarded(off.ptr(), PyTuple_GET_ITEM(args, 1), failures, PyTuple_GET_ITEM(args, 2), rest.ptr(),
                             kwargs)
        .release()
        .ptr();
  });
}

// add_phase(phase, start_wall, seconds, step=None)
PyObject* CoreAddPhase(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  StepCore* core = ValueOf<StepCore>(self);
  if (core == nullptr) return nullptr;
  FastArgs a("StepCore.add_phase(phase, start_wall, seconds, step=None)", args, nargs, 3, 4);
  std::string_view phase;
  double start_wall = 0, seconds = 0;
  if (!a.ok() || !a.Str(0, &phase) || !a.Double(1, &start_wall) || !a.Double(2, &seconds)) return nullptr;
  return Guard([&] {
    core->AddPhase(phase, start_wall, seconds, a.OrNone(3));
    Py_RETURN_NONE;
  });
}

// close(step, ended, started, device_timed)
PyObject* CoreClose(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  StepCore* core = ValueOf<StepCore>(self);
  if (core == nullptr) return nullptr;
  FastArgs a("StepCore.close(step, ended, started, device_timed)", args, nargs, 4, 4);
  int64_t step = 0;
  bool device_timed = false;
  if (!a.ok() || !a.Int(0, &step) || !a.Bool(3, &device_timed)) return nullptr;
  return Guard([&] {
    core->Close(step, py::reinterpret_borrow<py::object>(a.Object(1)), py::reinterpret_borrow<py::object>(a.Object(2)),
                device_timed);
    Py_RETURN_NONE;
  });
}

PyMethodDef kStepCoreMethods[] = {
    {"start", AsMethod(CoreStart), METH_FASTCALL,
     "start(phase): the phase's span begins (host wall and monotonic clocks)."},
    {"stop", AsMethod(CoreStop), METH_FASTCALL,
     "stop(phase): its span ends; its seconds join the step's time/<phase> (nothing if not open)."},
    {"is_open", AsMethod(CoreIsOpen), METH_FASTCALL,
     "is_open(phase) -> bool"},
    {"add_phase", AsMethod(CoreAddPhase), METH_FASTCALL,
     "add_phase(phase, start_wall, seconds, step=None): a phase timed elsewhere, of this step or an earlier one."},
    {"close", AsMethod(CoreClose), METH_FASTCALL,
     "close(step, ended, started, device_timed): the step's spans, time/<phase>, time/step and time/other."},
    {"enter", CoreEnter, METH_NOARGS, "trainscope's own time: a call begins (outermost calls count)."},
    {"leave", CoreLeave, METH_NOARGS, "trainscope's own time: the call ends."},
    {"take", CoreTake, METH_NOARGS, "trainscope's own seconds since the last take (an open call counts up to now)."},
    {"call", AsMethod(CoreCall), METH_VARARGS | METH_KEYWORDS,
     "call(failures, part, fn, *args, **kwargs): fn as a GuardedHook calls it (skipped once part failed, a "
     "failure reported)."},
    {nullptr, nullptr, 0, nullptr}};

// A GuardedHook as torch calls it: CPython's own call slot, with the args it made.
PyObject* CallHook(PyObject* self, PyObject* args, PyObject* kwargs) {
  GuardedHook* hook = ValueOf<GuardedHook>(self);
  if (hook == nullptr) return nullptr;
  return Guard([&] { return hook->Call(args, kwargs).release().ptr(); });
}

}  // namespace

// Called by RegisterWatch (watch_bindings.cc).
void RegisterStepCore(py::module_& m) {
  py::class_<StepCore, std::shared_ptr<StepCore>> step_core(m, "StepCore");
  step_core
      .def(py::init<Recorder&, py::object, py::object, bool>(), py::arg("recorder"), py::arg("run_ref"),
           py::arg("time_id"), py::arg("thread_clock") = false, py::keep_alive<1, 2>())
      .def_property_readonly("has_phase_seconds", &StepCore::HasPhaseSeconds)
      // The host timer's side of PhaseTimer's interface: nothing in flight.
      .def_property_readonly("pending", [](const StepCore&) { return false; })
      .def("collect", [](const StepCore&, bool) {}, py::arg("wait") = false)
      .def("reset_self_time", &StepCore::ResetSelfTime)
      .def("on_gc", &StepCore::OnGc, py::arg("phase"), py::arg("info"))
      .def_readwrite("depth", &StepCore::depth_)
      .def_readwrite("seconds", &StepCore::seconds_)
      .def_readwrite("own_gc", &StepCore::own_gc_);
  InstallMethods(step_core, kStepCoreMethods);
  py::class_<GuardedHook>(m, "GuardedHook", py::custom_type_setup([](PyHeapTypeObject* heap_type) {
                            PyTypeObject* type = &heap_type->ht_type;
                            type->tp_call = CallHook;
                            type->tp_flags |= Py_TPFLAGS_HAVE_GC;
                            type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) {
                              Py_VISIT(Py_TYPE(self));
                              if (!reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder()
                                       .holder_constructed()) {
                                return 0;
                              }
                              return py::cast<GuardedHook&>(py::handle(self)).Traverse(visit, arg);
                            };
                            type->tp_clear = [](PyObject* self) {
                              if (reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder()
                                      .holder_constructed()) {
                                py::cast<GuardedHook&>(py::handle(self)).Clear();
                              }
                              return 0;
                            };
                          }))
      .def(py::init<py::object, py::object, py::object, std::shared_ptr<StepCore>>(), py::arg("fn"),
           py::arg("part"), py::arg("failures"), py::arg("core"))
      .def_readwrite("fn", &GuardedHook::fn)
      .def_readonly("part", &GuardedHook::part)
      .def_readonly("failures", &GuardedHook::failures)
      .def("__reduce__",
           [](const GuardedHook&) {
             py::object hooks = py::module_::import("trainscope._watch.hooks");
             return hooks.attr("Hook")().attr("__reduce__")();
           })
      .def("__deepcopy__",
           [](const GuardedHook&, const py::object&) { return py::module_::import("trainscope._watch.hooks").attr("Hook")(); })
      .def_property_readonly_static("__torch_unserializable__", [](const py::object&) { return true; });
}

}  // namespace trainscope::python
