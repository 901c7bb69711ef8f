// Profiler traces read and analysed with the doctor's DataLoader threshold, as JSON with the
// findings in the store's JSON form: what `trainscope trace --json` prints and what the
// Python module's analyze_traces returns (run.profile()), written once.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "perf/trace_analysis.h"

namespace trainscope::cli {

// `paths` are trace files or folders of them. *options gets the doctor's DataLoader
// threshold set over whatever the caller passed. Fills *report and *out
// ({"ranks", "skew", "findings"}); errors name the file.
Status AnalyzeTraceFiles(const std::vector<std::string>& paths, perf::TraceAnalysisOptions options,
                         perf::TraceReport* report, nlohmann::json* out);

}  // namespace trainscope::cli
