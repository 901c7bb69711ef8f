// The JSON of `trainscope trace --json` (DESIGN.md): {"ranks": [{"rank", "temporal": {...}, ...}],
// ...}. The caller adds "findings" (their JSON form belongs to the store's json_forms).
#pragma once

#include <nlohmann/json.hpp>

#include "perf/trace_analysis.h"

namespace trainscope::perf {

nlohmann::json RankTraceReportToJson(const RankTraceReport& r);
// {"ranks": [...], "skew": {...}} without "findings".
nlohmann::json TraceReportToJson(const TraceReport& report);

}  // namespace trainscope::perf
