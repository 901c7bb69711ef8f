#include "read/run_summary.h"

#include <algorithm>

#include "core/tag.h"

namespace trainscope::read {

const char* RunHealth(const std::vector<Finding>& findings, const std::string& status) {
  if (status == "crashed") return "critical";
  Severity worst = Severity::kInfo;
  bool any = false;
  for (const Finding& f : findings) {
    if (f.severity == Severity::kInfo) continue;
    any = true;
    worst = std::max(worst, f.severity);
  }
  if (!any) return "ok";
  return worst == Severity::kCritical ? "critical" : "warning";
}

std::vector<const SeriesInfo*> FinalValueSeries(const std::vector<SeriesInfo>& series, size_t limit) {
  std::vector<const SeriesInfo*> kept;
  for (const bool own : {true, false}) {
    for (const SeriesInfo& info : series) {
      if (info.kind != SeriesKind::kScalar || info.points == 0) continue;
      if (tags::kSys.Holds(info.tag) || tags::kMem.Holds(info.tag) || tags::kTime.Holds(info.tag)) continue;
      if (tags::IsTrainscopeSeries(info.tag) == own) continue;
      if (kept.size() >= limit) break;
      kept.push_back(&info);
    }
  }
  return kept;
}

}  // namespace trainscope::read
