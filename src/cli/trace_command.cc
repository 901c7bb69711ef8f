// `trainscope trace FILE|FOLDER... [--json] [--top N] [--include-last-step]`: PyTorch profiler
// (Kineto) traces, one per rank, analysed as docs/traces.md says: the temporal breakdown with
// Holistic Trace Analysis' definitions, idle time, top kernels and operators, overlap,
// launch delays, collectives' bandwidth, steps and the DataLoader's share, rank skew.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/trace_report.h"

namespace trainscope::cli {

namespace {

using json = nlohmann::json;

std::string Us(double us) {
  if (us >= 1e6) return fmt::format("{:.3f} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.3f} ms", us / 1e3);
  return fmt::format("{:.1f} us", us);
}

std::string Short(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

void PrintOps(const char* title, const std::vector<perf::OpTime>& ops) {
  if (ops.empty()) return;
  fmt::print("  {}:\n", title);
  for (const perf::OpTime& op : ops) {
    fmt::print("    {:>12} {:>7}x  {}\n", Us(op.total_us), op.count, Short(op.name, 90));
  }
}

void PrintRank(const perf::RankTraceReport& r) {
  fmt::print("rank {} ({}; {} events{})\n", r.rank, r.path, r.events,
             r.devices.empty() ? "" : ", " + r.devices.front());
  if (r.has_gpu) {
    const perf::TemporalBreakdown& t = r.temporal;
    fmt::print("  temporal: kernel span {}; compute {} ({:.2f}%), non-compute {} ({:.2f}%), idle {} ({:.2f}%)\n",
               Us(t.kernel_us), Us(t.compute_us), t.compute_pct, Us(t.non_compute_us), t.non_compute_pct, Us(t.idle_us),
               t.idle_pct);
    if (r.gpu_events_used != r.gpu_events) {
      fmt::print("    ({} of {} GPU events: the last, incomplete profiler step's are left out, as HTA does)\n",
                 r.gpu_events_used, r.gpu_events);
    }
    fmt::print("  gaps between kernels of a stream, summed over streams: host wait {}, kernel wait {}, other {}\n",
               Us(r.idle.host_wait_us), Us(r.idle.kernel_wait_us),
               Us(r.idle.other_us));
    if (r.comm_overlap_pct >= 0) {
      fmt::print("  communication {}: {:.1f}% of it overlapped with computation\n", Us(r.comm_us), r.comm_overlap_pct);
    }
    if (r.launch.count > 0) {
      fmt::print("  launch delay (end of the launch call -> GPU start), {} events: median {}, p95 {}, max {}\n", r.launch.count,
                 Us(r.launch.median_us), Us(r.launch.p95_us), Us(r.launch.max_us));
    }
  } else {
    fmt::print("  CPU-only trace: no GPU events, no temporal breakdown\n");
  }
  PrintOps("top kernels", r.top_kernels);
  PrintOps("top CPU operators (inclusive time)", r.top_cpu_ops);
  for (const perf::CollectiveTime& c : r.collectives) {
    if (c.busbw_gbps >= 0) {
      fmt::print("  collective {} x{}: {} bytes on {} ranks, median {}, algbw {:.3f} GB/s, busbw {:.3f} GB/s\n", c.name,
                 c.count, c.bytes, c.group_size, Us(c.median_us), c.algbw_gbps, c.busbw_gbps);
    } else {
      fmt::print("  collective {} x{}: median {} (no size or group in its metadata: no bandwidth)\n", c.name, c.count,
                 Us(c.median_us));
    }
  }
  if (r.collectives_without_metadata > 0) {
    fmt::print("  {} collective calls carry no size metadata (older PyTorch): no bandwidth for them\n",
               r.collectives_without_metadata);
  }
  if (!r.steps.empty()) {
    fmt::print("  {} profiler steps, median {}", r.steps.size(), Us(r.median_step_us));
    if (r.dataloader_share >= 0) fmt::print("; DataLoader {:.1f}% of a step (median)", 100 * r.dataloader_share);
    fmt::print("\n");
  }
}

int TraceCommand(const std::vector<std::string>& paths, bool as_json, size_t top, bool include_last_step) {
  perf::TraceAnalysisOptions options;
  options.top = top;
  options.include_last_step = include_last_step;
  perf::TraceReport report;
  json out;
  Status s = AnalyzeTraceFiles(paths, options, &report, &out);
  if (!s.ok()) {
    fmt::print(stderr, "trainscope trace: {}\n", s.message());
    return 2;
  }
  if (as_json) {
    fmt::print("{}\n", out.dump());
    return 0;
  }
  for (const perf::RankTraceReport& r : report.ranks) PrintRank(r);
  if (report.step_skew_pct >= 0) {
    fmt::print("skew: rank {} is the slowest, {:.1f}% over rank {} (median profiler step)\n", report.slowest_rank,
               report.step_skew_pct, report.fastest_rank);
  }
  if (report.compute_skew_pct >= 0) fmt::print("skew: compute time differs by {:.1f}% between ranks\n", report.compute_skew_pct);
  if (report.findings.empty()) fmt::print("no findings\n");
  for (const Finding& f : report.findings) {
    fmt::print("[{}] {}: {}\n", SeverityName(f.severity), f.code, f.summary);
    for (const std::string& a : f.actions) fmt::print("  do: {}\n", a);
  }
  return 0;
}

}  // namespace

void AddTraceCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("trace", "Analyse PyTorch profiler (Kineto) traces: one file per rank, or a folder");
  auto paths = std::make_shared<std::vector<std::string>>();
  auto as_json = std::make_shared<bool>(false);
  auto top = std::make_shared<size_t>(10);
  auto last = std::make_shared<bool>(false);
  cmd->add_option("traces", *paths, "trace files (.json, .json.gz) or folders of them")->required();
  cmd->add_flag("--json", *as_json, "print the analysis as JSON");
  cmd->add_option("--top", *top, "kernels and CPU operators to list (default 10)");
  cmd->add_flag("--include-last-step", *last, "count the GPU work of the last profiler step (HTA leaves it out)");
  cmd->callback([=] { *exit_code = TraceCommand(*paths, *as_json, *top, *last); });
}

}  // namespace trainscope::cli
