// What `diagnose`, `report` and friends accept as PATH, loaded into memory.
#pragma once

#include <string>
#include <vector>

#include "core/run_data.h"
#include "core/status.h"

namespace trainscope::cli {

struct LoadedRun {
  std::string source;  // the path the run came from
  std::string format;  // "trainscope", or the format of the imported file
  std::string damage;  // what a damaged store's read skipped (DamageLog::Summary), empty if none
  RunData data;
};

// PATH may be a run directory, its trainscope.db, or a logdir of runs (one LoadedRun per
// run). The format is decided by content, not by name.
Status LoadSources(const std::string& path, std::vector<LoadedRun>* runs, bool* is_logdir);

}  // namespace trainscope::cli
