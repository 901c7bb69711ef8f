#include "perf/trace_analysis.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/json_number.h"

namespace trainscope::perf {

namespace {

struct Interval {
  double start, end;
};

// Sorts and merges overlapping intervals; returns the total length covered.
double MergeIntervals(std::vector<Interval>* intervals) {
  std::sort(intervals->begin(), intervals->end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> merged;
  for (const Interval& i : *intervals) {
    if (!merged.empty() && i.start <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, i.end);
    } else {
      merged.push_back(i);
    }
  }
  double total = 0;
  for (const Interval& i : merged) total += i.end - i.start;
  intervals->swap(merged);
  return total;
}

// Length of the intersection of two merged (sorted, disjoint) interval lists.
double IntersectionLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].start, b[j].start), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) total += hi - lo;
    if (a[i].end < b[j].end) ++i;
    else ++j;
  }
  return total;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at)), hi = static_cast<size_t>(std::ceil(at));
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

double RoundPct(double part, double whole) { return whole > 0 ? std::round(10000.0 * part / whole) / 100.0 : 0; }

bool StartsWith(const std::string& s, std::string_view p) { return s.size() >= p.size() && std::string_view(s).substr(0, p.size()) == p; }
bool Contains(const std::string& s, std::string_view p) { return s.find(p) != std::string::npos; }

bool IsProfilerStep(const std::string& name) { return StartsWith(name, "ProfilerStep#"); }

// The DataLoader's own ranges: `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`
// (and the multi-process iterator's), which torch records around each batch fetch.
bool IsDataLoaderRange(const std::string& name) {
  return StartsWith(name, "enumerate(DataLoader)") || Contains(name, "DataLoaderIter.__next__");
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::vector<OpTime> TopByTime(const std::unordered_map<uint32_t, OpTime>& by_name, size_t top) {
  std::vector<OpTime> all;
  all.reserve(by_name.size());
  for (const auto& [id, op] : by_name) all.push_back(op);
  std::sort(all.begin(), all.end(), [](const OpTime& a, const OpTime& b) {
    return a.total_us != b.total_us ? a.total_us > b.total_us : a.name < b.name;
  });
  if (all.size() > top) all.resize(top);
  return all;
}

}  // namespace

bool IsCommunicationKernel(const std::string& name) {
  return StartsWith(name, "nccl") && name.find("Kernel", 4) != std::string::npos;
}

bool IsComputationKernel(const std::string& name) {
  if (IsCommunicationKernel(name)) return false;
  return !Contains(name, "Memcpy") && !StartsWith(name, "Memset") && !Contains(name, "Sync");
}

double BusBandwidthFactor(const std::string& collective, int64_t n) {
  if (n < 1) return -1;
  const double nd = static_cast<double>(n);
  std::string c = Lower(collective);
  c.erase(std::remove(c.begin(), c.end(), '_'), c.end());
  if (Contains(c, "allreduce")) return 2 * (nd - 1) / nd;
  if (Contains(c, "allgather") || Contains(c, "reducescatter") || Contains(c, "alltoall")) return (nd - 1) / nd;
  if (Contains(c, "broadcast") || Contains(c, "reduce") || Contains(c, "send") || Contains(c, "recv")) return 1;
  return -1;
}

namespace {

using LaunchOf = std::unordered_map<int64_t, const TraceEvent*>;  // correlation -> host runtime event

// The GPU events counted: on a stream; with two or more profiler steps, only those launched
// (by correlation) from a host event that began before the last step, as HTA does. Counts
// r->gpu_events (all of them) and fills *launch_of.
std::vector<const TraceEvent*> CountedGpuEvents(const Trace& trace, const TraceAnalysisOptions& options,
                                                RankTraceReport* r, LaunchOf* launch_of) {
  const bool filter = r->steps.size() >= 2;
  double cutoff = 0;
  if (filter) {
    cutoff = r->steps.back().ts_us;
    if (options.include_last_step) cutoff = r->steps.back().ts_us + r->steps.back().dur_us + 1e-9;
  }
  std::unordered_set<int64_t> launched_in_range;
  for (const TraceEvent& e : trace.events) {
    if (e.stream >= 0 || e.correlation < 0) continue;
    if (e.kind == EventKind::kRuntime) launch_of->emplace(e.correlation, &e);
    const bool in_range = options.include_last_step ? e.ts_us <= cutoff : e.ts_us < cutoff;
    if (filter && in_range) launched_in_range.insert(e.correlation);
  }
  std::vector<const TraceEvent*> gpu;
  for (const TraceEvent& e : trace.events) {
    if (e.stream < 0 || e.kind == EventKind::kGpuAnnotation) continue;
    ++r->gpu_events;
    if (filter && (e.correlation < 0 || !launched_in_range.count(e.correlation))) continue;
    gpu.push_back(&e);
  }
  return gpu;
}

// Kernel time split into compute, other GPU work and idle; communication and its overlap.
void AddTemporalBreakdown(const Trace& trace, const std::vector<const TraceEvent*>& gpu, RankTraceReport* r) {
  if (gpu.empty()) return;
  std::vector<Interval> all, compute, comm;
  all.reserve(gpu.size());
  for (const TraceEvent* e : gpu) {
    const std::string& name = trace.Name(*e);
    all.push_back({e->ts_us, e->end_us()});
    if (IsComputationKernel(name)) compute.push_back({e->ts_us, e->end_us()});
    else if (IsCommunicationKernel(name)) comm.push_back({e->ts_us, e->end_us()});
  }
  const double busy = MergeIntervals(&all);
  TemporalBreakdown& t = r->temporal;
  t.kernel_us = all.back().end - all.front().start;
  t.idle_us = t.kernel_us - busy;
  t.compute_us = MergeIntervals(&compute);
  t.non_compute_us = t.kernel_us - t.compute_us - t.idle_us;
  t.idle_pct = RoundPct(t.idle_us, t.kernel_us);
  t.compute_pct = RoundPct(t.compute_us, t.kernel_us);
  t.non_compute_pct = RoundPct(t.non_compute_us, t.kernel_us);
  r->comm_us = MergeIntervals(&comm);
  if (r->comm_us > 0) r->comm_overlap_pct = 100.0 * IntersectionLength(comm, compute) / r->comm_us;
}

// Idle time per stream between kernels, copies and sets (syncs are not work a launch starts):
// waiting for the host's launch, short gaps between kernels, the rest.
void AddIdleBreakdown(const std::vector<const TraceEvent*>& gpu, const LaunchOf& launch_of,
                      const TraceAnalysisOptions& options, RankTraceReport* r) {
  std::map<int64_t, std::vector<const TraceEvent*>> by_stream;
  for (const TraceEvent* e : gpu) {
    if (e->kind == EventKind::kKernel || e->kind == EventKind::kMemcpy || e->kind == EventKind::kMemset) by_stream[e->stream].push_back(e);
  }
  for (auto& [stream, events] : by_stream) {
    std::stable_sort(events.begin(), events.end(), [](const TraceEvent* a, const TraceEvent* b) { return a->ts_us < b->ts_us; });
    for (size_t i = 1; i < events.size(); ++i) {
      const double prev_end = events[i - 1]->end_us();
      const double gap = events[i]->ts_us - prev_end;
      auto launch = launch_of.find(events[i]->correlation);
      if (launch != launch_of.end() && launch->second->ts_us > prev_end) r->idle.host_wait_us += gap;
      else if (gap < options.kernel_wait_us) r->idle.kernel_wait_us += gap;
      else r->idle.other_us += gap;
    }
  }
}

// The top kernels (all GPU work counted) and CPU operators by total time.
void AddTopOps(const Trace& trace, const std::vector<const TraceEvent*>& gpu, const TraceAnalysisOptions& options,
               RankTraceReport* r) {
  std::unordered_map<uint32_t, OpTime> kernels, cpu_ops;
  for (const TraceEvent* e : gpu) {
    if (e->kind == EventKind::kGpuSync) continue;
    OpTime& op = kernels[e->name];
    op.name = trace.Name(*e);
    ++op.count;
    op.total_us += e->dur_us;
    op.max_us = std::max(op.max_us, e->dur_us);
  }
  for (const TraceEvent& e : trace.events) {
    if (e.kind != EventKind::kCpuOp) continue;
    OpTime& op = cpu_ops[e.name];
    op.name = trace.Name(e);
    ++op.count;
    op.total_us += e.dur_us;
    op.max_us = std::max(op.max_us, e.dur_us);
  }
  r->top_kernels = TopByTime(kernels, options.top);
  r->top_cpu_ops = TopByTime(cpu_ops, options.top);
}

// Launch delays. HTA's definition: from the end of the launch call to the kernel's start,
// clipped at 0 (a kernel may start before its launch call returns).
void AddLaunchDelays(const std::vector<const TraceEvent*>& gpu, const LaunchOf& launch_of, RankTraceReport* r) {
  std::vector<double> delays;
  for (const TraceEvent* e : gpu) {
    if (e->kind == EventKind::kGpuSync) continue;
    auto launch = launch_of.find(e->correlation);
    if (launch != launch_of.end()) delays.push_back(std::max(0.0, e->ts_us - launch->second->end_us()));
  }
  r->launch.count = static_cast<int64_t>(delays.size());
  if (!delays.empty()) {
    r->launch.median_us = Percentile(delays, 0.5);
    r->launch.p95_us = Percentile(delays, 0.95);
    r->launch.max_us = *std::max_element(delays.begin(), delays.end());
  }
}

// Collectives: each (name, bytes, group) with the median time of its calls.
// When GPU kernels carry the metadata, their time is the transfer's; the host's
// record_param_comms beside them only enqueues it.
void AddCollectives(const Trace& trace, RankTraceReport* r) {
  bool gpu_metadata = false;
  for (const TraceEvent& e : trace.events) gpu_metadata |= e.collective >= 0 && e.stream >= 0;
  std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<double>> calls;
  for (const TraceEvent& e : trace.events) {
    if (e.collective >= 0 && gpu_metadata && e.stream < 0) continue;
    if (e.collective >= 0) {
      const CollectiveMeta& m = trace.collectives[e.collective];
      const int64_t elems = std::max(m.in_elems, m.out_elems);
      const int64_t bytes = elems > 0 && m.element_bytes > 0 ? elems * m.element_bytes : 0;
      const int64_t n = m.group_size > 0 ? m.group_size : trace.world_size;
      calls[{m.name, bytes, n}].push_back(e.dur_us);
    } else if (e.stream < 0) {
      const std::string& name = trace.Name(e);
      if (StartsWith(name, "nccl:") || StartsWith(name, "gloo:")) ++r->collectives_without_metadata;
    }
  }
  for (const auto& [key, durations] : calls) {
    CollectiveTime c;
    std::tie(c.name, c.bytes, c.group_size) = key;
    c.count = static_cast<int64_t>(durations.size());
    c.median_us = Percentile(durations, 0.5);
    c.bus_factor = BusBandwidthFactor(c.name, c.group_size);
    if (c.bytes > 0 && c.median_us > 0) {
      c.algbw_gbps = static_cast<double>(c.bytes) / (c.median_us * 1e-6) / 1e9;
      if (c.bus_factor >= 0) c.busbw_gbps = c.algbw_gbps * c.bus_factor;
    }
    r->collectives.push_back(c);
  }
}

// Per profiler step, the DataLoader ranges inside it (same process), merged; the median step
// and the median share of it spent waiting for data.
void AddDataLoaderShares(const Trace& trace, RankTraceReport* r) {
  if (r->steps.empty()) return;
  std::vector<Interval> loader;
  for (const TraceEvent& e : trace.events) {
    if (e.stream < 0 && IsDataLoaderRange(trace.Name(e))) loader.push_back({e.ts_us, e.end_us()});
  }
  MergeIntervals(&loader);
  std::vector<double> shares, lengths;
  for (ProfilerStep& s : r->steps) {
    for (const Interval& i : loader) {
      const double lo = std::max(i.start, s.ts_us), hi = std::min(i.end, s.ts_us + s.dur_us);
      if (hi > lo) s.dataloader_us += hi - lo;
    }
    lengths.push_back(s.dur_us);
    if (s.dur_us > 0) shares.push_back(s.dataloader_us / s.dur_us);
  }
  r->median_step_us = Percentile(lengths, 0.5);
  if (!shares.empty()) r->dataloader_share = Percentile(shares, 0.5);
}

}  // namespace

RankTraceReport AnalyzeRank(const Trace& trace, const TraceAnalysisOptions& options) {
  RankTraceReport r;
  r.rank = trace.rank;
  r.path = trace.path;
  r.devices = trace.device_names;
  r.events = static_cast<int64_t>(trace.events.size());

  // Profiler steps, in time order.
  for (const TraceEvent& e : trace.events) {
    if (e.stream < 0 && IsProfilerStep(trace.Name(e))) r.steps.push_back({trace.Name(e), e.ts_us, e.dur_us, 0});
  }
  std::sort(r.steps.begin(), r.steps.end(), [](const ProfilerStep& a, const ProfilerStep& b) { return a.ts_us < b.ts_us; });

  LaunchOf launch_of;
  const std::vector<const TraceEvent*> gpu = CountedGpuEvents(trace, options, &r, &launch_of);
  r.gpu_events_used = static_cast<int64_t>(gpu.size());
  r.has_gpu = trace.HasGpu();
  AddTemporalBreakdown(trace, gpu, &r);
  AddIdleBreakdown(gpu, launch_of, options, &r);
  AddTopOps(trace, gpu, options, &r);
  AddLaunchDelays(gpu, launch_of, &r);
  AddCollectives(trace, &r);
  AddDataLoaderShares(trace, &r);
  return r;
}

TraceReport AnalyzeTraces(const std::vector<Trace>& traces, const TraceAnalysisOptions& options) {
  TraceReport report;
  for (size_t i = 0; i < traces.size(); ++i) {
    RankTraceReport r = AnalyzeRank(traces[i], options);
    if (r.rank < 0) r.rank = static_cast<int64_t>(i);
    report.ranks.push_back(std::move(r));
  }
  std::stable_sort(report.ranks.begin(), report.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });

  // Skew between ranks.
  if (report.ranks.size() >= 2) {
    const RankTraceReport *slow = nullptr, *fast = nullptr;
    for (const RankTraceReport& r : report.ranks) {
      if (r.median_step_us <= 0) continue;
      if (!slow || r.median_step_us > slow->median_step_us) slow = &r;
      if (!fast || r.median_step_us < fast->median_step_us) fast = &r;
    }
    if (slow && fast && slow != fast) {
      report.slowest_rank = slow->rank;
      report.fastest_rank = fast->rank;
      report.step_skew_pct = 100.0 * (slow->median_step_us - fast->median_step_us) / fast->median_step_us;
    }
    double lo = -1, hi = -1;
    for (const RankTraceReport& r : report.ranks) {
      if (r.temporal.kernel_us <= 0) continue;
      const double busy = r.temporal.compute_us;
      if (lo < 0 || busy < lo) lo = busy;
      if (hi < 0 || busy > hi) hi = busy;
    }
    if (lo > 0) report.compute_skew_pct = 100.0 * (hi - lo) / lo;
  }

  // DATALOADER_BOTTLENECK, on CPU-only traces: there the host is the device, and time in
  // the loader is time the training does not compute. (On a GPU trace the loader may run
  // while the GPU is still busy; the share is reported, not judged.)
  for (const RankTraceReport& r : report.ranks) {
    if (r.has_gpu || r.dataloader_share < 0) continue;
    std::vector<double> waits;
    for (const ProfilerStep& s : r.steps) waits.push_back(s.dataloader_us);
    const double median_wait = Percentile(waits, 0.5);
    if (r.dataloader_share <= options.dataloader_share || median_wait < options.dataloader_min_wait_us) continue;
    Finding f;
    f.code = "DATALOADER_BOTTLENECK";
    f.severity = Severity::kWarning;
    f.location = "data";
    f.step = 0;
    f.last_step = static_cast<int64_t>(r.steps.size()) - 1;
    char summary[256];
    std::snprintf(summary, sizeof(summary),
                  "rank %lld waits for the DataLoader %.3g%% of each profiled step (%.3g ms of %.3g ms, median over %zu steps)",
                  static_cast<long long>(r.rank), 100 * r.dataloader_share, median_wait / 1e3, r.median_step_us / 1e3,
                  r.steps.size());
    f.summary = summary;
    f.evidence_json = nlohmann::json{{"data_share", JsonNumber(r.dataloader_share)},
                                     {"data_wait_ms", JsonNumber(median_wait / 1e3)},
                                     {"step_ms", JsonNumber(r.median_step_us / 1e3)},
                                     {"threshold", options.dataloader_share},
                                     {"steps", r.steps.size()},
                                     {"rank", r.rank},
                                     {"trace", r.path}}.dump();
    f.causes = {{"slow_dataloader", 0.9}};
    f.actions = {"Raise DataLoader num_workers, set pin_memory and persistent_workers, or move the slow work out of __getitem__"};
    report.findings.push_back(std::move(f));
  }
  return report;
}

}  // namespace trainscope::perf
