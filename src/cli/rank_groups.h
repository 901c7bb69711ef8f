// The rank stores of data-parallel runs: rank r of run N records into <logdir>/N/rank-<r>/
// (python/trainscope/distributed.py). `runs` and `diagnose` show a run's ranks together.
#pragma once

#include <string>
#include <vector>

namespace trainscope::cli {

// The rank of a run directory named rank-<r> (r a non-negative integer), else -1.
int RankOfRunDir(const std::string& dir);

// Directories grouped by run: every rank-<r> directory with its siblings under their
// parent, every other directory alone.
struct RunGroup {
  std::string dir;                // the run directory (the rank stores' parent), or the run itself
  std::vector<size_t> members;    // indices into the input, by rank
  std::vector<int> ranks;         // the members' ranks (empty for a run that is not a rank)
  bool distributed() const { return !ranks.empty(); }
};
std::vector<RunGroup> GroupByRun(const std::vector<std::string>& dirs);

// True when a and b name the same directory.
bool SameDirectory(const std::string& a, const std::string& b);

}  // namespace trainscope::cli
