// SqliteRunStore's reads. A damaged file is read as far as it can be: each read is one scan
// while the file reads, and after damage, row by row (ReadPlan).
#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "store/json_forms.h"
#include "store/sqlite_run_store.h"
#include "store/sqlite_util.h"

namespace trainscope {

using namespace sqlite;

void SqliteRunStore::UnmapReads() {
  (void)Exec("PRAGMA mmap_size=0");
  // Pages are then SQLite's own cache: large enough that the rows of one window, which the
  // series share pages with, are read from the file once rather than once per series.
  (void)Exec("PRAGMA cache_size=-32768");  // KiB
}

Status SqliteRunStore::ReadMeta(RunMeta* meta) {
  Statement stmt;
  if (sqlite3_prepare_v2(db_, "SELECT key, value FROM meta", -1, stmt.out(), nullptr) != SQLITE_OK) {
    return SqlError("read run metadata");
  }
  *meta = RunMeta();
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    const std::string key = ColumnText(stmt.get(), 0);
    const std::string value = ColumnText(stmt.get(), 1);
    SetMetaField(key, value, meta);
  }
  if (IsDamage(rc)) {
    // The keys read before the damage are kept; the rest take their defaults.
    ReportDamage({"", "meta", 0, std::string("the metadata stop at damage: ") + sqlite3_errmsg(db_)});
    return Status::Ok();
  }
  if (rc != SQLITE_DONE) return SqlError("read run metadata", rc);
  return Status::Ok();
}


// How one read finds its rows. Every query binds ?1 the series id, ?2 the lowest step and
// ?3 the highest, as far as it has parameters; `one` binds ?4, a rowid. Each query's
// first two columns are the rowid and the order key (rows come in key, rowid order).
struct SqliteRunStore::ReadPlan {
  const char* table;
  const char* scan;           // every row of the read, with the columns `row` reads from column 2
  const char* list_by_index;  // rowid and key of the same rows from a covering index (may be null) ...
  const char* list_by_table;  // ... and from the table itself, for rows a damaged index lost
  const char* one;            // as scan, for the one row ?4 (no row if it is outside the read)
};

// The fast path is one scan. When it stops at damage, the rows it had not reached are
// listed again (index and table, so one damaged page in either loses nothing) and read one
// by one: a damaged row is reported with its rowid and skipped, and every row before and
// after it is kept. `row` returns an empty string when it took the row, else what is wrong
// with it (the row is then reported and skipped).
template <class Row>
Status SqliteRunStore::ReadRows(const ReadPlan& plan, const std::string& series, int64_t series_id, int64_t lo, int64_t hi,
                          Row&& row) {
  auto bind = [&](sqlite3_stmt* stmt, int64_t rowid) {
    const int64_t values[] = {series_id, lo, hi, rowid};
    const int count = std::min(sqlite3_bind_parameter_count(stmt), 4);
    for (int i = 0; i < count; ++i) {
      const int rc = sqlite3_bind_int64(stmt, i + 1, values[i]);
      if (rc != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
  };
  auto take = [&](sqlite3_stmt* stmt) {
    const int64_t rowid = sqlite3_column_int64(stmt, 0);
    std::string problem = row(stmt, rowid);
    if (!problem.empty()) ReportDamage({series, plan.table, rowid, std::move(problem)});
  };
  const std::string what = std::string("read ") + plan.table;
  Statement scan;
  int rc = sqlite3_prepare_v2(db_, plan.scan, -1, scan.out(), nullptr);
  if (rc == SQLITE_OK) rc = bind(scan.get(), 0);
  if (rc != SQLITE_OK) return SqlError(what.c_str(), rc);
  bool any = false;
  std::pair<int64_t, int64_t> last{0, 0};  // (key, rowid) of the last row the scan read
  while ((rc = sqlite3_step(scan.get())) == SQLITE_ROW) {
    take(scan.get());
    any = true;
    last = {sqlite3_column_int64(scan.get(), 1), sqlite3_column_int64(scan.get(), 0)};
  }
  if (rc == SQLITE_DONE) return Status::Ok();
  if (!IsDamage(rc)) return SqlError(what.c_str(), rc);  // a lock or a failing disk: not for skipping
  const std::string scan_error = sqlite3_errmsg(db_);

  std::vector<std::pair<int64_t, int64_t>> rest;  // (key, rowid) of the rows after `last`
  bool listed = false;  // whether one listing went through to its end
  for (const char* list : {plan.list_by_index, plan.list_by_table}) {
    if (!list) continue;
    Statement stmt;
    rc = sqlite3_prepare_v2(db_, list, -1, stmt.out(), nullptr);
    if (rc == SQLITE_OK) rc = bind(stmt.get(), 0);
    if (rc != SQLITE_OK) continue;  // e.g. the index itself is gone from a damaged schema: the other listing
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      const std::pair<int64_t, int64_t> at{sqlite3_column_int64(stmt.get(), 1), sqlite3_column_int64(stmt.get(), 0)};
      if (!any || at > last) rest.push_back(at);
    }
    if (rc == SQLITE_DONE) listed = true;
    else if (!IsDamage(rc)) return SqlError(what.c_str(), rc);
  }
  std::sort(rest.begin(), rest.end());
  rest.erase(std::unique(rest.begin(), rest.end()), rest.end());

  Statement one;
  rc = sqlite3_prepare_v2(db_, plan.one, -1, one.out(), nullptr);
  if (rc != SQLITE_OK) return SqlError(what.c_str(), rc);
  bool pinned = false;  // whether the damage was found in a row of its own
  for (const auto& [key, rowid] : rest) {
    rc = bind(one.get(), rowid);
    if (rc != SQLITE_OK) return SqlError(what.c_str(), rc);
    rc = sqlite3_step(one.get());
    if (rc == SQLITE_ROW) {
      take(one.get());
    } else if (IsDamage(rc)) {
      ReportDamage({series, plan.table, rowid, std::string("unreadable row: ") + sqlite3_errmsg(db_)});
      pinned = true;
    } else if (rc != SQLITE_DONE) {
      return SqlError(what.c_str(), rc);
    }
    sqlite3_reset(one.get());  // repeats the step's code, handled above
  }
  if (!pinned) {
    // The damage sat in a page no row of this read lives in (an index, a table's inner
    // page): say so, with what the second listing could and could not find.
    ReportDamage({series, plan.table, 0,
                  "a scan stopped at damage (" + scan_error + "); " + std::to_string(rest.size()) +
                      " rows after it read one by one" + (listed ? "" : ", rows past the damage may be missing")});
  }
  return Status::Ok();
}

namespace {

// Scalar chunks in append (rowid) order; the range test on min/max step is in the scan, the
// listings come from the series index alone (it holds the rowid), so they read no table page.
// Stores from before the checksum have no crc column: NULL stands in.
const char* const kChunkColumns = "id, id, count, base_time, data, min_step, max_step, crc";
const char* const kChunkColumnsWithoutCrc = "id, id, count, base_time, data, min_step, max_step, NULL";

}  // namespace

Status SqliteRunStore::ListSeries(std::vector<SeriesInfo>* out) {
  out->clear();
  static const ReadPlan kSeries{"series", "SELECT id, id, tag, kind FROM series ORDER BY id", nullptr,
                                "SELECT id, id FROM series ORDER BY id", "SELECT id, id, tag, kind FROM series WHERE id=?4"};
  Status s = ReadRows(kSeries, "", 0, 0, 0, [&](sqlite3_stmt* r, int64_t) -> std::string {
    const int kind = sqlite3_column_int(r, 3);
    if (kind < 0 || kind > static_cast<int>(SeriesKind::kVector)) {
      return "series '" + ColumnText(r, 2) + "' of kind " + std::to_string(kind) + ", expected 0-3";
    }
    SeriesInfo info;
    info.id = sqlite3_column_int64(r, 0);
    info.tag = ColumnText(r, 2);
    info.kind = static_cast<SeriesKind>(kind);
    out->push_back(std::move(info));
    return {};
  });
  if (!s.ok()) return s;
  // Each series summarised on its own: damage in one series' rows costs only its summary.
  const char* const kSummary[] = {
      "SELECT coalesce(sum(count), 0), min(min_step), max(max_step), (SELECT last_value FROM scalar_chunk "
      "WHERE series_id = ?1 ORDER BY id DESC LIMIT 1) FROM scalar_chunk WHERE series_id = ?1",
      "SELECT count(*), min(step), max(step), (SELECT sqrt(sum_squares) FROM tensor_stats WHERE series_id = ?1 "
      "ORDER BY rowid DESC LIMIT 1) FROM tensor_stats WHERE series_id = ?1",
      nullptr,  // spans belong to no series
      "SELECT count(*), min(step), max(step), NULL FROM vector WHERE series_id = ?1",
  };
  Statement summaries[4];
  for (SeriesInfo& info : *out) {
    const int k = static_cast<int>(info.kind);
    info.last_value = std::numeric_limits<double>::quiet_NaN();  // a series with no last value
    if (!kSummary[k]) continue;
    Statement& stmt = summaries[k];
    int rc = stmt.get() ? SQLITE_OK : sqlite3_prepare_v2(db_, kSummary[k], -1, stmt.out(), nullptr);
    if (rc != SQLITE_OK) return SqlError("list series", rc);
    rc = sqlite3_bind_int64(stmt.get(), 1, info.id);
    if (rc != SQLITE_OK) return SqlError("list series", rc);
    rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_ROW) {
      info.points = sqlite3_column_int64(stmt.get(), 0);
      info.first_step = sqlite3_column_int64(stmt.get(), 1);
      info.last_step = sqlite3_column_int64(stmt.get(), 2);
      info.last_value = ColumnDouble(stmt.get(), 3);
    } else if (IsDamage(rc)) {
      ReportDamage({info.tag, SeriesKindName(info.kind), 0,
                    std::string("cannot count the series' points: ") + sqlite3_errmsg(db_)});
    } else {
      return SqlError("list series", rc);
    }
    sqlite3_reset(stmt.get());  // repeats the step's code, handled above
  }
  std::sort(out->begin(), out->end(), [](const SeriesInfo& a, const SeriesInfo& b) { return a.tag < b.tag; });
  return Status::Ok();
}

Status SqliteRunStore::FindSeries(std::string_view tag, SeriesInfo* info) {
  Statement stmt;
  int rc = sqlite3_prepare_v2(db_, "SELECT id, kind FROM series WHERE tag=?", -1, stmt.out(), nullptr);
  if (rc == SQLITE_OK) rc = Binder(stmt.get()).Text(tag).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return Status::NotFound(path_ + ": no series '" + std::string(tag) + "'");
  if (rc != SQLITE_ROW) return SqlError("look up series", rc);
  info->id = sqlite3_column_int64(stmt.get(), 0);
  info->tag = std::string(tag);
  info->kind = static_cast<SeriesKind>(sqlite3_column_int(stmt.get(), 1));
  return Status::Ok();
}

namespace {

// What is wrong with a row whose stored checksum (column `column`; NULL in stores from
// before it) is not that of the values read: empty when it matches.
std::string CrcMismatch(sqlite3_stmt* r, int column, const RowCrc& computed) {
  if (sqlite3_column_type(r, column) == SQLITE_NULL) return {};
  return CrcMismatch(static_cast<uint32_t>(sqlite3_column_int64(r, column)), computed);
}

// Checks one scalar_chunk row of kChunkColumns and hands its arrays to visit. Returns what
// is wrong with a damaged row.
template <class Visit>
std::string VisitChunk(sqlite3_stmt* r, Visit& visit) {
  uint32_t crc = 0;
  const bool has_crc = sqlite3_column_type(r, 7) != SQLITE_NULL;
  if (has_crc) crc = static_cast<uint32_t>(sqlite3_column_int64(r, 7));
  ChunkView view;
  std::string wrong = CheckChunk(sqlite3_column_int64(r, 2), sqlite3_column_double(r, 3),
                                 static_cast<const unsigned char*>(sqlite3_column_blob(r, 4)),
                                 sqlite3_column_bytes(r, 4), has_crc ? &crc : nullptr, &view);
  if (wrong.empty() && view.n > 0) visit(view);
  return wrong;
}

}  // namespace

Status SqliteRunStore::VisitChunks(const SeriesInfo& info, int64_t lo, int64_t hi, const ChunkVisitor& visit) {
  struct Plan {
    explicit Plan(const char* columns)
        : scan(std::string("SELECT ") + columns +
               " FROM scalar_chunk WHERE series_id=?1 AND max_step>=?2 AND min_step<=?3 ORDER BY id"),
          one(std::string("SELECT ") + columns +
              " FROM scalar_chunk WHERE id=?4 AND series_id=?1 AND max_step>=?2 AND min_step<=?3"),
          plan{"scalar_chunk", scan.c_str(),
               "SELECT id, id FROM scalar_chunk INDEXED BY scalar_chunk_by_series WHERE series_id=?1",
               "SELECT id, id FROM scalar_chunk NOT INDEXED WHERE series_id=?1", one.c_str()} {}
    std::string scan, one;
    ReadPlan plan;
  };
  static const Plan kWithCrc(kChunkColumns), kWithoutCrc(kChunkColumnsWithoutCrc);
  return ReadRows(row_crc_ ? kWithCrc.plan : kWithoutCrc.plan, info.tag, info.id, lo, hi,
                  [&](sqlite3_stmt* r, int64_t) { return VisitChunk(r, visit); });
}

Status SqliteRunStore::ListChunks(const SeriesInfo& info, std::vector<ChunkSpan>* chunks) {
  chunks->clear();
  Statement stmt;
  int rc = sqlite3_prepare_v2(db_, "SELECT id, min_step, max_step, count FROM scalar_chunk WHERE series_id=? ORDER BY id", -1,
                              stmt.out(), nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(stmt.get(), 1, info.id);
  if (rc != SQLITE_OK) return SqlError("list chunks", rc);
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    chunks->push_back({sqlite3_column_int64(stmt.get(), 0), sqlite3_column_int64(stmt.get(), 1),
                       sqlite3_column_int64(stmt.get(), 2), sqlite3_column_int64(stmt.get(), 3)});
  }
  if (rc == SQLITE_DONE) return Status::Ok();
  if (!IsDamage(rc)) return SqlError("list chunks", rc);
  ReportDamage({info.tag, "scalar_chunk", 0, std::string("the chunk list stopped at damage: ") + sqlite3_errmsg(db_)});
  return Status::Ok();
}

Status SqliteRunStore::ReadChunks(const SeriesInfo& info, const std::vector<int64_t>& ids, int64_t step_min,
                            int64_t step_max, std::vector<Point>* out) {
  out->clear();
  if (!read_chunk_) {  // kept: a window-by-window reader asks once per series and window
    const std::string sql =
        std::string("SELECT ") + (row_crc_ ? kChunkColumns : kChunkColumnsWithoutCrc) + " FROM scalar_chunk WHERE id=?";
    Status s = Prepare(sql.c_str(), &read_chunk_);
    if (!s.ok()) return s;
  }
  sqlite3_stmt* stmt = read_chunk_;
  int rc = SQLITE_OK;
  auto visit = [&](const ChunkView& chunk) {
    for (int64_t i = 0; i < chunk.n; ++i) {
      const int64_t step = chunk.Step(i);
      if (step >= step_min && step <= step_max) out->push_back({step, chunk.WallTime(i), chunk.Value(i)});
    }
  };
  for (int64_t id : ids) {
    rc = sqlite3_bind_int64(stmt, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      if (std::string problem = VisitChunk(stmt, visit); !problem.empty()) {
        ReportDamage({info.tag, "scalar_chunk", id, std::move(problem)});
      }
    } else if (IsDamage(rc)) {
      ReportDamage({info.tag, "scalar_chunk", id, std::string("unreadable row: ") + sqlite3_errmsg(db_)});
    }
    sqlite3_reset(stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE && !IsDamage(rc)) return SqlError("read scalar_chunk", rc);
  }
  return Status::Ok();
}

Status SqliteRunStore::ScalarStepRange(const SeriesInfo& info, bool* any, int64_t* lo, int64_t* hi) {
  Statement range;
  int rc = sqlite3_prepare_v2(db_, "SELECT min(min_step), max(max_step) FROM scalar_chunk WHERE series_id=?", -1,
                              range.out(), nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(range.get(), 1, info.id);
  if (rc == SQLITE_OK) rc = sqlite3_step(range.get());
  if (rc == SQLITE_ROW) {
    *any = sqlite3_column_type(range.get(), 0) != SQLITE_NULL;
    if (*any) {
      *lo = sqlite3_column_int64(range.get(), 0);
      *hi = sqlite3_column_int64(range.get(), 1);
    }
    return Status::Ok();
  }
  // Damage: the chunk read that follows meets it too, and reports it.
  if (IsDamage(rc)) return Status::Ok();
  return SqlError("read series range", rc);
}

Status SqliteRunStore::ReadTensorStats(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<TensorStatsPoint>* out) {
  out->clear();
  // Per read: the measured columns are this store's (CheckSchema).
  struct Plan {
    Plan(const std::string& measured, const char* crc)
        : columns("rowid, step, step, wall_time, numel, nan, inf, zeros, min, max, sum, sum_squares, abs_max, " +
                  measured + ", histogram, " + crc + " FROM tensor_stats "),
          scan("SELECT " + columns + "WHERE series_id=?1 AND step BETWEEN ?2 AND ?3 ORDER BY step, rowid"),
          one("SELECT " + columns + "WHERE rowid=?4 AND series_id=?1 AND step BETWEEN ?2 AND ?3"),
          plan{"tensor_stats", scan.c_str(),
               "SELECT rowid, step FROM tensor_stats INDEXED BY tensor_stats_by_series WHERE series_id=?1 AND step "
               "BETWEEN ?2 AND ?3",
               "SELECT rowid, step FROM tensor_stats NOT INDEXED WHERE series_id=?1 AND step BETWEEN ?2 AND ?3",
               one.c_str()} {}
    std::string columns, scan, one;
    ReadPlan plan;
  };
  const Plan kStatsPlan(measured_columns_, row_crc_ ? "crc" : "NULL");
  const ReadPlan& kStats = kStatsPlan.plan;
  constexpr int kFirstMeasured = 13, kHistogram = kFirstMeasured + static_cast<int>(tensor_stats::kMeasuredCount),
                kCrc = kHistogram + 1;
  return ReadRows(kStats, info.tag, info.id, step_min, step_max, [&](sqlite3_stmt* r, int64_t rowid) -> std::string {
    TensorStatsPoint p;
    p.step = sqlite3_column_int64(r, 2);
    p.wall_time = sqlite3_column_double(r, 3);
    p.stats.numel = sqlite3_column_int64(r, 4);
    p.stats.nan = sqlite3_column_int64(r, 5);
    p.stats.inf = sqlite3_column_int64(r, 6);
    p.stats.zeros = sqlite3_column_int64(r, 7);
    p.stats.min = ColumnDouble(r, 8);
    p.stats.max = ColumnDouble(r, 9);
    p.stats.sum = ColumnDouble(r, 10);
    p.stats.sum_squares = ColumnDouble(r, 11);
    p.stats.abs_max = ColumnDouble(r, 12);
    for (size_t i = 0; i < tensor_stats::kMeasuredCount; ++i) {
      p.stats.*tensor_stats::kMeasured[i]->field = ColumnDouble(r, kFirstMeasured + static_cast<int>(i));
    }
    RowCrc crc = StatsCrc(p.step, ColumnDouble(r, 3), p.stats);
    if (sqlite3_column_type(r, kHistogram) == SQLITE_BLOB) {
      crc.Bytes(sqlite3_column_blob(r, kHistogram), static_cast<size_t>(sqlite3_column_bytes(r, kHistogram)));
    }
    if (std::string wrong = CrcMismatch(r, kCrc, crc); !wrong.empty()) return wrong;
    if (sqlite3_column_type(r, kHistogram) == SQLITE_BLOB) {
      // The statistics stand without their histogram: keep the row, report the histogram.
      std::string problem = DecodeHistogram(static_cast<const unsigned char*>(sqlite3_column_blob(r, kHistogram)),
                                            sqlite3_column_bytes(r, kHistogram), &p.stats);
      if (!problem.empty()) ReportDamage({info.tag, "tensor_stats", rowid, problem + "; the row is kept without it"});
    }
    out->push_back(p);
    return {};
  });
}

Status SqliteRunStore::ReadVectors(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out) {
  out->clear();
  struct Plan {
    explicit Plan(const char* crc)
        : scan(std::string("SELECT rowid, step, step, wall_time, data, ") + crc +
               " FROM vector WHERE series_id=?1 AND step BETWEEN ?2 AND ?3 ORDER BY step, rowid"),
          one(std::string("SELECT rowid, step, step, wall_time, data, ") + crc +
              " FROM vector WHERE rowid=?4 AND series_id=?1 AND step BETWEEN ?2 AND ?3"),
          plan{"vector", scan.c_str(),
               "SELECT rowid, step FROM vector INDEXED BY vector_by_series WHERE series_id=?1 AND step BETWEEN ?2 AND ?3",
               "SELECT rowid, step FROM vector NOT INDEXED WHERE series_id=?1 AND step BETWEEN ?2 AND ?3",
               one.c_str()} {}
    std::string scan, one;
    ReadPlan plan;
  };
  static const Plan kWithCrc("crc"), kWithoutCrc("NULL");
  return ReadRows(row_crc_ ? kWithCrc.plan : kWithoutCrc.plan, info.tag, info.id, step_min, step_max,
                  [&](sqlite3_stmt* r, int64_t) -> std::string {
    const int bytes = sqlite3_column_bytes(r, 4);
    const void* data = sqlite3_column_blob(r, 4);
    if (bytes % static_cast<int>(sizeof(float)) != 0 || (bytes > 0 && !data)) {
      return "vector of " + std::to_string(bytes) + " bytes, expected a whole number of float32 values";
    }
    if (std::string wrong =
            CrcMismatch(r, 5, VectorCrc(sqlite3_column_int64(r, 2), ColumnDouble(r, 3), data, static_cast<size_t>(bytes)));
        !wrong.empty()) {
      return wrong;
    }
    VectorPoint p;
    p.step = sqlite3_column_int64(r, 2);
    p.wall_time = sqlite3_column_double(r, 3);
    p.values.resize(bytes / sizeof(float));
    if (bytes) std::memcpy(p.values.data(), data, p.values.size() * sizeof(float));
    out->push_back(std::move(p));
    return {};
  });
}

Status SqliteRunStore::ReadSpans(int64_t step_min, int64_t step_max, std::vector<Span>* out) {
  out->clear();
  static const ReadPlan kSpans{
      "span", "SELECT rowid, step, step, phase, start, duration FROM span WHERE step BETWEEN ?2 AND ?3 ORDER BY step, rowid",
      "SELECT rowid, step FROM span INDEXED BY span_by_step WHERE step BETWEEN ?2 AND ?3",
      "SELECT rowid, step FROM span NOT INDEXED WHERE step BETWEEN ?2 AND ?3",
      "SELECT rowid, step, step, phase, start, duration FROM span WHERE rowid=?4 AND step BETWEEN ?2 AND ?3"};
  return ReadRows(kSpans, "", 0, step_min, step_max, [&](sqlite3_stmt* r, int64_t) -> std::string {
    out->push_back({sqlite3_column_int64(r, 2), ColumnText(r, 3), sqlite3_column_double(r, 4),
                    sqlite3_column_double(r, 5)});
    return {};
  });
}

Status SqliteRunStore::ReadFindings(std::vector<Finding>* out) {
  out->clear();
  static const ReadPlan kFindings{
      "finding",
      "SELECT id, id, code, severity, step, last_step, location, summary, evidence, causes, actions FROM finding ORDER BY id",
      nullptr, "SELECT id, id FROM finding ORDER BY id",
      "SELECT id, id, code, severity, step, last_step, location, summary, evidence, causes, actions FROM finding "
      "WHERE id=?4"};
  return ReadRows(kFindings, "", 0, 0, 0, [&](sqlite3_stmt* r, int64_t rowid) -> std::string {
    Finding f;
    f.code = ColumnText(r, 2);
    if (!ParseSeverity(ColumnText(r, 3), &f.severity)) {
      ReportDamage({"", "finding", rowid,
                    "severity '" + ColumnText(r, 3) + "', expected info, warning or critical; the finding is kept"});
    }
    f.step = sqlite3_column_int64(r, 4);
    f.last_step = sqlite3_column_int64(r, 5);
    f.location = ColumnText(r, 6);
    f.summary = ColumnText(r, 7);
    f.evidence_json = ColumnText(r, 8);
    ReadStoredCauses(ColumnText(r, 9), &f.causes);
    ReadStoredActions(ColumnText(r, 10), &f.actions);
    out->push_back(std::move(f));
    return {};
  });
}

Status SqliteRunStore::MaxStep(int64_t* step) {
  Statement stmt;
  int rc = sqlite3_prepare_v2(db_,
                              "SELECT max(coalesce((SELECT max(max_step) FROM scalar_chunk), 0), "
                              "coalesce((SELECT max(step) FROM tensor_stats), 0))",
                              -1, stmt.out(), nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_ROW) return SqlError("read max step", rc);
  *step = sqlite3_column_int64(stmt.get(), 0);
  return Status::Ok();
}

}  // namespace trainscope
