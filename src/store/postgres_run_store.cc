#include "store/postgres_run_store.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "store/json_forms.h"
#include "store/postgres_schema.h"

namespace trainscope {

namespace {

// SQLite keeps -0.0 as 0: so does this store, so that both read back the same numbers.
double Stored(double v) { return v == 0 ? 0.0 : v; }

constexpr int64_t kChunkIdBlock = 1024;  // the scalar_chunk_block sequence's increment

}  // namespace

Status ParseDatabaseLocation(const std::string& location, bool need_run, DatabaseLocation* out) {
  const size_t hash = location.find('#');
  out->conninfo = location.substr(0, hash);
  out->project.clear();
  out->run.clear();
  if (hash != std::string::npos) {
    const std::string names = location.substr(hash + 1);
    const size_t slash = names.find('/');
    out->project = names.substr(0, slash);
    if (slash != std::string::npos) out->run = names.substr(slash + 1);
  }
  // user:password@ loses its password in what messages show.
  out->shown = out->conninfo;
  const size_t scheme_end = out->shown.find("://");
  const size_t at = out->shown.find('@', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  if (scheme_end != std::string::npos && at != std::string::npos) {
    const size_t colon = out->shown.find(':', scheme_end + 3);
    if (colon != std::string::npos && colon < at) out->shown.erase(colon, at - colon);
  }
  if (need_run && (out->project.empty() || out->run.empty())) {
    return Status::InvalidArgument(out->shown + (hash == std::string::npos ? "" : location.substr(hash)) +
                                   ": expected a run in the database: postgresql://host[:port]/database#project/run");
  }
  if (out->project.empty() && !out->run.empty()) {
    return Status::InvalidArgument(out->shown + ": a run needs its project: #project/run");
  }
  return Status::Ok();
}

PostgresRunStore::PostgresRunStore(std::string path, std::unique_ptr<PgConnection> db, int64_t run_id, bool read_only)
    : RunStore(std::move(path)), db_(std::move(db)), run_id_(run_id), read_only_(read_only) {}

PostgresRunStore::~PostgresRunStore() {
  if (read_only_) return;
  // Write what is still buffered; a failure here has nowhere to go but is not fatal.
  if (!db_->Exec("BEGIN", "write scalars").ok()) return;
  Status s = chunker_.WritePartial(this);
  if (s.ok()) s = FlushChunks();
  (void)db_->Exec(s.ok() ? "COMMIT" : "ROLLBACK", "write scalars");
}

Status PostgresRunStore::Fail(Status s) {
  last_fault_ = s.IsIOError() ? db_->last_fault() : "";
  if (db_->in_transaction()) (void)db_->Exec("ROLLBACK", "roll back");
  return s;
}

// ---- opening ----

namespace {

Status ConnectAndMigrate(const DatabaseLocation& where, std::unique_ptr<PgConnection>* db, std::string* fault) {
  Status s = PgConnection::Connect(where.conninfo, where.shown, db);
  if (!s.ok()) {
    if (fault) *fault = "cannot open";
    return s;
  }
  s = MigrateSchema(db->get());
  if (!s.ok() && fault) *fault = (*db)->last_fault();
  return s;
}

// Connects to a run's database and finds the run: NotFound when it is not there.
Status FindRun(const std::string& location, DatabaseLocation* where, std::unique_ptr<PgConnection>* db,
               int64_t* run_id) {
  Status s = ParseDatabaseLocation(location, /*need_run=*/true, where);
  if (s.ok()) s = ConnectAndMigrate(*where, db, nullptr);
  PgResult run;
  if (s.ok()) {
    s = (*db)->Query("SELECT id FROM run WHERE project = $1 AND name = $2",
                     PgParams().Text(where->project).Text(where->run), "find run", &run);
  }
  if (s.ok() && run.rows() == 0) s = Status::NotFound(where->Describe() + ": no such run in the database");
  if (s.ok()) *run_id = run.Int(0, 0);
  return s;
}

}  // namespace

Status PostgresRunStore::Create(const std::string& location, const RunMeta& meta, std::unique_ptr<RunStore>* out,
                                std::string* fault) {
  DatabaseLocation where;
  Status s = ParseDatabaseLocation(location, /*need_run=*/true, &where);
  if (!s.ok()) return s;
  std::unique_ptr<PgConnection> db;
  s = ConnectAndMigrate(where, &db, fault);
  if (!s.ok()) return s;
  PgResult created;
  s = db->Exec("BEGIN", "create run");
  if (s.ok()) {
    s = db->Query("INSERT INTO run(project, name, created) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING id",
                  PgParams().Text(where.project).Text(where.run).Real(WallClockNow()), "create run", &created);
  }
  if (s.ok() && created.rows() == 0) {
    s = Status::InvalidArgument(where.Describe() + ": a run store already exists here");
  }
  const int64_t run_id = s.ok() ? created.Int(0, 0) : 0;
  if (s.ok()) s = db->Exec(PartitionsSql(run_id), "create run");
  std::unique_ptr<PostgresRunStore> store;
  if (s.ok()) {
    store.reset(new PostgresRunStore(where.Describe(), std::move(db), run_id, /*read_only=*/false));
    s = store->SetMeta(meta);
    if (s.ok()) s = store->db_->Exec("COMMIT", "create run");
    if (!s.ok()) {
      s = store->Fail(s);
      if (fault) *fault = store->last_fault_;
      store->read_only_ = true;  // nothing to flush on the way out
      return s;
    }
    *out = std::move(store);
    return Status::Ok();
  }
  if (fault) *fault = db->last_fault();
  if (db->in_transaction()) (void)db->Exec("ROLLBACK", "create run");
  return s;
}

Status PostgresRunStore::Open(const std::string& location, bool read_only, std::unique_ptr<RunStore>* out,
                              DamageReporter* reporter) {
  DatabaseLocation where;
  std::unique_ptr<PgConnection> db;
  int64_t run_id = 0;
  Status s = FindRun(location, &where, &db, &run_id);
  if (!s.ok()) return s;
  std::unique_ptr<PostgresRunStore> store(new PostgresRunStore(where.Describe(), std::move(db), run_id, read_only));
  store->reporter_ = reporter;
  *out = std::move(store);
  return Status::Ok();
}

Status PostgresRunStore::ListRuns(const std::string& location, std::vector<RunEntry>* runs) {
  runs->clear();
  DatabaseLocation where;
  Status s = ParseDatabaseLocation(location, /*need_run=*/false, &where);
  if (!s.ok()) return s;
  std::unique_ptr<PgConnection> db;
  s = ConnectAndMigrate(where, &db, nullptr);
  if (!s.ok()) return s;
  PgResult rows;
  s = where.project.empty()
          ? db->Query("SELECT project, name FROM run ORDER BY project, name", PgParams(), "list runs", &rows)
          : db->Query("SELECT project, name FROM run WHERE project = $1 ORDER BY project, name",
                      PgParams().Text(where.project), "list runs", &rows);
  if (!s.ok()) return s;
  for (int i = 0; i < rows.rows(); ++i) {
    const std::string name = rows.Text(i, 0) + "/" + rows.Text(i, 1);
    runs->push_back({name, where.conninfo + "#" + name});
  }
  return Status::Ok();
}

Status PostgresRunStore::DropRun(const std::string& location) {
  DatabaseLocation where;
  std::unique_ptr<PgConnection> db;
  int64_t id = 0;
  Status s = FindRun(location, &where, &db, &id);
  if (!s.ok()) return s;
  s = db->Exec("BEGIN", "drop run");
  if (s.ok()) s = db->Exec(DropPartitionsSql(id), "drop run");
  if (s.ok()) s = db->Query("DELETE FROM run WHERE id = $1", PgParams().Int(id), "drop run");
  if (s.ok()) s = db->Exec("COMMIT", "drop run");
  if (!s.ok() && db->in_transaction()) (void)db->Exec("ROLLBACK", "drop run");
  return s;
}

// ---- writing ----

Status PostgresRunStore::EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id) {
  std::string key(tag);
  auto it = series_cache_.find(key);
  if (it == series_cache_.end()) {
    PgResult row;
    Status s = db_->Query("SELECT id, kind FROM series WHERE run_id = $1 AND tag = $2",
                          PgParams().Int(run_id_).Text(key), "look up series", &row);
    if (s.ok() && row.rows() == 0) {
      s = db_->Query(
          "INSERT INTO series(run_id, id, tag, kind) SELECT $1, coalesce(max(id), 0) + 1, $2, $3 FROM series "
          "WHERE run_id = $1 RETURNING id, kind",
          PgParams().Int(run_id_).Text(key).Int(static_cast<int>(kind)), "add series", &row);
    }
    if (!s.ok()) return Fail(s);
    it = series_cache_.emplace(key, std::make_pair(row.Int(0, 0), static_cast<SeriesKind>(row.Int(0, 1)))).first;
  }
  if (it->second.second != kind) {
    return Status::InvalidArgument(path_ + ": series '" + key + "' holds " + SeriesKindName(it->second.second) +
                                   " data, cannot add " + SeriesKindName(kind) + " data to it");
  }
  *id = it->second.first;
  return Status::Ok();
}

Status PostgresRunStore::EnsureSeriesAll(const std::vector<std::pair<std::string, SeriesKind>>& series,
                                         std::vector<int64_t>* ids) {
  ids->assign(series.size(), 0);
  if (series.empty()) return Status::Ok();
  Status s = db_->Exec("BEGIN", "add series");
  if (!s.ok()) return Fail(s);
  std::vector<std::string> added;  // cached in this transaction: forgotten if it rolls back
  for (size_t i = 0; i < series.size() && s.ok(); ++i) {
    const bool known = series_cache_.count(series[i].first) > 0;
    s = EnsureSeries(series[i].first, series[i].second, &(*ids)[i]);
    if (s.ok() && !known) added.push_back(series[i].first);
  }
  if (s.ok()) s = db_->Exec("COMMIT", "add series");
  if (!s.ok()) {
    for (const std::string& tag : added) series_cache_.erase(tag);
    ids->assign(series.size(), 0);
    return Fail(s);
  }
  return s;
}

Status PostgresRunStore::InsertChunk(const ChunkRow& row, int64_t* id) {
  if (chunk_ids_left_ == 0) {
    PgResult block;
    Status s = db_->Query("SELECT nextval('scalar_chunk_block')", PgParams(), "write scalar chunk", &block);
    if (!s.ok()) return s;
    next_chunk_id_ = block.Int(0, 0);
    chunk_ids_left_ = kChunkIdBlock;
  }
  *id = next_chunk_id_++;
  --chunk_ids_left_;
  chunk_rows_.push_back(row);
  chunk_row_ids_.push_back(*id);
  return Status::Ok();
}

Status PostgresRunStore::DeleteChunks(const std::vector<int64_t>& ids) {
  chunks_to_delete_.insert(chunks_to_delete_.end(), ids.begin(), ids.end());
  return Status::Ok();
}

Status PostgresRunStore::FlushChunks() {
  Status s;
  if (!chunk_rows_.empty()) {
    PgCopyRows rows;
    for (size_t i = 0; i < chunk_rows_.size(); ++i) {
      const ChunkRow& c = chunk_rows_[i];
      rows.BeginRow(11);
      rows.Int(run_id_);
      rows.Int(chunk_row_ids_[i]);
      rows.Int(c.series_id);
      rows.Int(c.count);
      rows.Int(c.min_step);
      rows.Int(c.max_step);
      rows.Int(c.last_step);
      rows.Real(c.last_value);
      rows.Real(c.base_time);
      rows.Bytes(c.data.data(), c.data.size());
      rows.Int(c.crc);
    }
    s = db_->CopyIn("COPY scalar_chunk(run_id, id, series_id, count, min_step, max_step, last_step, last_value, "
                    "base_time, data, crc) FROM STDIN (FORMAT binary)",
                    rows.Finish(), "write scalar chunks");
  }
  if (s.ok() && !chunks_to_delete_.empty()) {
    s = db_->Query("DELETE FROM scalar_chunk WHERE run_id = $1 AND id = ANY($2)",
                   PgParams().Int(run_id_).IntArray(chunks_to_delete_), "replace partial chunks");
  }
  chunk_rows_.clear();
  chunk_row_ids_.clear();
  chunks_to_delete_.clear();
  return s;
}

Status PostgresRunStore::WriteRows(const WriteBatch& batch) {
  Status s;
  if (!batch.tensor_stats.empty()) {
    PgCopyRows rows;
    for (const auto& r : batch.tensor_stats) {
      const TensorStats& t = r.stats;
      rows.BeginRow(static_cast<int>(15 + tensor_stats::kMeasuredCount));
      rows.Int(run_id_);
      rows.Int(r.series_id);
      rows.Int(r.step);
      rows.Real(Stored(r.wall_time));
      for (uint64_t v : {t.numel, t.nan, t.inf, t.zeros}) rows.Int(static_cast<int64_t>(v));
      for (double v : {t.min, t.max, t.sum, t.sum_squares, t.abs_max}) rows.Real(Stored(v));
      for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) rows.Real(Stored(t.*stat->field));
      RowCrc crc = StatsCrc(r.step, r.wall_time, t);
      if (t.has_histogram) {
        const std::string histogram = EncodeHistogram(t);
        rows.Bytes(histogram.data(), histogram.size());
        crc.Bytes(histogram.data(), histogram.size());
      } else {
        rows.Null();
      }
      rows.Int(crc.value());
    }
    s = db_->CopyIn("COPY tensor_stats(run_id, series_id, step, wall_time, numel, nan, inf, zeros, min, max, sum, "
                    "sum_squares, abs_max, " + MeasuredColumnList() + ", histogram, crc) FROM STDIN (FORMAT binary)",
                    rows.Finish(), "write tensor stats");
  }
  if (s.ok() && !batch.vectors.empty()) {
    PgCopyRows rows;
    for (const auto& v : batch.vectors) {
      const size_t bytes = v.values.size() * sizeof(float);
      rows.BeginRow(6);
      rows.Int(run_id_);
      rows.Int(v.series_id);
      rows.Int(v.step);
      rows.Real(Stored(v.wall_time));
      rows.Bytes(v.values.data(), bytes);
      rows.Int(VectorCrc(v.step, v.wall_time, v.values.data(), bytes).value());
    }
    s = db_->CopyIn("COPY vector(run_id, series_id, step, wall_time, data, crc) FROM STDIN (FORMAT binary)",
                    rows.Finish(), "write vectors");
  }
  if (s.ok() && !batch.spans.empty()) {
    PgCopyRows rows;
    for (const auto& span : batch.spans) {
      rows.BeginRow(5);
      rows.Int(run_id_);
      rows.Int(span.step);
      rows.Text(span.phase);
      rows.Real(Stored(span.start));
      rows.Real(Stored(span.duration));
    }
    s = db_->CopyIn("COPY span(run_id, step, phase, start, duration) FROM STDIN (FORMAT binary)", rows.Finish(),
                    "write spans");
  }
  for (const auto& f : batch.findings) {
    if (!s.ok()) break;
    s = db_->Query("INSERT INTO finding(run_id, code, severity, step, last_step, location, summary, evidence, causes, "
                   "actions) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                   PgParams()
                       .Int(run_id_)
                       .Text(f.code)
                       .Text(SeverityName(f.severity))
                       .Int(f.step)
                       .Int(f.last_step)
                       .Text(f.location)
                       .Text(f.summary)
                       .Text(f.evidence_json)
                       .Text(CausesToJson(f.causes).dump())
                       .Text(nlohmann::json(f.actions).dump()),
                   "write finding");
  }
  return s;
}

Status PostgresRunStore::WriteInTransaction(const WriteBatch& batch) {
  Status s = chunker_.Add(batch.scalars, this);
  if (s.ok()) s = FlushChunks();
  if (s.ok()) s = WriteRows(batch);
  return s;
}

Status PostgresRunStore::Write(const WriteBatch& batch) {
  return WriteAdvancing(
      [&batch](const StreamPositions&, WriteBatch* out, StreamPositions*) {
        *out = batch;
        return Status::Ok();
      },
      /*replace_findings=*/false);
}

Status PostgresRunStore::ReadPositions(StreamPositions* positions) {
  positions->clear();
  PgResult rows;
  Status s = db_->Query("SELECT stream, position FROM ingest_position WHERE run_id = $1", PgParams().Int(run_id_),
                        "read ingest positions", &rows);
  for (int i = 0; s.ok() && i < rows.rows(); ++i) (*positions)[rows.Text(i, 0)] = rows.Int(i, 1);
  return s;
}

Status PostgresRunStore::WriteAdvancing(const BatchBuilder& build, bool replace_findings) {
  if (!db_->Reconnect()) {
    last_fault_ = "I/O error";
    return Status::IOError(path_ + ": write: the database is not reachable");
  }
  Status s = db_->Exec("BEGIN", "write");
  // A connection the server dropped while idle (a restart) fails its first statement: open
  // it again and begin once more, nothing having been sent.
  if (!s.ok() && db_->Reconnect()) s = db_->Exec("BEGIN", "write");
  if (!s.ok()) return Fail(s);
  const int64_t backward_before = chunker_.backward_steps();
  // Writers of the same run (two server processes given the same batch) take turns.
  if (s.ok()) s = db_->Query("SELECT pg_advisory_xact_lock($1)", PgParams().Int(run_id_), "lock run");
  StreamPositions held, after;
  if (s.ok()) s = ReadPositions(&held);
  // Now, unless the batch brings its source's own (an ingest's metadata).
  if (s.ok()) s = SetMetaValue("heartbeat", FormatMetaDouble(WallClockNow()));
  WriteBatch batch;
  if (s.ok()) s = build(held, &batch, &after);
  if (s.ok()) s = CheckSeriesIds(batch);
  if (s.ok() && replace_findings) {
    s = db_->Query("DELETE FROM finding WHERE run_id = $1", PgParams().Int(run_id_), "replace findings");
  }
  if (s.ok()) s = WriteInTransaction(batch);
  if (s.ok() && !after.empty()) {  // every stream in one statement
    std::vector<std::string> streams;
    std::vector<int64_t> positions;
    for (const auto& [stream, position] : after) {
      streams.push_back(stream);
      positions.push_back(position);
    }
    s = db_->Query("INSERT INTO ingest_position(run_id, stream, position) SELECT $1, * FROM unnest($2::text[], "
                   "$3::int8[]) ON CONFLICT (run_id, stream) DO UPDATE SET position = excluded.position",
                   PgParams().Int(run_id_).TextArray(streams).IntArray(positions), "advance ingest positions");
  }
  if (s.ok() && chunker_.backward_steps() != backward_before) {
    s = SetMetaValue("backward_steps", std::to_string(chunker_.backward_steps()));
  }
  if (s.ok()) s = db_->Exec("COMMIT", "write");
  if (!s.ok()) {
    chunker_.Forget();
    chunker_.set_backward_steps(backward_before);
    chunk_rows_.clear();
    chunk_row_ids_.clear();
    chunks_to_delete_.clear();
    return Fail(s);
  }
  return s;
}

Status PostgresRunStore::UpdateFindings(const std::vector<Finding>& findings) {
  if (findings.empty()) return Status::Ok();
  Status s = db_->Exec("BEGIN", "update finding");
  for (const auto& f : findings) {
    if (!s.ok()) break;
    s = db_->Query("UPDATE finding SET severity = $1, last_step = $2, summary = $3, evidence = $4, causes = $5, "
                   "actions = $6 WHERE run_id = $7 AND code = $8 AND location = $9 AND step = $10",
                   PgParams()
                       .Text(SeverityName(f.severity))
                       .Int(f.last_step)
                       .Text(f.summary)
                       .Text(f.evidence_json)
                       .Text(CausesToJson(f.causes).dump())
                       .Text(nlohmann::json(f.actions).dump())
                       .Int(run_id_)
                       .Text(f.code)
                       .Text(f.location)
                       .Int(f.step),
                   "update finding");
  }
  if (s.ok()) s = db_->Exec("COMMIT", "update finding");
  return s.ok() ? s : Fail(s);
}

Status PostgresRunStore::SetMetaValue(const std::string& key, const std::string& value) {
  Status s = db_->Query(
      "INSERT INTO meta(run_id, key, value) VALUES ($1, $2, $3) ON CONFLICT (run_id, key) DO UPDATE SET value = "
      "excluded.value",
      PgParams().Int(run_id_).Text(key).Text(value), "write run metadata");
  if (!s.ok()) last_fault_ = db_->last_fault();
  return s;
}

Status PostgresRunStore::Close(const std::string& status, const std::string& exit_reason,
                               const std::vector<std::pair<std::string, std::string>>& meta) {
  (void)db_->Reconnect();
  Status s = db_->Exec("BEGIN", "close run");
  if (s.ok()) s = chunker_.WritePartial(this);
  if (s.ok()) s = FlushChunks();
  for (const auto& [key, value] : meta) {
    if (s.ok()) s = SetMetaValue(key, value);
  }
  if (s.ok()) s = SetMetaValue("status", status);
  if (s.ok()) s = SetMetaValue("exit_reason", exit_reason);
  if (s.ok()) s = SetMetaValue("end_time", FormatMetaDouble(WallClockNow()));
  if (s.ok()) s = SetMetaValue("heartbeat", FormatMetaDouble(WallClockNow()));
  if (s.ok()) s = db_->Exec("COMMIT", "close run");
  return s.ok() ? s : Fail(s);
}

}  // namespace trainscope
