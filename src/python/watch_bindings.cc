// What run.watch() calls into besides its host executor (watch_host_bindings.cc): the
// Recorder's id-based log calls (series ids, scalars, packed device rows, vectors, spans),
// the integer label range scan, the in-backward gradient collector, RSS and the
// system-metrics sampler thread.
//
// Pointers come from torch tensors that the caller keeps alive for the call; on a bad dtype
// code or mismatched list lengths a ValueError is raised before any memory is read.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "python/bindings.h"
#include "python/direct_calls.h"
#include "python/watch_args.h"
#include "recorder/recorder.h"
#include "watch/system_sampler.h"
#include "watch/tensor_passes.h"

namespace py = pybind11;

namespace trainscope::python {

namespace {

using watch::DType;

using namespace watch_args;

// Logs the smallest and largest value of an integer tensor (the targets' label range).
// int_code: 0 int64, 1 int32, 2 int16, 3 int8, 4 uint8; sizes and strides (in elements) as
// torch gives them, so a slice such as `tokens[:, 1:]` needs no copy. Our own loop, not
// torch.aminmax: at a step's start torch's dispatcher path is cold, and costs ~100x the scan
// of 1k labels.
void LogIntRange(Recorder& recorder, uint32_t min_id, uint32_t max_id, int64_t step, uintptr_t ptr,
                 const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int int_code) {
  if (int_code < 0 || int_code > 4) throw py::value_error("trainscope watch: unknown int code " + std::to_string(int_code));
  CheckStrided(sizes, strides);
  for (int64_t size : sizes) {
    if (size == 0) return;
  }
  auto range = [&](const auto* data) {
    const size_t dims = sizes.size();
    const int64_t inner = dims ? sizes[dims - 1] : 1, inner_stride = dims ? strides[dims - 1] : 1;
    auto lo = data[0], hi = data[0];
    watch::ForEachRow(sizes, strides, [&](int64_t offset) {
      const auto* row = data + offset;
      for (int64_t i = 0; i < inner; ++i) {
        lo = std::min(lo, row[i * inner_stride]);
        hi = std::max(hi, row[i * inner_stride]);
      }
    });
    recorder.LogScalar(min_id, step, static_cast<double>(lo));
    recorder.LogScalar(max_id, step, static_cast<double>(hi));
  };
  switch (int_code) {
    case 0: return range(reinterpret_cast<const int64_t*>(ptr));
    case 1: return range(reinterpret_cast<const int32_t*>(ptr));
    case 2: return range(reinterpret_cast<const int16_t*>(ptr));
    case 3: return range(reinterpret_cast<const int8_t*>(ptr));
    default: return range(reinterpret_cast<const uint8_t*>(ptr));
  }
}

// Statistics reduced on a device and copied to the host as rows of numbers (watch.py
// pack_device_stats): numel, nan, inf, zeros, min, max, sum, sum of squares, and optionally
// every measured statistic in data/tensor_stats.json's order (NaN when unmeasured:
// _core.measured_tensor_stats() gives Python their slots); hists[i] the 128 exponent bins,
// or hists empty.
void LogPackedStats(Recorder& recorder, int64_t step, const std::vector<uint32_t>& ids,
                    const std::vector<std::vector<double>>& rows, const std::vector<std::vector<double>>& hists) {
  CheckLengths(ids.size(), {rows.size()});
  if (!hists.empty()) CheckLengths(ids.size(), {hists.size()});
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<double>& r = rows[i];
    constexpr size_t kWithMeasured = tensor_stats::kFirstPackedSlot + tensor_stats::kMeasuredCount;
    if (r.size() != tensor_stats::kFirstPackedSlot && r.size() != kWithMeasured) {
      throw py::value_error("trainscope watch: a packed row has " + std::to_string(tensor_stats::kFirstPackedSlot) +
                            " or " + std::to_string(kWithMeasured) + " values");
    }
    TensorStats s = TensorStatsFromReductions(static_cast<uint64_t>(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    if (r.size() == kWithMeasured) {
      for (size_t m = 0; m < tensor_stats::kMeasuredCount; ++m) {
        s.*tensor_stats::kMeasured[m]->field = r[tensor_stats::kFirstPackedSlot + m];
      }
    }
    if (!hists.empty()) {
      if (hists[i].size() != TensorStats::kExponentBins) {
        throw py::value_error("trainscope watch: a packed histogram has 128 bins");
      }
      s.has_histogram = true;
      for (int b = 0; b < TensorStats::kExponentBins; ++b) s.exponent_counts[b] = static_cast<uint64_t>(hists[i][b]);
    }
    recorder.LogTensorStats(ids[i], step, s);
  }
}

// Gradient statistics taken inside backward, from the gradient each parameter receives,
// while it is still in cache (a parameter hook, before accumulation). They equal the
// statistics of param.grad when each parameter received exactly one gradient since its
// .grad was zeroed; watch.py checks that and otherwise reads param.grad at the optimizer
// step as usual. One slot per parameter.
class GradCollector {
 public:
  explicit GradCollector(size_t slots) : stats_(slots), rows_(slots), seen_(slots, 0) {}

  void Add(size_t slot, uintptr_t ptr, uint64_t numel, int dtype_code, bool histogram, uint64_t rows) {
    if (slot >= stats_.size()) throw py::value_error("trainscope watch: gradient slot out of range");
    const DType dtype = DTypes({dtype_code})[0];
    py::gil_scoped_release release;
    const void* data = reinterpret_cast<const void*>(ptr);
    if (rows > 0 && numel % rows == 0) {
      stats_[slot] = watch::StatsWithRowNorms(data, rows, numel / rows, dtype, histogram, &rows_[slot]);
    } else {
      stats_[slot] = watch::StatsOf(data, numel, dtype, histogram);
      rows_[slot].clear();
    }
    ++seen_[slot];
  }

  // How many gradients each slot received since Reset().
  std::vector<int> Seen() const { return seen_; }
  void Reset() { std::fill(seen_.begin(), seen_.end(), 0); }

  // Logs the slots that received a gradient; returns (sum of squares, nan, inf) over them.
  std::tuple<double, uint64_t, uint64_t> Log(Recorder& recorder, int64_t step, const std::vector<uint32_t>& ids,
                                             const std::vector<uint32_t>& unit_ids) {
    CheckLengths(stats_.size(), {ids.size(), unit_ids.size()});
    Totals totals;
    for (size_t i = 0; i < stats_.size(); ++i) {
      if (!seen_[i]) continue;
      const TensorStats& s = stats_[i];
      totals.sum_squares += s.sum_squares;
      totals.nan += s.nan;
      totals.inf += s.inf;
      recorder.LogTensorStats(ids[i], step, s);
      if (!rows_[i].empty()) recorder.LogVector(unit_ids[i], step, rows_[i]);
    }
    return {totals.sum_squares, totals.nan, totals.inf};
  }

 private:
  std::vector<TensorStats> stats_;
  std::vector<std::vector<float>> rows_;
  std::vector<int> seen_;
};

SeriesKind KindByName(const std::string& name) {
  if (name == "scalar") return SeriesKind::kScalar;
  if (name == "tensor_stats") return SeriesKind::kTensorStats;
  if (name == "vector") return SeriesKind::kVector;
  throw py::value_error("trainscope watch: unknown series kind '" + name + "'");
}

// recorder.log_scalar_ids(ids, values, step): one scalar per id at step (a direct call: every
// watched step makes several).
PyObject* LogScalarIds(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Recorder* recorder = ValueOf<Recorder>(self);
  if (recorder == nullptr) return nullptr;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "Recorder.log_scalar_ids takes (ids, values, step)");
    return nullptr;
  }
  const int64_t step = PyLong_AsLongLong(args[2]);
  if (step == -1 && PyErr_Occurred()) return nullptr;
  auto ids = py::reinterpret_steal<py::object>(PySequence_Fast(args[0], "log_scalar_ids: ids must be a sequence"));
  auto values =
      py::reinterpret_steal<py::object>(PySequence_Fast(args[1], "log_scalar_ids: values must be a sequence"));
  if (!ids || !values) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(ids.ptr());
  if (PySequence_Fast_GET_SIZE(values.ptr()) != n) {
    PyErr_SetString(PyExc_ValueError, "trainscope watch: argument lists differ in length");
    return nullptr;
  }
  PyObject** id_items = PySequence_Fast_ITEMS(ids.ptr());
  PyObject** value_items = PySequence_Fast_ITEMS(values.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    const unsigned long id = PyLong_AsUnsignedLong(id_items[i]);
    if (id == static_cast<unsigned long>(-1) && PyErr_Occurred()) return nullptr;
    if (id > UINT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "log_scalar_ids: a series id over 2^32");
      return nullptr;
    }
    const double value = PyFloat_AsDouble(value_items[i]);
    if (value == -1.0 && PyErr_Occurred()) return nullptr;
    recorder->LogScalar(static_cast<uint32_t>(id), step, value);
  }
  Py_RETURN_NONE;
}

// thread_usage(): (minor page faults, kernel CPU seconds) of the calling thread, each step.
PyObject* ThreadUsage(PyObject* /*module*/, PyObject* /*unused*/) {
  uint64_t faults = 0;
  double kernel_seconds = 0;
  if (!watch::ThreadFaultsAndKernelSeconds(&faults, &kernel_seconds)) Py_RETURN_NONE;
  return Py_BuildValue("(Kd)", static_cast<unsigned long long>(faults), kernel_seconds);
}

PyMethodDef kThreadUsage = {
    "thread_usage", ThreadUsage, METH_NOARGS,
    "(minor page faults, kernel CPU seconds) of the calling thread so far; None where the system has no per-thread "
    "usage. getrusage(RUSAGE_THREAD) without building Python's 16-field struct_rusage."};

// sampler.set_step(step): each step.
PyObject* SamplerSetStep(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* sampler = ValueOf<watch::SystemSampler>(self);
  if (sampler == nullptr) return nullptr;
  FastArgs a("SystemSampler.set_step(step)", args, nargs, 1, 1);
  int64_t step = 0;
  if (!a.ok() || !a.Int(0, &step)) return nullptr;
  sampler->SetStep(step);
  Py_RETURN_NONE;
}

PyMethodDef kSamplerMethods[] = {
    {"set_step", AsMethod(SamplerSetStep), METH_FASTCALL, "set_step(step): the step the next samples belong to."},
    {nullptr, nullptr, 0, nullptr}};

// recorder.log_label_range(min_id, max_id, step, tensor, int_code, strided) -> bool: the
// range of an integer host tensor (a batch's labels), its layout read here; False (nothing
// logged) when it is not a strided host tensor.
PyObject* LogLabelRange(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  static PyObject* const is_cpu = PyUnicode_InternFromString("is_cpu");
  static PyObject* const layout = PyUnicode_InternFromString("layout");
  static PyObject* const data_ptr = PyUnicode_InternFromString("data_ptr");
  static PyObject* const size = PyUnicode_InternFromString("size");
  static PyObject* const stride = PyUnicode_InternFromString("stride");
  Recorder* recorder = ValueOf<Recorder>(self);
  if (recorder == nullptr) return nullptr;
  FastArgs a("Recorder.log_label_range(min_id, max_id, step, tensor, int_code, strided)", args, nargs, 6, 6);
  uint32_t min_id = 0, max_id = 0;
  int64_t step = 0, int_code = 0;
  if (!a.ok() || !a.Id(0, &min_id) || !a.Id(1, &max_id) || !a.Int(2, &step) || !a.Int(4, &int_code)) return nullptr;
  return Guard([&] {
    PyObject* tensor = a.Object(3);
    if (Owned(PyObject_GetAttr(tensor, is_cpu)).ptr() != Py_True ||
        Owned(PyObject_GetAttr(tensor, layout)).ptr() != a.Object(5)) {
      Py_RETURN_FALSE;
    }
    const auto ptr =
        static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(Owned(PyObject_CallMethodNoArgs(tensor, data_ptr)).ptr()));
    if (PyErr_Occurred()) throw py::error_already_set();
    PyObject* shape[2] = {Owned(PyObject_CallMethodNoArgs(tensor, size)).release().ptr(),
                          Owned(PyObject_CallMethodNoArgs(tensor, stride)).release().ptr()};
    auto sizes_object = py::reinterpret_steal<py::object>(shape[0]);
    auto strides_object = py::reinterpret_steal<py::object>(shape[1]);
    FastArgs layout_args("Recorder.log_label_range: the tensor's size() and stride()", shape, 2, 2, 2);
    thread_local std::vector<int64_t> sizes, strides;
    if (!layout_args.Ints(0, &sizes) || !layout_args.Ints(1, &strides)) throw py::error_already_set();
    LogIntRange(*recorder, min_id, max_id, step, ptr, sizes, strides, static_cast<int>(int_code));
    Py_RETURN_TRUE;
  });
}

PyMethodDef kRecorderWatchMethods[] = {
    {"log_label_range", AsMethod(LogLabelRange), METH_FASTCALL,
     "log_label_range(min_id, max_id, step, tensor, int_code, strided) -> bool: the smallest and largest of an "
     "integer host tensor (strided: torch.strided), read in place; False when it is not one."},
    {"log_scalar_ids", AsMethod(LogScalarIds), METH_FASTCALL,
     "log_scalar_ids(ids, values, step): the scalar values[i] of series ids[i] at step."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void RegisterHostExecutor(py::module_& m);  // watch_host_bindings.cc
void RegisterStepCore(py::module_& m);      // watch_clock_bindings.cc

void RegisterWatch(py::module_& m) {
  RegisterHostExecutor(m);
  RegisterStepCore(m);
  // These extend the Recorder class registered by recorder_bindings.cc.
  auto recorder = py::reinterpret_borrow<py::object>(m.attr("Recorder"));
  auto def = [&](const char* name, py::cpp_function f) { py::setattr(recorder, name, f); };
  InstallMethods(recorder, kRecorderWatchMethods);
  def("series", py::cpp_function(
                    [](Recorder& r, const std::string& tag, const std::string& kind) {
                      uint32_t id = 0;
                      Status s = r.Series(tag, KindByName(kind), &id);
                      if (!s.ok()) throw py::value_error(s.message());
                      return id;
                    },
                    py::is_method(recorder), py::arg("tag"), py::arg("kind"),
                    "The id of a series for the log_* calls below; ValueError for a bad tag."));
  def("log_packed_stats", py::cpp_function(&LogPackedStats, py::is_method(recorder), py::arg("step"),
                                           py::arg("ids"), py::arg("rows"), py::arg("hists")));
  def("log_vector_id", py::cpp_function(
                           [](Recorder& r, uint32_t id, int64_t step, std::vector<float> values) {
                             r.LogVector(id, step, std::move(values));
                           },
                           py::is_method(recorder), py::arg("id"), py::arg("step"), py::arg("values")));
  def("log_span", py::cpp_function(
                      [](Recorder& r, int64_t step, const std::string& phase, double start, double duration) {
                        r.LogSpan(Span{step, phase, start, duration});
                      },
                      py::is_method(recorder), py::arg("step"), py::arg("phase"), py::arg("start"),
                      py::arg("duration")));
  def("log_spans", py::cpp_function(
                       [](Recorder& r, const std::vector<int64_t>& steps, const std::vector<std::string>& phases,
                          const std::vector<double>& starts, const std::vector<double>& durations) {
                         CheckLengths(steps.size(), {phases.size(), starts.size(), durations.size()});
                         for (size_t i = 0; i < steps.size(); ++i) {
                           r.LogSpan(Span{steps[i], phases[i], starts[i], durations[i]});
                         }
                       },
                       py::is_method(recorder), py::arg("steps"), py::arg("phases"), py::arg("starts"),
                       py::arg("durations")));
  def("set_meta", py::cpp_function([](Recorder& r, const std::string& key,
                                      const std::string& value) { r.SetMeta(key, value); },
                                   py::is_method(recorder), py::arg("key"), py::arg("value")));

  py::class_<GradCollector>(m, "GradCollector")
      .def(py::init<size_t>(), py::arg("slots"))
      .def("add", &GradCollector::Add, py::arg("slot"), py::arg("ptr"), py::arg("numel"), py::arg("dtype"),
           py::arg("histogram"), py::arg("rows"))
      .def("seen", &GradCollector::Seen)
      .def("reset", &GradCollector::Reset)
      .def("log", &GradCollector::Log, py::arg("recorder"), py::arg("step"), py::arg("ids"), py::arg("unit_ids"));

  m.def("rss_bytes", &watch::ProcessRssBytes, "Resident set size of this process in bytes (0 if unknown).");
  m.def(
      "step_rss_bytes", [] { return watch::RecentProcessRssBytes(watch::kStepRssMaxAgeSeconds); },
      "rss_bytes() as a step logs it: the last reading while it is under step_rss_max_age seconds old.");
  m.attr("step_rss_max_age") = watch::kStepRssMaxAgeSeconds;
  m.add_object("thread_usage", py::reinterpret_steal<py::object>(
                                   PyCFunction_NewEx(&kThreadUsage, nullptr, m.attr("__name__").ptr())));

  py::class_<watch::SystemSampler> sampler(m, "SystemSampler");
  sampler
      .def(py::init<Recorder*, double>(), py::arg("recorder"), py::arg("interval_seconds"),
           py::keep_alive<1, 2>())
      .def("sample_once", &watch::SystemSampler::SampleOnce, py::call_guard<py::gil_scoped_release>())
      .def("stop", &watch::SystemSampler::Stop, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("gpu_count", &watch::SystemSampler::gpu_count);
  InstallMethods(sampler, kSamplerMethods);
}

}  // namespace trainscope::python
