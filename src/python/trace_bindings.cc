// _core.analyze_traces(paths, top=10, include_last_step=False) -> str: the JSON of
// `trainscope trace --json` (python/trainscope/profile.py reads it for run.profile()).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cli/trace_report.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace trainscope::python {

void RegisterTrace(py::module_& m) {
  m.def(
      "analyze_traces",
      [](const std::vector<std::string>& paths, size_t top, bool include_last_step) {
        perf::TraceAnalysisOptions options;
        options.top = top;
        options.include_last_step = include_last_step;
        perf::TraceReport report;
        nlohmann::json out;
        Status s;
        {
          py::gil_scoped_release release;
          s = cli::AnalyzeTraceFiles(paths, options, &report, &out);
        }
        if (!s.ok()) throw py::value_error(s.message());
        return out.dump();
      },
      py::arg("paths"), py::arg("top") = 10, py::arg("include_last_step") = false,
      "Analyses PyTorch profiler traces (files or folders); returns the JSON of `trainscope trace --json`.");
}

}  // namespace trainscope::python
