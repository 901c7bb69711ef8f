// What run.watch() calls into: tensor statistics computed by the C++ core on the tensors'
// own memory (Python passes data_ptr(), numel and a dtype code; nothing is copied), logged
// straight into the Recorder, with the GIL released for the passes. Also the per-step
// helpers (spans, meta, RSS) and the system-metrics sampler thread.
//
// Pointers come from torch tensors that the caller keeps alive and contiguous for the
// call; on a bad dtype code or mismatched list lengths a ValueError is raised before any
// memory is read.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <functional>
#include <deque>
#include <thread>
#include <mutex>
#include <condition_variable>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "python/bindings.h"
#include "recorder/recorder.h"
#include "watch/system_sampler.h"
#include "watch/tensor_passes.h"

namespace py = pybind11;

namespace trainscope::python {

namespace {

using watch::DType;

struct Totals {
  double sum_squares = 0;  // over finite values of every tensor
  uint64_t nan = 0;
  uint64_t inf = 0;
};

void CheckLengths(size_t n, std::initializer_list<size_t> others) {
  for (size_t m : others) {
    if (m != n) throw py::value_error("trainscope watch: argument lists differ in length");
  }
}

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 8;
    case DType::kFloat32: return 4;
    default: return 2;
  }
}

std::vector<DType> DTypes(const std::vector<int>& codes) {
  std::vector<DType> out;
  out.reserve(codes.size());
  for (int c : codes) {
    if (!watch::ValidDType(c)) throw py::value_error("trainscope watch: unknown dtype code " + std::to_string(c));
    out.push_back(static_cast<DType>(c));
  }
  return out;
}

// The statistics of many tensors at `step`, logged (ptrs[i] == 0: none this time). rows[i] > 0
// asks for the L2 norm of each of the tensor's rows too, logged as a vector under unit_ids[i].
// Runs without the GIL; the caller has checked the lengths.
Totals StatsManyNoGil(Recorder& recorder, int64_t step, const std::vector<uint32_t>& ids,
                      const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& numels,
                      const std::vector<DType>& dtypes, const std::vector<uint64_t>& rows,
                      const std::vector<uint32_t>& unit_ids, bool histogram) {
  const bool units = !rows.empty();
  Totals totals;
  std::vector<float> norms;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ptrs[i] == 0) continue;  // no gradient this step
    const void* data = reinterpret_cast<const void*>(ptrs[i]);
    TensorStats s;
    if (units && rows[i] > 0 && numels[i] % rows[i] == 0) {
      s = watch::StatsWithRowNorms(data, rows[i], numels[i] / rows[i], dtypes[i], histogram, &norms);
      recorder.LogVector(unit_ids[i], step, norms);
    } else {
      s = watch::StatsOf(data, numels[i], dtypes[i], histogram);
    }
    totals.sum_squares += s.sum_squares;
    totals.nan += s.nan;
    totals.inf += s.inf;
    recorder.LogTensorStats(ids[i], step, s);
  }
  return totals;
}

void CheckStatsMany(const std::vector<uint32_t>& ids, const std::vector<uintptr_t>& ptrs,
                    const std::vector<uint64_t>& numels, const std::vector<int>& dtype_codes,
                    const std::vector<uint64_t>& rows, const std::vector<uint32_t>& unit_ids) {
  CheckLengths(ids.size(), {ptrs.size(), numels.size(), dtype_codes.size()});
  if (!rows.empty()) CheckLengths(ids.size(), {rows.size(), unit_ids.size()});
}

std::tuple<double, uint64_t, uint64_t> TensorStatsMany(Recorder& recorder, int64_t step,
                                                       const std::vector<uint32_t>& ids,
                                                       const std::vector<uintptr_t>& ptrs,
                                                       const std::vector<uint64_t>& numels,
                                                       const std::vector<int>& dtype_codes,
                                                       const std::vector<uint64_t>& rows,
                                                       const std::vector<uint32_t>& unit_ids, bool histogram) {
  CheckStatsMany(ids, ptrs, numels, dtype_codes, rows, unit_ids);
  const std::vector<DType> dtypes = DTypes(dtype_codes);
  py::gil_scoped_release release;
  const Totals t = StatsManyNoGil(recorder, step, ids, ptrs, numels, dtypes, rows, unit_ids, histogram);
  return {t.sum_squares, t.nan, t.inf};
}

// Calls row(offset) for the first element of every innermost row of a strided tensor
// (offsets and strides in elements), in row-major order; sizes must have no zero.
template <typename F>
void ForEachRow(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, F&& row) {
  std::vector<int64_t> index(sizes.size() > 1 ? sizes.size() - 1 : 0, 0);
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d) offset += index[d] * strides[d];
    row(offset);
    size_t d = index.size();
    while (d > 0 && ++index[d - 1] == sizes[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

void CheckStrided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  CheckLengths(sizes.size(), {strides.size()});
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) throw py::value_error("trainscope watch: negative size or stride");
  }
}

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
    ForEachRow(sizes, strides, [&](int64_t offset) {
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

// Weight stats, update stats (current - previous) and update_ratio = ||update|| / ||weight||
// for each parameter; previous[i] is refreshed to current[i] in the same pass.
void CheckWeightUpdates(const std::vector<uint32_t>& weight_ids, const std::vector<uint32_t>& update_ids,
                        const std::vector<uint32_t>& ratio_ids, const std::vector<uintptr_t>& current,
                        const std::vector<uintptr_t>& previous, const std::vector<uint64_t>& numels,
                        const std::vector<int>& dtype_codes) {
  CheckLengths(weight_ids.size(), {update_ids.size(), ratio_ids.size(), current.size(), previous.size(),
                                   numels.size(), dtype_codes.size()});
}

// The records of one parameter: its weight and update statistics and update_ratio.
void LogWeightUpdate(Recorder& recorder, int64_t step, uint32_t weight_id, uint32_t update_id, uint32_t ratio_id,
                     const TensorStats& w, const TensorStats& u) {
  const double ratio = w.l2_norm() > 0 ? u.l2_norm() / w.l2_norm()
                                       : (u.l2_norm() > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  recorder.LogTensorStats(weight_id, step, w);
  recorder.LogTensorStats(update_id, step, u);
  recorder.LogScalar(ratio_id, step, (u.nan || u.inf || w.nan || w.inf) ? std::nan("") : ratio);
}

void WeightUpdatesNoGil(Recorder& recorder, int64_t step, const std::vector<uint32_t>& weight_ids,
                        const std::vector<uint32_t>& update_ids, const std::vector<uint32_t>& ratio_ids,
                        const std::vector<uintptr_t>& current, const std::vector<uintptr_t>& previous,
                        const std::vector<uint64_t>& numels, const std::vector<DType>& dtypes, bool histogram) {
  for (size_t i = 0; i < weight_ids.size(); ++i) {
    TensorStats w, u;
    watch::WeightAndUpdateStats(reinterpret_cast<const void*>(current[i]), reinterpret_cast<void*>(previous[i]),
                                numels[i], dtypes[i], histogram, &w, &u);
    LogWeightUpdate(recorder, step, weight_ids[i], update_ids[i], ratio_ids[i], w, u);
  }
}

void WeightUpdateMany(Recorder& recorder, int64_t step, const std::vector<uint32_t>& weight_ids,
                      const std::vector<uint32_t>& update_ids, const std::vector<uint32_t>& ratio_ids,
                      const std::vector<uintptr_t>& current, const std::vector<uintptr_t>& previous,
                      const std::vector<uint64_t>& numels, const std::vector<int>& dtype_codes, bool histogram) {
  CheckWeightUpdates(weight_ids, update_ids, ratio_ids, current, previous, numels, dtype_codes);
  const std::vector<DType> dtypes = DTypes(dtype_codes);
  py::gil_scoped_release release;
  WeightUpdatesNoGil(recorder, step, weight_ids, update_ids, ratio_ids, current, previous, numels, dtypes, histogram);
}

// Activation kinds, as Python passes them.
enum ActivationKind { kPlain = 0, kDeadUnits = 1, kTanh = 2, kSigmoid = 3 };

// Logs one module output's stats; returns its non-finite count.
void CheckActivation(uint64_t numel, int dtype_code, uint64_t outer, uint64_t units, uint64_t inner, int kind) {
  DTypes({dtype_code});
  if (kind == kDeadUnits && outer * units * inner != numel) {
    throw py::value_error("trainscope watch: activation layout does not match its size");
  }
}

TensorStats ActivationStatsNoGil(uintptr_t ptr, uint64_t numel, DType dtype, uint64_t outer, uint64_t units,
                                 uint64_t inner, int kind, bool histogram) {
  const void* data = reinterpret_cast<const void*>(ptr);
  TensorStats s = watch::StatsOf(data, numel, dtype, histogram);
  if (kind == kDeadUnits) s.dead_fraction = watch::DeadFraction(data, outer, units, inner, dtype);
  if (kind == kTanh) s.saturated_fraction = watch::SaturatedFraction(data, numel, dtype, watch::Saturation::kTanh);
  if (kind == kSigmoid) {
    s.saturated_fraction = watch::SaturatedFraction(data, numel, dtype, watch::Saturation::kSigmoid);
  }
  return s;
}

uint64_t ActivationStats(Recorder& recorder, uint32_t id, int64_t step, uintptr_t ptr, uint64_t numel,
                         int dtype_code, uint64_t outer, uint64_t units, uint64_t inner, int kind, bool histogram) {
  CheckActivation(numel, dtype_code, outer, units, inner, kind);
  const DType dtype = static_cast<DType>(dtype_code);
  py::gil_scoped_release release;
  const TensorStats s = ActivationStatsNoGil(ptr, numel, dtype, outer, units, inner, kind, histogram);
  recorder.LogTensorStats(id, step, s);
  return s.nan + s.inf;
}

// Passes on a helper thread, in submission order, overlapping the training's own work:
//  - the gradient pass while the optimizer steps (optimizers read the gradients and write
//    the parameters and their own state, so both can read the same memory at once);
//  - weight snapshot copies, and the weight/update pass of the last optimizer step, while
//    the next forward runs (it reads the weights and does not change them); without an
//    optimizer to wait in, half of the weight/update pass while the calling thread does
//    the other half;
//  - activation passes while the backward goes on. Their results are held until
//    CommitActivations: the caller logs only those whose tensor no later op changed in
//    place (torch's version counter), since the pass may have read it mid-change.
// The caller keeps every tensor alive until WaitAll() has returned.
class StatsWorker {
 public:
  // Logs into recorder, which Python keeps alive as long as this worker (keep_alive on the
  // constructor: on each submit it would add a reference per call, never dropped).
  explicit StatsWorker(Recorder& recorder) : recorder_(recorder), thread_([this] { Loop(); }) {}
  ~StatsWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // What the gradient pass needs of each parameter, given once: per step only the
  // gradients' addresses cross from Python (one list, not six).
  void SetGradientPlan(std::vector<uint32_t> ids, std::vector<uint64_t> numels, const std::vector<int>& dtype_codes,
                       std::vector<uint64_t> rows, std::vector<uint32_t> unit_ids) {
    CheckStatsMany(ids, std::vector<uintptr_t>(ids.size()), numels, dtype_codes, rows, unit_ids);
    WaitAll();  // a pass in flight reads the old plan
    plan_ = {std::move(ids), std::move(numels), DTypes(dtype_codes), std::move(rows), std::move(unit_ids)};
  }

  // The gradient pass over ptrs (one per planned parameter, 0: no gradient); per-unit norms
  // when units. Also done at step from this thread: the statistics of the model's float
  // inputs (contiguous tensors: input_ids[i] over input_numels[i] values at input_ptrs[i]),
  // the step's scalars (lr, grad_zeroed), and, when rss_id is not 0, the process's RSS: a
  // recorder call, an RSS read or an input pass costs the training thread ~0.1-0.2 ms when
  // its code is cold, as it is at this point of a step.
  void SubmitGradientPass(int64_t step, std::vector<uintptr_t> ptrs, bool histogram, bool units,
                          std::vector<uint32_t> scalar_ids, std::vector<double> scalar_values, uint32_t rss_id,
                          std::vector<uint32_t> input_ids, std::vector<uintptr_t> input_ptrs,
                          std::vector<uint64_t> input_numels, const std::vector<int>& input_dtypes) {
    CheckLengths(plan_.ids.size(), {ptrs.size()});
    CheckLengths(scalar_ids.size(), {scalar_values.size()});
    CheckLengths(input_ids.size(), {input_ptrs.size(), input_numels.size(), input_dtypes.size()});
    Push([this, step, ptrs = std::move(ptrs), histogram, units, scalar_ids = std::move(scalar_ids),
          scalar_values = std::move(scalar_values), rss_id, input_ids = std::move(input_ids),
          input_ptrs = std::move(input_ptrs), input_numels = std::move(input_numels),
          input_dtypes = DTypes(input_dtypes)] {
      for (size_t i = 0; i < input_ids.size(); ++i) {
        recorder_.LogTensorStats(input_ids[i], step, watch::StatsOf(reinterpret_cast<const void*>(input_ptrs[i]),
                                                                    input_numels[i], input_dtypes[i], false));
      }
      for (size_t i = 0; i < scalar_ids.size(); ++i) recorder_.LogScalar(scalar_ids[i], step, scalar_values[i]);
      if (rss_id) recorder_.LogScalar(rss_id, step, static_cast<double>(watch::ProcessRssBytes()));
      static const std::vector<uint64_t> kNoRows;
      static const std::vector<uint32_t> kNoUnits;
      const Totals t = StatsManyNoGil(recorder_, step, plan_.ids, ptrs, plan_.numels, plan_.dtypes,
                                      units ? plan_.rows : kNoRows, units ? plan_.unit_ids : kNoUnits, histogram);
      std::lock_guard<std::mutex> lock(mu_);
      gradient_totals_ = t;
      gradient_step_ = step;
    });
  }

  // Waits for every pass, then logs the global gradient norm of the last gradient pass as
  // norm_id at its step (NaN if any value was NaN, else Inf if any was Inf); returns whether
  // any gradient value was not finite.
  bool FinishGradientPass(uint32_t norm_id) {
    WaitAll();
    Totals t;
    int64_t step;
    {
      std::lock_guard<std::mutex> lock(mu_);
      t = gradient_totals_;
      step = gradient_step_;
    }
    const double norm = t.nan ? std::nan("") : (t.inf ? std::numeric_limits<double>::infinity()
                                                       : std::sqrt(t.sum_squares));
    recorder_.LogScalar(norm_id, step, norm);
    return t.nan || t.inf;
  }

  // memcpy of each src[i] into dst[i] on this thread (weight snapshots, while the forward
  // runs; WaitFor(the returned ticket) before the sources change).
  uint64_t SubmitCopies(std::vector<uintptr_t> dst, std::vector<uintptr_t> src, std::vector<uint64_t> bytes) {
    CheckLengths(dst.size(), {src.size(), bytes.size()});
    return Push([dst = std::move(dst), src = std::move(src), bytes = std::move(bytes)] {
      for (size_t i = 0; i < dst.size(); ++i) {
        std::memcpy(reinterpret_cast<void*>(dst[i]), reinterpret_cast<const void*>(src[i]), bytes[i]);
      }
    });
  }

  // What the deferred weight/update pass needs of each parameter, given once (the
  // snapshots' addresses among it): per pass only the weights' addresses cross.
  void SetWeightPlan(std::vector<uint32_t> weight_ids, std::vector<uint32_t> update_ids,
                     std::vector<uint32_t> ratio_ids, std::vector<uintptr_t> previous, std::vector<uint64_t> numels,
                     const std::vector<int>& dtype_codes) {
    CheckWeightUpdates(weight_ids, update_ids, ratio_ids, previous, previous, numels, dtype_codes);
    WaitAll();  // a pass in flight reads the old plan
    weight_plan_ = {std::move(weight_ids), std::move(update_ids), std::move(ratio_ids), std::move(previous),
                    std::move(numels), DTypes(dtype_codes)};
  }

  // The whole weight/update pass (WeightUpdatesNoGil's records) over current (one address
  // per planned parameter) on this thread, logged from here: it runs while the next
  // forward and backward do, which read the weights and do not change them. WaitFor(the
  // returned ticket) before the weights change.
  uint64_t SubmitWeightPass(int64_t step, std::vector<uintptr_t> current, bool histogram) {
    CheckLengths(weight_plan_.weight_ids.size(), {current.size()});
    return Push([this, step, current = std::move(current), histogram] {
      const WeightPlan& p = weight_plan_;
      WeightUpdatesNoGil(recorder_, step, p.weight_ids, p.update_ids, p.ratio_ids, current, p.previous, p.numels,
                         p.dtypes, histogram);
    });
  }

  // The weight/update pass (WeightUpdatesNoGil's records) in two halves of the values at
  // once, both memory-bound: this thread takes the first half, the calling thread the rest;
  // a tensor across the boundary is read in two parts whose statistics are merged (one
  // large tensor, such as a CNN's first Linear, would otherwise leave one side idle).
  void WeightUpdatePass(int64_t step, const std::vector<uint32_t>& weight_ids,
                        const std::vector<uint32_t>& update_ids, const std::vector<uint32_t>& ratio_ids,
                        const std::vector<uintptr_t>& current, const std::vector<uintptr_t>& previous,
                        const std::vector<uint64_t>& numels, const std::vector<int>& dtype_codes, bool histogram) {
    CheckWeightUpdates(weight_ids, update_ids, ratio_ids, current, previous, numels, dtype_codes);
    const std::vector<DType> dtypes = DTypes(dtype_codes);
    struct Part {
      size_t tensor;
      uint64_t begin, count;
      TensorStats weight, update;
    };
    uint64_t total = 0;
    for (uint64_t n : numels) total += n;
    const uint64_t half = total / 2 / kPartAlign * kPartAlign;
    std::vector<Part> first, second;
    uint64_t seen = 0;
    for (size_t i = 0; i < numels.size(); ++i) {
      const uint64_t begin = seen, end = seen + numels[i];
      if (end <= half) {
        first.push_back({i, 0, numels[i], {}, {}});
      } else if (begin >= half) {
        second.push_back({i, 0, numels[i], {}, {}});
      } else {
        first.push_back({i, 0, half - begin, {}, {}});
        second.push_back({i, half - begin, end - half, {}, {}});
      }
      seen = end;
    }
    auto run = [&](std::vector<Part>& parts) {
      for (Part& part : parts) {
        const size_t bytes = ElementSize(dtypes[part.tensor]);
        watch::WeightAndUpdateStats(reinterpret_cast<const void*>(current[part.tensor] + part.begin * bytes),
                                    reinterpret_cast<void*>(previous[part.tensor] + part.begin * bytes), part.count,
                                    dtypes[part.tensor], histogram, &part.weight, &part.update);
      }
    };
    Push([&] { run(first); });
    {
      py::gil_scoped_release release;
      run(second);
    }
    WaitAll();
    std::vector<TensorStats> weights(numels.size()), updates(numels.size());
    for (std::vector<Part>* parts : {&first, &second}) {
      for (const Part& part : *parts) {
        MergeTensorStats(weights[part.tensor], part.weight);
        MergeTensorStats(updates[part.tensor], part.update);
      }
    }
    for (size_t i = 0; i < numels.size(); ++i) LogWeightUpdate(recorder_, step, weight_ids[i], update_ids[i],
                                                               ratio_ids[i], weights[i], updates[i]);
  }

  // Module outputs of one forward (or the model's inputs), measured in one job; held for
  // CommitActivations. histograms[i]: an exponent histogram for the i-th.
  // strides[i]: empty for a contiguous tensor; else its strides in elements (its sizes in
  // sizes[i]), and this thread first gathers it in row-major order, as .contiguous() would,
  // so the training thread does not copy (attention outputs are transposes).
  void SubmitActivations(int64_t step, const std::vector<uint32_t>& ids, const std::vector<uintptr_t>& ptrs,
                         const std::vector<uint64_t>& numels, const std::vector<int>& dtype_codes,
                         const std::vector<uint64_t>& outers, const std::vector<uint64_t>& units,
                         const std::vector<uint64_t>& inners, const std::vector<int>& kinds,
                         const std::vector<bool>& histograms, const std::vector<std::vector<int64_t>>& sizes,
                         const std::vector<std::vector<int64_t>>& strides) {
    CheckLengths(ids.size(), {ptrs.size(), numels.size(), dtype_codes.size(), outers.size(), units.size(),
                              inners.size(), kinds.size(), histograms.size(), sizes.size(), strides.size()});
    std::vector<ActivationJob> jobs(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      CheckActivation(numels[i], dtype_codes[i], outers[i], units[i], inners[i], kinds[i]);
      jobs[i] = {ptrs[i], numels[i], static_cast<DType>(dtype_codes[i]), outers[i], units[i], inners[i], kinds[i],
                 static_cast<bool>(histograms[i]), {}, {}};
      if (!strides[i].empty()) {
        CheckStrided(sizes[i], strides[i]);
        int64_t count = 1;
        for (int64_t size : sizes[i]) count *= size;
        if (static_cast<uint64_t>(count) != numels[i]) {
          throw py::value_error("trainscope watch: activation sizes do not match its numel");
        }
        jobs[i].sizes = sizes[i];
        jobs[i].strides = strides[i];
      }
    }
    size_t first;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = activations_.size();
      for (uint32_t id : ids) activations_.push_back({id, step, TensorStats{}});
    }
    Push([this, first, jobs = std::move(jobs)] {
      std::vector<unsigned char> gathered;
      for (size_t i = 0; i < jobs.size(); ++i) {
        const ActivationJob& j = jobs[i];
        uintptr_t ptr = j.ptr;
        if (!j.strides.empty() && j.numel) {
          const size_t bytes = ElementSize(j.dtype);
          const int64_t inner = j.sizes.back(), inner_stride = j.strides.back();
          gathered.resize(j.numel * bytes);
          unsigned char* out = gathered.data();
          const auto* in = reinterpret_cast<const unsigned char*>(j.ptr);
          ForEachRow(j.sizes, j.strides, [&](int64_t offset) {
            for (int64_t k = 0; k < inner; ++k, out += bytes) {
              std::memcpy(out, in + (offset + k * inner_stride) * bytes, bytes);
            }
          });
          ptr = reinterpret_cast<uintptr_t>(gathered.data());
        }
        const TensorStats s = ActivationStatsNoGil(ptr, j.numel, j.dtype, j.outer, j.units, j.inner, j.kind,
                                                   j.histogram);
        std::lock_guard<std::mutex> lock(mu_);
        activations_[first + i].stats = s;
      }
    });
  }

  // Holds the queued passes until Resume() (tests: a helper that runs late, after the
  // training thread has gone on).
  void Pause() {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
  }
  void Resume() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      paused_ = false;
    }
    cv_.notify_all();
  }

  // Waits until every submitted pass is done.
  void WaitAll() {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return jobs_.empty() && !busy_; });
  }

  // Waits until the pass with this ticket (Submit*'s result) and those before it are done,
  // not for later ones (the optimizer step waits for the weights' passes, while the
  // gradient pass submitted after them goes on beside the step).
  void WaitFor(uint64_t ticket) {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this, ticket] { return finished_ >= ticket; });
  }

  // Waits for every pass, then logs the activation results (in submission order) whose
  // keep flag is set, and drops all.
  void CommitActivations(const std::vector<bool>& keep) {
    WaitAll();
    std::vector<Activation> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done.swap(activations_);
    }
    CheckLengths(done.size(), {keep.size()});
    for (size_t i = 0; i < done.size(); ++i) {
      if (keep[i]) recorder_.LogTensorStats(done[i].id, done[i].step, done[i].stats);
    }
  }

 private:
  struct Activation {
    uint32_t id;
    int64_t step;
    TensorStats stats;
  };
  struct ActivationJob {
    uintptr_t ptr;
    uint64_t numel;
    DType dtype;
    uint64_t outer, units, inner;
    int kind;
    bool histogram;
    std::vector<int64_t> sizes, strides;  // strides empty: contiguous
  };
  static constexpr uint64_t kPartAlign = 16384;  // the split falls on a pass block's boundary
  struct GradientPlan {
    std::vector<uint32_t> ids;
    std::vector<uint64_t> numels;
    std::vector<DType> dtypes;
    std::vector<uint64_t> rows;
    std::vector<uint32_t> unit_ids;
  };

  struct WeightPlan {
    std::vector<uint32_t> weight_ids, update_ids, ratio_ids;
    std::vector<uintptr_t> previous;
    std::vector<uint64_t> numels;
    std::vector<DType> dtypes;
  };

  // Queues a job; returns its ticket (jobs finish in ticket order).
  uint64_t Push(std::function<void()> job) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
      ticket = ++submitted_;
    }
    cv_.notify_all();
    return ticket;
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || (!jobs_.empty() && !paused_); });
      if (stop_) return;
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      lock.unlock();
      job();
      lock.lock();
      busy_ = false;
      ++finished_;
      done_cv_.notify_all();
    }
  }

  Recorder& recorder_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<Activation> activations_;
  bool busy_ = false;
  uint64_t submitted_ = 0, finished_ = 0;  // tickets
  bool stop_ = false;
  bool paused_ = false;
  Totals gradient_totals_;  // of the last gradient pass, at gradient_step_
  int64_t gradient_step_ = 0;
  GradientPlan plan_;  // written only while no job runs (SetGradientPlan waits)
  WeightPlan weight_plan_;  // likewise (SetWeightPlan waits)
  std::thread thread_;  // last: starts after the members it reads
};

// Statistics reduced on a device and copied to the host as rows of numbers (watch.py
// pack_device_stats): numel, nan, inf, zeros, min, max, sum, sum of squares, and optionally
// dead fraction and saturated fraction (NaN when unmeasured); hists[i] the 128 exponent
// bins, or hists empty.
void LogPackedStats(Recorder& recorder, int64_t step, const std::vector<uint32_t>& ids,
                    const std::vector<std::vector<double>>& rows, const std::vector<std::vector<double>>& hists) {
  CheckLengths(ids.size(), {rows.size()});
  if (!hists.empty()) CheckLengths(ids.size(), {hists.size()});
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<double>& r = rows[i];
    if (r.size() != 8 && r.size() != 10) throw py::value_error("trainscope watch: a packed row has 8 or 10 values");
    TensorStats s = TensorStatsFromReductions(static_cast<uint64_t>(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    if (r.size() == 10) {
      s.dead_fraction = r[8];
      s.saturated_fraction = r[9];
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

}  // namespace

void RegisterHostExecutor(py::module_& m);  // watch_host_bindings.cc

void RegisterWatch(py::module_& m) {
  RegisterHostExecutor(m);
  // These extend the Recorder class registered by recorder_bindings.cc.
  auto recorder = py::reinterpret_borrow<py::object>(m.attr("Recorder"));
  auto def = [&](const char* name, py::cpp_function f) { py::setattr(recorder, name, f); };
  def("series", py::cpp_function(
                    [](Recorder& r, const std::string& tag, const std::string& kind) {
                      uint32_t id = 0;
                      Status s = r.Series(tag, KindByName(kind), &id);
                      if (!s.ok()) throw py::value_error(s.message());
                      return id;
                    },
                    py::is_method(recorder), py::arg("tag"), py::arg("kind"),
                    "The id of a series for the log_* calls below; ValueError for a bad tag."));
  def("log_tensor_stats_many",
      py::cpp_function(&TensorStatsMany, py::is_method(recorder), py::arg("step"), py::arg("ids"), py::arg("ptrs"),
                       py::arg("numels"), py::arg("dtypes"), py::arg("rows"), py::arg("unit_ids"),
                       py::arg("histogram"),
                       "Stats of many tensors read in place; returns (sum of squares, nan, inf) over all."));
  def("log_weight_update_many",
      py::cpp_function(&WeightUpdateMany, py::is_method(recorder), py::arg("step"), py::arg("weight_ids"),
                       py::arg("update_ids"), py::arg("ratio_ids"), py::arg("current"), py::arg("previous"),
                       py::arg("numels"), py::arg("dtypes"), py::arg("histogram")));
  def("log_activation", py::cpp_function(&ActivationStats, py::is_method(recorder), py::arg("id"), py::arg("step"),
                                         py::arg("ptr"), py::arg("numel"), py::arg("dtype"), py::arg("outer"),
                                         py::arg("units"), py::arg("inner"), py::arg("kind"),
                                         py::arg("histogram")));
  def("log_scalar_ids", py::cpp_function(
                            [](Recorder& r, const std::vector<uint32_t>& ids, const std::vector<double>& values,
                               int64_t step) {
                              CheckLengths(ids.size(), {values.size()});
                              for (size_t i = 0; i < ids.size(); ++i) r.LogScalar(ids[i], step, values[i]);
                            },
                            py::is_method(recorder), py::arg("ids"), py::arg("values"), py::arg("step")));
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
  def("log_int_range", py::cpp_function(&LogIntRange, py::is_method(recorder), py::arg("min_id"), py::arg("max_id"),
                                        py::arg("step"), py::arg("ptr"), py::arg("sizes"), py::arg("strides"),
                                        py::arg("int_code")));
  def("set_meta", py::cpp_function([](Recorder& r, const std::string& key,
                                      const std::string& value) { r.SetMeta(key, value); },
                                   py::is_method(recorder), py::arg("key"), py::arg("value")));

  py::class_<StatsWorker>(m, "StatsWorker")
      .def(py::init<Recorder&>(), py::arg("recorder"), py::keep_alive<1, 2>())
      .def("set_gradient_plan", &StatsWorker::SetGradientPlan, py::arg("ids"), py::arg("numels"), py::arg("dtypes"),
           py::arg("rows"), py::arg("unit_ids"))
      .def("submit_gradient_pass", &StatsWorker::SubmitGradientPass, py::arg("step"), py::arg("ptrs"),
           py::arg("histogram"), py::arg("units"), py::arg("scalar_ids"), py::arg("scalar_values"),
           py::arg("rss_id"), py::arg("input_ids"), py::arg("input_ptrs"), py::arg("input_numels"),
           py::arg("input_dtypes"))
      .def("submit_copies", &StatsWorker::SubmitCopies, py::arg("dst"), py::arg("src"), py::arg("bytes"))
      .def("submit_activations", &StatsWorker::SubmitActivations, py::arg("step"), py::arg("ids"), py::arg("ptrs"),
           py::arg("numels"), py::arg("dtypes"), py::arg("outers"), py::arg("units"), py::arg("inners"),
           py::arg("kinds"), py::arg("histograms"), py::arg("sizes"), py::arg("strides"))
      .def("set_weight_plan", &StatsWorker::SetWeightPlan, py::arg("weight_ids"), py::arg("update_ids"),
           py::arg("ratio_ids"), py::arg("previous"), py::arg("numels"), py::arg("dtypes"))
      .def("submit_weight_pass", &StatsWorker::SubmitWeightPass, py::arg("step"), py::arg("current"),
           py::arg("histogram"))
      .def("weight_update_pass", &StatsWorker::WeightUpdatePass, py::arg("step"),
           py::arg("weight_ids"), py::arg("update_ids"), py::arg("ratio_ids"), py::arg("current"),
           py::arg("previous"), py::arg("numels"), py::arg("dtypes"), py::arg("histogram"))
      .def("wait_all", &StatsWorker::WaitAll)
      .def("wait_for", &StatsWorker::WaitFor, py::arg("ticket"))
      .def("pause", &StatsWorker::Pause)
      .def("resume", &StatsWorker::Resume)
      .def("finish_gradient_pass", &StatsWorker::FinishGradientPass, py::arg("norm_id"))
      .def("commit_activations", &StatsWorker::CommitActivations, py::arg("keep"));

  py::class_<GradCollector>(m, "GradCollector")
      .def(py::init<size_t>(), py::arg("slots"))
      .def("add", &GradCollector::Add, py::arg("slot"), py::arg("ptr"), py::arg("numel"), py::arg("dtype"),
           py::arg("histogram"), py::arg("rows"))
      .def("seen", &GradCollector::Seen)
      .def("reset", &GradCollector::Reset)
      .def("log", &GradCollector::Log, py::arg("recorder"), py::arg("step"), py::arg("ids"), py::arg("unit_ids"));

  m.def(
      "copy_many",
      [](const std::vector<uintptr_t>& dst, const std::vector<uintptr_t>& src, const std::vector<uint64_t>& bytes) {
        CheckLengths(dst.size(), {src.size(), bytes.size()});
        py::gil_scoped_release release;
        for (size_t i = 0; i < dst.size(); ++i) {
          std::memcpy(reinterpret_cast<void*>(dst[i]), reinterpret_cast<const void*>(src[i]), bytes[i]);
        }
      },
      py::arg("dst"), py::arg("src"), py::arg("bytes"),
      "memcpy of each src[i] into dst[i] (the weight snapshots: one call instead of a torch copy per tensor).");
  m.def("rss_bytes", &watch::ProcessRssBytes, "Resident set size of this process in bytes (0 if unknown).");

  py::class_<watch::SystemSampler>(m, "SystemSampler")
      .def(py::init<Recorder*, double>(), py::arg("recorder"), py::arg("interval_seconds"),
           py::keep_alive<1, 2>())
      .def("set_step", &watch::SystemSampler::SetStep, py::arg("step"))
      .def("sample_once", &watch::SystemSampler::SampleOnce, py::call_guard<py::gil_scoped_release>())
      .def("stop", &watch::SystemSampler::Stop, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("gpu_count", &watch::SystemSampler::gpu_count);
}

}  // namespace trainscope::python
