// trainscope._core: the C++ engine behind `import trainscope`.
#include "python/bindings.h"

#include <pybind11/stl.h>

#include "core/measured_stats.h"
#include "core/tag.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "trainscope's C++ engine: the recorder, the run store reader and tensor statistics.";
  trainscope::python::RegisterRecorder(m);
  trainscope::python::RegisterReader(m);
  trainscope::python::RegisterWatch(m);
  trainscope::python::RegisterAlerts(m);
  // data/tag_families.json, compiled in: the Python side builds its tags from the same table.
  m.def("tag_families", [] {
    pybind11::list out;
    for (const trainscope::tags::TagFamily* f : trainscope::tags::kFamilies) {
      out.append(pybind11::dict(pybind11::arg("name") = std::string(f->name), pybind11::arg("prefix") = std::string(f->prefix),
                                pybind11::arg("scope") = std::string(f->scope), pybind11::arg("kind") = std::string(f->kind)));
    }
    return out;
  });
  // data/tensor_stats.json, compiled in: the device path packs a row's measured statistics
  // at these slots, and its kernels read these thresholds.
  m.def("measured_tensor_stats", [] {
    pybind11::list out;
    for (size_t i = 0; i < trainscope::tensor_stats::kMeasuredCount; ++i) {
      const trainscope::tensor_stats::MeasuredStat* stat = trainscope::tensor_stats::kMeasured[i];
      pybind11::dict thresholds;
      for (size_t t = 0; t < stat->threshold_count; ++t) {
        thresholds[pybind11::str(std::string(stat->thresholds[t].name))] = stat->thresholds[t].value;
      }
      out.append(pybind11::dict(pybind11::arg("name") = std::string(stat->name),
                                pybind11::arg("slot") = trainscope::tensor_stats::kFirstPackedSlot + i,
                                pybind11::arg("unit") = std::string(stat->unit),
                                pybind11::arg("computed") = std::string(stat->computed),
                                pybind11::arg("thresholds") = thresholds));
    }
    return out;
  });
#ifdef TRAINSCOPE_WITH_PERF
  trainscope::python::RegisterTrace(m);
#endif
}
