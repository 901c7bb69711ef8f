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
// Offline, from a whole run (diagnose, report). docs/doctor.md "Layer health".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"

namespace trainscope::doctor {

struct LayerHealth {
  std::string layer;  // a module: the parameter's name without its last part, or act/<module>
  int score = 100;
  std::string worst;  // what set the score, in words ("" at 100)
  std::vector<std::pair<std::string, double>> parts;  // part name -> share in [0, 1]
};

// Every layer with recorded statistics, in forward order (meta module_order), else in
// the order first seen.
std::vector<LayerHealth> LayerHealthOf(const RunData& run, const std::vector<Finding>& findings);

}  // namespace trainscope::doctor
