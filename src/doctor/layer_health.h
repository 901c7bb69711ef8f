// One health score per layer (issue 27: what users of the peers liked): 0 to 100, the
// lowest of its parts, so the number always has one reason a reader can check. Each part
// is a recorded measurement or a finding, read as a share in [0, 1]:
//
//   finite    0 when the layer's latest gradient, weight or output holds NaN/Inf;
//   learning  its update/weight ratio (median of the last 5, the largest parameter):
//             1 within [1e-5, 1e-1], a third less per decade outside; 0 when the weights
//             do not move at all;
//   gradient  its gradient norm against the median of every layer's (latest records):
//             1 at >= 1e-3 of it, a third less per decade below;
//   findings  the worst finding located at the layer or one of its parameters:
//             critical 0.2, warning 0.5, info 0.9.
//
// The measured bands are wide on purpose: a healthy layer scores 100, and what the
// detectors judge with more evidence (dead or saturated units: a ReLU's output can be
// mostly zeros in a healthy network) enters through their findings only.
// Offline, from a whole run (diagnose, report), or from one replayed a window of steps at
// a time (a long stored run). docs/doctor.md "Layer health".
#pragma once

#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"
#include "doctor/step_frame.h"

namespace trainscope::doctor {

struct LayerHealth {
  std::string layer;  // a module: the parameter's name without its last part, or act/<module>
  int score = 100;
  std::string worst;  // what set the score, in words ("" at 100)
  std::vector<std::pair<std::string, double>> parts;  // part name -> share in [0, 1]
};

// Layer health gathered from a run replayed in step order (RunData::ReplaySteps): it keeps
// each tensor series' latest record and its last few update/weight ratios, not the run.
class LayerHealthBuilder : public SampleSink {
 public:
  void OnScalar(std::string_view, int64_t, double, double) override {}
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override;
  // Every sample of a step has been given.
  void EndStep();
  // Every layer with recorded statistics, in forward order (meta module_order), else in
  // the order first seen; `series_order`: the run's tensor series, in series order.
  std::vector<LayerHealth> Finish(const std::vector<std::string>& series_order,
                                  const std::map<std::string, std::string>& meta,
                                  const std::vector<Finding>& findings) const;

 private:
  struct Layer;
  static LayerHealth Score(const Layer& layer, bool converged, double median_norm, size_t layers_with_norm);
  static void MarkFrozenModels(const std::map<std::string, std::string>& meta, std::map<std::string, Layer>* layers);
  struct Series {
    bool seen = false;
    bool nonfinite = false;  // of the latest record
    double l2 = 0;
    double numel = 0;
    std::deque<double> ratios;  // update/<param>: the last update/weight ratios
  };
  TagMap<Series> series_;
  TagMap<double> weight_norm_now_;  // weight/<param> at the step being given: param -> norm
  struct Update {
    Series* series;
    std::string param;
    double norm;
  };
  std::vector<Update> updates_now_;
};

// LayerHealthBuilder over a whole run.
std::vector<LayerHealth> LayerHealthOf(const RunData& run, const std::vector<Finding>& findings);

}  // namespace trainscope::doctor
