// The flight recorder: the last K values of every statistic, so a finding can carry the
// steps that led to it and the evidence survives the crash that usually follows a NaN.
// For tensor statistics it keeps the few numbers that tell the story (L2 norm, abs max,
// non-finite count, mean, std, dead and saturated fractions).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "doctor/step_frame.h"

namespace trainscope::doctor {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t steps, size_t max_census = 8) : steps_(steps), max_census_(max_census) {}
  // The frame's scalar tags must be interned names that outlive the recorder (the Doctor's).
  void Add(const StepFrame& frame);

  // {"scalars": {tag: [[step, value], ...]}, "tensors": {tag: [[step, l2, abs_max,
  //  nonfinite, mean, std], ...]}}. Every scalar but the object census: of `census/<type>`
  // only the types whose count changed over the window, at most `max_census`, largest
  // change first ("census_omitted" says how many were left out). Tensor series only those
  // named in `tensor_tags` (the ones the finding is about) plus at most `max_other` others.
  nlohmann::json Snapshot(const std::vector<std::string>& tensor_tags, size_t max_other = 0) const;
  // The last values of a scalar tag (oldest first), empty when unknown.
  std::vector<std::pair<int64_t, double>> ScalarHistory(const std::string& tag) const;
  // The recorded L2 norms of a tensor series (oldest first).
  std::vector<std::pair<int64_t, double>> NormHistory(const std::string& tag) const;
  // The recorded largest absolute values of a tensor series (oldest first).
  std::vector<std::pair<int64_t, double>> AbsMaxHistory(const std::string& tag) const;
  // The derived global gradient norm of the last steps (oldest first).
  const std::deque<std::pair<int64_t, double>>& grad_norm() const { return grad_norm_; }
  void AddGradNorm(int64_t step, double value);
  size_t steps() const { return steps_; }

 private:
  struct TensorPoint {
    int64_t step;
    double l2, abs_max, nonfinite, mean, std, dead, saturated;
  };
  size_t steps_;
  size_t max_census_;
  std::map<std::string, std::deque<std::pair<int64_t, double>>, std::less<>> scalars_;
  // scalars_'s entries by the address of a frame's tag (map nodes do not move).
  std::unordered_map<const char*, std::deque<std::pair<int64_t, double>>*> scalar_by_address_;
  std::map<std::string, std::deque<TensorPoint>> tensors_;
  std::deque<std::pair<int64_t, double>> grad_norm_;
};

}  // namespace trainscope::doctor
