// The Recorder as Python sees it. log_dict is the hot path of run.log(): it walks the
// dict with the CPython API, takes plain numbers itself and hands everything else
// (tensors, numpy scalars, bad keys) back to Python in one list.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "doctor/online_doctor.h"
#include "doctor/rule_observer.h"
#include "python/bindings.h"
#include "python/direct_calls.h"
#include "recorder/recorder.h"
#ifdef TRAINSCOPE_WITH_FORWARD
#include "forward/forwarder.h"
#endif
#include "store/json_forms.h"
#include "watch/run_facts.h"
#ifdef TRAINSCOPE_WITH_INGEST
#include "ingest/tensorboard_mirror.h"
#endif

namespace py = pybind11;

namespace trainscope::python {

namespace {

std::unique_ptr<Recorder> OpenRecorder(const std::string& logdir, const std::string& name,
                                       const std::string& config_json, const std::string& command_line,
                                       bool resume, size_t queue_capacity, double flush_interval,
                                       const std::map<std::string, std::string>& extra_meta, bool online_doctor,
                                       const std::string& alert_rules_file, const std::string& alert_rules_text,
                                       const std::string& alert_rules_origin, bool tensorboard,
                                       const std::string& tensorboard_dir, const std::string& project,
                                       const std::string& forward_name) {
  Recorder::Options options;
  options.logdir = logdir;
  options.name = name;
  options.config_json = config_json;
  options.command_line = command_line;
  options.resume = resume;
  options.queue_capacity = queue_capacity;
  options.flush_interval_seconds = flush_interval;
  options.extra_meta = extra_meta;
  options.host = HostName();
  options.git_commit = GitCommit(".");
  // The observers this module is built with, composed here: the recorder knows none of them.
  // Alert rules first: a bad rules file is the user's error, reported before a run exists.
  if (!alert_rules_file.empty() || !alert_rules_text.empty()) {
    std::shared_ptr<doctor::RuleObserver> rules;
    Status parsed = alert_rules_file.empty() ? doctor::RuleObserver::FromText(alert_rules_text, alert_rules_origin, &rules)
                                             : doctor::RuleObserver::FromFile(alert_rules_file, &rules);
    if (!parsed.ok()) throw py::value_error(parsed.message());
    if (rules->rule_count() > 0) options.observers.push_back(std::move(rules));
  }
  if (tensorboard) {
#ifdef TRAINSCOPE_WITH_INGEST
    options.observers.push_back(std::make_shared<ingest::TensorBoardMirror>(tensorboard_dir));
#else
    throw py::value_error("tensorboard=: the TensorBoard mirror needs the ingest part, which this build leaves out "
                          "(TRAINSCOPE_PARTS)");
#endif
  }
  if (online_doctor) options.observers.push_back(std::make_shared<doctor::OnlineDoctor>());
  // TRAINSCOPE_SERVER set: the run is forwarded to a team server as it is written.
#ifdef TRAINSCOPE_WITH_FORWARD
  if (ForwardTarget target = ForwardTargetFromEnvironment(project, forward_name); !target.server.empty()) {
    options.observers.push_back(std::make_shared<Forwarder>(std::move(target)));
  }
#else
  if (const char* server = std::getenv("TRAINSCOPE_SERVER"); server && *server) {
    throw py::value_error("TRAINSCOPE_SERVER: forwarding needs the server part, which this build leaves out");
  }
  (void)project, (void)forward_name;
#endif
  std::unique_ptr<Recorder> recorder;
  Status s;
  {
    py::gil_scoped_release release;
    s = Recorder::Open(options, &recorder);
  }
  if (!s.ok()) throw py::value_error(s.message());
  return recorder;
}

// torch.Tensor, once Python has seen one logged (Run._log_slow): LogDict then reads a host
// tensor of one element itself, with the other numbers, instead of handing it back to
// Python (two frames and a second recorder call a step; on a 110 ms step ~40 us cold).
PyObject* logged_tensor_type = nullptr;

// value.item() of a host tensor of one element as a double; false (no error set) for any
// other tensor: on a device (run.log defers those), of several elements, complex.
bool HostScalarOfTensor(PyObject* value, double* number) {
  static PyObject* const is_cpu = PyUnicode_InternFromString("is_cpu");
  static PyObject* const numel = PyUnicode_InternFromString("numel");
  static PyObject* const item = PyUnicode_InternFromString("item");
  bool ok = false;
  PyObject* on_host = PyObject_GetAttr(value, is_cpu);
  if (on_host == Py_True) {
    PyObject* count = PyObject_CallMethodNoArgs(value, numel);
    if (count && PyLong_Check(count) && PyLong_AsLongLong(count) == 1) {
      PyObject* scalar = PyObject_CallMethodNoArgs(value, item);
      if (scalar && PyFloat_Check(scalar)) {
        *number = PyFloat_AS_DOUBLE(scalar);
        ok = true;
      } else if (scalar && PyLong_Check(scalar)) {  // int and bool tensors
        *number = PyLong_AsDouble(scalar);
        ok = !(*number == -1.0 && PyErr_Occurred());
      }
      Py_XDECREF(scalar);
    }
    Py_XDECREF(count);
  }
  Py_XDECREF(on_host);
  PyErr_Clear();
  return ok;
}

// Returns None when every value was a plain number, else a list of (key, value) pairs
// for Python to handle, followed by the rejected-tag messages as (None, message) pairs,
// and (None, None) when an alert rule fired: run.log() then polls at the step boundary.
py::object LogDict(Recorder& recorder, py::handle data, int64_t step) {
  if (!PyDict_Check(data.ptr())) throw py::type_error("run.log() takes a dict of {tag: value}");
  thread_local std::vector<std::pair<std::string_view, double>> numbers;
  numbers.clear();
  PyObject* rest = nullptr;
  auto defer = [&rest](PyObject* key, PyObject* value) {
    if (!rest) rest = PyList_New(0);
    PyObject* pair = PyTuple_Pack(2, key, value);
    PyList_Append(rest, pair);
    Py_DECREF(pair);
  };
  PyObject* key;
  PyObject* value;
  Py_ssize_t position = 0;
  while (PyDict_Next(data.ptr(), &position, &key, &value)) {
    if (!PyUnicode_Check(key)) {
      defer(key, value);
      continue;
    }
    double number;
    if (PyFloat_Check(value)) {  // float and its subclasses (numpy.float64)
      number = PyFloat_AS_DOUBLE(value);
    } else if (PyLong_Check(value)) {  // int, bool
      number = PyLong_AsDouble(value);
      if (number == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        defer(key, value);
        continue;
      }
    } else if (!(logged_tensor_type && PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(logged_tensor_type)) &&
                 HostScalarOfTensor(value, &number))) {
      defer(key, value);
      continue;
    }
    Py_ssize_t length = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(key, &length);  // cached in the str object
    if (!utf8) {  // a str that cannot be UTF-8 (lone surrogates)
      PyErr_Clear();
      defer(key, value);
      continue;
    }
    numbers.emplace_back(std::string_view(utf8, static_cast<size_t>(length)), number);
  }
  std::vector<std::string> rejected;
  recorder.LogNamedScalars(numbers, step, &rejected);
  for (const std::string& message : rejected) {
    py::str text(message);
    defer(Py_None, text.ptr());
  }
  if (recorder.alerts_pending()) defer(Py_None, Py_None);
  if (!rest) return py::none();
  return py::reinterpret_steal<py::object>(rest);
}

// A finding from its DESIGN.md JSON form, as user code hands it in: only "code" is required
// (FindingFields::kCodeOnly); a field of the wrong type is the caller's error, named.
Finding FindingFromJsonText(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw py::value_error("add_finding_json: expected a JSON object, got: " + text.substr(0, 200));
  Finding f;
  if (Status s = FindingFromJson(j, FindingFields::kCodeOnly, &f); !s.ok()) {
    throw py::value_error("add_finding_json: " + s.message());
  }
  return f;
}

// run.log's call, once a step or more: a direct call (python/direct_calls.h).
PyObject* LogDictCall(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Recorder* recorder = ValueOf<Recorder>(self);
  if (recorder == nullptr) return nullptr;
  FastArgs a("Recorder.log_dict(data, step)", args, nargs, 2, 2);
  int64_t step = 0;
  if (!a.ok() || !a.Int(1, &step)) return nullptr;
  return Guard([&] { return LogDict(*recorder, a.Object(0), step).release().ptr(); });
}

PyMethodDef kRecorderMethods[] = {
    {"log_dict", AsMethod(LogDictCall), METH_FASTCALL,
     "log_dict(data, step): the numbers of {tag: value} logged here; the rest (tensors of several values, "
     "objects to convert) returned as [(tag, value)], or None."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void RegisterRecorder(py::module_& m) {
  py::class_<Recorder> recorder(m, "Recorder");
  recorder
      .def(py::init(&OpenRecorder), py::arg("logdir"), py::arg("name"), py::arg("config_json"),
           py::arg("command_line"), py::arg("resume") = false, py::arg("queue_capacity") = size_t{1} << 22,
           py::arg("flush_interval") = 1.0, py::arg("extra_meta") = std::map<std::string, std::string>{},
           py::arg("online_doctor") = true, py::arg("alert_rules_file") = "", py::arg("alert_rules_text") = "",
           py::arg("alert_rules_origin") = "alert rules", py::arg("tensorboard") = false,
           py::arg("tensorboard_dir") = "", py::arg("project") = "", py::arg("forward_name") = "")
      .def_property_readonly("run_dir", &Recorder::run_dir)
      .def_property_readonly("name", &Recorder::name)
      .def_property_readonly("dropped", &Recorder::dropped)
      .def_property_readonly("drops", &Recorder::drops, "The dropped points by cause ('queue full', 'disk full', ...).")
      .def_property_readonly(
          "gaps",
          [](const Recorder& r) {
            std::vector<std::tuple<int64_t, int64_t, std::string>> out;
            for (const Recorder::Gap& g : r.gaps()) out.emplace_back(g.first_step, g.last_step, g.cause);
            return out;
          },
          "Stretches of steps [first, last] that lost points to a store fault, with its cause.")
      .def_static(
          "read_tensors_as",
          [](py::object tensor_type) {
            if (!PyType_Check(tensor_type.ptr())) throw py::type_error("read_tensors_as takes a type (torch.Tensor)");
            if (!logged_tensor_type) logged_tensor_type = tensor_type.release().ptr();  // kept for the process
          },
          py::arg("tensor_type"), "log_dict reads host tensors of one element of this type itself (torch.Tensor).")
      .def(
          "log_scalar",
          [](Recorder& r, const std::string& tag, double value, int64_t step) {
            uint32_t id = 0;
            Status s = r.Series(tag, SeriesKind::kScalar, &id);
            if (!s.ok()) return s.message();
            r.LogScalar(id, step, value);
            return std::string();
          },
          py::arg("tag"), py::arg("value"), py::arg("step"),
          "Logs one value; returns '' or the reason the tag was refused.")
      .def("flush", &Recorder::Flush, py::call_guard<py::gil_scoped_release>())
      .def(
          "close",
          [](Recorder& r, const std::string& status, const std::string& reason) {
            Status s;
            {
              py::gil_scoped_release release;
              s = r.Close(status, reason);
            }
            return s.ok() ? std::string() : s.message();
          },
          py::arg("status") = "finished", py::arg("exit_reason") = "",
          "Flushes and closes the run; returns '' or the first error the writer met.")
      .def(
          "add_finding_json",
          [](Recorder& r, const std::string& json_text) { r.AddFinding(FindingFromJsonText(json_text)); },
          py::arg("json_text"),
          "Adds a finding (DESIGN.md JSON form) from the client, stored with the run; ValueError on a bad one.")
      .def("live_findings_json",
           [](const Recorder& r) {
             nlohmann::json out = nlohmann::json::array();
             for (const Finding& f : r.live_findings()) out.push_back(FindingToJson(f));
             return out.dump();
           })
      .def("writer_error", [](const Recorder& r) {
        Status s = r.writer_status();
        return s.ok() ? std::string() : s.message();
      });
  InstallMethods(recorder, kRecorderMethods);
}

}  // namespace trainscope::python
