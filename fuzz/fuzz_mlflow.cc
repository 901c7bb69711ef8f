// Fuzzes the MLflow file-store readers: a metrics file ("<timestamp> <value> [<step>]" lines)
// or a run's meta.yaml; the first byte chooses which.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/run_data.h"
#include "ingest/mlflow_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  trainscope::RunData run;
  trainscope::ingest::ImportStats stats;
  if (data[0] & 1) {
    (void)trainscope::ingest::ReadMlflowRunMeta(text, "fuzz/meta.yaml", &run);
  } else {
    (void)trainscope::ingest::ReadMlflowMetricText(text, "train/loss", "fuzz/metrics/loss", &run, &stats);
  }
  return 0;
}
