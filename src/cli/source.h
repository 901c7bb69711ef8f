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
  // A stored run loaded without its series: `data` holds its metadata and recorded findings,
  // and who needs the series reads them from the store at `source` (diagnose, a window of
  // steps at a time) or loads them whole (LoadSeries).
  bool series_in_store = false;
};

// PATH may be a run directory, its trainscope.db, or a logdir of runs (one LoadedRun per
// run). The format is decided by content, not by name.
// series_in_store: stored runs are loaded without their series (LoadedRun::series_in_store);
// runs other tools wrote are loaded whole either way.
Status LoadSources(const std::string& path, std::vector<LoadedRun>* runs, bool* is_logdir,
                   bool series_in_store = false);

// Reads the series of a run loaded with series_in_store into its data (nothing to do for
// one loaded whole).
Status LoadSeries(LoadedRun* run);

}  // namespace trainscope::cli
