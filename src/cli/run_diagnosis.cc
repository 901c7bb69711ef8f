#include "cli/run_diagnosis.h"

#include <algorithm>

#include "doctor/ranks.h"
#include "store/json_forms.h"
#ifdef TRAINSCOPE_WITH_PERF
#include <unistd.h>

#include "perf/perf_metrics.h"
#endif

namespace trainscope::cli {

namespace {

using json = nlohmann::json;

int64_t MetaInt(const RunData& data, const char* key, int64_t fallback) {
  auto it = data.meta.find(key);
  if (it == data.meta.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (...) {
    return fallback;
  }
}

DistributedReport DiagnoseRanks(const RunGroup& group, const std::vector<RunReport>& reports) {
  DistributedReport dd{group.dir, group.ranks, {}, {}};
  std::vector<doctor::RankRun> ranks;
  for (size_t k = 0; k < group.members.size(); ++k) {
    const RunReport& d = reports[group.members[k]];
    dd.per_rank.push_back(&d);
    ranks.push_back({group.ranks[k], &d.run->data});
    for (const Finding& f : d.findings) dd.findings.push_back({f, group.ranks[k], {}, false});
  }
  for (doctor::RankFinding& f : doctor::CompareRanks(ranks)) {
    dd.findings.push_back({std::move(f.finding), f.rank, std::move(f.ranks), true});
  }
  std::stable_sort(dd.findings.begin(), dd.findings.end(), [](const RankedFinding& a, const RankedFinding& b) {
    if (a.finding.severity != b.finding.severity) return a.finding.severity > b.finding.severity;
    if (a.finding.step != b.finding.step) return a.finding.step < b.finding.step;
    return a.rank < b.rank;
  });
  return dd;
}

// LOW_MFU for a run that recorded its FLOPs per step (ts.perf.record) on hardware whose peak
// is known: the same analysis as `trainscope perf run`, so diagnose names it too.
std::vector<Finding> PerfFindings(const RunData& data) {
#ifdef TRAINSCOPE_WITH_PERF
  if (data.meta.find("perf/flops_per_step") == data.meta.end()) return {};
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  return perf::AnalyzeRun({&data}, perf::ChoosePeak(data, host)).findings;
#else
  return {};
#endif
}

}  // namespace

std::string MetaText(const RunData& data, const char* key) {
  auto it = data.meta.find(key);
  return it == data.meta.end() ? "" : it->second;
}

Status DiagnosePath(const std::string& path, PathReport* out) {
  Status s = LoadSources(path, &out->runs, &out->is_logdir);
  if (!s.ok()) return s;
  out->reports.clear();
  for (const LoadedRun& run : out->runs) {
    doctor::Diagnosis d = doctor::Diagnose(run.data);
    for (Finding& f : PerfFindings(run.data)) d.findings.push_back(std::move(f));
    std::vector<doctor::LayerHealth> layers = doctor::LayerHealthOf(run.data, d.findings);
    out->reports.push_back({&run, std::move(d.findings), std::move(d.not_checked), std::move(layers)});
  }
  // The ranks of a data-parallel run (rank-<r>/ under one run directory) go together.
  out->groups.clear();
  if (out->is_logdir) {
    std::vector<std::string> dirs;
    for (const LoadedRun& run : out->runs) dirs.push_back(run.source);
    out->groups = GroupByRun(dirs);
  } else {
    out->groups.push_back({out->runs.front().source, {0}, {}});
  }
  out->distributed.assign(out->groups.size(), {});
  for (size_t g = 0; g < out->groups.size(); ++g) {
    if (out->groups[g].distributed()) out->distributed[g] = DiagnoseRanks(out->groups[g], out->reports);
  }
  out->one_distributed_run =
      out->groups.size() == 1 && out->groups[0].distributed() && SameDirectory(out->groups[0].dir, path);
  return Status::Ok();
}

json RunReportJson(const RunReport& d) {
  json findings = json::array();
  for (const Finding& f : d.findings) findings.push_back(FindingToJson(f));
  json not_checked = json::array();
  for (const auto& n : d.not_checked) {
    not_checked.push_back({{"check", n.check}, {"codes", n.codes}, {"reason", n.reason}});
  }
  json out = {{"source", d.run->source},
              {"format", d.run->format},
              {"steps", d.run->data.MaxStep()},
              {"findings", findings},
              {"not_checked", not_checked}};
  if (!d.layers.empty()) {
    json layers = json::array();
    for (const doctor::LayerHealth& h : d.layers) {
      json parts = json::object();
      for (const auto& [part, share] : h.parts) parts[part] = share;
      layers.push_back({{"layer", h.layer}, {"score", h.score}, {"worst", h.worst}, {"parts", parts}});
    }
    out["layers"] = std::move(layers);
  }
  return out;
}

json DistributedReportJson(const DistributedReport& dd) {
  json ranks = json::array();
  int64_t steps = 0, world_size = 0;
  std::vector<int> missing;
  for (size_t k = 0; k < dd.per_rank.size(); ++k) {
    const LoadedRun& run = *dd.per_rank[k]->run;
    steps = std::max(steps, run.data.MaxStep());
    world_size = std::max(world_size, MetaInt(run.data, "world_size", 0));
    json r = {{"rank", dd.ranks[k]}, {"source", run.source}, {"status", MetaText(run.data, "status")},
              {"steps", run.data.MaxStep()}};
    if (!MetaText(run.data, "exit_reason").empty()) r["exit_reason"] = MetaText(run.data, "exit_reason");
    ranks.push_back(r);
  }
  for (int r = 0; r < world_size; ++r) {
    if (std::find(dd.ranks.begin(), dd.ranks.end(), r) == dd.ranks.end()) missing.push_back(r);
  }
  json findings = json::array();
  for (const RankedFinding& f : dd.findings) {
    json j = FindingToJson(f.finding);
    j["rank"] = f.rank >= 0 ? json(f.rank) : json(nullptr);
    if (f.compared) j["ranks"] = f.ranks;
    findings.push_back(std::move(j));
  }
  // What could not be checked: once per check, with the ranks it applies to.
  json not_checked = json::array();
  std::vector<std::string> seen;
  for (size_t k = 0; k < dd.per_rank.size(); ++k) {
    for (const auto& n : dd.per_rank[k]->not_checked) {
      auto it = std::find(seen.begin(), seen.end(), n.check);
      if (it != seen.end()) {
        not_checked[it - seen.begin()]["ranks"].push_back(dd.ranks[k]);
        continue;
      }
      seen.push_back(n.check);
      not_checked.push_back({{"check", n.check}, {"codes", n.codes}, {"reason", n.reason}, {"ranks", {dd.ranks[k]}}});
    }
  }
  json out = {{"source", dd.dir},
              {"format", "trainscope"},
              {"steps", steps},
              {"world_size", std::max<int64_t>(world_size, static_cast<int64_t>(dd.ranks.size()))},
              {"ranks", ranks},
              {"findings", findings},
              {"not_checked", not_checked}};
  if (!missing.empty()) out["missing_ranks"] = missing;
  return out;
}

json PathReportJson(const PathReport& report, const std::string& path) {
  if (report.one_distributed_run) return DistributedReportJson(report.distributed[0]);
  if (!report.is_logdir) return RunReportJson(report.reports.front());
  json all = json::array();
  for (size_t g = 0; g < report.groups.size(); ++g) {
    all.push_back(report.groups[g].distributed() ? DistributedReportJson(report.distributed[g])
                                                 : RunReportJson(report.reports[report.groups[g].members[0]]));
  }
  return {{"source", path}, {"format", "logdir"}, {"runs", all}};
}

}  // namespace trainscope::cli
