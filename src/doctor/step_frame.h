// StepFrame: everything recorded at one step, in arrival order. The doctor groups the
// sample stream into frames and hands each detector one frame at a time, in step order,
// so a detector sees the same thing online (samples arriving) and offline (a whole run).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sample.h"

namespace trainscope::doctor {

struct StepFrame {
  int64_t step = 0;
  double wall_time = 0;  // the latest wall time of a sample in the frame (0 when unknown)
  // In arrival order. For `act/<module>` that is the order the forward hooks fired, i.e.
  // forward order, which NaN forensics relies on when no `module_order` meta is given.
  std::vector<std::pair<std::string, double>> scalars;
  std::vector<std::pair<std::string, TensorStats>> stats;
  std::vector<std::pair<std::string, std::vector<float>>> vectors;
  std::vector<Span> spans;

  // The last value logged under `tag` at this step, or nullptr.
  const double* Scalar(std::string_view tag) const {
    for (auto it = scalars.rbegin(); it != scalars.rend(); ++it) {
      if (it->first == tag) return &it->second;
    }
    return nullptr;
  }
  const TensorStats* Stats(std::string_view tag) const {
    for (auto it = stats.rbegin(); it != stats.rend(); ++it) {
      if (it->first == tag) return &it->second;
    }
    return nullptr;
  }
  bool empty() const { return scalars.empty() && stats.empty() && vectors.empty() && spans.empty(); }
};

// Whether `tag` starts with `prefix`; on success *rest is what follows it.
inline bool HasPrefix(std::string_view tag, std::string_view prefix, std::string_view* rest = nullptr) {
  if (tag.size() < prefix.size() || tag.substr(0, prefix.size()) != prefix) return false;
  if (rest) *rest = tag.substr(prefix.size());
  return true;
}

}  // namespace trainscope::doctor
