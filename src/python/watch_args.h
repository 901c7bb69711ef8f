// What the watch bindings (watch_bindings.cc, watch_host_bindings.cc) check of the
// arguments Python passes before any memory is read, and the totals of a statistics pass.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "watch/tensor_passes.h"

namespace trainscope::python::watch_args {

struct Totals {
  double sum_squares = 0;  // over finite values of every tensor
  uint64_t nan = 0;
  uint64_t inf = 0;
};

inline void CheckLengths(size_t n, std::initializer_list<size_t> others) {
  for (size_t m : others) {
    if (m != n) throw pybind11::value_error("trainscope watch: argument lists differ in length");
  }
}

inline watch::DType ToDType(int code) {
  if (!watch::ValidDType(code)) {
    throw pybind11::value_error("trainscope watch: unknown dtype code " + std::to_string(code));
  }
  return static_cast<watch::DType>(code);
}

inline std::vector<watch::DType> DTypes(const std::vector<int>& codes) {
  std::vector<watch::DType> out;
  out.reserve(codes.size());
  for (int c : codes) out.push_back(ToDType(c));
  return out;
}

inline void CheckStrided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  CheckLengths(sizes.size(), {strides.size()});
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) throw pybind11::value_error("trainscope watch: negative size or stride");
  }
}

}  // namespace trainscope::python::watch_args
