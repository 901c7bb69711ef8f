// trainscope._core: the C++ engine behind `import trainscope`.
#include "python/bindings.h"

#include <pybind11/stl.h>

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
#ifdef TRAINSCOPE_WITH_PERF
  trainscope::python::RegisterTrace(m);
#endif
}
