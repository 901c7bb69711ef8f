// The one owner of step bucketing (docs/architecture.md, "One owner per rule"): the steps
// [lo, hi] cut into at most `width` buckets of equal integer width, the width rounded up.
// The dashboard's heatmaps and curves (server/api.cc) and the HTML report's heatmap
// (cli/report_command.cc) bucket with this, so a step lands in the same column in both
// (the report once divided in floating point: 300 steps in 200 columns put step 3 in
// column 2, the server in bucket 1). Standard library only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace trainscope {

struct StepBuckets {
  int64_t lo = 0;
  uint64_t step_width = 1;  // steps per bucket
  size_t count = 1;         // buckets used (<= width)

  // Requires lo <= hi and width >= 1. The width is the ceiling of (hi - lo + 1) / width in
  // a form that cannot overflow, even for a range over the whole int64 line.
  StepBuckets(int64_t lo_step, int64_t hi_step, int64_t width) : lo(lo_step) {
    const uint64_t span_less_one = static_cast<uint64_t>(hi_step) - static_cast<uint64_t>(lo_step);
    const uint64_t w = static_cast<uint64_t>(std::max<int64_t>(1, width));
    step_width = span_less_one / w + 1;
    if (step_width == 0) step_width = std::numeric_limits<uint64_t>::max();
    count = static_cast<size_t>(std::min<uint64_t>(span_less_one / step_width + 1, w));
  }
  // The bucket of `step` (lo <= step <= hi).
  size_t Of(int64_t step) const {
    const uint64_t b = (static_cast<uint64_t>(step) - static_cast<uint64_t>(lo)) / step_width;
    return static_cast<size_t>(std::min<uint64_t>(b, count - 1));
  }
  // The first step of bucket b.
  int64_t Begin(size_t b) const { return static_cast<int64_t>(static_cast<uint64_t>(lo) + b * step_width); }
};

}  // namespace trainscope
