#include "perf/trace_json.h"

#include "core/json_number.h"

namespace trainscope::perf {

namespace {

using json = nlohmann::json;

json OpsToJson(const std::vector<OpTime>& ops) {
  json out = json::array();
  for (const OpTime& op : ops) {
    out.push_back({{"name", op.name}, {"count", op.count}, {"total_us", JsonNumber(op.total_us)},
                   {"mean_us", JsonNumber(op.count ? op.total_us / static_cast<double>(op.count) : 0)},
                   {"max_us", JsonNumber(op.max_us)}});
  }
  return out;
}

// -1 (unknown) as null: a missing measurement is not a zero.
json OrNull(double v) { return v < 0 ? json(nullptr) : JsonNumber(v); }

}  // namespace

json RankTraceReportToJson(const RankTraceReport& r) {
  const TemporalBreakdown& t = r.temporal;
  json steps = json::array();
  for (const ProfilerStep& s : r.steps) {
    steps.push_back({{"name", s.name}, {"dur_us", JsonNumber(s.dur_us)}, {"dataloader_us", JsonNumber(s.dataloader_us)},
                     {"dataloader_share", JsonNumber(s.dur_us > 0 ? s.dataloader_us / s.dur_us : 0)}});
  }
  json collectives = json::array();
  for (const CollectiveTime& c : r.collectives) {
    collectives.push_back({{"name", c.name}, {"count", c.count}, {"bytes", c.bytes}, {"group_size", c.group_size},
                           {"median_us", JsonNumber(c.median_us)}, {"algbw_gbps", OrNull(c.algbw_gbps)},
                           {"busbw_gbps", OrNull(c.busbw_gbps)}, {"bus_factor", OrNull(c.bus_factor)}});
  }
  return {
      {"rank", r.rank},
      {"trace", r.path},
      {"has_gpu", r.has_gpu},
      {"devices", r.devices},
      {"events", r.events},
      {"gpu_events", r.gpu_events},
      {"gpu_events_used", r.gpu_events_used},
      {"temporal",
       {{"idle_us", JsonNumber(t.idle_us)},
        {"compute_us", JsonNumber(t.compute_us)},
        {"non_compute_us", JsonNumber(t.non_compute_us)},
        {"kernel_us", JsonNumber(t.kernel_us)},
        {"idle_pct", JsonNumber(t.idle_pct)},
        {"compute_pct", JsonNumber(t.compute_pct)},
        {"non_compute_pct", JsonNumber(t.non_compute_pct)}}},
      {"idle_breakdown",
       {{"host_wait_us", JsonNumber(r.idle.host_wait_us)},
        {"kernel_wait_us", JsonNumber(r.idle.kernel_wait_us)},
        {"other_us", JsonNumber(r.idle.other_us)}}},
      {"top_kernels", OpsToJson(r.top_kernels)},
      {"top_cpu_ops", OpsToJson(r.top_cpu_ops)},
      {"comm_us", JsonNumber(r.comm_us)},
      {"comm_overlap_pct", OrNull(r.comm_overlap_pct)},
      {"launch_delay",
       {{"count", r.launch.count},
        {"median_us", JsonNumber(r.launch.median_us)},
        {"p95_us", JsonNumber(r.launch.p95_us)},
        {"max_us", JsonNumber(r.launch.max_us)}}},
      {"collectives", collectives},
      {"collectives_without_metadata", r.collectives_without_metadata},
      {"steps", steps},
      {"median_step_us", JsonNumber(r.median_step_us)},
      {"dataloader_share", OrNull(r.dataloader_share)},
  };
}

json TraceReportToJson(const TraceReport& report) {
  json ranks = json::array();
  for (const RankTraceReport& r : report.ranks) ranks.push_back(RankTraceReportToJson(r));
  json skew = {{"slowest_rank", report.slowest_rank < 0 ? json(nullptr) : json(report.slowest_rank)},
               {"fastest_rank", report.fastest_rank < 0 ? json(nullptr) : json(report.fastest_rank)},
               {"step_skew_pct", OrNull(report.step_skew_pct)},
               {"compute_skew_pct", OrNull(report.compute_skew_pct)}};
  return {{"ranks", ranks}, {"skew", skew}};
}

}  // namespace trainscope::perf
