// Fuzzes the profiler-trace reader (Kineto JSON, the legacy event array, gzip) and every
// analysis on what it reads: no input may crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "perf/trace.h"
#include "perf/trace_analysis.h"
#include "perf/trace_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  trainscope::perf::Trace trace;
  if (!trainscope::perf::ParseKinetoTrace("fuzz", bytes, &trace).ok()) return 0;
  const trainscope::perf::TraceReport report = trainscope::perf::AnalyzeTraces({trace, trace}, {});
  (void)trainscope::perf::TraceReportToJson(report).dump();
  return 0;
}
