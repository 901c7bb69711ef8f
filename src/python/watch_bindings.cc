// Tensor statistics for run.watch(): computed by the C++ core on the tensor's memory.
#include <pybind11/pybind11.h>

#include "python/bindings.h"

namespace trainscope::python {

void RegisterWatch(pybind11::module_& m) {}

}  // namespace trainscope::python
