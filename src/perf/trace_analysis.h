// What a profiler trace says about one rank's time, and the ranks compared. Each analysis
// is one question with a one-line definition (docs/traces.md has them all, with how they
// follow Holistic Trace Analysis, HTA):
//
// - temporal breakdown: kernel_us = end of the last GPU event - start of the first;
//   idle_us = kernel_us - the union of all GPU intervals; compute_us = the union of the
//   computation kernels (not NCCL, not memcpy/memset, not sync); non_compute_us = the rest;
// - idle breakdown: each gap between consecutive kernels of a stream is host wait when the
//   kernel's launch call started after the previous kernel ended, kernel wait when it is
//   shorter than kernel_wait_us, other otherwise;
// - top kernels and CPU operators by total time, with counts;
// - communication/computation overlap: the time NCCL kernels run while compute kernels run,
//   over the NCCL kernels' time;
// - launch delay: GPU start - end of the runtime call with the same correlation id, at
//   least 0 (HTA's get_cuda_kernel_launch_stats);
// - collectives: algbw = bytes / time, busbw = algbw x nccl-tests' factor;
// - profiler steps: each ProfilerStep#N's length and the DataLoader's share of it.
//
// As in HTA, with two or more profiler steps the GPU work of the last (incomplete) step is
// left out: only GPU events launched before the last step began count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/sample.h"
#include "perf/trace.h"

namespace trainscope::perf {

struct TraceAnalysisOptions {
  size_t top = 10;                 // kernels and CPU operators listed
  // HTA's consecutive_kernel_delay default, 30. HTA's docstring says nanoseconds but it is
  // compared with gaps in the trace's unit, microseconds: 30 us is what HTA does.
  double kernel_wait_us = 30;
  bool include_last_step = false;  // HTA's include_last_profiler_step
  // DATALOADER_BOTTLENECK: the caller passes the doctor's threshold (doctor::DataloaderOptions:
  // data wait above 30 % of the step, at least 1 ms a step); perf does not link the doctor.
  double dataloader_share = 0.3;
  double dataloader_min_wait_us = 1000;
};

struct TemporalBreakdown {
  double idle_us = 0, compute_us = 0, non_compute_us = 0, kernel_us = 0;
  double idle_pct = 0, compute_pct = 0, non_compute_pct = 0;  // of kernel_us, rounded to 0.01 as HTA does
};

struct IdleBreakdown {
  double host_wait_us = 0, kernel_wait_us = 0, other_us = 0;
};

struct OpTime {
  std::string name;
  int64_t count = 0;
  double total_us = 0, max_us = 0;
};

struct LaunchDelays {
  int64_t count = 0;  // GPU events matched with their launch call
  double median_us = 0, p95_us = 0, max_us = 0;
};

// One collective as the trace records it, with its bandwidths when the metadata gives the
// bytes and the group size.
struct CollectiveTime {
  std::string name;
  int64_t count = 0;
  int64_t bytes = 0;       // nccl-tests' size: max(in, out) elements x element size
  int64_t group_size = 0;
  double median_us = 0;
  double algbw_gbps = -1, busbw_gbps = -1;  // GB/s (1e9 bytes); -1 when unknown
  double bus_factor = -1;
};

struct ProfilerStep {
  std::string name;       // "ProfilerStep#12"
  double ts_us = 0, dur_us = 0;
  double dataloader_us = 0;
};

struct RankTraceReport {
  int64_t rank = -1;
  std::string path;
  bool has_gpu = false;
  int64_t events = 0, gpu_events = 0, gpu_events_used = 0;
  std::vector<std::string> devices;
  TemporalBreakdown temporal;
  IdleBreakdown idle;
  std::vector<OpTime> top_kernels, top_cpu_ops;
  double comm_us = 0, comm_overlap_pct = -1;  // -1: no communication kernels
  LaunchDelays launch;
  std::vector<CollectiveTime> collectives;
  int64_t collectives_without_metadata = 0;  // collective ops with no size in the trace
  std::vector<ProfilerStep> steps;
  double median_step_us = 0, dataloader_share = -1;  // -1: no steps
};

struct TraceReport {
  std::vector<RankTraceReport> ranks;
  // Across ranks (two or more): the slowest and fastest rank by median step time and by
  // busy GPU time, and the difference as a share of the fastest.
  int64_t slowest_rank = -1, fastest_rank = -1;
  double step_skew_pct = -1, compute_skew_pct = -1;
  std::vector<Finding> findings;
};

// Analyses one rank's trace. Never fails: a CPU-only trace has zero GPU times.
RankTraceReport AnalyzeRank(const Trace& trace, const TraceAnalysisOptions& options);

// Analyses the traces of a job (one per rank). A trace without a rank gets its position.
TraceReport AnalyzeTraces(const std::vector<Trace>& traces, const TraceAnalysisOptions& options);

// nccl-tests' bus bandwidth factor for a collective on n ranks: all-reduce 2(n-1)/n;
// all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1.
// -1 for a name it does not know or n < 1.
double BusBandwidthFactor(const std::string& collective, int64_t n);

// HTA's kernel classes: communication (^nccl.*Kernel), memory (^Memcpy, ^Memset, ^dma) and
// computation (none of those, and not a sync).
bool IsCommunicationKernel(const std::string& name);
bool IsComputationKernel(const std::string& name);

}  // namespace trainscope::perf
