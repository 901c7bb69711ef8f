#include "store/run_io.h"

#include "store/store_format.h"

#include <algorithm>
#include <cstdint>

namespace trainscope {

namespace {

class DiscardSink : public SampleSink {
 public:
  void OnScalar(std::string_view, int64_t, double, double) override {}
};

}  // namespace

Status CheckRun(const std::string& path, DamageLog* damage) {
  std::unique_ptr<RunStore> store;
  Status s = RunStore::OpenReadOnly(path, &store, damage);
  if (!s.ok()) return s;
  DiscardSink discard;
  return ReadRun(*store, &discard);
}

Status ReadRunMeta(RunStore& store, SampleSink* sink) {
  RunMeta meta;
  Status s = store.ReadMeta(&meta);
  if (!s.ok()) return s;
  sink->OnMeta("format", "trainscope");
  sink->OnMeta("name", meta.name);
  sink->OnMeta("status", store.EffectiveStatus(meta));
  sink->OnMeta("config", meta.config_json);
  sink->OnMeta("host", meta.host);
  sink->OnMeta("command_line", meta.command_line);
  sink->OnMeta("git_commit", meta.git_commit);
  sink->OnMeta("exit_reason", meta.exit_reason);
  for (const auto& [key, value] : meta.extra) sink->OnMeta(key, value);
  std::vector<Finding> findings;
  s = store.ReadFindings(&findings);
  if (!s.ok()) return s;
  for (const Finding& f : findings) sink->OnFinding(f);
  return Status::Ok();
}

namespace {

// The points of `series` (from ListSeries) and the spans with step in [lo, hi], into `sink`.
// `chunks`, when given: each scalar series' chunks (RunStore::ListChunks), by series index.
Status ReadSteps(RunStore& store, const std::vector<SeriesInfo>& series, int64_t lo, int64_t hi, SampleSink* sink,
                 const std::vector<std::vector<RunStore::ChunkSpan>>* chunks = nullptr) {
  Status s;
  std::vector<int64_t> ids;
  for (size_t k = 0; k < series.size(); ++k) {
    const SeriesInfo& info = series[k];
    if (info.kind == SeriesKind::kScalar) {
      std::vector<Point> points;
      if (chunks) {
        ids.clear();
        for (const RunStore::ChunkSpan& c : (*chunks)[k]) {
          if (c.max_step >= lo && c.min_step <= hi) ids.push_back(c.id);
        }
        s = store.ReadChunks(info, ids, lo, hi, &points);
      } else {
        s = store.ReadScalars(info, lo, hi, &points);
      }
      if (!s.ok()) return s;
      for (const Point& p : points) sink->OnScalar(info.tag, p.step, p.wall_time, p.value);
    } else if (info.kind == SeriesKind::kTensorStats) {
      std::vector<TensorStatsPoint> points;
      s = store.ReadTensorStats(info, lo, hi, &points);
      if (!s.ok()) return s;
      for (const auto& p : points) sink->OnTensorStats(info.tag, p.step, p.wall_time, p.stats);
    } else if (info.kind == SeriesKind::kVector) {
      std::vector<VectorPoint> points;
      s = store.ReadVectors(info, lo, hi, &points);
      if (!s.ok()) return s;
      for (const auto& p : points) sink->OnVector(info.tag, p.step, p.wall_time, p.values);
    }
  }
  std::vector<Span> spans;
  s = store.ReadSpans(lo, hi, &spans);
  if (!s.ok()) return s;
  for (const Span& span : spans) sink->OnSpan(span);
  return Status::Ok();
}

}  // namespace

Status ReadRun(RunStore& store, SampleSink* sink) {
  Status s = ReadRunMeta(store, sink);
  if (!s.ok()) return s;
  std::vector<SeriesInfo> series;
  s = store.ListSeries(&series);
  if (!s.ok()) return s;
  return ReadSteps(store, series, INT64_MIN, INT64_MAX, sink);
}

namespace {

// The share of [first, last] that [lo, hi] covers (steps as doubles: the whole int64 line).
double Overlap(int64_t first, int64_t last, int64_t lo, int64_t hi) {
  const double a = static_cast<double>(std::max(first, lo)), b = static_cast<double>(std::min(last, hi));
  if (a > b) return 0;
  return (b - a + 1) / (static_cast<double>(last) - static_cast<double>(first) + 1);
}

}  // namespace

Status ReplayStepsInWindows(RunStore& store, SampleSink* sink, const std::function<void(int64_t step)>& step_done,
                            int64_t window_points) {
  std::vector<SeriesInfo> series;
  Status s = store.ListSeries(&series);
  if (!s.ok()) return s;
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const SeriesInfo& info : series) {
    if (info.points <= 0) continue;
    first = std::min(first, info.first_step);
    last = std::max(last, info.last_step);
  }
  if (first > last) {  // no points: the spans, if any, in one window
    RunData window;
    s = ReadSteps(store, series, INT64_MIN, INT64_MAX, &window);
    if (s.ok()) window.ReplaySteps(sink, step_done);
    return s;
  }
  std::vector<std::vector<RunStore::ChunkSpan>> chunks(series.size());
  for (size_t k = 0; k < series.size(); ++k) {
    if (series[k].kind != SeriesKind::kScalar) continue;
    s = store.ListChunks(series[k], &chunks[k]);
    if (!s.ok()) return s;
  }
  // The points a window would hold, without reading it: each scalar chunk's, and each other
  // series', spread evenly over its steps. A step far from the others (a bogus one) widens
  // only its own chunk, not the estimate of every window.
  auto estimate = [&](int64_t lo, int64_t hi) {
    double points = 0;
    for (size_t k = 0; k < series.size(); ++k) {
      if (series[k].kind == SeriesKind::kScalar) {
        for (const RunStore::ChunkSpan& c : chunks[k]) points += c.count * Overlap(c.min_step, c.max_step, lo, hi);
      } else if (series[k].points > 0) {
        points += series[k].points * Overlap(series[k].first_step, series[k].last_step, lo, hi);
      }
    }
    return points;
  };
  const double target = static_cast<double>(std::max<int64_t>(window_points, 1));
  const double span = static_cast<double>(last) - static_cast<double>(first) + 1;
  double width = std::clamp(target * span / std::max(estimate(first, last), 1.0), 1.0, span);
  // Windows cover every step: spans before the first point and after the last included.
  int64_t lo = INT64_MIN;
  for (;;) {
    const double start = static_cast<double>(lo == INT64_MIN ? first : lo);
    auto end_of = [&](double w) {
      const double end = start + w - 1;
      return end >= static_cast<double>(last) ? INT64_MAX : static_cast<int64_t>(end);
    };
    int64_t hi = end_of(width);
    double expected = estimate(lo, hi);
    while (expected > 2 * target && width > 1) {  // denser here than on average: narrower
      width = std::max(1.0, width / 2);
      hi = end_of(width);
      expected = estimate(lo, hi);
    }
    RunData window;
    s = ReadSteps(store, series, lo, hi, &window, &chunks);
    if (!s.ok()) return s;
    window.ReplaySteps(sink, step_done);
    if (hi == INT64_MAX) return Status::Ok();
    if (2 * expected < target) width *= 2;  // sparser: wider
    lo = hi + 1;
  }
}

int64_t StoreSink::Id(std::string_view tag, SeriesKind kind) {
  auto it = ids_.find(std::string(tag));
  if (it != ids_.end()) return it->second;
  int64_t id = -1;
  if (status_.ok()) {
    Status s = ValidateTag(tag);
    if (s.ok()) s = store_->EnsureSeries(tag, kind, &id);
    if (!s.ok()) status_ = s;
  }
  ids_.emplace(std::string(tag), id);
  return id;
}

void StoreSink::MaybeWrite() {
  if (++pending_ < 100000 || !status_.ok()) return;
  status_ = store_->Write(batch_);
  batch_ = WriteBatch();
  pending_ = 0;
}

void StoreSink::OnScalar(std::string_view tag, int64_t step, double wall_time, double value) {
  const int64_t id = Id(tag, SeriesKind::kScalar);
  if (id < 0) return;
  batch_.scalars.push_back({id, step, wall_time, value});
  MaybeWrite();
}

void StoreSink::OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) {
  const int64_t id = Id(tag, SeriesKind::kTensorStats);
  if (id < 0) return;
  batch_.tensor_stats.push_back({id, step, wall_time, stats});
  MaybeWrite();
}

void StoreSink::OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) {
  const int64_t id = Id(tag, SeriesKind::kVector);
  if (id < 0) return;
  batch_.vectors.push_back({id, step, wall_time, values});
  MaybeWrite();
}

void StoreSink::OnSpan(const Span& span) {
  batch_.spans.push_back(span);
  MaybeWrite();
}

void StoreSink::OnFinding(const Finding& finding) {
  batch_.findings.push_back(finding);
  MaybeWrite();
}

void StoreSink::OnMeta(std::string_view key, std::string_view value) {
  if (!status_.ok()) return;
  if (key == "config") status_ = store_->SetMetaValue("config", std::string(value));
  else status_ = store_->SetMetaValue(std::string(key), std::string(value));
}

Status StoreSink::Finish() {
  if (status_.ok() && !batch_.empty()) status_ = store_->Write(batch_);
  batch_ = WriteBatch();
  pending_ = 0;
  return status_;
}

namespace {

// Everything but the metadata, which CopyRun copies as stored (ReadRun gives the effective
// status, and a "format" key, in its place).
class SamplesOnly : public SampleSink {
 public:
  explicit SamplesOnly(StoreSink* to) : to_(to) {}
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override {
    to_->OnScalar(tag, step, wall_time, value);
  }
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override {
    to_->OnTensorStats(tag, step, wall_time, stats);
  }
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override {
    to_->OnVector(tag, step, wall_time, values);
  }
  void OnSpan(const Span& span) override { to_->OnSpan(span); }
  void OnFinding(const Finding& finding) override { to_->OnFinding(finding); }
  void OnMeta(std::string_view, std::string_view) override {}

 private:
  StoreSink* to_;
};

}  // namespace

Status CopyRun(RunStore& from, RunStore* to) {
  RunMeta meta;
  Status s = from.ReadMeta(&meta);
  if (s.ok()) s = to->SetMeta(meta);
  if (s.ok() && meta.backward_steps) s = to->SetMetaValue("backward_steps", std::to_string(meta.backward_steps));
  // Every series, those without a point too, made in the order the run made them (the
  // dashboard lists them so), so that both runs list the same.
  std::vector<SeriesInfo> series;
  if (s.ok()) s = from.ListSeries(&series);
  std::sort(series.begin(), series.end(), [](const SeriesInfo& a, const SeriesInfo& b) { return a.id < b.id; });
  std::vector<std::pair<std::string, SeriesKind>> kinds;
  for (const SeriesInfo& info : series) kinds.emplace_back(info.tag, info.kind);
  std::vector<int64_t> ids;
  if (s.ok()) s = to->EnsureSeriesAll(kinds, &ids);
  if (!s.ok()) return s;
  StoreSink sink(to);
  SamplesOnly samples(&sink);
  s = ReadRun(from, &samples);
  Status written = sink.Finish();
  if (!s.ok()) return s;
  // Each write moved the heartbeat to now: the copy's is the run's own.
  if (written.ok()) written = to->SetMetaValue("heartbeat", FormatMetaDouble(meta.heartbeat));
  return written;
}

}  // namespace trainscope
