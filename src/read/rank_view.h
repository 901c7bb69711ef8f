// The ranks of one data-parallel run side by side (each rank records into <run>/rank-<r>):
// what the dashboard's Ranks view draws, from /api/ranks.
//
//   ranks   each rank's run, status, steps, median step time (time/step; without it, the
//           wall time between the loss's consecutive points), steps per second, and the
//           median of each rank-local phase (time/data, time/forward ...);
//   step    step buckets (StepBuckets over every rank's steps), and per rank per bucket the
//           mean step time ("step_time") and the mean loss and gradient norm ("series":
//           role, tag, values per rank, the median over ranks and the spread: (max - min) /
//           |median| over the ranks, what a diverging replica widens);
//   layers  per layer of one tensor family, each rank's median L2 norm over the steps and
//           its ratio to the median over the ranks (1 everywhere for replicas that agree),
//           and each rank's non-finite points;
//   findings  the ranks compared (doctor/ranks.h: STRAGGLER, RANK_DIVERGENCE), each with the
//           rank it names ("rank", -1 for none) and every rank involved ("ranks").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run_data.h"
#include "store/run_store.h"

namespace trainscope::read {

struct RankMember {
  int rank = 0;
  std::string run;     // the rank's run name, as the runs list names it
  std::string status;  // running, finished or crashed (RunStore::EffectiveStatus)
  RunData data;        // what LoadRankMember reads
};

// The tensor families the view aggregates over ranks.
bool IsRankLayerFamily(const std::string& family);

// Reads what the view needs of one rank's store: its metadata (the roles of its series),
// every scalar series and the tensor statistics of `family`; no vectors, spans or other
// tensor families.
Status LoadRankMember(RunStore& store, const std::string& family, RankMember* member);

// `ranks` in rank order; `width` the step buckets at most.
nlohmann::json RankViewJson(const std::vector<RankMember>& ranks, const std::string& family, int64_t width);

}  // namespace trainscope::read
