#include "cli/run_diagnosis.h"

#include <algorithm>

#include "core/tag.h"
#include "doctor/ranks.h"
#include "store/json_forms.h"
#include "store/run_io.h"
#include "store/run_store.h"
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
  if (data.meta.find(tags::kPerfFlopsPerStep) == data.meta.end()) return {};
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

namespace {

// Passes every sample of a step to each sink.
class FanOut : public SampleSink {
 public:
  explicit FanOut(std::vector<SampleSink*> sinks) : sinks_(std::move(sinks)) {}
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override {
    for (SampleSink* s : sinks_) s->OnScalar(tag, step, wall_time, value);
  }
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override {
    for (SampleSink* s : sinks_) s->OnTensorStats(tag, step, wall_time, stats);
  }
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override {
    for (SampleSink* s : sinks_) s->OnVector(tag, step, wall_time, values);
  }
  void OnSpan(const Span& span) override {
    for (SampleSink* s : sinks_) s->OnSpan(span);
  }

 private:
  std::vector<SampleSink*> sinks_;
};

// The largest step of a scalar or tensor series (RunData::MaxStep).
class MaxStepSink : public SampleSink {
 public:
  void OnScalar(std::string_view, int64_t step, double, double) override { max = std::max(max, step); }
  void OnTensorStats(std::string_view, int64_t step, double, const TensorStats&) override { max = std::max(max, step); }
  int64_t max = 0;
};

// A run judged from memory: the doctor, the performance analysis, layer health.
RunReport DiagnoseLoaded(const LoadedRun& run) {
  doctor::Diagnosis d = doctor::Diagnose(run.data);
  for (Finding& f : PerfFindings(run.data)) d.findings.push_back(std::move(f));
  std::vector<doctor::LayerHealth> layers = doctor::LayerHealthOf(run.data, d.findings);
  return {&run, std::move(d.findings), std::move(d.not_checked), std::move(layers), run.data.MaxStep()};
}

// A stored run judged as it is read, one window of steps at a time: memory independent of
// its length (docs/architecture.md). The same answer as DiagnoseLoaded; false when the
// store turned out damaged, which the whole read reports as such.
bool DiagnoseInWindows(const LoadedRun& run, RunReport* report, Status* status) {
  std::unique_ptr<RunStore> store;
  *status = RunStore::OpenReadOnly(run.source, &store);
  if (!status->ok()) return true;
  store->UnmapReads();
  std::vector<SeriesInfo> series;
  *status = store->ListSeries(&series);
  if (!status->ok()) return true;
  doctor::StepwiseRun stepwise{run.data.meta, run.data.findings, {}, {}, {}};
  std::vector<std::string> tensor_series;
  for (const SeriesInfo& info : series) {
    if (info.kind == SeriesKind::kScalar && info.points > 0) stepwise.scalars.push_back({info.tag, info.first_step});
    if (info.kind == SeriesKind::kTensorStats) tensor_series.push_back(info.tag);
  }
  stepwise.points_of = [&](const std::string& tag, std::vector<int64_t>* steps, std::vector<double>* values) {
    std::vector<Point> points;
    if (!store->ReadScalars(tag, INT64_MIN, INT64_MAX, &points).ok()) return;
    for (const Point& p : points) steps->push_back(p.step), values->push_back(p.value);
  };
  doctor::LayerHealthBuilder layers;
  MaxStepSink max_step;
  stepwise.replay_steps = [&](SampleSink* doctor, const std::function<void(int64_t)>& step_done) {
    FanOut all({doctor, &layers, &max_step});
    *status = ReplayStepsInWindows(*store, &all, [&](int64_t step) {
      step_done(step);
      layers.EndStep();
    });
  };
  doctor::Diagnosis d = doctor::Diagnose(stepwise);
  if (!status->ok()) return true;
  if (store->damage().count()) return false;
  std::vector<doctor::LayerHealth> health = layers.Finish(tensor_series, run.data.meta, d.findings);
  *report = {&run, std::move(d.findings), std::move(d.not_checked), std::move(health), max_step.max};
  return true;
}

}  // namespace

Status DiagnosePath(const std::string& path, PathReport* out) {
  Status s = LoadSources(path, &out->runs, &out->is_logdir, /*series_in_store=*/true);
  if (!s.ok()) return s;
  // The ranks of a data-parallel run (rank-<r>/ under one run directory) go together.
  out->groups.clear();
  if (out->is_logdir) {
    std::vector<std::string> dirs;
    for (const LoadedRun& run : out->runs) dirs.push_back(run.source);
    out->groups = GroupByRun(dirs);
  } else {
    out->groups.push_back({out->runs.front().source, {0}, {}});
  }
  // Ranks are compared whole, and the performance analysis reads the run whole: those runs
  // are loaded; any other stored run is judged as it is read.
  for (const RunGroup& group : out->groups) {
    for (size_t member : group.members) {
      LoadedRun& run = out->runs[member];
      if (!group.distributed() && !run.data.meta.count(tags::kPerfFlopsPerStep)) continue;
      s = LoadSeries(&run);
      if (!s.ok()) return s;
    }
  }
  out->reports.clear();
  for (LoadedRun& run : out->runs) {
    RunReport report;
    if (run.series_in_store && DiagnoseInWindows(run, &report, &s)) {
      if (!s.ok()) return s;
      out->reports.push_back(std::move(report));
      continue;
    }
    s = LoadSeries(&run);  // a damaged store: read whole, which says what it skipped
    if (!s.ok()) return s;
    out->reports.push_back(DiagnoseLoaded(run));
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
              {"steps", d.steps},
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
    steps = std::max(steps, dd.per_rank[k]->steps);
    world_size = std::max(world_size, MetaInt(run.data, "world_size", 0));
    json r = {{"rank", dd.ranks[k]}, {"source", run.source}, {"status", MetaText(run.data, "status")},
              {"steps", dd.per_rank[k]->steps}};
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
