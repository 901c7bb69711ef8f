// The parts of the _core module, one registration function per file.
#pragma once

#include <pybind11/pybind11.h>

namespace trainscope::python {

void RegisterRecorder(pybind11::module_& m);  // recorder_bindings.cc: Recorder, log fast path
void RegisterReader(pybind11::module_& m);    // reader_bindings.cc: RunReader, list_runs
void RegisterWatch(pybind11::module_& m);     // watch_bindings.cc: tensor statistics for watch()
void RegisterAlerts(pybind11::module_& m);    // alert_bindings.cc: alert polling (after RegisterRecorder)
void RegisterTrace(pybind11::module_& m);     // trace_bindings.cc: analyze_traces (perf part)

}  // namespace trainscope::python
