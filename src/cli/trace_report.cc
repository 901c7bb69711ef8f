#include "cli/trace_report.h"

#include "doctor/detectors/system.h"
#include "perf/trace.h"
#include "perf/trace_json.h"
#include "store/json_forms.h"

namespace trainscope::cli {

Status AnalyzeTraceFiles(const std::vector<std::string>& paths, perf::TraceAnalysisOptions options,
                         perf::TraceReport* report, nlohmann::json* out) {
  std::vector<std::string> files;
  Status s = perf::ExpandTracePaths(paths, &files);
  if (!s.ok()) return s;
  std::vector<perf::Trace> traces(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    s = perf::ReadTraceFile(files[i], &traces[i]);
    if (!s.ok()) return s;
  }
  // The doctor's own threshold, so a trace and a watched run judge the loader alike.
  const doctor::DataloaderOptions loader;
  options.dataloader_share = loader.share;
  options.dataloader_min_wait_us = loader.min_wait_seconds * 1e6;
  *report = perf::AnalyzeTraces(traces, options);
  *out = perf::TraceReportToJson(*report);
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : report->findings) findings.push_back(FindingToJson(f));
  (*out)["findings"] = findings;
  return Status::Ok();
}

}  // namespace trainscope::cli
