// Throughput, MFU, scaling efficiency and collective bus bandwidth, from recorded runs.
//
// How a run records what these need (docs/perf.md; python/trainscope/perf.py writes them):
//   meta  perf/flops_per_step     model FLOPs of one training step on one rank (forward +
//                                 backward, ts.count_flops(...).training_flops or 6N+12LHQT)
//         perf/samples_per_step   samples one rank processes per step (else config batch_size)
//         perf/tokens_per_step    tokens one rank processes per step (language models)
//         perf/precision          fp32, tf32, bf16, fp16, fp8, fp64
//         perf/device             torch.cuda.get_device_name(), or "cpu"
//         perf/threads            torch.get_num_threads() (CPU)
//         perf/peak_flops         optional: a peak to use instead of the table's
//   scalars perf/flops, perf/samples, perf/tokens   per step, override the meta for that step
//           time/step, time/data, time/forward, time/backward, time/optimizer, time/other
//                                 (run.watch / run.data / run.step record these)
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"

namespace trainscope::perf {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// nccl-tests' bus bandwidth factor (its PERFORMANCE.md): busbw = algbw x factor, so that
// busbw is comparable with the link's bandwidth whatever the collective and rank count.
// all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce 1.
// NaN for a collective it does not know or n < 1.
double BusBandwidthFactor(std::string_view collective, int ranks);

// throughput_n / (n x throughput_1); NaN when an input is not positive.
double ScalingEfficiency(double throughput_1, double throughput_n, int n);

struct PeakChoice {
  std::optional<double> flops;  // per device, FLOP/s
  std::string source;           // "NVIDIA H100 SXM bf16 (datasheet ...)", "computed CPU peak ...", or why none
};

struct StepPerf {
  int64_t step = 0;
  double seconds = kNaN;         // the slowest rank's time/step (the ranks wait for each other)
  double samples_per_second = kNaN;
  double tokens_per_second = kNaN;
  double flops_per_second = kNaN;  // per device
  double mfu = kNaN;
};

struct RankPerf {
  int rank = 0;
  double median_step_seconds = kNaN;
  int steps = 0;
};

struct RunPerf {
  int world_size = 1;
  double flops_per_step = kNaN;    // per rank (meta), NaN when not recorded
  double samples_per_step = kNaN;  // per rank
  double tokens_per_step = kNaN;
  std::string precision, device;
  PeakChoice peak;
  std::vector<RankPerf> ranks;
  std::vector<StepPerf> steps;
  // Medians over the steps after the first (warm-up: allocation, first-call dispatch).
  double step_seconds = kNaN;
  double samples_per_second = kNaN;  // whole run: the ranks together
  double tokens_per_second = kNaN;
  double flops_per_second = kNaN;    // per device
  double mfu = kNaN;
  // Shares of the step (mean over steps after the first): time/data, forward, backward,
  // optimizer, other (host work outside the phases) as recorded; idle = what the recorded
  // phases leave of the step when no time/other is recorded (device-timed phases).
  struct Share {
    std::string phase;
    double share = kNaN;
  };
  std::vector<Share> shares;
  std::vector<Finding> findings;
};

struct PerfOptions {
  // LOW_MFU below this MFU: well-tuned large trainings reach 40-60 % of a GPU's dense peak;
  // under 30 % a large part of the hardware's time goes to something else.
  double low_mfu = 0.30;
  // POOR_SCALING below this efficiency: data parallelism on one host loses some to the
  // all-reduce and the slowest rank; losing over a fifth says the step waits on something.
  double poor_scaling = 0.80;
};

// The ranks of one run (one RunData per rank, world size = their count) with the peak the
// caller chose for the run's device and precision. Findings: LOW_MFU.
RunPerf AnalyzeRun(const std::vector<const RunData*>& ranks, const PeakChoice& peak, const PerfOptions& options = {});

struct ScalingPerf {
  int n_1 = 1, n_n = 1;
  double throughput_1 = kNaN, throughput_n = kNaN;  // samples/s of each run (tokens/s when no samples)
  std::string unit = "samples/s";
  double efficiency = kNaN;  // throughput_n / ((n_n / n_1) x throughput_1)
  std::vector<Finding> findings;  // POOR_SCALING
};

// RUN_1 and RUN_N analysed; efficiency of N against 1 (n_1 may be > 1: the ratio of world
// sizes is used).
ScalingPerf CompareScaling(const RunPerf& run_1, const RunPerf& run_n, const PerfOptions& options = {});

// The peak a run's MFU is taken against: one recorded with it (perf/peak_flops), the table's
// row for its perf/device and perf/precision, or the computed CPU peak when the run was
// recorded on `this_host`; else none, with the reason in `source` (unknown hardware gets no MFU).
PeakChoice ChoosePeak(const RunData& data, std::string_view this_host);

// The meta key as a number (NaN when absent or not a number).
double MetaNumber(const RunData& data, const std::string& key);

}  // namespace trainscope::perf
