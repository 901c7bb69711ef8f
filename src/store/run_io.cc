#include "store/run_io.h"

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

Status ReadRun(RunStore& store, SampleSink* sink) {
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
  std::vector<SeriesInfo> series;
  s = store.ListSeries(&series);
  if (!s.ok()) return s;
  for (const SeriesInfo& info : series) {
    if (info.kind == SeriesKind::kScalar) {
      std::vector<Point> points;
      s = store.ReadScalars(info.tag, INT64_MIN, INT64_MAX, &points);
      if (!s.ok()) return s;
      for (const Point& p : points) sink->OnScalar(info.tag, p.step, p.wall_time, p.value);
    } else if (info.kind == SeriesKind::kTensorStats) {
      std::vector<TensorStatsPoint> points;
      s = store.ReadTensorStats(info.tag, INT64_MIN, INT64_MAX, &points);
      if (!s.ok()) return s;
      for (const auto& p : points) sink->OnTensorStats(info.tag, p.step, p.wall_time, p.stats);
    } else if (info.kind == SeriesKind::kVector) {
      std::vector<VectorPoint> points;
      s = store.ReadVectors(info.tag, INT64_MIN, INT64_MAX, &points);
      if (!s.ok()) return s;
      for (const auto& p : points) sink->OnVector(info.tag, p.step, p.wall_time, p.values);
    }
  }
  std::vector<Span> spans;
  s = store.ReadSpans(INT64_MIN, INT64_MAX, &spans);
  if (!s.ok()) return s;
  for (const Span& span : spans) sink->OnSpan(span);
  std::vector<Finding> findings;
  s = store.ReadFindings(&findings);
  if (!s.ok()) return s;
  for (const Finding& f : findings) sink->OnFinding(f);
  return Status::Ok();
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

}  // namespace trainscope
