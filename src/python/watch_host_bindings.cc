// The host executor of run.watch() (python/trainscope/_watch/executors.py): statistics of
// host tensors taken by the C++ core on the tensors' own memory (Python passes data_ptr()
// and the family's plan; nothing is copied), on one helper thread (watch/helper_thread.h)
// beside the training, and logged straight into the Recorder. Every submit returns a
// Ticket, which owns the references to the tensors the job reads until the job has
// finished: Python keeps no lists of its own, and a ticket dropped early waits for its job
// before letting the tensors go.
//
// On a bad dtype code or mismatched list lengths a ValueError is raised before any memory
// is read or any job is queued.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "python/direct_calls.h"
#include "python/watch_args.h"
#include "recorder/recorder.h"
#include "watch/helper_thread.h"
#include "watch/system_sampler.h"
#include "watch/tensor_passes.h"

namespace py = pybind11;

namespace trainscope::python {

namespace {

using watch::DType;
using watch::HelperThread;

using namespace watch_args;

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 8;
    case DType::kFloat32: return 4;
    default: return 2;
  }
}

double GlobalNorm(const Totals& t) {
  return t.nan ? std::nan("") : (t.inf ? std::numeric_limits<double>::infinity() : std::sqrt(t.sum_squares));
}

// What a statistics pass needs of each tensor of a family, fixed when watch() plans it
// (rebuilt only when a parameter changes shape): per step only the addresses cross.
// rows[i] > 0: the L2 norm of each of the tensor's rows too (a unit norm), as unit_ids[i].
struct StatsPlan {
  StatsPlan(std::vector<uint32_t> ids_, std::vector<uint64_t> numels_, const std::vector<int>& codes,
            std::vector<uint64_t> rows_, std::vector<uint32_t> unit_ids_)
      : ids(std::move(ids_)), numels(std::move(numels_)), dtypes(DTypes(codes)), rows(std::move(rows_)),
        unit_ids(std::move(unit_ids_)) {
    CheckLengths(ids.size(), {numels.size(), dtypes.size()});
    if (!rows.empty()) CheckLengths(ids.size(), {rows.size(), unit_ids.size()});
  }
  size_t size() const { return ids.size(); }
  std::vector<uint32_t> ids;
  std::vector<uint64_t> numels;
  std::vector<DType> dtypes;
  std::vector<uint64_t> rows;
  std::vector<uint32_t> unit_ids;
};

// The weight/update pass's constants: per parameter its weight/<name>, update/<name> and
// update_ratio/<name> series, numel and dtype.
struct WeightPlan {
  WeightPlan(std::vector<uint32_t> weight_ids_, std::vector<uint32_t> update_ids_, std::vector<uint32_t> ratio_ids_,
             std::vector<uint64_t> numels_, const std::vector<int>& codes)
      : weight_ids(std::move(weight_ids_)), update_ids(std::move(update_ids_)), ratio_ids(std::move(ratio_ids_)),
        numels(std::move(numels_)), dtypes(DTypes(codes)) {
    CheckLengths(weight_ids.size(), {update_ids.size(), ratio_ids.size(), numels.size(), dtypes.size()});
  }
  size_t size() const { return weight_ids.size(); }
  std::vector<uint32_t> weight_ids, update_ids, ratio_ids;
  std::vector<uint64_t> numels;
  std::vector<DType> dtypes;
};

// One module output (or model input) of an activation job. strides empty: contiguous; else
// its strides in elements (its sizes in sizes), gathered row-major on the helper first, so
// the training thread does not copy (attention outputs are transposes).
struct ActivationJob {
  uint32_t id;
  uintptr_t ptr;
  uint64_t numel;
  DType dtype;
  uint64_t outer, units, inner;
  int kind;
  bool histogram;
  std::vector<int64_t> sizes, strides;
};

struct Activation {
  uint32_t id;
  TensorStats stats;
};

// What a job hands back: written by the job before its ticket counts as done, read after.
struct TicketState {
  HelperThread::Ticket number = 0;
  int64_t step = 0;
  Totals totals;
  std::vector<Activation> activations;
};

// One submitted job. Owns the references to what the job reads (kept) until the job has
// finished; dropped before that (an exception on the training thread, a watcher closed),
// it waits for the job first. Holds the worker (and through it the recorder) alive too.
class Ticket {
 public:
  Ticket(std::shared_ptr<HelperThread> helper, std::shared_ptr<TicketState> state, Recorder* recorder,
         py::object owner, py::object kept)
      : helper_(std::move(helper)), state_(std::move(state)), recorder_(recorder), owner_(std::move(owner)),
        kept_(std::move(kept)) {}
  ~Ticket() { WaitForJob(); }  // before kept_ goes (members are destroyed after this body)
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;

  bool Done() const { return waited_ || helper_->Done(state_->number); }

  // Waits for the job, lets its tensors go; returns (sum of squares, nan, inf) of a stats job.
  std::tuple<double, uint64_t, uint64_t> Wait() {
    WaitForJob();
    kept_ = py::none();
    return {state_->totals.sum_squares, state_->totals.nan, state_->totals.inf};
  }

  // The tensors the job reads (None once waited for).
  py::object Kept() const { return kept_; }

  // An activation job: waits, then logs the results (in submission order) whose keep flag is
  // set: the caller drops those whose tensor a later op changed in place while the job ran.
  void LogActivations(const std::vector<bool>& keep) {
    WaitForJob();
    CheckLengths(state_->activations.size(), {keep.size()});
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i]) recorder_->LogTensorStats(state_->activations[i].id, state_->step, state_->activations[i].stats);
    }
    state_->activations.clear();
    kept_ = py::none();
  }

 private:
  void WaitForJob() {
    if (waited_) return;
    if (helper_->Done(state_->number)) {  // the common case: no GIL hand-over
      waited_ = true;
      return;
    }
    {
      py::gil_scoped_release release;
      helper_->WaitFor(state_->number);
    }
    waited_ = true;
  }

  std::shared_ptr<HelperThread> helper_;
  std::shared_ptr<TicketState> state_;
  Recorder* recorder_;
  bool waited_ = false;
  py::object owner_;
  py::object kept_;
};

// A ticket as Python holds it: a plain CPython object owning its Ticket (made once per job:
// pybind11's instance registry cost ~0.8 us a ticket in the training loop).
struct TicketObject {
  PyObject_HEAD
  Ticket* ticket;
};

PyTypeObject* ticket_type = nullptr;  // made by RegisterHostExecutor, kept for the process

py::object WrapTicket(std::unique_ptr<Ticket> ticket) {
  TicketObject* object = PyObject_New(TicketObject, ticket_type);
  if (object == nullptr) throw py::error_already_set();
  object->ticket = ticket.release();
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(object));
}

Ticket* TicketOf(PyObject* self) { return reinterpret_cast<TicketObject*>(self)->ticket; }

void DeallocTicket(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete TicketOf(self);  // waits for its job first (Ticket's destructor)
  PyObject_Free(self);
  Py_DECREF(type);
}

// The statistics of plan's tensors at ptrs (0: none this time), logged; returns the totals.
Totals StatsPass(Recorder& recorder, int64_t step, const StatsPlan& plan, const std::vector<uintptr_t>& ptrs,
                 bool histogram, bool units) {
  Totals totals;
  std::vector<float> norms;
  const bool with_rows = units && !plan.rows.empty();
  for (size_t i = 0; i < plan.size(); ++i) {
    if (ptrs[i] == 0) continue;
    const void* data = reinterpret_cast<const void*>(ptrs[i]);
    TensorStats s;
    if (with_rows && plan.rows[i] > 0 && plan.numels[i] % plan.rows[i] == 0) {
      s = watch::StatsWithRowNorms(data, plan.rows[i], plan.numels[i] / plan.rows[i], plan.dtypes[i], histogram,
                                   &norms);
      recorder.LogVector(plan.unit_ids[i], step, norms);
    } else {
      s = watch::StatsOf(data, plan.numels[i], plan.dtypes[i], histogram);
    }
    totals.sum_squares += s.sum_squares;
    totals.nan += s.nan;
    totals.inf += s.inf;
    recorder.LogTensorStats(plan.ids[i], step, s);
  }
  return totals;
}

// Weight stats, update stats (current - previous) and update_ratio = ||update|| / ||weight||
// of each parameter; previous[i] is refreshed to current[i] in the same pass.
void WeightPass(Recorder& recorder, int64_t step, const WeightPlan& plan, const std::vector<uintptr_t>& current,
                const std::vector<uintptr_t>& previous, bool histogram) {
  for (size_t i = 0; i < plan.size(); ++i) {
    TensorStats w, u;
    watch::WeightAndUpdateStats(reinterpret_cast<const void*>(current[i]), reinterpret_cast<void*>(previous[i]),
                                plan.numels[i], plan.dtypes[i], histogram, &w, &u);
    const double ratio = w.l2_norm() > 0 ? u.l2_norm() / w.l2_norm()
                                         : (u.l2_norm() > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    recorder.LogTensorStats(plan.weight_ids[i], step, w);
    recorder.LogTensorStats(plan.update_ids[i], step, u);
    recorder.LogScalar(plan.ratio_ids[i], step, (u.nan || u.inf || w.nan || w.inf) ? std::nan("") : ratio);
  }
}

TensorStats ActivationStats(const ActivationJob& j, const void* data) {
  TensorStats s = watch::StatsOf(data, j.numel, j.dtype, j.histogram);
  watch::MeasureActivation(data, j.numel, j.outer, j.units, j.inner, j.dtype, static_cast<watch::ActivationKind>(j.kind),
                           &s);
  return s;
}

// Module outputs or model inputs as Python describes them (capture_record): a sequence of
// (id, ptr, numel, dtype, outer, units, inner, kind, histogram, sizes, strides). Read with
// CPython's calls (one a step at least: pybind11's tuple casters cost ~1 us a record); checked
// before any job is queued: a bad record raises on the training thread.
ActivationJob ActivationJobOf(PyObject* record) {
  if (!PyTuple_Check(record)) throw py::type_error("trainscope watch: an activation record is a tuple");
  FastArgs a("activation record (id, ptr, numel, dtype, outer, units, inner, kind, histogram, sizes, strides)",
             reinterpret_cast<PyTupleObject*>(record)->ob_item, PyTuple_GET_SIZE(record), 11, 11);
  ActivationJob j{};
  int64_t dtype = 0, kind = 0;
  uint64_t ptr = 0;
  if (!a.ok() || !a.Id(0, &j.id) || !a.Unsigned(1, &ptr) || !a.Unsigned(2, &j.numel) || !a.Int(3, &dtype) ||
      !a.Unsigned(4, &j.outer) || !a.Unsigned(5, &j.units) || !a.Unsigned(6, &j.inner) || !a.Int(7, &kind) ||
      !a.Bool(8, &j.histogram) || !a.Ints(10, &j.strides)) {
    throw py::error_already_set();
  }
  j.ptr = static_cast<uintptr_t>(ptr);
  j.dtype = ToDType(static_cast<int>(dtype));
  j.kind = static_cast<int>(kind);
  if (j.kind == watch::kDeadUnits && j.outer * j.units * j.inner != j.numel) {
    throw py::value_error("trainscope watch: activation layout does not match its size");
  }
  if (!j.strides.empty()) {  // sizes are read only for a strided tensor: a contiguous one is numel values
    if (!a.Ints(9, &j.sizes)) throw py::error_already_set();
    CheckStrided(j.sizes, j.strides);
    int64_t count = 1;
    for (int64_t size : j.sizes) count *= size;
    if (static_cast<uint64_t>(count) != j.numel) {
      throw py::value_error("trainscope watch: activation sizes do not match its numel");
    }
  }
  return j;
}

std::vector<ActivationJob> ActivationJobs(py::handle records) {
  auto seq = py::reinterpret_steal<py::object>(PySequence_Fast(records.ptr(), "activation records: a sequence"));
  if (!seq) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  std::vector<ActivationJob> jobs;
  jobs.reserve(static_cast<size_t>(n));
  for (Py_ssize_t r = 0; r < n; ++r) jobs.push_back(ActivationJobOf(PySequence_Fast_GET_ITEM(seq.ptr(), r)));
  return jobs;
}

// The statistics of each job's tensor; a strided one is gathered row-major into *gathered first.
void MeasureActivations(const std::vector<ActivationJob>& jobs, std::vector<unsigned char>* gathered,
                        const std::function<void(size_t, const TensorStats&)>& out) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ActivationJob& j = jobs[i];
    const void* data = reinterpret_cast<const void*>(j.ptr);
    if (!j.strides.empty() && j.numel) {
      const size_t bytes = ElementSize(j.dtype);
      const int64_t inner = j.sizes.back(), inner_stride = j.strides.back();
      gathered->resize(j.numel * bytes);
      unsigned char* dst = gathered->data();
      const auto* in = reinterpret_cast<const unsigned char*>(j.ptr);
      watch::ForEachRow(j.sizes, j.strides, [&](int64_t offset) {
        for (int64_t k = 0; k < inner; ++k, dst += bytes) {
          std::memcpy(dst, in + (offset + k * inner_stride) * bytes, bytes);
        }
      });
      data = gathered->data();
    }
    out(i, ActivationStats(j, data));
  }
}

// (outer, units, inner) of an activation of these sizes: channels of NCHW/NCDHW, else the last
// dimension (the device path's twin is plan.unit_layout, which its torch reductions use).
std::tuple<uint64_t, uint64_t, uint64_t> UnitLayout(const std::vector<uint64_t>& sizes) {
  if (sizes.empty()) return {1, 1, 1};
  if (sizes.size() >= 4) {
    uint64_t inner = 1;
    for (size_t d = 2; d < sizes.size(); ++d) inner *= sizes[d];
    return {sizes[0], sizes[1], inner};
  }
  uint64_t outer = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) outer *= sizes[d];
  return {outer, sizes.back(), 1};
}

// HostExecutor.capture in one call: (record, tensor) of a host tensor (the record as
// ActivationJobs reads it), or None when it is not a strided host tensor. code: the tensor's
// dtype code (the caller's table); flat: one unit of all its values (a model input).
py::object CaptureRecord(uint32_t series_id, py::handle tensor, int code, int kind, bool histogram, bool flat,
                         py::handle strided) {
  static const py::handle layout = PyUnicode_InternFromString("layout"), is_cpu = PyUnicode_InternFromString("is_cpu"),
                          shape = PyUnicode_InternFromString("shape"),
                          is_contiguous = PyUnicode_InternFromString("is_contiguous"),
                          stride = PyUnicode_InternFromString("stride"),
                          data_ptr = PyUnicode_InternFromString("data_ptr");
  if (tensor.attr(layout).ptr() != strided.ptr() || !tensor.attr(is_cpu).cast<bool>()) return py::none();
  py::tuple sizes_object = tensor.attr(shape);  // torch.Size, a tuple
  std::vector<uint64_t> sizes;
  sizes.reserve(sizes_object.size());
  uint64_t numel = 1;
  for (const py::handle size : sizes_object) {
    sizes.push_back(size.cast<uint64_t>());
    numel *= sizes.back();
  }
  py::object strides = tensor.attr(is_contiguous)().cast<bool>() ? py::tuple() : py::object(tensor.attr(stride)());
  const auto [outer, units, inner] = flat ? std::make_tuple(uint64_t{1}, numel, uint64_t{1}) : UnitLayout(sizes);
  py::tuple record = py::make_tuple(series_id, tensor.attr(data_ptr)(), outer * units * inner, code, outer, units,
                                    inner, kind, histogram, sizes_object, strides);
  return py::make_tuple(std::move(record), tensor);
}

// The host executor's C++ half: every pass a job on the helper thread, every submit a Ticket.
class HostWorker {
 public:

  // Logs into recorder, which Python keeps alive as long as this worker (keep_alive on the
  // constructor; the tickets hold the worker).
  explicit HostWorker(Recorder& recorder) : recorder_(recorder), helper_(std::make_shared<HelperThread>()) {}

  // The statistics of plan's tensors (ptrs[i] == 0: none), unit norms when units; then the
  // global norm as norm_id (0: none). Also logged from the helper: scalars (lr, grad_zeroed)
  // and, when rss_id is not 0, the process's RSS (read at most kStepRssMaxAgeSeconds before:
  // RecentProcessRssBytes): a recorder call or an RSS read costs the training thread
  // ~0.1-0.2 ms when its code is cold, as it is at an optimizer step.
  // The statistics of params[i].grad for each planned parameter (their .grad read here, not
  // in a Python loop): None (nothing queued) when a gradient does not fit the plan (not a
  // host tensor of dtypes[i] and the planned size): the watcher plans again. A missing or
  // sparse gradient is skipped; the global norm is logged only if one was read, or
  // always_norm. inputs: the step's model inputs as the watcher holds them, [(name, (record,
  // tensor))], measured in the same job (SubmitStats).
  py::object SubmitGradients(py::object self, int64_t step, std::shared_ptr<StatsPlan> plan, const py::list& params,
                             const py::list& dtypes, const py::object& strided, bool histogram, bool units,
                             uint32_t norm_id, bool always_norm, std::vector<uint32_t> scalar_ids,
                             std::vector<double> scalar_values, uint32_t rss_id, py::handle inputs) {
    // Interned once and never freed: a static py::str would be released after the interpreter.
    static PyObject* const grad = PyUnicode_InternFromString("grad");
    static PyObject* const layout = PyUnicode_InternFromString("layout");
    static PyObject* const dtype = PyUnicode_InternFromString("dtype");
    static PyObject* const is_cpu = PyUnicode_InternFromString("is_cpu");
    static PyObject* const numel = PyUnicode_InternFromString("numel");
    static PyObject* const is_contiguous = PyUnicode_InternFromString("is_contiguous");
    static PyObject* const contiguous = PyUnicode_InternFromString("contiguous");
    static PyObject* const data_ptr = PyUnicode_InternFromString("data_ptr");
    CheckLengths(plan->size(), {params.size(), dtypes.size()});
    std::vector<uintptr_t> ptrs(plan->size(), 0);
    py::list kept;
    bool any = false;
    for (size_t i = 0; i < plan->size(); ++i) {
      py::object g = Owned(PyObject_GetAttr(PyList_GET_ITEM(params.ptr(), i), grad));
      if (g.is_none() || Owned(PyObject_GetAttr(g.ptr(), layout)).ptr() != strided.ptr()) continue;
      if (Owned(PyObject_GetAttr(g.ptr(), dtype)).ptr() != PyList_GET_ITEM(dtypes.ptr(), i) ||
          Owned(PyObject_GetAttr(g.ptr(), is_cpu)).ptr() != Py_True ||
          PyLong_AsUnsignedLongLong(Owned(PyObject_CallMethodNoArgs(g.ptr(), numel)).ptr()) != plan->numels[i]) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return py::none();
      }
      if (Owned(PyObject_CallMethodNoArgs(g.ptr(), is_contiguous)).ptr() != Py_True) {
        g = Owned(PyObject_CallMethodNoArgs(g.ptr(), contiguous));
      }
      ptrs[i] =
          static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(Owned(PyObject_CallMethodNoArgs(g.ptr(), data_ptr)).ptr()));
      if (PyErr_Occurred()) throw py::error_already_set();
      kept.append(g);
      any = true;
    }
    std::vector<ActivationJob> input_jobs;
    for (const py::handle input : inputs) {  // (name, (record, tensor)): what capture_record made
      if (!PyTuple_Check(input.ptr()) || PyTuple_GET_SIZE(input.ptr()) != 2 ||
          !PyTuple_Check(PyTuple_GET_ITEM(input.ptr(), 1)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(input.ptr(), 1)) != 2) {
        throw py::type_error("submit_gradients: inputs are (name, (record, tensor)) pairs");
      }
      PyObject* item = PyTuple_GET_ITEM(input.ptr(), 1);
      input_jobs.push_back(ActivationJobOf(PyTuple_GET_ITEM(item, 0)));
      kept.append(PyTuple_GET_ITEM(item, 1));
    }
    return WrapTicket(SubmitStats(std::move(self), step, std::move(plan), std::move(ptrs), histogram, units,
                                (any || always_norm) ? norm_id : 0, std::move(scalar_ids), std::move(scalar_values),
                                rss_id, std::move(kept), std::move(input_jobs)));
  }

  // inputs: the step's model inputs (activation records), measured and logged in the same
  // job: the step's one hand-off to the helper.
  std::unique_ptr<Ticket> SubmitStats(py::object self, int64_t step, std::shared_ptr<StatsPlan> plan,
                                      std::vector<uintptr_t> ptrs, bool histogram, bool units, uint32_t norm_id,
                                      std::vector<uint32_t> scalar_ids, std::vector<double> scalar_values,
                                      uint32_t rss_id, py::object kept, std::vector<ActivationJob> input_jobs) {
    CheckLengths(plan->size(), {ptrs.size()});
    CheckLengths(scalar_ids.size(), {scalar_values.size()});
    uint64_t bytes = JobBytes(input_jobs);
    for (size_t i = 0; i < ptrs.size(); ++i) {
      if (ptrs[i]) bytes += plan->numels[i] * ElementSize(plan->dtypes[i]);
    }
    auto state = NewState(step);
    Recorder* rec = &recorder_;
    return Push(std::move(self), state, std::move(kept), bytes,
                [rec, state, step, plan, ptrs = std::move(ptrs), histogram, units, norm_id,
                 scalar_ids = std::move(scalar_ids), scalar_values = std::move(scalar_values), rss_id,
                 input_jobs = std::move(input_jobs)] {
                  for (size_t i = 0; i < scalar_ids.size(); ++i) rec->LogScalar(scalar_ids[i], step, scalar_values[i]);
                  if (rss_id) {
                    rec->LogScalar(rss_id, step,
                                   static_cast<double>(watch::RecentProcessRssBytes(watch::kStepRssMaxAgeSeconds)));
                  }
                  if (!input_jobs.empty()) {
                    std::vector<unsigned char> gathered;
                    MeasureActivations(input_jobs, &gathered, [&](size_t i, const TensorStats& stats) {
                      rec->LogTensorStats(input_jobs[i].id, step, stats);
                    });
                  }
                  state->totals = StatsPass(*rec, step, *plan, ptrs, histogram, units);
                  if (norm_id) rec->LogScalar(norm_id, step, GlobalNorm(state->totals));
                });
  }

  // The weight/update pass: current[i] the weights, previous[i] their snapshot (refreshed).
  std::unique_ptr<Ticket> SubmitWeights(py::object self, int64_t step, std::shared_ptr<WeightPlan> plan,
                                        std::vector<uintptr_t> current, std::vector<uintptr_t> previous,
                                        bool histogram, py::object kept) {
    CheckLengths(plan->size(), {current.size(), previous.size()});
    uint64_t bytes = 0;
    for (size_t i = 0; i < plan->size(); ++i) bytes += 2 * plan->numels[i] * ElementSize(plan->dtypes[i]);
    auto state = NewState(step);
    Recorder* rec = &recorder_;
    return Push(std::move(self), state, std::move(kept), bytes,
                [rec, step, plan, current = std::move(current), previous = std::move(previous), histogram] {
                  WeightPass(*rec, step, *plan, current, previous, histogram);
                });
  }

  // memcpy of each src[i] into dst[i] (the weight snapshots).
  std::unique_ptr<Ticket> SubmitCopies(py::object self, std::vector<uintptr_t> dst, std::vector<uintptr_t> src,
                                       std::vector<uint64_t> bytes, py::object kept) {
    CheckLengths(dst.size(), {src.size(), bytes.size()});
    uint64_t total = 0;
    for (uint64_t b : bytes) total += b;
    auto state = NewState(0);
    return Push(std::move(self), state, std::move(kept), total, [dst = std::move(dst), src = std::move(src),
                                                          bytes = std::move(bytes)] {
      for (size_t i = 0; i < dst.size(); ++i) {
        std::memcpy(reinterpret_cast<void*>(dst[i]), reinterpret_cast<const void*>(src[i]), bytes[i]);
      }
    });
  }

  // One forward's module outputs and inputs: records of (id, ptr, numel, dtype, outer, units,
  // inner, kind, histogram, sizes, strides); the results wait in the ticket for
  // Ticket.log_activations.
  std::unique_ptr<Ticket> SubmitActivations(py::object self, int64_t step, py::handle records, py::object kept) {
    std::vector<ActivationJob> jobs = ActivationJobs(records);
    auto state = NewState(step);
    state->activations.resize(jobs.size());
    const uint64_t bytes = JobBytes(jobs);
    return Push(std::move(self), state, std::move(kept), bytes, [state, jobs = std::move(jobs)] {
      std::vector<unsigned char> gathered;
      MeasureActivations(jobs, &gathered, [&](size_t i, const TensorStats& stats) {
        state->activations[i] = {jobs[i].id, stats};
      });
    });
  }

  void Pause() { helper_->Pause(); }
  void Resume() { helper_->Resume(); }
  void WaitAll() {
    py::gil_scoped_release release;
    helper_->WaitAll();
  }

 private:
  std::shared_ptr<TicketState> NewState(int64_t step) {
    auto state = std::make_shared<TicketState>();
    state->step = step;
    return state;
  }

  // bytes: the memory the job reads. A job under kRunHereBytes runs on the calling thread when
  // the helper is idle: waking the helper costs the training thread more than such a job
  // (docs/watch.md, "The training thread's budget").
  std::unique_ptr<Ticket> Push(py::object self, const std::shared_ptr<TicketState>& state, py::object kept,
                               uint64_t bytes, std::function<void()> job) {
    // The ticket exists (and owns kept) before the job can run: nothing is freed under it.
    auto ticket = std::make_unique<Ticket>(helper_, state, &recorder_, std::move(self), std::move(kept));
    HelperThread::Ticket number = bytes < kRunHereBytes ? helper_->RunHereIfIdle(job) : 0;
    state->number = number ? number : helper_->Push(std::move(job));
    return ticket;
  }

  static constexpr uint64_t kRunHereBytes = 64 * 1024;

  static uint64_t JobBytes(const std::vector<ActivationJob>& jobs) {
    uint64_t bytes = 0;
    for (const ActivationJob& j : jobs) bytes += j.numel * ElementSize(j.dtype);
    return bytes;
  }

  Recorder& recorder_;
  std::shared_ptr<HelperThread> helper_;
};

// ---- the per-step calls without pybind11's dispatcher (python/direct_calls.h) ----

// worker.submit_gradients(step, plan, params, dtypes, strided, histogram, units, norm_id,
// always_norm, scalar_ids, scalar_values, rss_id, inputs) -> Ticket or None
PyObject* WorkerSubmitGradients(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  HostWorker* worker = ValueOf<HostWorker>(self);
  if (worker == nullptr) return nullptr;
  FastArgs a("HostWorker.submit_gradients(step, plan, params, dtypes, strided, histogram, units, norm_id, "
             "always_norm, scalar_ids, scalar_values, rss_id, inputs)",
             args, nargs, 13, 13);
  int64_t step = 0;
  uint32_t norm_id = 0, rss_id = 0;
  bool histogram = false, units = false, always_norm = false;
  if (!a.ok() || !a.Int(0, &step) || !a.Bool(5, &histogram) || !a.Bool(6, &units) || !a.Id(7, &norm_id) ||
      !a.Bool(8, &always_norm) || !a.Id(11, &rss_id)) {
    return nullptr;
  }
  return Guard([&] {
    auto plan = py::cast<std::shared_ptr<StatsPlan>>(a.Object(1));
    if (!PyList_Check(a.Object(2)) || !PyList_Check(a.Object(3))) {
      throw py::type_error("submit_gradients: params and dtypes must be lists");
    }
    return worker
        ->SubmitGradients(py::reinterpret_borrow<py::object>(self), step, std::move(plan),
                          py::reinterpret_borrow<py::list>(a.Object(2)), py::reinterpret_borrow<py::list>(a.Object(3)),
                          py::reinterpret_borrow<py::object>(a.Object(4)), histogram, units, norm_id, always_norm,
                          py::cast<std::vector<uint32_t>>(a.Object(9)), py::cast<std::vector<double>>(a.Object(10)),
                          rss_id, a.Object(12))
        .release()
        .ptr();
  });
}

PyObject* TicketDone(PyObject* self, PyObject* /*unused*/) {
  return PyBool_FromLong(TicketOf(self)->Done());
}

PyObject* TicketWait(PyObject* self, PyObject* /*unused*/) {
  Ticket* ticket = TicketOf(self);
  return Guard([&] {
    const auto [sum_squares, nan, inf] = ticket->Wait();
    return Py_BuildValue("(dKK)", sum_squares, static_cast<unsigned long long>(nan),
                         static_cast<unsigned long long>(inf));
  });
}

// capture_record(series_id, tensor, code, kind, histogram, flat, strided)
PyObject* CaptureRecordCall(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  FastArgs a("capture_record(series_id, tensor, code, kind, histogram, flat, strided)", args, nargs, 7, 7);
  uint32_t series_id = 0;
  int64_t code = 0, kind = 0;
  bool histogram = false, flat = false;
  if (!a.ok() || !a.Id(0, &series_id) || !a.Int(2, &code) || !a.Int(3, &kind) || !a.Bool(4, &histogram) ||
      !a.Bool(5, &flat)) {
    return nullptr;
  }
  return Guard([&] {
    return CaptureRecord(series_id, a.Object(1), static_cast<int>(code), static_cast<int>(kind), histogram, flat,
                         a.Object(6))
        .release()
        .ptr();
  });
}

// worker.submit_activations(step, records, kept=None) -> Ticket
PyObject* WorkerSubmitActivations(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  HostWorker* worker = ValueOf<HostWorker>(self);
  if (worker == nullptr) return nullptr;
  FastArgs a("HostWorker.submit_activations(step, records, kept=None)", args, nargs, 2, 3);
  int64_t step = 0;
  if (!a.ok() || !a.Int(0, &step)) return nullptr;
  return Guard([&] {
    py::object kept = a.OrNone(2);
    return WrapTicket(worker->SubmitActivations(py::reinterpret_borrow<py::object>(self), step,
                                              a.Object(1), std::move(kept)))
        .release()
        .ptr();
  });
}

// worker.submit_weights(step, plan, current, previous, histogram, kept=None) -> Ticket
PyObject* WorkerSubmitWeights(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  HostWorker* worker = ValueOf<HostWorker>(self);
  if (worker == nullptr) return nullptr;
  FastArgs a("HostWorker.submit_weights(step, plan, current, previous, histogram, kept=None)", args, nargs, 5, 6);
  int64_t step = 0;
  bool histogram = false;
  if (!a.ok() || !a.Int(0, &step) || !a.Bool(4, &histogram)) return nullptr;
  return Guard([&] {
    py::object kept = a.OrNone(5);
    return WrapTicket(worker->SubmitWeights(py::reinterpret_borrow<py::object>(self), step,
                                          py::cast<std::shared_ptr<WeightPlan>>(a.Object(1)),
                                          py::cast<std::vector<uintptr_t>>(a.Object(2)),
                                          py::cast<std::vector<uintptr_t>>(a.Object(3)), histogram, std::move(kept)))
        .release()
        .ptr();
  });
}

// worker.submit_copies(dst, src, bytes, kept=None) -> Ticket
PyObject* WorkerSubmitCopies(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  HostWorker* worker = ValueOf<HostWorker>(self);
  if (worker == nullptr) return nullptr;
  FastArgs a("HostWorker.submit_copies(dst, src, bytes, kept=None)", args, nargs, 3, 4);
  if (!a.ok()) return nullptr;
  return Guard([&] {
    py::object kept = a.OrNone(3);
    return WrapTicket(worker->SubmitCopies(py::reinterpret_borrow<py::object>(self),
                                         py::cast<std::vector<uintptr_t>>(a.Object(0)),
                                         py::cast<std::vector<uintptr_t>>(a.Object(1)),
                                         py::cast<std::vector<uint64_t>>(a.Object(2)), std::move(kept)))
        .release()
        .ptr();
  });
}

// ticket.log_activations(keep)
PyObject* TicketLogActivations(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Ticket* ticket = TicketOf(self);
  FastArgs a("Ticket.log_activations(keep)", args, nargs, 1, 1);
  if (!a.ok()) return nullptr;
  return Guard([&] {
    ticket->LogActivations(py::cast<std::vector<bool>>(a.Object(0)));
    Py_RETURN_NONE;
  });
}

PyMethodDef kWorkerMethods[] = {
    {"submit_activations", AsMethod(WorkerSubmitActivations), METH_FASTCALL,
     "One forward's module outputs and inputs (records as capture_record makes them): a Ticket whose "
     "log_activations logs their statistics."},
    {"submit_weights", AsMethod(WorkerSubmitWeights), METH_FASTCALL,
     "The weight/update pass: current[i] the weights, previous[i] their snapshot (refreshed): a Ticket."},
    {"submit_copies", AsMethod(WorkerSubmitCopies), METH_FASTCALL,
     "memcpy of each src[i] into dst[i] (the weight snapshots): a Ticket."},
    {"submit_gradients", AsMethod(WorkerSubmitGradients), METH_FASTCALL,
     "The statistics of each planned parameter's .grad (read here), the step's scalars and inputs: a Ticket, or "
     "None when a gradient does not fit the plan."},
    {nullptr, nullptr, 0, nullptr}};

PyMethodDef kTicketMethods[] = {
    {"done", TicketDone, METH_NOARGS, "Whether the job has finished."},
    {"log_activations", AsMethod(TicketLogActivations), METH_FASTCALL,
     "log_activations(keep): waits, then logs the results whose keep flag is set."},
    {"wait", TicketWait, METH_NOARGS,
     "Waits for the job, lets its tensors go; (sum of squares, nan, inf) of a stats job."},
    {nullptr, nullptr, 0, nullptr}};

PyObject* TicketKept(PyObject* self, void* /*closure*/) { return TicketOf(self)->Kept().release().ptr(); }

PyGetSetDef kTicketGetSet[] = {
    {"kept", TicketKept, nullptr, "The tensors the job reads (None once waited for).", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot kTicketSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(DeallocTicket)},
    {Py_tp_methods, kTicketMethods},
    {Py_tp_getset, kTicketGetSet},
    {Py_tp_doc, const_cast<char*>("One job of the host worker: done(), wait(), log_activations(keep), kept. Made by "
                                  "the worker's submit calls only.")},
    {0, nullptr}};

PyType_Spec kTicketSpec = {"trainscope._core.Ticket", sizeof(TicketObject), 0, Py_TPFLAGS_DEFAULT, kTicketSlots};

PyMethodDef kCaptureRecord = {
    "capture_record", AsMethod(CaptureRecordCall), METH_FASTCALL,
    "capture_record(series_id, tensor, code, kind, histogram, flat, strided): (record, tensor) of a strided host "
    "tensor as the host worker's activation jobs read it, or None."};

}  // namespace

// Called by RegisterWatch (watch_bindings.cc).
void RegisterHostExecutor(py::module_& m) {
  py::class_<StatsPlan, std::shared_ptr<StatsPlan>>(m, "StatsPlan")
      .def(py::init<std::vector<uint32_t>, std::vector<uint64_t>, const std::vector<int>&, std::vector<uint64_t>,
                    std::vector<uint32_t>>(),
           py::arg("ids"), py::arg("numels"), py::arg("dtypes"), py::arg("rows"), py::arg("unit_ids"))
      .def("__len__", &StatsPlan::size);
  py::class_<WeightPlan, std::shared_ptr<WeightPlan>>(m, "WeightPlan")
      .def(py::init<std::vector<uint32_t>, std::vector<uint32_t>, std::vector<uint32_t>, std::vector<uint64_t>,
                    const std::vector<int>&>(),
           py::arg("weight_ids"), py::arg("update_ids"), py::arg("ratio_ids"), py::arg("numels"), py::arg("dtypes"))
      .def("__len__", &WeightPlan::size);
  ticket_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kTicketSpec));
  if (ticket_type == nullptr) throw py::error_already_set();
  ticket_type->tp_new = nullptr;  // made by the worker only: Ticket() raises TypeError
  m.add_object("Ticket", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(ticket_type)));
  m.add_object("capture_record", py::reinterpret_steal<py::object>(
                                     PyCFunction_NewEx(&kCaptureRecord, nullptr, m.attr("__name__").ptr())));
  py::class_<HostWorker> worker(m, "HostWorker");
  worker
      .def(py::init<Recorder&>(), py::arg("recorder"), py::keep_alive<1, 2>())
      .def(
          "submit_stats",
          [](py::object self, int64_t step, std::shared_ptr<StatsPlan> plan, std::vector<uintptr_t> ptrs,
             bool histogram, bool units, uint32_t norm_id, std::vector<uint32_t> scalar_ids,
             std::vector<double> scalar_values, uint32_t rss_id, py::object kept, const py::list& inputs) {
            return WrapTicket(self.cast<HostWorker&>().SubmitStats(
                self, step, std::move(plan), std::move(ptrs), histogram, units, norm_id, std::move(scalar_ids),
                std::move(scalar_values), rss_id, std::move(kept), ActivationJobs(inputs)));
          },
          py::arg("step"), py::arg("plan"), py::arg("ptrs"), py::arg("histogram"), py::arg("units"),
          py::arg("norm_id") = 0, py::arg("scalar_ids") = std::vector<uint32_t>{},
          py::arg("scalar_values") = std::vector<double>{}, py::arg("rss_id") = 0, py::arg("kept") = py::none(),
          py::arg("inputs") = py::list())
      .def("wait_all", &HostWorker::WaitAll)
      .def("pause", &HostWorker::Pause)
      .def("resume", &HostWorker::Resume);
  InstallMethods(worker, kWorkerMethods);
}

}  // namespace trainscope::python
