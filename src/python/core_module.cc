// trainscope._core: the C++ engine behind `import trainscope`.
#include "python/bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "trainscope's C++ engine: the recorder, the run store reader and tensor statistics.";
  trainscope::python::RegisterRecorder(m);
  trainscope::python::RegisterReader(m);
  trainscope::python::RegisterWatch(m);
  trainscope::python::RegisterAlerts(m);
#ifdef TRAINSCOPE_WITH_PERF
  trainscope::python::RegisterTrace(m);
#endif
}
