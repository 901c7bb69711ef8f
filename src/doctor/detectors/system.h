// Detectors on time and memory: data-loader bottleneck (data wait share of the step),
// page faults of the training thread (its kernel time share of the step), memory leak
// (robust slope of memory over steps after warm-up, with the object type that grows), and
// throughput drop against the run's own early step time.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>

#include "doctor/detector.h"
#include "doctor/thinning.h"

namespace trainscope::doctor {

// The data wait and the whole step time at a frame, from `time/<phase>` scalars or spans
// (seconds). *step is time/step (or a "step" span), else the sum of the phases seen.
// Returns false when the frame has no timing.
bool StepTimes(const StepFrame& frame, double* data_wait, double* step);

struct DataloaderOptions {
  // Data wait above 30 % of the step time (the seeds' figure), median over 20 steps after
  // the first 5 (worker start-up), and at least 1 ms of waiting per step (below that the
  // whole step is so short that there is nothing to win).
  double share = 0.3;
  size_t window = 20;
  size_t skip = 5;
  double min_wait_seconds = 1e-3;
};

class DataloaderDetector : public Detector {
 public:
  explicit DataloaderDetector(DataloaderOptions options = {}) : options_(options) {}
  const char* name() const override { return "dataloader"; }
  DetectorSpec spec() const override {
    return {{"DATALOADER_BOTTLENECK"}, {{Input::kStepTime}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  DataloaderOptions options_;
  size_t seen_ = 0;
  std::deque<std::pair<double, double>> window_;  // (wait, step)
  std::deque<int64_t> steps_;
};

struct PageFaultOptions {
  // The training thread's kernel time (mem/kernel_seconds) above 15 % of the step, with at
  // least 1,000 minor page faults a step (mem/page_faults: 4 MB of fresh pages), median over
  // 20 steps after the first 10 (allocator and caches warming up). glibc's malloc returns
  // freed blocks above its trim and mmap thresholds to the system and faults them back in at
  // the next allocation: the CPU CNN of bench/watch spent a quarter of its step so
  // (docs/benchmarks.md, "HOST_PAGE_FAULTS"). A healthy loop faults a few pages.
  double share = 0.15;
  double min_faults = 1000;
  size_t window = 20;
  size_t skip = 10;
};

class PageFaultDetector : public Detector {
 public:
  explicit PageFaultDetector(PageFaultOptions options = {}) : options_(options) {}
  const char* name() const override { return "page_faults"; }
  DetectorSpec spec() const override {
    return {{"HOST_PAGE_FAULTS"}, {{Input::kStepTime}, {Input::kMemory}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  PageFaultOptions options_;
  size_t seen_ = 0;
  struct Point {
    int64_t step;
    double kernel_seconds, faults, step_seconds;
  };
  std::deque<Point> window_;
};

struct MemoryLeakOptions {
  // Skip the warm-up (allocator pools, caches, the first optimizer state): the first 20 %
  // of points, at least `warmup`. Then Theil-Sen slope and Mann-Kendall z over the rest:
  // z >= 5 is a steady climb, not noise; and the total growth must matter: >= min_growth
  // bytes and >= rel_growth of the level (RSS), or >= cuda_min_growth for device memory
  // (which is flat in a healthy loop). Healthy CPU scenario runs measured here grow their
  // RSS by ~20 MB over 400 steps (allocator, the monitor's own buffers), steadily: 50 MB
  // and 10 % keep those quiet; a kept graph grows by that in tens of steps.
  size_t warmup = 20;
  double warmup_fraction = 0.2;
  // Online, a leak is reported once the run has gone this long (wall time of the memory
  // series): over a first minute RSS climbs as the allocator's arenas, caches and the
  // monitor's own batches fill (a million-step soak climbed 50 MB in its first 20,000 steps,
  // 11 s, and stayed within +-30 MB of that after). A shorter run is judged at its end, as
  // offline.
  double online_min_seconds = 60;
  size_t min_points = 50;
  double trend_z = 5;
  double min_growth = 50e6;
  double rel_growth = 0.1;
  double cuda_min_growth = 10e6;
  // A leak is sustained: memory still grows over the most recent part of the run (the
  // last recent_fraction of the judged points, at least min_points / 2), with a
  // Mann-Kendall z >= recent_trend_z and a slope >= recent_slope_fraction of the whole
  // fit's. An evaluation pass with a larger batch steps RSS up once per epoch and leaves it
  // flat after: steps followed by a plateau are the allocator's new high-water mark, not a
  // leak. The recent window must also climb throughout: the medians of its three thirds
  // rise one after the other, each by >= recent_slope_fraction of what the fit predicts
  // (one step inside the window leaves two thirds level). And the growth the finding reports (median of the last points minus median of
  // the first) meets the same floor as the fitted one.
  double recent_fraction = 1.0 / 3;
  double recent_trend_z = 3;
  double recent_slope_fraction = 0.25;
  // A census type grows: slope >= 0.5 objects per step with z >= 4.
  double census_slope = 0.5;
  double census_z = 4;
  size_t eval_every = 25;
};

class MemoryLeakDetector : public Detector {
 public:
  explicit MemoryLeakDetector(MemoryLeakOptions options = {}) : options_(options) {}
  const char* name() const override { return "memory_leak"; }
  DetectorSpec spec() const override {
    return {{"MEMORY_LEAK"}, {{Input::kMemory}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  void Check(const DetectorContext& ctx, bool final);
  MemoryLeakOptions options_;
  // Offline: where each series first met the rules (the climb's first judged step, and the
  // step it was seen at); the run's end decides (memory that later falls back was the
  // allocator's, not a leak) and the finding keeps these steps.
  struct Candidate {
    int64_t since, seen;
  };
  std::map<std::string, Candidate> candidate_at_;
  struct Series {
    // Evenly thinned over the run (thinning.h) to 2,048 points: a memory series is judged
    // on its shape (the fit itself reads at most 400 of them), and a run has dozens of
    // census series.
    std::vector<double> steps, values;
    Thinning thin{2048};
  };
  std::map<std::string, Series, std::less<>> memory_, census_;
  std::set<std::string> reported_;
  size_t frames_ = 0;
  double own_rss_ = 0;  // the latest mem/trainscope* value (trainscope's own memory)
  double first_wall_ = kNaN, last_wall_ = kNaN;  // wall times of the first and latest frames
};

struct ThroughputOptions {
  // Step time: baseline = median over records [skip, skip + baseline) ; now = median of the
  // last `window`; a drop when now >= ratio x baseline. 2x is far past the jitter of a
  // steady loop and below what a real regression (swapping, thermal throttling, a
  // growing graph) produces.
  size_t skip = 10;
  size_t baseline = 50;
  size_t window = 50;  // a slowdown must last: short bursts of a busy host are not a regression
  double ratio = 2;
  // Severity: info unless >= warning_ratio x and >= warning_increase_seconds slower. On a
  // shared host other processes make a millisecond loop 2-4x slower for minutes; a real
  // regression of a real training step (100 ms and up) clears both.
  double warning_ratio = 4;
  double warning_increase_seconds = 0.05;
  // And at least 10 ms slower: sub-millisecond steps of a toy loop double whenever a
  // neighbour process takes the core; nothing to act on.
  double min_increase_seconds = 0.01;
  // Causes ranked by the evidence (else host contention first: on a shared host it is the
  // usual reason): memory grown >= memory_growth of its baseline level and >= 50 MB since
  // the baseline steps is a graph or tensors kept alive (retained_graph); the data wait
  // accounting for >= data_share of the slowdown is the loader; the host busy (sys/
  // cpu_percent >= busy_host_percent) while this process gets <= starved_fraction of the
  // CPU it had early in the run is other processes taking the cores (host_contention).
  double memory_growth = 0.1;
  double memory_growth_bytes = 50e6;
  double data_share = 0.5;
  double busy_host_percent = 80;
  double starved_fraction = 0.7;
  // A step whose work grew (data/input_elements: the elements its training forwards took,
  // an RL loop's longer episodes, a longer sequence) takes longer without running slower:
  // the ratios are then of the time per element, once the work per step has varied by this.
  double work_varies = 1.5;
};

class ThroughputDetector : public Detector {
 public:
  explicit ThroughputDetector(ThroughputOptions options = {}) : options_(options) {}
  const char* name() const override { return "throughput"; }
  DetectorSpec spec() const override {
    return {{"THROUGHPUT_DROP"}, {{Input::kStepTime}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  std::optional<double> TimePerElementRatio() const;
  ThroughputOptions options_;
  std::vector<double> base_;
  size_t seen_ = 0;
  std::deque<std::pair<int64_t, double>> recent_;
  // The step's work (data/input_elements, logged when it changes; NaN before the first)
  // beside each step time, in base_ and recent_ order.
  double elements_ = kNaN;
  std::vector<double> base_elements_;
  std::deque<double> recent_elements_;
  // Evidence for the causes: data waits, memory, host and process CPU (latest and early).
  std::vector<double> base_wait_, base_memory_;
  std::deque<double> recent_wait_;
  double memory_ = kNaN, host_cpu_ = kNaN, process_cpu_ = kNaN, first_process_cpu_ = kNaN;
};

}  // namespace trainscope::doctor
