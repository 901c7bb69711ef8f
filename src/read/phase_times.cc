#include "read/phase_times.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "core/step_buckets.h"

namespace trainscope::read {

PhaseTimes ComputePhaseTimes(const std::vector<Span>& spans, int64_t width) {
  PhaseTimes out;
  out.spans = spans.size();
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const Span& span : spans) {
    if (std::find(out.phases.begin(), out.phases.end(), span.phase) == out.phases.end()) out.phases.push_back(span.phase);
    lo = std::min(lo, span.step);
    hi = std::max(hi, span.step);
  }
  std::map<int64_t, double> step_start, phase_sum;
  for (const Span& span : spans) {
    auto [it, fresh] = step_start.emplace(span.step, span.start);
    if (!fresh) it->second = std::min(it->second, span.start);
    phase_sum[span.step] += span.duration;
  }
  std::map<int64_t, double> step_length;
  for (auto it = step_start.begin(); it != step_start.end(); ++it) {
    auto next = std::next(it);
    const double measured = next == step_start.end() ? 0 : next->second - it->second;
    step_length[it->first] = std::max(measured, phase_sum[it->first]);
  }
  bool any_other = false;
  for (const auto& [step, length] : step_length) any_other = any_other || length > phase_sum[step];
  if (any_other) out.phases.push_back("other");
  out.mean.resize(out.phases.size());
  if (lo > hi) return out;
  const StepBuckets buckets(lo, hi, width);
  // Per bucket: the distinct steps it saw, each phase's total time, first start.
  std::vector<std::vector<double>> total(out.phases.size(), std::vector<double>(buckets.count, 0));
  std::vector<std::set<int64_t>> seen(buckets.count);
  std::vector<double> first_start(buckets.count, std::numeric_limits<double>::infinity());
  for (const Span& span : spans) {
    const size_t b = buckets.Of(span.step);
    const size_t p = std::find(out.phases.begin(), out.phases.end(), span.phase) - out.phases.begin();
    total[p][b] += span.duration;
    seen[b].insert(span.step);
    first_start[b] = std::min(first_start[b], span.start);
  }
  std::vector<double> length(buckets.count, 0);
  for (const auto& [step, seconds] : step_length) {
    const size_t b = buckets.Of(step);
    length[b] += seconds;
    if (any_other) total.back()[b] += seconds - phase_sum[step];
  }
  for (size_t b = 0; b < buckets.count; ++b) {
    if (seen[b].empty()) continue;
    const double steps = static_cast<double>(seen[b].size());
    out.steps.push_back(buckets.Begin(b));
    out.starts.push_back(first_start[b]);
    out.step_time.push_back(length[b] / steps);
    for (size_t p = 0; p < out.phases.size(); ++p) out.mean[p].push_back(total[p][b] / steps);
  }
  return out;
}

}  // namespace trainscope::read
