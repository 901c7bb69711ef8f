// Alert rules as Python sees them. The rules are judged on the recorder's writer thread
// (doctor/rule_observer.h, composed by recorder_bindings.cc); run.log() learns from log_dict that an alert waits, and run.py polls
// take_alerts() at step boundaries to do the actions that belong to Python (print,
// callback, stop, pdb). Also the TensorBoard mirror's path.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "doctor/rule_observer.h"
#include "doctor/rules.h"
#include "python/bindings.h"
#include "recorder/recorder.h"
#ifdef TRAINSCOPE_WITH_INGEST
#include "ingest/tensorboard_mirror.h"
#endif

namespace py = pybind11;

namespace trainscope::python {

namespace {

// The observer of type T that OpenRecorder composed, or null.
template <class T>
const T* FindObserver(const Recorder& r) {
  for (const auto& observer : r.observers()) {
    if (const auto* found = dynamic_cast<const T*>(observer.get())) return found;
  }
  return nullptr;
}

py::dict AlertToDict(const RuleAlert& a) {
  py::dict d;
  d["rule"] = a.rule;
  d["series"] = a.series;
  d["severity"] = SeverityName(a.severity);
  d["step"] = a.step;
  d["value"] = a.value;
  d["message"] = a.message;
  d["actions"] = a.actions;
  d["callback"] = a.callback;
  d["shell"] = a.shell;
  return d;
}

}  // namespace

void RegisterAlerts(py::module_& m) {
  // The Recorder class is registered by recorder_bindings.cc; these methods join it.
  auto recorder = py::reinterpret_borrow<py::class_<Recorder>>(m.attr("Recorder"));
  recorder
      .def_property_readonly("alerts_pending", &Recorder::alerts_pending,
                             "Whether an alert rule fired and waits to be taken (one atomic load).")
      .def(
          "take_alerts",
          [](Recorder& r, int64_t before_step) {
            py::list out;
            for (const RuleAlert& a : r.TakeAlerts(before_step)) out.append(AlertToDict(a));
            return out;
          },
          py::arg("before_step"),
          "The fired alerts of steps before before_step, oldest first, as dicts; later ones stay pending.")
      .def_property_readonly("alert_rule_count",
                             [](const Recorder& r) {
                               const auto* rules = FindObserver<doctor::RuleObserver>(r);
                               return rules ? rules->rule_count() : size_t{0};
                             })
      .def_property_readonly(
          "tensorboard_path",
          [](const Recorder& r) {
#ifdef TRAINSCOPE_WITH_INGEST
            if (const auto* mirror = FindObserver<ingest::TensorBoardMirror>(r)) return mirror->path();
#endif
            return std::string();
          },
          "The TensorBoard mirror's event file, or '' when there is none.");
  m.def(
      "check_alert_rules",
      [](const std::string& toml_text, const std::string& origin) {
        std::vector<doctor::AlertRule> rules;
        Status s = doctor::ParseRules(toml_text, origin, &rules);
        if (!s.ok()) throw py::value_error(s.message());
        return rules.size();
      },
      py::arg("toml_text"), py::arg("origin"),
      "Parses alert rules (TOML text); returns how many, or raises ValueError naming origin and line.");
}

}  // namespace trainscope::python
