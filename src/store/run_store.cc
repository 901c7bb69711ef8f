#include "store/run_store.h"

#include "store/json_forms.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

namespace trainscope {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kSchemaVersion = 1;

// Page size 16 KiB: a full chunk (2048 points x 20 bytes) spans three pages, and the
// partial-chunk rewrites of slow series stay small in the WAL.
constexpr const char* kSchema = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE series(id INTEGER PRIMARY KEY, tag TEXT NOT NULL UNIQUE, kind INTEGER NOT NULL);
-- Up to 2048 points of one scalar series: data = int64 steps[n], float64 values[n],
-- float32 wall-time offsets from base_time[n], little-endian.
CREATE TABLE scalar_chunk(
  id INTEGER PRIMARY KEY, series_id INTEGER NOT NULL, count INTEGER NOT NULL,
  min_step INTEGER NOT NULL, max_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL, last_value REAL, base_time REAL NOT NULL, data BLOB NOT NULL);
CREATE INDEX scalar_chunk_by_series ON scalar_chunk(series_id);
CREATE TABLE tensor_stats(
  series_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
  numel INTEGER, nan INTEGER, inf INTEGER, zeros INTEGER,
  min REAL, max REAL, sum REAL, sum_squares REAL, abs_max REAL,
  dead_fraction REAL, saturated_fraction REAL,
  histogram BLOB);  -- uint8 first bin, then uint64 counts up to the last non-zero bin
CREATE INDEX tensor_stats_by_series ON tensor_stats(series_id, step);
CREATE TABLE vector(series_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
  data BLOB NOT NULL);  -- float32 values
CREATE INDEX vector_by_series ON vector(series_id, step);
CREATE TABLE span(step INTEGER NOT NULL, phase TEXT NOT NULL, start REAL NOT NULL, duration REAL NOT NULL);
CREATE INDEX span_by_step ON span(step);
CREATE TABLE finding(
  id INTEGER PRIMARY KEY, code TEXT NOT NULL, severity TEXT NOT NULL,
  step INTEGER NOT NULL, last_step INTEGER NOT NULL, location TEXT NOT NULL, summary TEXT NOT NULL,
  evidence TEXT NOT NULL, causes TEXT NOT NULL, actions TEXT NOT NULL);
)sql";

std::string fmt_double(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  return buffer;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string ResolveDbPath(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return (fs::path(path) / kStoreFileName).string();
  return path;
}

// RAII for one prepared statement used by a read.
class Statement {
 public:
  Statement() = default;
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt** out() { return &stmt_; }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

template <class T>
T LoadUnaligned(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string EncodeHistogram(const TensorStats& s) {
  int first = -1, last = -1;
  for (int i = 0; i < TensorStats::kExponentBins; ++i) {
    if (s.exponent_counts[i]) {
      if (first < 0) first = i;
      last = i;
    }
  }
  std::string blob(1, static_cast<char>(first < 0 ? 0 : first));
  if (first >= 0) {
    blob.resize(1 + (last - first + 1) * sizeof(uint64_t));
    std::memcpy(blob.data() + 1, &s.exponent_counts[first], (last - first + 1) * sizeof(uint64_t));
  }
  return blob;
}

void DecodeHistogram(const unsigned char* blob, int bytes, TensorStats* s) {
  if (bytes < 1) return;
  const int first = blob[0];
  const int count = (bytes - 1) / static_cast<int>(sizeof(uint64_t));
  s->has_histogram = true;
  for (int i = 0; i < count && first + i < TensorStats::kExponentBins; ++i) {
    s->exponent_counts[first + i] = LoadUnaligned<uint64_t>(blob + 1 + i * sizeof(uint64_t));
  }
}

double ColumnDouble(sqlite3_stmt* stmt, int column) {
  // SQLite stores NaN as NULL; read it back as NaN.
  if (sqlite3_column_type(stmt, column) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt, column);
}

void BindDouble(sqlite3_stmt* stmt, int index, double v) {
  if (std::isnan(v)) sqlite3_bind_null(stmt, index);
  else sqlite3_bind_double(stmt, index, v);
}

std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text ? std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt, column)) : std::string();
}

}  // namespace

const char* SeriesKindName(SeriesKind kind) {
  switch (kind) {
    case SeriesKind::kScalar: return "scalar";
    case SeriesKind::kTensorStats: return "tensor_stats";
    case SeriesKind::kSpan: return "span";
    case SeriesKind::kVector: return "vector";
  }
  return "scalar";
}

struct RunStore::OpenChunk {
  double base_time = 0;
  std::vector<int64_t> steps;
  std::vector<double> values;
  std::vector<float> offsets;
  size_t written = 0;               // points already in partial rows
  std::vector<int64_t> partial_rows;  // rowids of those rows, replaced when the chunk fills
  // The series' last step, across chunks, to count steps that go backwards.
  bool has_last_step = false;
  int64_t last_step = 0;
};

RunStore::~RunStore() {
  if (!read_only_) {
    // Write what is still buffered; a failure here has nowhere to go but is not fatal.
    WritePartialChunks();
  }
  for (sqlite3_stmt* stmt : statements_) sqlite3_finalize(stmt);
  if (db_) sqlite3_close_v2(db_);
}

Status RunStore::SqlError(const char* what) {
  return Status::Error(db_path_ + ": " + what + ": " + (db_ ? sqlite3_errmsg(db_) : "cannot open"));
}

Status RunStore::Exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = db_path_ + ": " + (error ? error : "SQL error");
    sqlite3_free(error);
    return Status::Error(message);
  }
  return Status::Ok();
}

Status RunStore::Prepare(const char* sql, sqlite3_stmt** stmt) {
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, stmt, nullptr) != SQLITE_OK) {
    return SqlError("prepare");
  }
  statements_.push_back(*stmt);
  return Status::Ok();
}

Status RunStore::OpenDb(const std::string& db_path, bool read_only, std::unique_ptr<RunStore>* out) {
  std::unique_ptr<RunStore> store(new RunStore());
  store->db_path_ = db_path;
  store->read_only_ = read_only;
  const int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (sqlite3_open_v2(db_path.c_str(), &store->db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    return store->SqlError("cannot open store");
  }
  sqlite3_busy_timeout(store->db_, 5000);
  sqlite3_extended_result_codes(store->db_, 1);
  *out = std::move(store);
  return Status::Ok();
}

Status RunStore::Create(const std::string& run_dir, const RunMeta& meta, std::unique_ptr<RunStore>* out) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::Error(run_dir + ": cannot create run directory: " + ec.message());
  const std::string db_path = (fs::path(run_dir) / kStoreFileName).string();
  if (fs::exists(db_path, ec)) return Status::Error(db_path + ": a run store already exists here");
  std::unique_ptr<RunStore> store;
  Status s = OpenDb(db_path, /*read_only=*/false, &store);
  if (!s.ok()) return s;
  s = store->CreateSchema(meta);
  if (!s.ok()) return s;
  *out = std::move(store);
  return Status::Ok();
}

Status RunStore::CreateSchema(const RunMeta& meta) {
  // A new, empty file needs no syncs while its schema is laid down (a crash now only means
  // the run never started); from the first data on, WAL with synchronous=NORMAL: a
  // process killed at any moment leaves every committed batch readable.
  Status s = Exec("PRAGMA synchronous=OFF; PRAGMA page_size=16384; PRAGMA journal_mode=WAL;");
  if (!s.ok()) return s;
  s = Exec("BEGIN");
  if (!s.ok()) return s;
  s = Exec(kSchema);
  if (!s.ok()) return s;
  s = Exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
  if (!s.ok()) return s;
  s = SetMeta(meta);
  if (!s.ok()) return s;
  s = Exec("COMMIT");
  if (!s.ok()) return s;
  s = Exec("PRAGMA synchronous=NORMAL");
  if (!s.ok()) return s;
  return CheckSchema();
}

Status RunStore::OpenForWrite(const std::string& run_dir, std::unique_ptr<RunStore>* out) {
  const std::string db_path = ResolveDbPath(run_dir);
  std::error_code ec;
  if (!fs::exists(db_path, ec)) return Status::Error(db_path + ": no run store here");
  std::unique_ptr<RunStore> store;
  Status s = OpenDb(db_path, /*read_only=*/false, &store);
  if (!s.ok()) return s;
  s = store->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (!s.ok()) return Status::Error(db_path + ": not a trainscope store: " + s.message());
  s = store->CheckSchema();
  if (!s.ok()) return s;
  *out = std::move(store);
  return Status::Ok();
}

Status RunStore::OpenReadOnly(const std::string& path, std::unique_ptr<RunStore>* out) {
  const std::string db_path = ResolveDbPath(path);
  std::error_code ec;
  if (!fs::exists(db_path, ec)) {
    return Status::Error(db_path + ": no such file (expected a run directory holding " +
                         std::string(kStoreFileName) + ")");
  }
  std::unique_ptr<RunStore> store;
  Status s = OpenDb(db_path, /*read_only=*/true, &store);
  if (!s.ok()) return s;
  // Readers map the file: a decimation scan then reads pages without copying them.
  store->Exec("PRAGMA mmap_size=1073741824");
  s = store->CheckSchema();
  if (!s.ok()) return s;
  *out = std::move(store);
  return Status::Ok();
}

Status RunStore::CheckSchema() {
  Statement stmt;
  if (sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, stmt.out(), nullptr) != SQLITE_OK ||
      sqlite3_step(stmt.get()) != SQLITE_ROW) {
    return Status::Error(db_path_ + ": not a trainscope store: " + sqlite3_errmsg(db_));
  }
  const int version = sqlite3_column_int(stmt.get(), 0);
  if (version != kSchemaVersion) {
    return Status::Error(db_path_ + ": not a trainscope store: schema version " + std::to_string(version) +
                         ", expected " + std::to_string(kSchemaVersion));
  }
  Statement check;
  if (sqlite3_prepare_v2(db_, "SELECT count(*) FROM series", -1, check.out(), nullptr) != SQLITE_OK ||
      sqlite3_step(check.get()) != SQLITE_ROW) {
    return Status::Error(db_path_ + ": damaged trainscope store: " + sqlite3_errmsg(db_));
  }
  return Status::Ok();
}

Status RunStore::EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id) {
  std::string key(tag);
  auto it = series_cache_.find(key);
  if (it == series_cache_.end()) {
    Statement select;
    sqlite3_prepare_v2(db_, "SELECT id, kind FROM series WHERE tag=?", -1, select.out(), nullptr);
    sqlite3_bind_text(select.get(), 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    int rc = sqlite3_step(select.get());
    if (rc == SQLITE_ROW) {
      it = series_cache_.emplace(key, std::make_pair(sqlite3_column_int64(select.get(), 0),
                                                     static_cast<SeriesKind>(sqlite3_column_int(select.get(), 1))))
               .first;
    } else if (rc == SQLITE_DONE) {
      Statement insert;
      sqlite3_prepare_v2(db_, "INSERT INTO series(tag, kind) VALUES(?, ?)", -1, insert.out(), nullptr);
      sqlite3_bind_text(insert.get(), 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
      sqlite3_bind_int(insert.get(), 2, static_cast<int>(kind));
      if (sqlite3_step(insert.get()) != SQLITE_DONE) return SqlError("add series");
      it = series_cache_.emplace(key, std::make_pair(sqlite3_last_insert_rowid(db_), kind)).first;
    } else {
      return SqlError("look up series");
    }
  }
  if (it->second.second != kind) {
    return Status::Error(db_path_ + ": series '" + key + "' holds " + SeriesKindName(it->second.second) +
                         " data, cannot add " + SeriesKindName(kind) + " data to it");
  }
  *id = it->second.first;
  return Status::Ok();
}

Status RunStore::InsertChunkRow(int64_t series_id, const OpenChunk& c, size_t begin, int64_t* rowid) {
  const size_t n = c.steps.size() - begin;
  std::string blob(n * (sizeof(int64_t) + sizeof(double) + sizeof(float)), '\0');
  char* p = blob.data();
  std::memcpy(p, c.steps.data() + begin, n * sizeof(int64_t));
  std::memcpy(p + n * sizeof(int64_t), c.values.data() + begin, n * sizeof(double));
  std::memcpy(p + n * (sizeof(int64_t) + sizeof(double)), c.offsets.data() + begin, n * sizeof(float));
  const auto [min_it, max_it] = std::minmax_element(c.steps.begin() + begin, c.steps.end());
  if (!insert_chunk_) {
    Status s = Prepare("INSERT INTO scalar_chunk(series_id, count, min_step, max_step, last_step, "
                       "last_value, base_time, data) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                       &insert_chunk_);
    if (!s.ok()) return s;
  }
  sqlite3_stmt* stmt = insert_chunk_;
  sqlite3_bind_int64(stmt, 1, series_id);
  sqlite3_bind_int64(stmt, 2, static_cast<int64_t>(n));
  sqlite3_bind_int64(stmt, 3, *min_it);
  sqlite3_bind_int64(stmt, 4, *max_it);
  sqlite3_bind_int64(stmt, 5, c.steps.back());
  BindDouble(stmt, 6, c.values.back());
  sqlite3_bind_double(stmt, 7, c.base_time);
  sqlite3_bind_blob(stmt, 8, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  if (rc != SQLITE_DONE) return SqlError("write scalar chunk");
  *rowid = sqlite3_last_insert_rowid(db_);
  return Status::Ok();
}

// A full chunk becomes one row; the partial rows that held its first points go, in the
// same transaction, so a reader sees either the parts or the whole, never both.
Status RunStore::WriteFullChunk(int64_t series_id, OpenChunk* c) {
  int64_t rowid = 0;
  Status s = InsertChunkRow(series_id, *c, 0, &rowid);
  if (!s.ok()) return s;
  if (!c->partial_rows.empty()) {
    if (!delete_chunk_) {
      s = Prepare("DELETE FROM scalar_chunk WHERE id=?", &delete_chunk_);
      if (!s.ok()) return s;
    }
    for (int64_t row : c->partial_rows) {
      sqlite3_bind_int64(delete_chunk_, 1, row);
      const int rc = sqlite3_step(delete_chunk_);
      sqlite3_reset(delete_chunk_);
      if (rc != SQLITE_DONE) return SqlError("replace partial chunks");
    }
  }
  const int64_t last_step = c->last_step;
  *c = OpenChunk();
  c->has_last_step = true;
  c->last_step = last_step;
  return Status::Ok();
}

// The points of each open chunk not yet in the store go into one small row per series.
Status RunStore::WritePartialChunks() {
  for (auto& [id, c] : open_chunks_) {
    if (c->written == c->steps.size()) continue;
    int64_t rowid = 0;
    Status s = InsertChunkRow(id, *c, c->written, &rowid);
    if (!s.ok()) return s;
    c->partial_rows.push_back(rowid);
    c->written = c->steps.size();
  }
  return Status::Ok();
}

Status RunStore::WriteScalars(const std::vector<WriteBatch::ScalarPoint>& points) {
  OpenChunk* chunk = nullptr;
  int64_t chunk_series = -1;
  for (const auto& p : points) {
    if (p.series_id != chunk_series) {  // points usually come grouped by series
      auto& slot = open_chunks_[p.series_id];
      if (!slot) slot = std::make_unique<OpenChunk>();
      chunk = slot.get();
      chunk_series = p.series_id;
    }
    if (chunk->has_last_step && p.step < chunk->last_step) ++backward_steps_;
    chunk->has_last_step = true;
    chunk->last_step = p.step;
    if (chunk->steps.empty()) chunk->base_time = p.wall_time;
    chunk->steps.push_back(p.step);
    chunk->values.push_back(p.value);
    chunk->offsets.push_back(static_cast<float>(p.wall_time - chunk->base_time));
    if (chunk->steps.size() == static_cast<size_t>(kChunkPoints)) {
      Status s = WriteFullChunk(p.series_id, chunk);
      if (!s.ok()) return s;
    }
  }
  return WritePartialChunks();
}

Status RunStore::UpdateFindings(const std::vector<Finding>& findings) {
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
    sqlite3_bind_text(update, 1, SeverityName(f.severity), -1, SQLITE_STATIC);
    sqlite3_bind_int64(update, 2, f.last_step);
    sqlite3_bind_text(update, 3, f.summary.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(update, 4, f.evidence_json.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(update, 5, causes_text.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(update, 6, actions_text.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(update, 7, f.code.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(update, 8, f.location.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_int64(update, 9, f.step);
    const int rc = sqlite3_step(update);
    sqlite3_reset(update);
    if (rc != SQLITE_DONE) s = SqlError("update finding");
  }
  if (!s.ok()) {
    Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

Status RunStore::Write(const WriteBatch& batch) {
  Status s = Exec("BEGIN");
  if (!s.ok()) return s;
  const int64_t backward_before = backward_steps_;
  s = WriteScalars(batch.scalars);
  for (const auto& r : batch.tensor_stats) {
    if (!s.ok()) break;
    if (!insert_stats_) {
      s = Prepare("INSERT INTO tensor_stats VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                  &insert_stats_);
      if (!s.ok()) break;
    }
    const TensorStats& t = r.stats;
    sqlite3_bind_int64(insert_stats_, 1, r.series_id);
    sqlite3_bind_int64(insert_stats_, 2, r.step);
    sqlite3_bind_double(insert_stats_, 3, r.wall_time);
    sqlite3_bind_int64(insert_stats_, 4, static_cast<int64_t>(t.numel));
    sqlite3_bind_int64(insert_stats_, 5, static_cast<int64_t>(t.nan));
    sqlite3_bind_int64(insert_stats_, 6, static_cast<int64_t>(t.inf));
    sqlite3_bind_int64(insert_stats_, 7, static_cast<int64_t>(t.zeros));
    BindDouble(insert_stats_, 8, t.min);
    BindDouble(insert_stats_, 9, t.max);
    BindDouble(insert_stats_, 10, t.sum);
    BindDouble(insert_stats_, 11, t.sum_squares);
    BindDouble(insert_stats_, 12, t.abs_max);
    BindDouble(insert_stats_, 13, t.dead_fraction);
    BindDouble(insert_stats_, 14, t.saturated_fraction);
    std::string histogram;
    if (t.has_histogram) {
      histogram = EncodeHistogram(t);
      sqlite3_bind_blob(insert_stats_, 15, histogram.data(), static_cast<int>(histogram.size()), SQLITE_STATIC);
    } else {
      sqlite3_bind_null(insert_stats_, 15);
    }
    const int rc = sqlite3_step(insert_stats_);
    sqlite3_reset(insert_stats_);
    if (rc != SQLITE_DONE) s = SqlError("write tensor stats");
  }
  for (const auto& v : batch.vectors) {
    if (!s.ok()) break;
    if (!insert_vector_) {
      s = Prepare("INSERT INTO vector VALUES(?1, ?2, ?3, ?4)", &insert_vector_);
      if (!s.ok()) break;
    }
    sqlite3_bind_int64(insert_vector_, 1, v.series_id);
    sqlite3_bind_int64(insert_vector_, 2, v.step);
    sqlite3_bind_double(insert_vector_, 3, v.wall_time);
    sqlite3_bind_blob(insert_vector_, 4, v.values.data(), static_cast<int>(v.values.size() * sizeof(float)),
                      SQLITE_STATIC);
    const int rc = sqlite3_step(insert_vector_);
    sqlite3_reset(insert_vector_);
    if (rc != SQLITE_DONE) s = SqlError("write vector");
  }
  for (const auto& span : batch.spans) {
    if (!s.ok()) break;
    if (!insert_span_) {
      s = Prepare("INSERT INTO span VALUES(?1, ?2, ?3, ?4)", &insert_span_);
      if (!s.ok()) break;
    }
    sqlite3_bind_int64(insert_span_, 1, span.step);
    sqlite3_bind_text(insert_span_, 2, span.phase.data(), static_cast<int>(span.phase.size()), SQLITE_STATIC);
    sqlite3_bind_double(insert_span_, 3, span.start);
    sqlite3_bind_double(insert_span_, 4, span.duration);
    const int rc = sqlite3_step(insert_span_);
    sqlite3_reset(insert_span_);
    if (rc != SQLITE_DONE) s = SqlError("write span");
  }
  for (const auto& f : batch.findings) {
    if (!s.ok()) break;
    if (!insert_finding_) {
      s = Prepare("INSERT INTO finding(code, severity, step, last_step, location, summary, evidence, causes, "
                  "actions) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                  &insert_finding_);
      if (!s.ok()) break;
    }
    const std::string causes_text = CausesToJson(f.causes).dump();
    const std::string actions_text = json(f.actions).dump();
    sqlite3_bind_text(insert_finding_, 1, f.code.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(insert_finding_, 2, SeverityName(f.severity), -1, SQLITE_STATIC);
    sqlite3_bind_int64(insert_finding_, 3, f.step);
    sqlite3_bind_int64(insert_finding_, 4, f.last_step);
    sqlite3_bind_text(insert_finding_, 5, f.location.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(insert_finding_, 6, f.summary.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(insert_finding_, 7, f.evidence_json.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(insert_finding_, 8, causes_text.c_str(), -1, SQLITE_STATIC);
    sqlite3_bind_text(insert_finding_, 9, actions_text.c_str(), -1, SQLITE_STATIC);
    const int rc = sqlite3_step(insert_finding_);
    sqlite3_reset(insert_finding_);
    if (rc != SQLITE_DONE) s = SqlError("write finding");
  }
  if (s.ok()) s = SetMetaValue("heartbeat", fmt_double(Now()));
  if (s.ok() && backward_steps_ != backward_before) s = SetMetaValue("backward_steps", std::to_string(backward_steps_));
  if (!s.ok()) {
    Exec("ROLLBACK");
    // Buffered chunks may hold points of the failed batch; start clean so they are not
    // written twice.
    open_chunks_.clear();
    return s;
  }
  return Exec("COMMIT");
}

Status RunStore::SetMetaValue(const std::string& key, const std::string& value) {
  Statement stmt;
  sqlite3_prepare_v2(db_, "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                     -1, stmt.out(), nullptr);
  sqlite3_bind_text(stmt.get(), 1, key.c_str(), -1, SQLITE_STATIC);
  sqlite3_bind_text(stmt.get(), 2, value.c_str(), -1, SQLITE_STATIC);
  if (sqlite3_step(stmt.get()) != SQLITE_DONE) return SqlError("write run metadata");
  return Status::Ok();
}

Status RunStore::SetMeta(const RunMeta& meta) {
  const std::pair<const char*, std::string> values[] = {
      {"name", meta.name},
      {"start_time", fmt_double(meta.start_time)},
      {"end_time", fmt_double(meta.end_time)},
      {"host", meta.host},
      {"pid", std::to_string(meta.pid)},
      {"config", meta.config_json.empty() ? "{}" : meta.config_json},
      {"command_line", meta.command_line},
      {"git_commit", meta.git_commit},
      {"status", meta.status},
      {"exit_reason", meta.exit_reason},
      {"heartbeat", fmt_double(meta.heartbeat)},
      {"dropped_points", std::to_string(meta.dropped_points)},
  };
  for (const auto& [key, value] : values) {
    Status s = SetMetaValue(key, value);
    if (!s.ok()) return s;
  }
  for (const auto& [key, value] : meta.extra) {
    Status s = SetMetaValue(key, value);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status RunStore::Close(const std::string& status, const std::string& exit_reason) {
  Status s = Exec("BEGIN");
  if (s.ok()) s = SetMetaValue("status", status);
  if (s.ok()) s = SetMetaValue("exit_reason", exit_reason);
  if (s.ok()) s = SetMetaValue("end_time", fmt_double(Now()));
  if (s.ok()) s = SetMetaValue("heartbeat", fmt_double(Now()));
  if (!s.ok()) {
    Exec("ROLLBACK");
    return s;
  }
  s = Exec("COMMIT");
  if (s.ok()) Exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return s;
}

Status RunStore::ReadMeta(RunMeta* meta) {
  Statement stmt;
  if (sqlite3_prepare_v2(db_, "SELECT key, value FROM meta", -1, stmt.out(), nullptr) != SQLITE_OK) {
    return SqlError("read run metadata");
  }
  *meta = RunMeta();
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    const std::string key = ColumnText(stmt.get(), 0);
    const std::string value = ColumnText(stmt.get(), 1);
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
  if (rc != SQLITE_DONE) return SqlError("read run metadata");
  return Status::Ok();
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

Status RunStore::ListSeries(std::vector<SeriesInfo>* out) {
  out->clear();
  Statement stmt;
  const char* sql = R"sql(
    SELECT s.id, s.tag, s.kind,
      CASE s.kind WHEN 0 THEN (SELECT coalesce(sum(count), 0) FROM scalar_chunk WHERE series_id = s.id)
                  WHEN 1 THEN (SELECT count(*) FROM tensor_stats WHERE series_id = s.id)
                  WHEN 3 THEN (SELECT count(*) FROM vector WHERE series_id = s.id) ELSE 0 END,
      CASE s.kind WHEN 0 THEN (SELECT min(min_step) FROM scalar_chunk WHERE series_id = s.id)
                  WHEN 1 THEN (SELECT min(step) FROM tensor_stats WHERE series_id = s.id)
                  WHEN 3 THEN (SELECT min(step) FROM vector WHERE series_id = s.id) END,
      CASE s.kind WHEN 0 THEN (SELECT max(max_step) FROM scalar_chunk WHERE series_id = s.id)
                  WHEN 1 THEN (SELECT max(step) FROM tensor_stats WHERE series_id = s.id)
                  WHEN 3 THEN (SELECT max(step) FROM vector WHERE series_id = s.id) END,
      CASE s.kind WHEN 0 THEN (SELECT last_value FROM scalar_chunk WHERE series_id = s.id ORDER BY id DESC LIMIT 1)
                  WHEN 1 THEN (SELECT sqrt(sum_squares) FROM tensor_stats WHERE series_id = s.id
                               ORDER BY rowid DESC LIMIT 1) END
    FROM series s ORDER BY s.tag)sql";
  if (sqlite3_prepare_v2(db_, sql, -1, stmt.out(), nullptr) != SQLITE_OK) return SqlError("list series");
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    SeriesInfo info;
    info.id = sqlite3_column_int64(stmt.get(), 0);
    info.tag = ColumnText(stmt.get(), 1);
    info.kind = static_cast<SeriesKind>(sqlite3_column_int(stmt.get(), 2));
    info.points = sqlite3_column_int64(stmt.get(), 3);
    info.first_step = sqlite3_column_int64(stmt.get(), 4);
    info.last_step = sqlite3_column_int64(stmt.get(), 5);
    info.last_value = ColumnDouble(stmt.get(), 6);
    out->push_back(std::move(info));
  }
  if (rc != SQLITE_DONE) return SqlError("list series");
  return Status::Ok();
}

Status RunStore::FindSeries(std::string_view tag, SeriesInfo* info) {
  Statement stmt;
  sqlite3_prepare_v2(db_, "SELECT id, kind FROM series WHERE tag=?", -1, stmt.out(), nullptr);
  sqlite3_bind_text(stmt.get(), 1, tag.data(), static_cast<int>(tag.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return Status::Error(db_path_ + ": no series '" + std::string(tag) + "'");
  if (rc != SQLITE_ROW) return SqlError("look up series");
  info->id = sqlite3_column_int64(stmt.get(), 0);
  info->tag = std::string(tag);
  info->kind = static_cast<SeriesKind>(sqlite3_column_int(stmt.get(), 1));
  return Status::Ok();
}

namespace {

// Walks the chunks of one scalar series overlapping [lo, hi], in append order, calling
// visit(steps, values, offsets, n, base_time) on each chunk's raw arrays.
template <class Visit>
int ForEachChunk(sqlite3* db, int64_t series_id, int64_t lo, int64_t hi, Visit&& visit) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT count, base_time, data FROM scalar_chunk "
                              "WHERE series_id=? AND max_step>=? AND min_step<=? ORDER BY id",
                              -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_int64(stmt, 1, series_id);
  sqlite3_bind_int64(stmt, 2, lo);
  sqlite3_bind_int64(stmt, 3, hi);
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const int64_t n = sqlite3_column_int64(stmt, 0);
    const double base_time = sqlite3_column_double(stmt, 1);
    const auto* data = static_cast<const unsigned char*>(sqlite3_column_blob(stmt, 2));
    const int bytes = sqlite3_column_bytes(stmt, 2);
    if (n < 0 || bytes != n * static_cast<int64_t>(sizeof(int64_t) + sizeof(double) + sizeof(float))) {
      rc = SQLITE_CORRUPT;
      break;
    }
    visit(data, data + n * sizeof(int64_t), data + n * (sizeof(int64_t) + sizeof(double)), n, base_time);
  }
  sqlite3_finalize(stmt);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

}  // namespace

Status RunStore::ReadScalars(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<Point>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  if (info.kind != SeriesKind::kScalar) {
    return Status::Error(db_path_ + ": series '" + std::string(tag) + "' is " + SeriesKindName(info.kind) +
                         ", not scalar");
  }
  const int rc = ForEachChunk(db_, info.id, step_min, step_max,
                              [&](const unsigned char* steps, const unsigned char* values,
                                  const unsigned char* offsets, int64_t n, double base_time) {
                                for (int64_t i = 0; i < n; ++i) {
                                  const int64_t step = LoadUnaligned<int64_t>(steps + i * 8);
                                  if (step < step_min || step > step_max) continue;
                                  out->push_back({step, base_time + LoadUnaligned<float>(offsets + i * 4),
                                                  LoadUnaligned<double>(values + i * 8)});
                                }
                              });
  if (rc != SQLITE_OK) return Status::Error(db_path_ + ": read series '" + std::string(tag) + "': " + sqlite3_errstr(rc));
  return Status::Ok();
}

Status RunStore::ReadDecimated(std::string_view tag, size_t buckets, int64_t step_min, int64_t step_max,
                               std::vector<Bucket>* out) {
  out->clear();
  if (buckets == 0) return Status::Error("decimation needs at least one bucket");
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  if (info.kind != SeriesKind::kScalar) {
    return Status::Error(db_path_ + ": series '" + std::string(tag) + "' is " + SeriesKindName(info.kind) +
                         ", not scalar");
  }
  // Narrow the requested range to the steps the series has, so buckets span real data.
  {
    Statement range;
    sqlite3_prepare_v2(db_, "SELECT min(min_step), max(max_step) FROM scalar_chunk WHERE series_id=?", -1,
                       range.out(), nullptr);
    sqlite3_bind_int64(range.get(), 1, info.id);
    if (sqlite3_step(range.get()) != SQLITE_ROW) return SqlError("read series range");
    if (sqlite3_column_type(range.get(), 0) == SQLITE_NULL) return Status::Ok();  // no points
    step_min = std::max<int64_t>(step_min, sqlite3_column_int64(range.get(), 0));
    step_max = std::min<int64_t>(step_max, sqlite3_column_int64(range.get(), 1));
  }
  if (step_min > step_max) return Status::Ok();
  // Bucket width in steps, rounded up so `buckets` buckets cover the range. Computed in
  // unsigned 128-bit-safe form: the range may span the whole int64 line.
  const uint64_t span = static_cast<uint64_t>(step_max) - static_cast<uint64_t>(step_min) + 1;
  const uint64_t width = std::max<uint64_t>(1, span / buckets + (span % buckets ? 1 : 0));
  const size_t used_buckets = static_cast<size_t>((span - 1) / width + 1);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<Bucket> all(used_buckets);
  for (size_t b = 0; b < used_buckets; ++b) {
    all[b] = Bucket{static_cast<int64_t>(static_cast<uint64_t>(step_min) + b * width),
                    static_cast<int64_t>(static_cast<uint64_t>(step_min) + (b + 1) * width),
                    0, kInf, -kInf, 0, 0, 0, 0};
  }
  const int rc = ForEachChunk(db_, info.id, step_min, step_max,
                              [&](const unsigned char* steps, const unsigned char* values,
                                  const unsigned char* offsets, int64_t n, double base_time) {
                                for (int64_t i = 0; i < n; ++i) {
                                  const int64_t step = LoadUnaligned<int64_t>(steps + i * 8);
                                  if (step < step_min || step > step_max) continue;
                                  const double v = LoadUnaligned<double>(values + i * 8);
                                  Bucket& b = all[(static_cast<uint64_t>(step) - static_cast<uint64_t>(step_min)) / width];
                                  ++b.count;
                                  if (std::isfinite(v)) {
                                    b.min = std::min(b.min, v);
                                    b.max = std::max(b.max, v);
                                  } else {
                                    ++b.nonfinite;
                                  }
                                  b.last = v;
                                  b.last_step = step;
                                  b.last_wall_time = base_time + LoadUnaligned<float>(offsets + i * 4);
                                }
                              });
  if (rc != SQLITE_OK) return Status::Error(db_path_ + ": read series '" + std::string(tag) + "': " + sqlite3_errstr(rc));
  for (Bucket& b : all) {
    if (b.count == 0) continue;
    if (b.count == b.nonfinite) b.min = b.max = std::numeric_limits<double>::quiet_NaN();
    out->push_back(b);
  }
  return Status::Ok();
}

Status RunStore::ReadTensorStats(std::string_view tag, int64_t step_min, int64_t step_max,
                                 std::vector<TensorStatsPoint>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  Statement stmt;
  sqlite3_prepare_v2(db_,
                     "SELECT step, wall_time, numel, nan, inf, zeros, min, max, sum, sum_squares, abs_max, "
                     "dead_fraction, saturated_fraction, histogram FROM tensor_stats "
                     "WHERE series_id=? AND step BETWEEN ? AND ? ORDER BY step, rowid",
                     -1, stmt.out(), nullptr);
  sqlite3_bind_int64(stmt.get(), 1, info.id);
  sqlite3_bind_int64(stmt.get(), 2, step_min);
  sqlite3_bind_int64(stmt.get(), 3, step_max);
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    TensorStatsPoint p;
    sqlite3_stmt* r = stmt.get();
    p.step = sqlite3_column_int64(r, 0);
    p.wall_time = sqlite3_column_double(r, 1);
    p.stats.numel = sqlite3_column_int64(r, 2);
    p.stats.nan = sqlite3_column_int64(r, 3);
    p.stats.inf = sqlite3_column_int64(r, 4);
    p.stats.zeros = sqlite3_column_int64(r, 5);
    p.stats.min = ColumnDouble(r, 6);
    p.stats.max = ColumnDouble(r, 7);
    p.stats.sum = ColumnDouble(r, 8);
    p.stats.sum_squares = ColumnDouble(r, 9);
    p.stats.abs_max = ColumnDouble(r, 10);
    p.stats.dead_fraction = ColumnDouble(r, 11);
    p.stats.saturated_fraction = ColumnDouble(r, 12);
    if (sqlite3_column_type(r, 13) == SQLITE_BLOB) {
      DecodeHistogram(static_cast<const unsigned char*>(sqlite3_column_blob(r, 13)), sqlite3_column_bytes(r, 13),
                      &p.stats);
    }
    out->push_back(p);
  }
  if (rc != SQLITE_DONE) return SqlError("read tensor stats");
  return Status::Ok();
}

Status RunStore::ReadVectors(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  Statement stmt;
  sqlite3_prepare_v2(db_,
                     "SELECT step, wall_time, data FROM vector WHERE series_id=? AND step BETWEEN ? AND ? "
                     "ORDER BY step, rowid",
                     -1, stmt.out(), nullptr);
  sqlite3_bind_int64(stmt.get(), 1, info.id);
  sqlite3_bind_int64(stmt.get(), 2, step_min);
  sqlite3_bind_int64(stmt.get(), 3, step_max);
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    VectorPoint p;
    p.step = sqlite3_column_int64(stmt.get(), 0);
    p.wall_time = sqlite3_column_double(stmt.get(), 1);
    const int bytes = sqlite3_column_bytes(stmt.get(), 2);
    p.values.resize(bytes / sizeof(float));
    if (bytes) std::memcpy(p.values.data(), sqlite3_column_blob(stmt.get(), 2), p.values.size() * sizeof(float));
    out->push_back(std::move(p));
  }
  if (rc != SQLITE_DONE) return SqlError("read vectors");
  return Status::Ok();
}

Status RunStore::ReadSpans(int64_t step_min, int64_t step_max, std::vector<Span>* out) {
  out->clear();
  Statement stmt;
  sqlite3_prepare_v2(db_, "SELECT step, phase, start, duration FROM span WHERE step BETWEEN ? AND ? ORDER BY step, rowid",
                     -1, stmt.out(), nullptr);
  sqlite3_bind_int64(stmt.get(), 1, step_min);
  sqlite3_bind_int64(stmt.get(), 2, step_max);
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    out->push_back({sqlite3_column_int64(stmt.get(), 0), ColumnText(stmt.get(), 1),
                    sqlite3_column_double(stmt.get(), 2), sqlite3_column_double(stmt.get(), 3)});
  }
  if (rc != SQLITE_DONE) return SqlError("read spans");
  return Status::Ok();
}

Status RunStore::ReadFindings(std::vector<Finding>* out) {
  out->clear();
  Statement stmt;
  sqlite3_prepare_v2(db_,
                     "SELECT code, severity, step, last_step, location, summary, evidence, causes, actions "
                     "FROM finding ORDER BY id",
                     -1, stmt.out(), nullptr);
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    Finding f;
    sqlite3_stmt* r = stmt.get();
    f.code = ColumnText(r, 0);
    ParseSeverity(ColumnText(r, 1), &f.severity);
    f.step = sqlite3_column_int64(r, 2);
    f.last_step = sqlite3_column_int64(r, 3);
    f.location = ColumnText(r, 4);
    f.summary = ColumnText(r, 5);
    f.evidence_json = ColumnText(r, 6);
    const json causes = json::parse(ColumnText(r, 7), nullptr, /*allow_exceptions=*/false);
    if (causes.is_array()) {
      for (const auto& c : causes) {
        if (c.is_object()) f.causes.push_back({c.value("id", ""), c.value("confidence", 0.0)});
      }
    }
    const json actions = json::parse(ColumnText(r, 8), nullptr, false);
    if (actions.is_array()) {
      for (const auto& a : actions) {
        if (a.is_string()) f.actions.push_back(a.get<std::string>());
      }
    }
    out->push_back(std::move(f));
  }
  if (rc != SQLITE_DONE) return SqlError("read findings");
  return Status::Ok();
}

Status RunStore::MaxStep(int64_t* step) {
  Statement stmt;
  sqlite3_prepare_v2(db_,
                     "SELECT max(coalesce((SELECT max(max_step) FROM scalar_chunk), 0), "
                     "coalesce((SELECT max(step) FROM tensor_stats), 0))",
                     -1, stmt.out(), nullptr);
  if (sqlite3_step(stmt.get()) != SQLITE_ROW) return SqlError("read max step");
  *step = sqlite3_column_int64(stmt.get(), 0);
  return Status::Ok();
}

Status ListRuns(const std::string& logdir, std::vector<RunEntry>* runs) {
  runs->clear();
  std::error_code ec;
  if (!fs::is_directory(logdir, ec)) return Status::Error(logdir + ": not a directory (expected a logdir of runs)");
  fs::recursive_directory_iterator it(logdir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return Status::Error(logdir + ": cannot list: " + ec.message());
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
