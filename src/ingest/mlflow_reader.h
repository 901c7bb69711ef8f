// MLflow file store runs: mlruns/<experiment id>/<run id>/ holding
//   meta.yaml      run_id, run_name/name, status (1 RUNNING, 2 SCHEDULED, 3 FINISHED,
//                  4 FAILED, 5 KILLED), start_time/end_time (ms), experiment_id, user_id
//   metrics/<key>  one line per logged value: "<timestamp ms> <value> [<step>]" (the step
//                  came with MLflow 1.0; without it the line's index is the step). A key
//                  with '/' is a sub-folder (metrics/train/loss is "train/loss").
//   params/<key>   the value, as text, no newline -> meta "config" (JSON object of strings)
//   tags/<key>     the value -> meta "mlflow_tags" (mlflow.* system tags included)
// The run is one trainscope run; the experiment's meta.yaml (one folder up) gives its name
// (meta "mlflow_experiment"). Lines that are not "<int> <number> [<int>]" are skipped,
// counted and named.
#pragma once

#include <string>
#include <string_view>

#include "core/run_data.h"
#include "core/status.h"
#include "ingest/import_stats.h"

namespace trainscope::ingest {

// A run folder: meta.yaml beside a metrics/ or params/ folder.
bool IsMlflowRunFolder(const std::string& dir);
Status ReadMlflowRun(const std::string& dir, SampleSink* sink, ImportStats* stats);

// One metrics file's text (tag = the metric key; name for messages).
Status ReadMlflowMetricText(std::string_view text, const std::string& tag, const std::string& name, SampleSink* sink,
                            ImportStats* stats);
// meta.yaml's text -> meta keys (name, status, start/end time); name for messages.
Status ReadMlflowRunMeta(std::string_view text, const std::string& name, SampleSink* sink);

}  // namespace trainscope::ingest
