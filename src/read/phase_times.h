// Where a run's steps go, per step bucket: the mean seconds per step of each phase (data,
// forward, backward, optimizer, ... from the recorded spans) and of the whole step, what
// the dashboard's Performance view draws (/api/spans).
//
// A step lasts from its first span's start to the next step's: what its phases leave of that
// is "other" (logging, evaluation, the Python between them), so the phases add up to the step
// and throughput is steps per second of the run's own clock. The last step has no successor:
// its phases are its length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/sample.h"

namespace trainscope::read {

struct PhaseTimes {
  std::vector<std::string> phases;  // in the order first seen; "other" last when there is any
  std::vector<int64_t> steps;       // the first step of each bucket that holds a span
  std::vector<double> starts;       // each bucket's first span start (wall time)
  std::vector<double> step_time;    // mean seconds per step in the bucket
  std::vector<std::vector<double>> mean;  // [phase][bucket]: mean seconds per step
  size_t spans = 0;
};

// `spans` in any order; at most `width` buckets of equal step width.
PhaseTimes ComputePhaseTimes(const std::vector<Span>& spans, int64_t width);

}  // namespace trainscope::read
