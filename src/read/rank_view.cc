#include "read/rank_view.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/json_number.h"
#include "core/step_buckets.h"
#include "core/streaming.h"
#include "core/tag.h"
#include "doctor/rank_stats.h"
#include "doctor/ranks.h"
#include "doctor/roles.h"
#include "store/json_forms.h"
#include "store/run_io.h"

namespace trainscope::read {

namespace {

using json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

json Num(double v) { return JsonSeriesNumber(v); }

const tags::TagFamily* LayerFamily(const std::string& family) {
  for (const tags::TagFamily* f : {&tags::kGrad, &tags::kWeight, &tags::kUpdate, &tags::kAct}) {
    if (f->name == family) return f;
  }
  return nullptr;
}

// The step time of each point: time/step where the rank recorded it, else the wall time
// between consecutive points of the loss (per step between them).
struct StepTimes {
  std::string source;
  std::vector<int64_t> steps;
  std::vector<double> seconds;
};

StepTimes StepTimesOf(const RunData& data, const std::string& loss_tag) {
  StepTimes out;
  if (const ScalarSeries* s = data.FindScalar(tags::kTimeStep)) {
    out.source = tags::kTimeStep;
    for (size_t i = 0; i < s->steps.size(); ++i) {
      if (std::isfinite(s->values[i]) && s->values[i] >= 0) out.steps.push_back(s->steps[i]), out.seconds.push_back(s->values[i]);
    }
    return out;
  }
  const ScalarSeries* loss = loss_tag.empty() ? nullptr : data.FindScalar(loss_tag);
  if (!loss) return out;
  out.source = "wall time of " + loss_tag;
  for (size_t i = 1; i < loss->steps.size(); ++i) {
    const int64_t steps = loss->steps[i] - loss->steps[i - 1];
    const double seconds = loss->wall_times[i] - loss->wall_times[i - 1];
    if (steps > 0 && seconds >= 0) out.steps.push_back(loss->steps[i]), out.seconds.push_back(seconds / steps);
  }
  return out;
}

double FiniteMedian(const std::vector<double>& values) {
  std::vector<double> finite;
  for (double v : values) {
    if (std::isfinite(v)) finite.push_back(v);
  }
  return Median(finite);
}

// Mean of the finite values per bucket (NaN where a bucket has none).
std::vector<double> BucketMeans(const std::vector<int64_t>& steps, const std::vector<double>& values,
                                const StepBuckets& buckets, int64_t lo, int64_t hi) {
  std::vector<double> sum(buckets.count, 0), mean(buckets.count, kNaN);
  std::vector<size_t> count(buckets.count, 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i] < lo || steps[i] > hi || !std::isfinite(values[i])) continue;
    const size_t b = buckets.Of(steps[i]);
    sum[b] += values[i];
    ++count[b];
  }
  for (size_t b = 0; b < buckets.count; ++b) {
    if (count[b]) mean[b] = sum[b] / static_cast<double>(count[b]);
  }
  return mean;
}

json Row(const std::vector<double>& values) {
  json row = json::array();
  for (double v : values) row.push_back(Num(v));
  return row;
}

// One series of every rank over the buckets, with the median over ranks and their spread.
json SeriesAcrossRanks(const std::vector<RankMember>& ranks, const std::string& role, const std::string& tag,
                       const StepBuckets& buckets, int64_t lo, int64_t hi) {
  std::vector<std::vector<double>> per_rank;
  json values = json::array();
  for (const RankMember& m : ranks) {
    const ScalarSeries* s = m.data.FindScalar(tag);
    per_rank.push_back(s ? BucketMeans(s->steps, s->values, buckets, lo, hi) : std::vector<double>(buckets.count, kNaN));
    values.push_back(Row(per_rank.back()));
  }
  std::vector<double> median(buckets.count, kNaN), spread(buckets.count, kNaN);
  for (size_t b = 0; b < buckets.count; ++b) {
    std::vector<double> at;
    for (const auto& row : per_rank) {
      if (std::isfinite(row[b])) at.push_back(row[b]);
    }
    if (at.empty()) continue;
    median[b] = Median(at);
    if (at.size() >= 2 && median[b] != 0) {
      const auto [min, max] = std::minmax_element(at.begin(), at.end());
      spread[b] = (*max - *min) / std::fabs(median[b]);
    }
  }
  return {{"role", role}, {"tag", tag}, {"values", values}, {"median", Row(median)}, {"spread", Row(spread)}};
}

json Layers(const std::vector<RankMember>& ranks, const tags::TagFamily& family) {
  // Layers in the order the first rank that has them created them (the model's order).
  std::vector<std::string> names;
  std::map<std::string, size_t> index;
  for (const RankMember& m : ranks) {
    for (const TensorStatsSeries& s : m.data.tensor_stats) {
      std::string_view layer;
      if (family.Holds(s.tag, &layer) && index.emplace(std::string(layer), names.size()).second) names.emplace_back(layer);
    }
  }
  json values = json::array(), ratio = json::array(), nonfinite = json::array();
  for (const std::string& name : names) {
    std::vector<double> level;
    json bad = json::array();
    for (const RankMember& m : ranks) {
      const TensorStatsSeries* s = m.data.FindTensorStats(family.Of(name));
      std::vector<double> norms;
      int64_t nonfinite_points = 0;
      if (s) {
        for (size_t i = 0; i < s->stats.size(); ++i) {
          const TensorStats st = s->stats[i];
          if (st.nan + st.inf > 0) ++nonfinite_points;
          else norms.push_back(st.l2_norm());
        }
      }
      level.push_back(FiniteMedian(norms));
      bad.push_back(nonfinite_points);
    }
    const double reference = FiniteMedian(level);
    std::vector<double> relative;
    for (double v : level) relative.push_back(reference > 0 ? v / reference : kNaN);
    values.push_back(Row(level));
    ratio.push_back(Row(relative));
    nonfinite.push_back(std::move(bad));
  }
  return {{"family", family.name}, {"metric", "l2_norm"}, {"names", names}, {"values", values}, {"ratio", ratio},
          {"nonfinite", nonfinite}};
}

}  // namespace

bool IsRankLayerFamily(const std::string& family) { return LayerFamily(family) != nullptr; }

Status LoadRankMember(RunStore& store, const std::string& family, RankMember* member) {
  RunData& data = member->data;
  Status s = ReadRunMeta(store, &data);
  std::vector<SeriesInfo> series;
  if (s.ok()) s = store.ListSeries(&series);
  if (!s.ok()) return s;
  std::sort(series.begin(), series.end(), [](const SeriesInfo& a, const SeriesInfo& b) { return a.id < b.id; });
  doctor::RoleResolver roles;
  if (auto it = data.meta.find("roles"); it != data.meta.end()) roles.SetExplicit(it->second);
  for (const SeriesInfo& info : series) {
    if (info.kind == SeriesKind::kScalar) roles.See(info.tag);
  }
  const tags::TagFamily* layers = LayerFamily(family);
  std::vector<Point> points;
  std::vector<TensorStatsPoint> stats;
  constexpr int64_t kAll[2] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  for (const SeriesInfo& info : series) {
    if (info.kind == SeriesKind::kScalar &&
        (info.tag == roles.Get(doctor::Role::kLoss) || info.tag == roles.Get(doctor::Role::kGradNorm) ||
         tags::kTime.Holds(info.tag))) {
      if (Status r = store.ReadScalars(info, kAll[0], kAll[1], &points); !r.ok()) return r;
      for (const Point& p : points) data.OnScalar(info.tag, p.step, p.wall_time, p.value);
    } else if (info.kind == SeriesKind::kTensorStats && layers && layers->Holds(info.tag)) {
      if (Status r = store.ReadTensorStats(info, kAll[0], kAll[1], &stats); !r.ok()) return r;
      for (const TensorStatsPoint& p : stats) data.OnTensorStats(info.tag, p.step, p.wall_time, p.stats);
    }
  }
  return Status::Ok();
}

json RankViewJson(const std::vector<RankMember>& ranks, const std::string& family, int64_t width) {
  std::vector<doctor::RankRun> runs;
  for (const RankMember& m : ranks) runs.push_back({m.rank, &m.data});
  // The ranks run one program: the first rank's roles name the series for all (as the doctor reads them).
  const RunData* first = ranks.empty() ? nullptr : &ranks.front().data;
  const std::string loss_tag = first ? doctor::rank_stats::RoleTag(*first, doctor::Role::kLoss) : "";
  const std::string grad_tag = first ? doctor::rank_stats::RoleTag(*first, doctor::Role::kGradNorm) : "";

  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  std::vector<StepTimes> times;
  json rank_rows = json::array();
  for (const RankMember& m : ranks) {
    times.push_back(StepTimesOf(m.data, loss_tag));
    for (const ScalarSeries& s : m.data.scalars) {
      for (int64_t step : s.steps) lo = std::min(lo, step), hi = std::max(hi, step);
    }
    const double step_time = FiniteMedian(times.back().seconds);
    json phases = json::object();
    for (const ScalarSeries& s : m.data.scalars) {
      std::string_view phase;
      if (tags::kTime.Holds(s.tag, &phase) && s.tag != tags::kTimeStep) phases[std::string(phase)] = Num(FiniteMedian(s.values));
    }
    rank_rows.push_back({{"rank", m.rank}, {"run", m.run}, {"status", m.status}, {"steps", m.data.MaxStep()},
                         {"step_time", Num(step_time)}, {"step_time_source", times.back().source},
                         {"steps_per_second", Num(step_time > 0 ? 1 / step_time : kNaN)}, {"phases", phases}});
  }
  json out = {{"ranks", rank_rows}, {"step", json::array()}, {"step_time", json::array()}, {"series", json::array()}};
  if (lo <= hi) {
    const StepBuckets buckets(lo, hi, width);
    for (size_t b = 0; b < buckets.count; ++b) out["step"].push_back(buckets.Begin(b));
    for (const StepTimes& t : times) out["step_time"].push_back(Row(BucketMeans(t.steps, t.seconds, buckets, lo, hi)));
    if (!loss_tag.empty()) out["series"].push_back(SeriesAcrossRanks(ranks, "loss", loss_tag, buckets, lo, hi));
    if (!grad_tag.empty()) out["series"].push_back(SeriesAcrossRanks(ranks, "grad_norm", grad_tag, buckets, lo, hi));
  }
  if (const tags::TagFamily* f = LayerFamily(family)) out["layers"] = Layers(ranks, *f);
  json findings = json::array();
  for (const doctor::RankFinding& f : doctor::CompareRanks(runs)) {
    json j = FindingToJson(f.finding);
    j["rank"] = f.rank;
    j["ranks"] = f.ranks;
    findings.push_back(std::move(j));
  }
  out["findings"] = std::move(findings);
  return out;
}

}  // namespace trainscope::read
