// SqliteRunStore's writes: series, batches in one transaction each, findings, metadata.
#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include "store/json_forms.h"
#include "store/sqlite_run_store.h"
#include "store/sqlite_util.h"

#include <sys/stat.h>

#include <algorithm>

namespace trainscope {

using json = nlohmann::json;
using namespace sqlite;

Status SqliteRunStore::EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id) {
  std::string key(tag);
  auto it = series_cache_.find(key);
  if (it == series_cache_.end()) {
    Statement select;
    int rc = sqlite3_prepare_v2(db_, "SELECT id, kind FROM series WHERE tag=?", -1, select.out(), nullptr);
    if (rc == SQLITE_OK) rc = Binder(select.get()).Text(key).rc();
    if (rc == SQLITE_OK) rc = sqlite3_step(select.get());
    if (rc == SQLITE_ROW) {
      it = series_cache_.emplace(key, std::make_pair(sqlite3_column_int64(select.get(), 0),
                                                     static_cast<SeriesKind>(sqlite3_column_int(select.get(), 1))))
               .first;
    } else if (rc == SQLITE_DONE) {
      Statement insert;
      if (sqlite3_prepare_v2(db_, "INSERT INTO series(tag, kind) VALUES(?, ?)", -1, insert.out(), nullptr) != SQLITE_OK) {
        return SqlError("add series");
      }
      Status s = StepDone(insert.get(), Binder(insert.get()).Text(key).Int(static_cast<int>(kind)).rc(), "add series");
      if (!s.ok()) return s;
      it = series_cache_.emplace(key, std::make_pair(sqlite3_last_insert_rowid(db_), kind)).first;
    } else {
      return SqlError("look up series", rc);
    }
  }
  if (it->second.second != kind) {
    return Status::InvalidArgument(path_ + ": series '" + key + "' holds " + SeriesKindName(it->second.second) +
                         " data, cannot add " + SeriesKindName(kind) + " data to it");
  }
  *id = it->second.first;
  return Status::Ok();
}

Status SqliteRunStore::EnsureSeriesAll(const std::vector<std::pair<std::string, SeriesKind>>& series,
                                 std::vector<int64_t>* ids) {
  ids->assign(series.size(), 0);
  if (series.empty()) return Status::Ok();
  Status s = Exec("BEGIN");
  if (!s.ok()) return s;
  std::vector<std::string> added;  // cached in this transaction: forgotten if it rolls back
  for (size_t i = 0; i < series.size() && s.ok(); ++i) {
    const bool known = series_cache_.count(series[i].first) > 0;
    s = EnsureSeries(series[i].first, series[i].second, &(*ids)[i]);
    if (s.ok() && !known) added.push_back(series[i].first);
  }
  if (s.ok()) s = Exec("COMMIT");
  if (!s.ok()) {
    Rollback();
    for (const std::string& tag : added) series_cache_.erase(tag);
    ids->assign(series.size(), 0);
  }
  return s;
}

Status SqliteRunStore::InsertChunk(const ChunkRow& row, int64_t* id) {
  if (!insert_chunk_) {
    // A store from before the checksum is appended to without one (NULL): its readers may be
    // older builds too.
    Status s = Prepare(row_crc_ ? "INSERT INTO scalar_chunk(series_id, count, min_step, max_step, last_step, "
                                    "last_value, base_time, data, crc) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
                                  : "INSERT INTO scalar_chunk(series_id, count, min_step, max_step, last_step, "
                                    "last_value, base_time, data) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                       &insert_chunk_);
    if (!s.ok()) return s;
  }
  Binder binder(insert_chunk_);
  binder.Int(row.series_id)
      .Int(row.count)
      .Int(row.min_step)
      .Int(row.max_step)
      .Int(row.last_step)
      .Real(row.last_value)
      .Real(row.base_time)
      .Blob(row.data.data(), row.data.size());
  if (row_crc_) binder.Int(row.crc);
  const int bind_rc = binder.rc();
  Status s = StepDone(insert_chunk_, bind_rc, "write scalar chunk");
  if (!s.ok()) return s;
  *id = sqlite3_last_insert_rowid(db_);
  return Status::Ok();
}

Status SqliteRunStore::DeleteChunks(const std::vector<int64_t>& ids) {
  if (!delete_chunk_) {
    Status s = Prepare("DELETE FROM scalar_chunk WHERE id=?", &delete_chunk_);
    if (!s.ok()) return s;
  }
  for (int64_t id : ids) {
    Status s = StepDone(delete_chunk_, Binder(delete_chunk_).Int(id).rc(), "replace partial chunks");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status SqliteRunStore::UpdateFindings(const std::vector<Finding>& findings) {
  if (findings.empty()) return Status::Ok();
  Status s = Exec("BEGIN");
  if (!s.ok()) return s;
  sqlite3_stmt* update = nullptr;
  s = Prepare("UPDATE finding SET severity = ?1, last_step = ?2, summary = ?3, evidence = ?4, causes = ?5, "
              "actions = ?6 WHERE code = ?7 AND location = ?8 AND step = ?9",
              &update);
  for (const auto& f : findings) {
    if (!s.ok()) break;
    const std::string causes_text = CausesToJson(f.causes).dump();
    const std::string actions_text = json(f.actions).dump();
    const int bind_rc = Binder(update)
                            .Text(SeverityName(f.severity))
                            .Int(f.last_step)
                            .Text(f.summary)
                            .Text(f.evidence_json)
                            .Text(causes_text)
                            .Text(actions_text)
                            .Text(f.code)
                            .Text(f.location)
                            .Int(f.step)
                            .rc();
    s = StepDone(update, bind_rc, "update finding");
  }
  if (!s.ok()) {
    Rollback();
    return s;
  }
  return Exec("COMMIT");
}

// After a failed step SQLite may have rolled the transaction back itself (a full disk,
// an I/O error); then there is none left to end, and that is the state we want.
void SqliteRunStore::Rollback() {
  if (!sqlite3_get_autocommit(db_)) (void)Exec("ROLLBACK");
}

Status SqliteRunStore::WriteTensorStats(const std::vector<WriteBatch::StatsPoint>& records) {
  for (const auto& r : records) {
    if (!insert_stats_) {
      // By column name: a measured statistic's column added to an existing store is last.
      std::string columns = "series_id, step, wall_time, numel, nan, inf, zeros, min, max, sum, sum_squares, abs_max";
      for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) columns += ", " + std::string(stat->name);
      columns += row_crc_ ? ", histogram, crc" : ", histogram";
      const size_t count = static_cast<size_t>(std::count(columns.begin(), columns.end(), ',')) + 1;
      std::string values;
      for (size_t i = 1; i <= count; ++i) values += (i > 1 ? ", ?" : "?") + std::to_string(i);
      Status s = Prepare(("INSERT INTO tensor_stats(" + columns + ") VALUES(" + values + ")").c_str(), &insert_stats_);
      if (!s.ok()) return s;
    }
    const TensorStats& t = r.stats;
    Binder bind(insert_stats_);
    bind.Int(r.series_id)
        .Int(r.step)
        .Real(r.wall_time)
        .Int(static_cast<int64_t>(t.numel))
        .Int(static_cast<int64_t>(t.nan))
        .Int(static_cast<int64_t>(t.inf))
        .Int(static_cast<int64_t>(t.zeros))
        .Real(t.min)
        .Real(t.max)
        .Real(t.sum)
        .Real(t.sum_squares)
        .Real(t.abs_max);
    for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) bind.Real(t.*stat->field);
    std::string histogram;
    if (t.has_histogram) {
      histogram = EncodeHistogram(t);
      bind.Blob(histogram.data(), histogram.size());
    } else {
      bind.Null();
    }
    if (row_crc_) {
      RowCrc crc = StatsCrc(r.step, r.wall_time, t);
      if (t.has_histogram) crc.Bytes(histogram.data(), histogram.size());
      bind.Int(crc.value());
    }
    Status s = StepDone(insert_stats_, bind.rc(), "write tensor stats");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status SqliteRunStore::WriteVectors(const std::vector<WriteBatch::VectorRecord>& records) {
  for (const auto& v : records) {
    if (!insert_vector_) {
      Status s = Prepare(row_crc_ ? "INSERT INTO vector VALUES(?1, ?2, ?3, ?4, ?5)" : "INSERT INTO vector VALUES(?1, ?2, ?3, ?4)",
                  &insert_vector_);
      if (!s.ok()) return s;
    }
    const size_t bytes = v.values.size() * sizeof(float);
    Binder bind(insert_vector_);
    bind.Int(v.series_id).Int(v.step).Real(v.wall_time).Blob(v.values.data(), bytes);
    if (row_crc_) bind.Int(VectorCrc(v.step, v.wall_time, v.values.data(), bytes).value());
    const int bind_rc = bind.rc();
    Status s = StepDone(insert_vector_, bind_rc, "write vector");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status SqliteRunStore::WriteSpans(const std::vector<Span>& spans) {
  for (const auto& span : spans) {
    if (!insert_span_) {
      Status s = Prepare("INSERT INTO span VALUES(?1, ?2, ?3, ?4)", &insert_span_);
      if (!s.ok()) return s;
    }
    const int bind_rc =
        Binder(insert_span_).Int(span.step).Text(span.phase).Real(span.start).Real(span.duration).rc();
    Status s = StepDone(insert_span_, bind_rc, "write span");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status SqliteRunStore::WriteFindings(const std::vector<Finding>& findings) {
  for (const auto& f : findings) {
    if (!insert_finding_) {
      Status s = Prepare("INSERT INTO finding(code, severity, step, last_step, location, summary, evidence, causes, "
                  "actions) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                  &insert_finding_);
      if (!s.ok()) return s;
    }
    const std::string causes_text = CausesToJson(f.causes).dump();
    const std::string actions_text = json(f.actions).dump();
    const int bind_rc = Binder(insert_finding_)
                            .Text(f.code)
                            .Text(SeverityName(f.severity))
                            .Int(f.step)
                            .Int(f.last_step)
                            .Text(f.location)
                            .Text(f.summary)
                            .Text(f.evidence_json)
                            .Text(causes_text)
                            .Text(actions_text)
                            .rc();
    Status s = StepDone(insert_finding_, bind_rc, "write finding");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status SqliteRunStore::Write(const WriteBatch& batch) {
  if (Status ids = CheckSeriesIds(batch); !ids.ok()) return ids;
  // SQLite writes on into a store whose file was deleted (or replaced) under it, and all of
  // it would be lost unseen: one stat a write tells.
  if (file_id_.first != 0) {
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0 || st.st_dev != file_id_.first || st.st_ino != file_id_.second) {
      last_fault_ = "store deleted";
      return Status::IOError(path_ + ": the store file was deleted or replaced while the run was written");
    }
  }
  Status s = Exec("BEGIN");
  if (!s.ok()) return s;
  const int64_t backward_before = chunker_.backward_steps();
  s = chunker_.Add(batch.scalars, this);
  if (s.ok()) s = WriteTensorStats(batch.tensor_stats);
  if (s.ok()) s = WriteVectors(batch.vectors);
  if (s.ok()) s = WriteSpans(batch.spans);
  if (s.ok()) s = WriteFindings(batch.findings);
  if (s.ok()) s = SetMetaValue("heartbeat", FormatMetaDouble(WallClockNow()));
  if (s.ok() && chunker_.backward_steps() != backward_before) {
    s = SetMetaValue("backward_steps", std::to_string(chunker_.backward_steps()));
  }
  if (s.ok()) s = Exec("COMMIT");  // a full disk may refuse the commit itself
  if (!s.ok()) {
    Rollback();
    // Buffered chunks may hold points of the failed batch, and rowids of partial rows the
    // rollback took back; start clean so nothing is written twice or deleted by mistake.
    chunker_.Forget();
    chunker_.set_backward_steps(backward_before);
    return s;
  }
  return Status::Ok();
}

Status SqliteRunStore::SetMetaValue(const std::string& key, const std::string& value) {
  Statement stmt;
  if (sqlite3_prepare_v2(db_, "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                         -1, stmt.out(), nullptr) != SQLITE_OK) {
    return SqlError("write run metadata");
  }
  return StepDone(stmt.get(), Binder(stmt.get()).Text(key).Text(value).rc(), "write run metadata");
}

Status SqliteRunStore::Close(const std::string& status, const std::string& exit_reason,
                       const std::vector<std::pair<std::string, std::string>>& meta) {
  Status s = Exec("BEGIN");
  for (const auto& [key, value] : meta) {
    if (s.ok()) s = SetMetaValue(key, value);
  }
  if (s.ok()) s = SetMetaValue("status", status);
  if (s.ok()) s = SetMetaValue("exit_reason", exit_reason);
  if (s.ok()) s = SetMetaValue("end_time", FormatMetaDouble(WallClockNow()));
  if (s.ok()) s = SetMetaValue("heartbeat", FormatMetaDouble(WallClockNow()));
  if (!s.ok()) {
    Rollback();
    return s;
  }
  s = Exec("COMMIT");
  // Folding the WAL into the file is tidiness (one file to copy): the run is committed
  // either way, and a reader busy on the WAL may well keep it from happening now.
  if (s.ok()) (void)Exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return s;
}


}  // namespace trainscope
