// PATH diagnosed: loaded (cli/source.h), each run judged by the doctor, and the ranks of a
// data-parallel run (<run>/rank-<r>/) compared with each other (doctor/ranks.h). Shared by
// `trainscope diagnose` and ts.diagnose(), so both give the same answer.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/rank_groups.h"
#include "cli/source.h"
#include "core/status.h"
#include "doctor/doctor.h"
#include "doctor/layer_health.h"

namespace trainscope::cli {

// One run judged: the doctor over the whole run (offline), merged with the findings recorded
// with it (the online doctor's, the watch() checks'): one per code and location, worst first.
struct RunReport {
  const LoadedRun* run = nullptr;
  std::vector<Finding> findings;
  std::vector<doctor::NotChecked> not_checked;
  std::vector<doctor::LayerHealth> layers;  // doctor/layer_health.h; empty without per-layer statistics
  int64_t steps = 0;                        // the largest step of a scalar or tensor series
};

// A finding of a data-parallel run: which rank it is about.
struct RankedFinding {
  Finding finding;
  int rank = -1;           // -1: about several ranks (or none in particular)
  std::vector<int> ranks;  // the ranks involved, for the findings of the comparison
  bool compared = false;   // from comparing the ranks (has "ranks" in JSON)
};

// A data-parallel run: each rank's findings, then the comparison's, worst first, then by
// step and rank.
struct DistributedReport {
  std::string dir;
  std::vector<int> ranks;
  std::vector<const RunReport*> per_rank;  // by rank
  std::vector<RankedFinding> findings;
};

struct PathReport {
  PathReport() = default;
  PathReport(const PathReport&) = delete;  // the reports point into runs
  PathReport& operator=(const PathReport&) = delete;

  std::vector<LoadedRun> runs;
  bool is_logdir = false;
  std::vector<RunReport> reports;              // one per run
  std::vector<RunGroup> groups;                // runs grouped: a data-parallel run's ranks together
  std::vector<DistributedReport> distributed;  // per group; filled for data-parallel ones
  bool one_distributed_run = false;            // PATH is one data-parallel run
};

Status DiagnosePath(const std::string& path, PathReport* out);

// DESIGN.md's object for one run.
nlohmann::json RunReportJson(const RunReport& report);
// The same object for a data-parallel run, extended: world_size, ranks [{rank, source,
// status, steps}], a "rank" on every finding ("ranks" on the comparison's), not_checked
// with the ranks each applies to, missing_ranks.
nlohmann::json DistributedReportJson(const DistributedReport& report);
// What `diagnose --json` prints: one object for a run or a data-parallel run, else
// {"source", "format": "logdir", "runs": [...]}.
nlohmann::json PathReportJson(const PathReport& report, const std::string& path);

// Meta of a run as text ("" when absent).
std::string MetaText(const RunData& data, const char* key);

}  // namespace trainscope::cli
