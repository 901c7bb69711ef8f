// The ranks of one data-parallel run side by side: a rank whose numbers differ from the
// others' (RANK_DIVERGENCE) and a rank slower than the others (STRAGGLER).
//
// Each rank records into a store of its own (<run>/rank-<r>/); the doctor judges each
// alone, and this compares them at the same steps. What it relies on (data parallelism):
// - every rank trains the same model on its own shard, so the ranks' losses differ step by
//   step (different batches, maybe different batch sizes) but not in level;
// - gradients are all-reduced, so the gradient norm after backward is equal on every rank
//   (bit for bit where one collective computed it).
//
// The level rule (loss, gradient norm, phase times): the steps are cut into windows; per
// window each rank's level is the mean of its points (the mean of a batch loss does not
// depend on the batch size; its median does, with skewed per-sample losses) and the
// reference is the median of the other ranks' levels. A window is "out" for a rank when its
// level is >= `level_ratio` times the reference or <= 1/level_ratio of it (the effect) and
// the difference is beyond the noise: it clears `z` standard errors of the two window means,
// or (heavy tails) the rank's points lie above (below) >= 80 % of the other ranks' points in
// the window, pair by pair (Mann-Whitney). A rank is named when it is out, in the same direction, for a sustained stretch of consecutive
// windows (>= min_windows and >= min_stretch_share of its windows): never for one step.
//
// The exact rule (series equal by construction): a series that is bit-equal across ranks at
// most steps (the all-reduced gradient norm) is replicated; a rank that leaves the value the
// other ranks agree on, for a sustained stretch of steps, is named.
//
// Who is named. With 3 or more ranks the reference is the other ranks' median, so the odd
// rank stands out; when half of the ranks or more are out together the run is split and
// no rank is named (the finding lists them). With 2 ranks each is the other's reference
// and "which one" has no majority: a rank is named only when its own history singles it
// out: before the stretch the two agreed, and at the stretch's start one rank's level moved
// against its own preceding windows by at least level_ratio more than the other's. Otherwise
// the finding names both ranks ("ranks 0 and 1 disagree") and no rank.
#pragma once

#include <string>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"

namespace trainscope::doctor {

struct RankRun {
  int rank = 0;
  const RunData* data = nullptr;
};

struct RankOptions {
  // Steps per window; 0 = a sixteenth of the steps compared, within [8, 50]: up to 16
  // windows, each with enough points for its mean's standard error and for the pair count
  // below to mean something (8 points against 8 or more).
  int window_steps = 0;
  // A level >= 2x or <= 1/2 of the other ranks': more than shards of one data set give
  // (their expected loss is the same) and than batch-size differences give (the mean is
  // unbiased); a factor that matters to the run.
  double level_ratio = 2.0;
  // The difference of two window means must clear 4 standard errors: with ~20 windows a
  // healthy rank is out by chance in well under 1 window in 10^3.
  double z = 4.0;
  // Or: >= 80 % of the pairs (this rank's point, another rank's point) in the window on one
  // side: 2.5 standard deviations of that share for 8 points against 8 (0.6 % of windows by
  // chance), and it must hold in 3 windows in a row with the 2x effect. Batch-size noise
  // alone does not do this while the means differ 2x (a small batch's mean is high by a few
  // bad samples, most of its points stay low).
  double share_above = 0.8;
  // A stretch of consecutive out windows: at least 3 and at least 20 % of the rank's windows.
  int min_windows = 3;
  double min_stretch_share = 0.2;
  // Replicated series: equal within 1e-6 (relative) at >= 50 % of the steps compared; a rank
  // leaves the agreed value when it differs by > 1e-3 (relative) for >= 3 consecutive steps
  // and >= 10 % of them.
  double replicated_tolerance = 1e-6;
  double replicated_share = 0.5;
  double departure_tolerance = 1e-3;
  int min_departure_steps = 3;
  double min_departure_share = 0.1;
  // STRAGGLER: a rank's rank-local phase time (data wait, forward) >= 1.5x the others' and
  // >= 1 ms slower per step, by the level rule on window medians (the host's hiccups are
  // spikes).
  double straggler_ratio = 1.5;
  double straggler_min_seconds = 1e-3;
};

// A finding about the ranks: `rank` is the rank it names (-1: none, e.g. 2 ranks that
// disagree), `ranks` every rank involved.
struct RankFinding {
  Finding finding;
  int rank = -1;
  std::vector<int> ranks;
};

// Compares the ranks of one run (each rank's recorded data). Fewer than 2 ranks: nothing.
// Actions are filled from the knowledge base.
std::vector<RankFinding> CompareRanks(const std::vector<RankRun>& ranks, const RankOptions& options = {});

}  // namespace trainscope::doctor
