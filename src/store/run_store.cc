#include "store/run_store.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "store/postgres_run_store.h"
#include "store/sqlite_run_store.h"
#include "store/store_format.h"

namespace trainscope {

namespace fs = std::filesystem;

std::string DescribeDamage(const DamagedRecord& r) {
  std::string text;
  if (!r.series.empty()) text += "series '" + r.series + "': ";
  text += r.table;
  if (r.rowid != 0) text += " row " + std::to_string(r.rowid);
  return text + ": " + r.what;
}

void DamageLog::Damaged(const DamagedRecord& record) {
  ++count_;
  if (records_.size() < kMaxKept) records_.push_back(record);
}

std::string DamageLog::Summary(size_t at_most) const {
  if (count_ == 0) return {};
  std::string text = std::to_string(count_) + (count_ == 1 ? " damaged record" : " damaged records") + " skipped (";
  for (size_t i = 0; i < records_.size() && i < at_most; ++i) text += (i ? "; " : "") + DescribeDamage(records_[i]);
  if (static_cast<size_t>(count_) > at_most) text += "; ...";
  return text + ")";
}

std::vector<std::string> DamageLog::Series() const {
  std::vector<std::string> series;
  for (const DamagedRecord& r : records_) {
    if (!r.series.empty()) series.push_back(r.series);
  }
  std::sort(series.begin(), series.end());
  series.erase(std::unique(series.begin(), series.end()), series.end());
  return series;
}

size_t BatchBytes(const WriteBatch& batch) {
  size_t bytes = batch.scalars.size() * sizeof(WriteBatch::ScalarPoint) +
                 batch.tensor_stats.size() * sizeof(WriteBatch::StatsPoint) + batch.spans.size() * sizeof(Span);
  for (const auto& v : batch.vectors) bytes += sizeof(v) + v.values.size() * sizeof(float);
  return bytes;
}

const char* SeriesKindName(SeriesKind kind) {
  switch (kind) {
    case SeriesKind::kScalar: return "scalar";
    case SeriesKind::kTensorStats: return "tensor_stats";
    case SeriesKind::kSpan: return "span";
    case SeriesKind::kVector: return "vector";
  }
  return "scalar";
}

bool IsDatabaseLocation(std::string_view location) {
  return location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0;
}

// ---- opening ----

Status RunStore::Create(const std::string& location, const RunMeta& meta, std::unique_ptr<RunStore>* store,
                        std::string* fault) {
  if (IsDatabaseLocation(location)) return PostgresRunStore::Create(location, meta, store, fault);
  return SqliteRunStore::Create(location, meta, store, fault);
}

Status RunStore::OpenForWrite(const std::string& location, std::unique_ptr<RunStore>* store) {
  if (IsDatabaseLocation(location)) return PostgresRunStore::Open(location, /*read_only=*/false, store, nullptr);
  return SqliteRunStore::OpenForWrite(location, store);
}

Status RunStore::OpenReadOnly(const std::string& location, std::unique_ptr<RunStore>* store,
                              DamageReporter* reporter) {
  if (IsDatabaseLocation(location)) return PostgresRunStore::Open(location, /*read_only=*/true, store, reporter);
  return SqliteRunStore::OpenReadOnly(location, store, reporter);
}

Status RunStore::LimitFileSize(int64_t max_bytes) {
  (void)max_bytes;
  return Status::InvalidArgument(path_ + ": a size cap is for run files (SQLite); a database has its own quotas");
}

void RunStore::ReportDamage(DamagedRecord record) {
  damage_.Damaged(record);
  if (reporter_) reporter_->Damaged(record);
}

Status RunStore::CheckSeriesIds(const WriteBatch& batch) const {
  // A series id the store did not hand out (EnsureSeries failed, and the caller wrote on)
  // would store points no series lists: refused before anything is written.
  auto unknown_id = [](const auto& records) {
    for (const auto& r : records) {
      if (r.series_id <= 0) return r.series_id;
    }
    return int64_t{1};
  };
  for (int64_t id : {unknown_id(batch.scalars), unknown_id(batch.tensor_stats), unknown_id(batch.vectors)}) {
    if (id <= 0) {
      return Status::InvalidArgument(path_ + ": write: series id " + std::to_string(id) +
                                     " is not one EnsureSeries gave (expected ids from 1)");
    }
  }
  return Status::Ok();
}

Status RunStore::WrongKind(std::string_view tag, SeriesKind kind, const char* expected) const {
  return Status::InvalidArgument(path_ + ": series '" + std::string(tag) + "' is " + SeriesKindName(kind) + ", not " +
                                 expected);
}

// ---- metadata ----

std::vector<std::pair<std::string, std::string>> RunStore::MetaValues(const RunMeta& meta) {
  std::vector<std::pair<std::string, std::string>> values = {
      {"name", meta.name},
      {"start_time", FormatMetaDouble(meta.start_time)},
      {"end_time", FormatMetaDouble(meta.end_time)},
      {"host", meta.host},
      {"pid", std::to_string(meta.pid)},
      {"config", meta.config_json.empty() ? "{}" : meta.config_json},
      {"command_line", meta.command_line},
      {"git_commit", meta.git_commit},
      {"status", meta.status},
      {"exit_reason", meta.exit_reason},
      {"heartbeat", FormatMetaDouble(meta.heartbeat)},
      {"dropped_points", std::to_string(meta.dropped_points)},
  };
  for (const auto& [key, value] : meta.extra) values.emplace_back(key, value);
  return values;
}

Status RunStore::SetMeta(const RunMeta& meta) {
  for (const auto& [key, value] : MetaValues(meta)) {
    Status s = SetMetaValue(key, value);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

void RunStore::SetMetaField(const std::string& key, const std::string& value, RunMeta* meta) {
  auto to_double = [&](double* out) { *out = value.empty() ? 0 : std::strtod(value.c_str(), nullptr); };
  auto to_int = [&](int64_t* out) { *out = value.empty() ? 0 : std::strtoll(value.c_str(), nullptr, 10); };
  if (key == "name") meta->name = value;
  else if (key == "start_time") to_double(&meta->start_time);
  else if (key == "end_time") to_double(&meta->end_time);
  else if (key == "host") meta->host = value;
  else if (key == "pid") to_int(&meta->pid);
  else if (key == "config") meta->config_json = value;
  else if (key == "command_line") meta->command_line = value;
  else if (key == "git_commit") meta->git_commit = value;
  else if (key == "status") meta->status = value;
  else if (key == "exit_reason") meta->exit_reason = value;
  else if (key == "heartbeat") to_double(&meta->heartbeat);
  else if (key == "dropped_points") to_int(&meta->dropped_points);
  else if (key == "backward_steps") to_int(&meta->backward_steps);
  else meta->extra[key] = value;
}

std::string RunStore::EffectiveStatus(const RunMeta& meta) {
  if (meta.status != "running") return meta.status;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  if (meta.host == host && meta.pid > 0 && kill(static_cast<pid_t>(meta.pid), 0) != 0 && errno == ESRCH) {
    return "crashed";
  }
  return "running";
}

// ---- reads every backend shares ----

Status RunStore::ReadScalars(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<Point>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  if (info.kind != SeriesKind::kScalar) return WrongKind(tag, info.kind, "scalar");
  return ReadScalars(info, step_min, step_max, out);
}

Status RunStore::ReadScalars(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<Point>* out) {
  out->clear();
  return VisitChunks(info, step_min, step_max, [&](const ChunkView& chunk) {
    for (int64_t i = 0; i < chunk.n; ++i) {
      const int64_t step = chunk.Step(i);
      if (step < step_min || step > step_max) continue;
      out->push_back({step, chunk.WallTime(i), chunk.Value(i)});
    }
  });
}

Status RunStore::ReadDecimated(std::string_view tag, size_t buckets, int64_t step_min, int64_t step_max,
                               std::vector<Bucket>* out) {
  out->clear();
  if (buckets == 0) return Status::InvalidArgument("decimation needs at least one bucket");
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  if (info.kind != SeriesKind::kScalar) return WrongKind(tag, info.kind, "scalar");
  // Narrow the requested range to the steps the series has, so buckets span real data. A
  // damaged store that cannot say buckets the range asked for, over the rows that read.
  bool any = true;
  int64_t lo = step_min, hi = step_max;
  s = ScalarStepRange(info, &any, &lo, &hi);
  if (!s.ok()) return s;
  if (!any) return Status::Ok();
  step_min = std::max(step_min, lo);
  step_max = std::min(step_max, hi);
  if (step_min > step_max) return Status::Ok();
  BucketFiller filler(buckets, step_min, step_max);
  s = VisitChunks(info, step_min, step_max, [&](const ChunkView& chunk) { filler.Add(chunk); });
  if (!s.ok()) return s;
  *out = filler.Take();
  return Status::Ok();
}

Status RunStore::ReadTensorStats(std::string_view tag, int64_t step_min, int64_t step_max,
                                 std::vector<TensorStatsPoint>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  return ReadTensorStats(info, step_min, step_max, out);
}

Status RunStore::ReadVectors(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  return ReadVectors(info, step_min, step_max, out);
}

// ---- listing ----

Status ListRuns(const std::string& logdir, std::vector<RunEntry>* runs) {
  runs->clear();
  if (IsDatabaseLocation(logdir)) return PostgresRunStore::ListRuns(logdir, runs);
  std::error_code ec;
  if (!fs::is_directory(logdir, ec)) return Status::NotFound(logdir + ": not a directory (expected a logdir of runs)");
  fs::recursive_directory_iterator it(logdir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return Status::IOError(logdir + ": cannot list: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file(ec) && it->path().filename() == kStoreFileName) {
      const fs::path dir = it->path().parent_path();
      std::string name = fs::relative(dir, logdir, ec).string();
      if (name.empty() || name == ".") name = dir.filename().string();
      runs->push_back({name, dir.string()});
    }
  }
  std::sort(runs->begin(), runs->end(), [](const RunEntry& a, const RunEntry& b) { return a.name < b.name; });
  return Status::Ok();
}

}  // namespace trainscope
