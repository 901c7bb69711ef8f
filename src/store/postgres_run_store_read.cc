// PostgresRunStore's reads: each one query, its rows checked as the SQLite store checks its
// own (store_format.h), a damaged row reported and skipped.
#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "store/json_forms.h"
#include "store/postgres_run_store.h"

namespace trainscope {

Status PostgresRunStore::ReadMeta(RunMeta* meta) {
  PgResult rows;
  Status s = db_->Query("SELECT key, value FROM meta WHERE run_id = $1", PgParams().Int(run_id_),
                        "read run metadata", &rows);
  if (!s.ok()) return s;
  *meta = RunMeta();
  for (int i = 0; i < rows.rows(); ++i) SetMetaField(rows.Text(i, 0), rows.Text(i, 1), meta);
  return Status::Ok();
}

Status PostgresRunStore::ListSeries(std::vector<SeriesInfo>* out) {
  out->clear();
  PgResult rows;
  Status s = db_->Query("SELECT id, tag, kind::bigint FROM series WHERE run_id = $1 ORDER BY id",
                        PgParams().Int(run_id_), "list series", &rows);
  if (!s.ok()) return s;
  std::unordered_map<int64_t, size_t> index;
  for (int i = 0; i < rows.rows(); ++i) {
    const int64_t kind = rows.Int(i, 2);
    if (kind < 0 || kind > static_cast<int>(SeriesKind::kVector)) {
      ReportDamage({"", "series", rows.Int(i, 0),
                    "series '" + rows.Text(i, 1) + "' of kind " + std::to_string(kind) + ", expected 0-3"});
      continue;
    }
    SeriesInfo info;
    info.id = rows.Int(i, 0);
    info.tag = rows.Text(i, 1);
    info.kind = static_cast<SeriesKind>(kind);
    info.last_value = std::numeric_limits<double>::quiet_NaN();  // a series with no last value
    index[info.id] = out->size();
    out->push_back(std::move(info));
  }
  // Per series: points, first and last step, and the last value (the last row's).
  const char* const kSummaries =
      "SELECT series_id, sum(count)::bigint, min(min_step), max(max_step), "
      "  (array_agg(last_value ORDER BY id DESC))[1] FROM scalar_chunk WHERE run_id = $1 GROUP BY series_id "
      "UNION ALL SELECT series_id, count(*), min(step), max(step), "
      "  (array_agg(CASE WHEN sum_squares >= 0 THEN sqrt(sum_squares) END ORDER BY id DESC))[1] "
      "  FROM tensor_stats WHERE run_id = $1 GROUP BY series_id "
      "UNION ALL SELECT series_id, count(*), min(step), max(step), NULL::double precision "
      "  FROM vector WHERE run_id = $1 GROUP BY series_id";
  PgResult summaries;
  s = db_->Query(kSummaries, PgParams().Int(run_id_), "list series", &summaries);
  if (!s.ok()) return s;
  for (int i = 0; i < summaries.rows(); ++i) {
    auto it = index.find(summaries.Int(i, 0));
    if (it == index.end()) continue;  // rows of a series the table does not list
    SeriesInfo& info = (*out)[it->second];
    info.points = summaries.Int(i, 1);
    info.first_step = summaries.Int(i, 2);
    info.last_step = summaries.Int(i, 3);
    info.last_value = summaries.Real(i, 4);
  }
  std::sort(out->begin(), out->end(), [](const SeriesInfo& a, const SeriesInfo& b) { return a.tag < b.tag; });
  return Status::Ok();
}

Status PostgresRunStore::FindSeries(std::string_view tag, SeriesInfo* info) {
  PgResult row;
  Status s = db_->Query("SELECT id, kind::bigint FROM series WHERE run_id = $1 AND tag = $2",
                        PgParams().Int(run_id_).Text(tag), "look up series", &row);
  if (!s.ok()) return s;
  if (row.rows() == 0) return Status::NotFound(path_ + ": no series '" + std::string(tag) + "'");
  info->id = row.Int(0, 0);
  info->tag = std::string(tag);
  info->kind = static_cast<SeriesKind>(row.Int(0, 1));
  return Status::Ok();
}

namespace {

// Checks the chunk in columns first..first+3 (count, base_time, data, crc) of a row.
std::string ChunkOfRow(const PgResult& rows, int i, int first, ChunkView* view) {
  int64_t bytes = 0;
  const unsigned char* data = rows.Bytes(i, first + 2, &bytes);
  const auto crc = static_cast<uint32_t>(rows.Int(i, first + 3));
  return CheckChunk(rows.Int(i, first), rows.Real(i, first + 1), data, bytes, &crc, view);
}

}  // namespace

Status PostgresRunStore::VisitChunks(const SeriesInfo& info, int64_t lo, int64_t hi, const ChunkVisitor& visit) {
  PgResult rows;
  Status s = db_->Query(
      "SELECT id, count, base_time, data, crc FROM scalar_chunk WHERE run_id = $1 AND series_id = $2 AND "
      "max_step >= $3 AND min_step <= $4 ORDER BY id",
      PgParams().Int(run_id_).Int(info.id).Int(lo).Int(hi), "read scalar_chunk", &rows);
  if (!s.ok()) return s;
  for (int i = 0; i < rows.rows(); ++i) {
    ChunkView view;
    std::string problem = ChunkOfRow(rows, i, 1, &view);
    if (!problem.empty()) {
      ReportDamage({info.tag, "scalar_chunk", rows.Int(i, 0), std::move(problem)});
    } else if (view.n > 0) {
      visit(view);
    }
  }
  return Status::Ok();
}

Status PostgresRunStore::ScalarStepRange(const SeriesInfo& info, bool* any, int64_t* lo, int64_t* hi) {
  PgResult row;
  Status s = db_->Query("SELECT min(min_step), max(max_step) FROM scalar_chunk WHERE run_id = $1 AND series_id = $2",
                        PgParams().Int(run_id_).Int(info.id), "read series range", &row);
  if (!s.ok()) return s;
  *any = !row.IsNull(0, 0);
  if (*any) {
    *lo = row.Int(0, 0);
    *hi = row.Int(0, 1);
  }
  return Status::Ok();
}

Status PostgresRunStore::ListChunks(const SeriesInfo& info, std::vector<ChunkSpan>* chunks) {
  chunks->clear();
  PgResult rows;
  Status s = db_->Query("SELECT id, min_step, max_step, count FROM scalar_chunk WHERE run_id = $1 AND series_id = $2 "
                        "ORDER BY id",
                        PgParams().Int(run_id_).Int(info.id), "list chunks", &rows);
  if (!s.ok()) return s;
  for (int i = 0; i < rows.rows(); ++i) {
    chunks->push_back({rows.Int(i, 0), rows.Int(i, 1), rows.Int(i, 2), rows.Int(i, 3)});
  }
  return Status::Ok();
}

Status PostgresRunStore::ReadChunks(const SeriesInfo& info, const std::vector<int64_t>& ids, int64_t step_min,
                                    int64_t step_max, std::vector<Point>* out) {
  out->clear();
  if (ids.empty()) return Status::Ok();
  PgResult rows;
  Status s = db_->Query("SELECT id, count, base_time, data, crc FROM scalar_chunk WHERE run_id = $1 AND id = ANY($2)",
                        PgParams().Int(run_id_).IntArray(ids), "read scalar_chunk", &rows);
  if (!s.ok()) return s;
  std::unordered_map<int64_t, int> row_of;
  for (int i = 0; i < rows.rows(); ++i) row_of[rows.Int(i, 0)] = i;
  for (int64_t id : ids) {  // in the order asked
    auto it = row_of.find(id);
    if (it == row_of.end()) continue;
    ChunkView view;
    std::string problem = ChunkOfRow(rows, it->second, 1, &view);
    if (!problem.empty()) {
      ReportDamage({info.tag, "scalar_chunk", id, std::move(problem)});
      continue;
    }
    for (int64_t i = 0; i < view.n; ++i) {
      const int64_t step = view.Step(i);
      if (step >= step_min && step <= step_max) out->push_back({step, view.WallTime(i), view.Value(i)});
    }
  }
  return Status::Ok();
}

Status PostgresRunStore::ReadTensorStats(const SeriesInfo& info, int64_t step_min, int64_t step_max,
                                         std::vector<TensorStatsPoint>* out) {
  out->clear();
  PgResult rows;
  Status s = db_->Query(
      "SELECT id, step, wall_time, numel, nan, inf, zeros, min, max, sum, sum_squares, abs_max, " +
          MeasuredColumnList() +
          ", histogram, crc FROM tensor_stats WHERE run_id = $1 AND series_id = $2 AND step BETWEEN $3 AND $4 ORDER BY "
          "step, id",
      PgParams().Int(run_id_).Int(info.id).Int(step_min).Int(step_max), "read tensor_stats", &rows);
  if (!s.ok()) return s;
  out->reserve(static_cast<size_t>(rows.rows()));
  constexpr int kFirstMeasured = 12, kHistogram = kFirstMeasured + static_cast<int>(tensor_stats::kMeasuredCount);
  for (int i = 0; i < rows.rows(); ++i) {
    TensorStatsPoint p;
    p.step = rows.Int(i, 1);
    p.wall_time = rows.Real(i, 2);
    p.stats.numel = static_cast<uint64_t>(rows.Int(i, 3));
    p.stats.nan = static_cast<uint64_t>(rows.Int(i, 4));
    p.stats.inf = static_cast<uint64_t>(rows.Int(i, 5));
    p.stats.zeros = static_cast<uint64_t>(rows.Int(i, 6));
    p.stats.min = rows.Real(i, 7);
    p.stats.max = rows.Real(i, 8);
    p.stats.sum = rows.Real(i, 9);
    p.stats.sum_squares = rows.Real(i, 10);
    p.stats.abs_max = rows.Real(i, 11);
    for (size_t m = 0; m < tensor_stats::kMeasuredCount; ++m) {
      p.stats.*tensor_stats::kMeasured[m]->field = rows.Real(i, kFirstMeasured + static_cast<int>(m));
    }
    RowCrc crc = StatsCrc(p.step, p.wall_time, p.stats);
    int64_t histogram_bytes = 0;
    const unsigned char* histogram =
        rows.IsNull(i, kHistogram) ? nullptr : rows.Bytes(i, kHistogram, &histogram_bytes);
    if (histogram) crc.Bytes(histogram, static_cast<size_t>(histogram_bytes));
    if (std::string wrong = CrcMismatch(static_cast<uint32_t>(rows.Int(i, kHistogram + 1)), crc); !wrong.empty()) {
      ReportDamage({info.tag, "tensor_stats", rows.Int(i, 0), std::move(wrong)});
      continue;
    }
    if (histogram) {
      // The statistics stand without their histogram: keep the row, report the histogram.
      std::string problem = DecodeHistogram(histogram, histogram_bytes, &p.stats);
      if (!problem.empty()) {
        ReportDamage({info.tag, "tensor_stats", rows.Int(i, 0), problem + "; the row is kept without it"});
      }
    }
    out->push_back(p);
  }
  return Status::Ok();
}

Status PostgresRunStore::ReadVectors(const SeriesInfo& info, int64_t step_min, int64_t step_max,
                                     std::vector<VectorPoint>* out) {
  out->clear();
  PgResult rows;
  Status s = db_->Query(
      "SELECT id, step, wall_time, data, crc FROM vector WHERE run_id = $1 AND series_id = $2 AND step BETWEEN $3 "
      "AND $4 ORDER BY step, id",
      PgParams().Int(run_id_).Int(info.id).Int(step_min).Int(step_max), "read vector", &rows);
  if (!s.ok()) return s;
  for (int i = 0; i < rows.rows(); ++i) {
    int64_t bytes = 0;
    const unsigned char* data = rows.Bytes(i, 3, &bytes);
    std::string problem;
    if (bytes % static_cast<int64_t>(sizeof(float)) != 0) {
      problem = "vector of " + std::to_string(bytes) + " bytes, expected a whole number of float32 values";
    } else {
      problem = CrcMismatch(static_cast<uint32_t>(rows.Int(i, 4)),
                            VectorCrc(rows.Int(i, 1), rows.Real(i, 2), data, static_cast<size_t>(bytes)));
    }
    if (!problem.empty()) {
      ReportDamage({info.tag, "vector", rows.Int(i, 0), std::move(problem)});
      continue;
    }
    VectorPoint p;
    p.step = rows.Int(i, 1);
    p.wall_time = rows.Real(i, 2);
    p.values.resize(static_cast<size_t>(bytes) / sizeof(float));
    if (bytes) std::memcpy(p.values.data(), data, p.values.size() * sizeof(float));
    out->push_back(std::move(p));
  }
  return Status::Ok();
}

Status PostgresRunStore::ReadSpans(int64_t step_min, int64_t step_max, std::vector<Span>* out) {
  out->clear();
  PgResult rows;
  Status s = db_->Query("SELECT step, phase, start, duration FROM span WHERE run_id = $1 AND step BETWEEN $2 AND $3 "
                        "ORDER BY step, id",
                        PgParams().Int(run_id_).Int(step_min).Int(step_max), "read span", &rows);
  if (!s.ok()) return s;
  out->reserve(static_cast<size_t>(rows.rows()));
  for (int i = 0; i < rows.rows(); ++i) {
    out->push_back({rows.Int(i, 0), rows.Text(i, 1), rows.Real(i, 2), rows.Real(i, 3)});
  }
  return Status::Ok();
}

Status PostgresRunStore::ReadFindings(std::vector<Finding>* out) {
  out->clear();
  PgResult rows;
  Status s = db_->Query("SELECT id, code, severity, step, last_step, location, summary, evidence, causes, actions "
                        "FROM finding WHERE run_id = $1 ORDER BY id",
                        PgParams().Int(run_id_), "read finding", &rows);
  if (!s.ok()) return s;
  for (int i = 0; i < rows.rows(); ++i) {
    Finding f;
    f.code = rows.Text(i, 1);
    if (!ParseSeverity(rows.Text(i, 2), &f.severity)) {
      ReportDamage({"", "finding", rows.Int(i, 0),
                    "severity '" + rows.Text(i, 2) + "', expected info, warning or critical; the finding is kept"});
    }
    f.step = rows.Int(i, 3);
    f.last_step = rows.Int(i, 4);
    f.location = rows.Text(i, 5);
    f.summary = rows.Text(i, 6);
    f.evidence_json = rows.Text(i, 7);
    ReadStoredCauses(rows.Text(i, 8), &f.causes);
    ReadStoredActions(rows.Text(i, 9), &f.actions);
    out->push_back(std::move(f));
  }
  return Status::Ok();
}

Status PostgresRunStore::MaxStep(int64_t* step) {
  PgResult row;
  Status s = db_->Query(
      "SELECT greatest(coalesce((SELECT max(max_step) FROM scalar_chunk WHERE run_id = $1), 0), "
      "coalesce((SELECT max(step) FROM tensor_stats WHERE run_id = $1), 0))",
      PgParams().Int(run_id_), "read max step", &row);
  if (!s.ok()) return s;
  *step = row.Int(0, 0);
  return Status::Ok();
}

}  // namespace trainscope
