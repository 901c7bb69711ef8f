#include "store/run_store.h"

#include "store/json_forms.h"

#include <sqlite3.h>
#include <zlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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
-- float32 wall-time offsets from base_time[n], little-endian. crc: RowCrc of count, base_time
-- and data. Every crc column is NULL, or missing, in stores written before checksums.
CREATE TABLE scalar_chunk(
  id INTEGER PRIMARY KEY, series_id INTEGER NOT NULL, count INTEGER NOT NULL,
  min_step INTEGER NOT NULL, max_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL, last_value REAL, base_time REAL NOT NULL, data BLOB NOT NULL, crc INTEGER);
CREATE INDEX scalar_chunk_by_series ON scalar_chunk(series_id);
-- histogram: uint8 first bin, then uint64 counts up to the last non-zero bin. crc: RowCrc of
-- step, wall_time, the statistics and the histogram.
CREATE TABLE tensor_stats(
  series_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
  numel INTEGER, nan INTEGER, inf INTEGER, zeros INTEGER,
  min REAL, max REAL, sum REAL, sum_squares REAL, abs_max REAL,
  dead_fraction REAL, saturated_fraction REAL, histogram BLOB, crc INTEGER);
CREATE INDEX tensor_stats_by_series ON tensor_stats(series_id, step);
-- data: float32 values. crc: RowCrc of step, wall_time and data.
CREATE TABLE vector(series_id INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
  data BLOB NOT NULL, crc INTEGER);
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

// Readers map the file: a decimation scan then reads pages without copying them. An
// optimisation only: without it pages are read by read(2), so its failure is no error.
constexpr const char* kMapReads = "PRAGMA mmap_size=1073741824";

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

// Reads a histogram written by EncodeHistogram. A blob of another shape (cut short, or
// reaching past the last bin) leaves the stats without a histogram and says why: a part of
// the counts would misstate every fraction computed from them.
std::string DecodeHistogram(const unsigned char* blob, int bytes, TensorStats* s) {
  constexpr int kBin = static_cast<int>(sizeof(uint64_t));
  if (bytes < 1 || (bytes - 1) % kBin != 0) {
    return "histogram of " + std::to_string(bytes) + " bytes, expected 1 + 8 x bins (cut short?)";
  }
  const int first = blob[0];
  const int count = (bytes - 1) / kBin;
  if (first + count > TensorStats::kExponentBins) {
    return "histogram of " + std::to_string(count) + " bins from bin " + std::to_string(first) + ", expected at most " +
           std::to_string(TensorStats::kExponentBins) + " bins in all";
  }
  s->has_histogram = true;
  for (int i = 0; i < count; ++i) s->exponent_counts[first + i] = LoadUnaligned<uint64_t>(blob + 1 + i * kBin);
  return {};
}

// Binds a statement's parameters from ?1 on and keeps the first failure (a blob over
// SQLite's length limit, out of memory): a step must not run with a parameter unbound.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Binder& Int(int64_t v) { return Keep(sqlite3_bind_int64(stmt_, ++index_, v)); }
  Binder& Real(double v) { return Keep(sqlite3_bind_double(stmt_, ++index_, v)); }  // NaN binds NULL
  Binder& Text(std::string_view v) {
    return Keep(sqlite3_bind_text64(stmt_, ++index_, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8));
  }
  // An empty blob stays a blob (a null pointer would bind NULL and break NOT NULL columns).
  Binder& Blob(const void* data, size_t bytes) {
    if (bytes == 0) return Keep(sqlite3_bind_zeroblob(stmt_, ++index_, 0));
    return Keep(sqlite3_bind_blob64(stmt_, ++index_, data, bytes, SQLITE_STATIC));
  }
  Binder& Null() { return Keep(sqlite3_bind_null(stmt_, ++index_)); }
  int rc() const { return rc_; }

 private:
  Binder& Keep(int rc) {
    if (rc_ == SQLITE_OK) rc_ = rc;
    return *this;
  }
  sqlite3_stmt* stmt_;
  int index_ = 0;
  int rc_ = SQLITE_OK;
};

// Damage in the file (as opposed to a busy lock, a failing disk or a full one): a read
// skips what it cannot read and goes on.
bool IsDamage(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_FORMAT;
}

Status StatusFromSqlite(int rc, std::string message) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_FORMAT: return Status::Corruption(std::move(message));
    case SQLITE_CONSTRAINT:
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH: return Status::InvalidArgument(std::move(message));
    case SQLITE_ERROR:
    case SQLITE_MISUSE:
    case SQLITE_INTERNAL: return Status::Internal(std::move(message));
    default: return Status::IOError(std::move(message));  // IOERR, FULL, READONLY, BUSY, NOMEM, CANTOPEN, ...
  }
}

// The checksum of a tensor_stats row's step, wall time and statistics, as they read back
// (the histogram's bytes are added by the caller).
RowCrc StatsCrc(int64_t step, double wall_time, const TensorStats& t) {
  RowCrc crc;
  crc.Int(step).Real(wall_time);
  crc.Int(static_cast<int64_t>(t.numel)).Int(static_cast<int64_t>(t.nan)).Int(static_cast<int64_t>(t.inf));
  crc.Int(static_cast<int64_t>(t.zeros)).Real(t.min).Real(t.max).Real(t.sum).Real(t.sum_squares);
  crc.Real(t.abs_max).Real(t.dead_fraction).Real(t.saturated_fraction);
  return crc;
}

double ColumnDouble(sqlite3_stmt* stmt, int column) {
  // SQLite stores NaN as NULL; read it back as NaN.
  if (sqlite3_column_type(stmt, column) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt, column);
}

std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text ? std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt, column)) : std::string();
}

}  // namespace

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

size_t BatchBytes(const WriteBatch& batch) {
  size_t bytes = batch.scalars.size() * sizeof(WriteBatch::ScalarPoint) +
                 batch.tensor_stats.size() * sizeof(WriteBatch::StatsPoint) + batch.spans.size() * sizeof(Span);
  for (const auto& v : batch.vectors) bytes += sizeof(v) + v.values.size() * sizeof(float);
  return bytes;
}

RowCrc& RowCrc::Int(int64_t v) { return Bytes(&v, sizeof(v)); }

RowCrc& RowCrc::Real(double v) {
  // As the value reads back: SQLite stores NaN as NULL (read as NaN) and -0.0 as 0.
  if (std::isnan(v)) v = std::numeric_limits<double>::quiet_NaN();
  if (v == 0) v = 0;
  return Bytes(&v, sizeof(v));
}

RowCrc& RowCrc::Bytes(const void* data, size_t bytes) {
  // zlib takes a uInt length: stored values are far smaller, but stay correct past 4 GB.
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    const auto n = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc_ = crc32(crc_, p, n);
    p += n;
    bytes -= n;
  }
  return *this;
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
  if (!db_) return Status::IOError(db_path_ + ": " + what + ": cannot open");
  return SqlError(what, sqlite3_extended_errcode(db_));
}

std::string StoreFaultCause(int sqlite_code, int system_errno) {
  switch (sqlite_code & 0xff) {
    case SQLITE_FULL: return "disk full";
    case SQLITE_READONLY:
      // SQLITE_READONLY_DBMOVED: the file was unlinked or renamed under the open store.
      return sqlite_code == SQLITE_READONLY_DBMOVED ? "store deleted" : "read-only";
    case SQLITE_PERM: return "read-only";
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return "locked by another process";
    default: break;
  }
  // An I/O error or a failed open says no more: the system's errno tells why.
  switch (system_errno) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return "disk full";  // EFBIG: the file size limit (ulimit -f), full for this file
    case EROFS:
    case EACCES:
    case EPERM: return "read-only";
    case ENOENT: return "store deleted";
    default: break;
  }
  return (sqlite_code & 0xff) == SQLITE_CANTOPEN ? "cannot open" : "I/O error";
}

void RunStore::NoteFailure(int rc) {
  last_fault_ = StoreFaultCause(rc, db_ ? sqlite3_system_errno(db_) : 0);
  if (last_fault_ != "I/O error") return;
  // SQLite reports a write refused for want of space as a plain I/O error when the OS said
  // EFBIG (a file size limit), and its errno is often gone by then: the file system and
  // the limit are asked instead.
  const std::string dir = fs::path(db_path_).parent_path().string();
  struct statvfs vfs;
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &vfs) == 0) {
    if (vfs.f_flag & ST_RDONLY) {
      last_fault_ = "read-only";
      return;
    }
    if (static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < (64u << 10)) {
      last_fault_ = "disk full";
      return;
    }
  }
  struct rlimit limit;
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    for (const char* suffix : {"", "-wal"}) {
      struct stat st;
      if (::stat((db_path_ + suffix).c_str(), &st) == 0 &&
          static_cast<uint64_t>(st.st_size) + (64u << 10) > static_cast<uint64_t>(limit.rlim_cur)) {
        last_fault_ = "disk full";
        return;
      }
    }
  }
}

Status RunStore::SqlError(const char* what, int rc) {
  NoteFailure(rc);
  // The connection's message belongs to its last failure, which may not be rc's.
  const char* detail = db_ && sqlite3_extended_errcode(db_) == rc ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  return StatusFromSqlite(rc, db_path_ + ": " + what + ": " + detail);
}

Status RunStore::StepDone(sqlite3_stmt* stmt, int bind_rc, const char* what) {
  // sqlite3_reset repeats the step's error code, which is checked here already.
  if (bind_rc != SQLITE_OK) {
    sqlite3_reset(stmt);
    return SqlError(what, bind_rc);
  }
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  if (rc != SQLITE_DONE) return SqlError(what, rc);
  return Status::Ok();
}

void RunStore::ReportDamage(DamagedRecord record) {
  damage_.Damaged(record);
  if (reporter_) reporter_->Damaged(record);
}

Status RunStore::Exec(const char* sql) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    NoteFailure(sqlite3_extended_errcode(db_));
    std::string message = db_path_ + ": " + (error ? error : sqlite3_errstr(rc));
    sqlite3_free(error);
    return StatusFromSqlite(rc, std::move(message));
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

void RunStore::LimitValueSize(int max_bytes) {
  (void)sqlite3_limit(db_, SQLITE_LIMIT_LENGTH, max_bytes);  // returns the old limit: nothing to check
}

Status RunStore::LimitFileSize(int64_t max_bytes) {
  Statement page_size;
  if (sqlite3_prepare_v2(db_, "PRAGMA page_size", -1, page_size.out(), nullptr) != SQLITE_OK ||
      sqlite3_step(page_size.get()) != SQLITE_ROW) {
    return SqlError("read page size");
  }
  const int64_t pages = std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, sqlite3_column_int64(page_size.get(), 0)));
  return Exec(("PRAGMA max_page_count=" + std::to_string(pages)).c_str());
}

Status RunStore::OpenDb(const std::string& db_path, bool read_only, std::unique_ptr<RunStore>* out) {
  std::unique_ptr<RunStore> store(new RunStore());
  store->db_path_ = db_path;
  store->read_only_ = read_only;
  const int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int rc = sqlite3_open_v2(db_path.c_str(), &store->db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    // Even a failed open hands back a connection (for its message), closed with the store.
    return store->db_ ? store->SqlError("cannot open store", rc)
                      : Status::IOError(db_path + ": cannot open store: " + sqlite3_errstr(rc));
  }
  if (sqlite3_busy_timeout(store->db_, 5000) != SQLITE_OK || sqlite3_extended_result_codes(store->db_, 1) != SQLITE_OK) {
    return store->SqlError("configure connection");
  }
  *out = std::move(store);
  return Status::Ok();
}

Status RunStore::Create(const std::string& run_dir, const RunMeta& meta, std::unique_ptr<RunStore>* out,
                        std::string* fault) {
  std::error_code ec;
  const bool created_dir = fs::create_directories(run_dir, ec);
  if (ec) {
    if (fault) *fault = StoreFaultCause(0, ec.value());
    return Status::IOError(run_dir + ": cannot create run directory: " + ec.message());
  }
  const std::string db_path = (fs::path(run_dir) / kStoreFileName).string();
  if (fs::exists(db_path, ec)) return Status::InvalidArgument(db_path + ": a run store already exists here");
  std::unique_ptr<RunStore> store;
  Status s = OpenDb(db_path, /*read_only=*/false, &store);
  if (s.ok()) s = store->CreateSchema(meta);
  if (!s.ok()) {
    // A store that could not be laid down (a full disk, a read-only one) is removed with its
    // WAL: an empty file left behind would read as a damaged run.
    if (store) {
      if (fault) *fault = store->last_fault_;
      store.reset();
    } else if (fault) {
      *fault = StoreFaultCause(0, errno);
    }
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(db_path + suffix, ec);
    if (created_dir) fs::remove(run_dir, ec);  // only if empty: nothing of anyone else's goes
    return s;
  }
  store->NoteFileId();
  *out = std::move(store);
  return Status::Ok();
}

void RunStore::NoteFileId() {
  struct stat st;
  if (::stat(db_path_.c_str(), &st) == 0) file_id_ = {st.st_dev, st.st_ino};
}

Status RunStore::Checkpoint() { return Exec("PRAGMA wal_checkpoint(TRUNCATE)"); }

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
  if (!fs::exists(db_path, ec)) return Status::NotFound(db_path + ": no run store here");
  if (Status regular = CheckRegularFile(db_path); !regular.ok()) return regular;
  std::unique_ptr<RunStore> store;
  Status s = OpenDb(db_path, /*read_only=*/false, &store);
  if (!s.ok()) return s;
  s = store->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (!s.ok()) return s.WithMessage(db_path + ": not a trainscope store: " + s.message());
  s = store->CheckSchema();
  if (!s.ok()) return s;
  store->NoteFileId();
  *out = std::move(store);
  return Status::Ok();
}

Status RunStore::OpenReadOnly(const std::string& path, std::unique_ptr<RunStore>* out, DamageReporter* reporter) {
  const std::string db_path = ResolveDbPath(path);
  std::error_code ec;
  if (!fs::exists(db_path, ec)) {
    return Status::NotFound(db_path + ": no such file (expected a run directory holding " +
                            std::string(kStoreFileName) + ")");
  }
  if (Status regular = CheckRegularFile(db_path); !regular.ok()) return regular;
  std::unique_ptr<RunStore> store;
  Status s = OpenDb(db_path, /*read_only=*/true, &store);
  if (!s.ok()) return s;
  store->reporter_ = reporter;
  (void)store->Exec(kMapReads);
  s = store->CheckSchema();
  if (s.IsCorruption()) {
    // A file cut short (a copy that stopped, a full disk) is refused whole by SQLite when its
    // header counts more pages than the file has. writable_schema lets it read the pages
    // that are there; the connection is read-only, so nothing can be written through it.
    Status relaxed = store->Exec("PRAGMA writable_schema=ON");
    if (relaxed.ok()) relaxed = store->CheckSchema();
    if (!relaxed.ok()) return s;
    const auto bytes = fs::file_size(db_path, ec);
    store->ReportDamage({"", "file", 0,
                         s.message() + " (" + (ec ? std::string("size unknown") : std::to_string(bytes) + " bytes") +
                             "): read as far as the pages that are there"});
    s = relaxed;
  }
  if (!s.ok()) return s;
  *out = std::move(store);
  return Status::Ok();
}

Status RunStore::CheckSchema() {
  Statement stmt;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, stmt.out(), nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_ROW) return SqlError("not a trainscope store", rc);
  const int version = sqlite3_column_int(stmt.get(), 0);
  std::error_code ec;
  if (version == 0 && fs::exists(db_path_, ec) && fs::file_size(db_path_, ec) == 0) {
    return Status::Corruption(db_path_ + ": empty store (0 bytes): nothing was ever written to it; the disk was "
                              "full or not writable when the run started");
  }
  if (version != kSchemaVersion) {
    return Status::Corruption(db_path_ + ": not a trainscope store: schema version " + std::to_string(version) +
                              ", expected " + std::to_string(kSchemaVersion));
  }
  // Whether rows carry their checksums (stores written before them do not).
  {
    Statement crc;
    rc = sqlite3_prepare_v2(db_,
                            "SELECT (SELECT count(*) FROM pragma_table_info('scalar_chunk') WHERE name='crc') + "
                            "(SELECT count(*) FROM pragma_table_info('tensor_stats') WHERE name='crc') + "
                            "(SELECT count(*) FROM pragma_table_info('vector') WHERE name='crc')",
                            -1, crc.out(), nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(crc.get());
    row_crc_ = rc == SQLITE_ROW && sqlite3_column_int(crc.get(), 0) == 3;
  }
  // The tables are there (the schema is on page 1); damage inside them is met, reported
  // and skipped by the reads.
  Statement check;
  rc = sqlite3_prepare_v2(db_,
                          "SELECT count(*) FROM sqlite_schema WHERE type='table' AND name IN "
                          "('meta', 'series', 'scalar_chunk', 'tensor_stats', 'vector', 'span', 'finding')",
                          -1, check.out(), nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(check.get());
  if (rc != SQLITE_ROW) return SqlError("damaged trainscope store", rc);
  if (sqlite3_column_int(check.get(), 0) != 7) {
    return Status::Corruption(db_path_ + ": damaged trainscope store: expected the tables meta, series, "
                              "scalar_chunk, tensor_stats, vector, span and finding");
  }
  return Status::Ok();
}

Status RunStore::EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id) {
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
    return Status::InvalidArgument(db_path_ + ": series '" + key + "' holds " + SeriesKindName(it->second.second) +
                         " data, cannot add " + SeriesKindName(kind) + " data to it");
  }
  *id = it->second.first;
  return Status::Ok();
}

Status RunStore::EnsureSeriesAll(const std::vector<std::pair<std::string, SeriesKind>>& series,
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

Status RunStore::InsertChunkRow(int64_t series_id, const OpenChunk& c, size_t begin, int64_t* rowid) {
  const size_t n = c.steps.size() - begin;
  std::string blob(n * (sizeof(int64_t) + sizeof(double) + sizeof(float)), '\0');
  char* p = blob.data();
  std::memcpy(p, c.steps.data() + begin, n * sizeof(int64_t));
  std::memcpy(p + n * sizeof(int64_t), c.values.data() + begin, n * sizeof(double));
  std::memcpy(p + n * (sizeof(int64_t) + sizeof(double)), c.offsets.data() + begin, n * sizeof(float));
  const auto [min_it, max_it] = std::minmax_element(c.steps.begin() + begin, c.steps.end());
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
  binder.Int(series_id)
      .Int(static_cast<int64_t>(n))
      .Int(*min_it)
      .Int(*max_it)
      .Int(c.steps.back())
      .Real(c.values.back())
      .Real(c.base_time)
      .Blob(blob.data(), blob.size());
  if (row_crc_) binder.Int(RowCrc().Int(static_cast<int64_t>(n)).Real(c.base_time).Bytes(blob.data(), blob.size()).value());
  const int bind_rc = binder.rc();
  Status s = StepDone(insert_chunk_, bind_rc, "write scalar chunk");
  if (!s.ok()) return s;
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
      s = StepDone(delete_chunk_, Binder(delete_chunk_).Int(row).rc(), "replace partial chunks");
      if (!s.ok()) return s;
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
  int64_t chunk_series = 0;
  for (const auto& p : points) {
    if (chunk == nullptr || p.series_id != chunk_series) {  // points usually come grouped by series
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
void RunStore::Rollback() {
  if (!sqlite3_get_autocommit(db_)) (void)Exec("ROLLBACK");
}

Status RunStore::Write(const WriteBatch& batch) {
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
      return Status::InvalidArgument(db_path_ + ": write: series id " + std::to_string(id) +
                                     " is not one EnsureSeries gave (expected ids from 1)");
    }
  }
  // SQLite writes on into a store whose file was deleted (or replaced) under it, and all of
  // it would be lost unseen: one stat a write tells.
  if (file_id_.first != 0) {
    struct stat st;
    if (::stat(db_path_.c_str(), &st) != 0 || st.st_dev != file_id_.first || st.st_ino != file_id_.second) {
      last_fault_ = "store deleted";
      return Status::IOError(db_path_ + ": the store file was deleted or replaced while the run was written");
    }
  }
  Status s = Exec("BEGIN");
  if (!s.ok()) return s;
  const int64_t backward_before = backward_steps_;
  s = WriteScalars(batch.scalars);
  for (const auto& r : batch.tensor_stats) {
    if (!s.ok()) break;
    if (!insert_stats_) {
      s = Prepare(row_crc_ ? "INSERT INTO tensor_stats VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                             "?14, ?15, ?16)"
                           : "INSERT INTO tensor_stats VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                             "?14, ?15)",
                  &insert_stats_);
      if (!s.ok()) break;
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
        .Real(t.abs_max)
        .Real(t.dead_fraction)
        .Real(t.saturated_fraction);
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
    s = StepDone(insert_stats_, bind.rc(), "write tensor stats");
  }
  for (const auto& v : batch.vectors) {
    if (!s.ok()) break;
    if (!insert_vector_) {
      s = Prepare(row_crc_ ? "INSERT INTO vector VALUES(?1, ?2, ?3, ?4, ?5)" : "INSERT INTO vector VALUES(?1, ?2, ?3, ?4)",
                  &insert_vector_);
      if (!s.ok()) break;
    }
    const size_t bytes = v.values.size() * sizeof(float);
    Binder bind(insert_vector_);
    bind.Int(v.series_id).Int(v.step).Real(v.wall_time).Blob(v.values.data(), bytes);
    if (row_crc_) bind.Int(RowCrc().Int(v.step).Real(v.wall_time).Bytes(v.values.data(), bytes).value());
    const int bind_rc = bind.rc();
    s = StepDone(insert_vector_, bind_rc, "write vector");
  }
  for (const auto& span : batch.spans) {
    if (!s.ok()) break;
    if (!insert_span_) {
      s = Prepare("INSERT INTO span VALUES(?1, ?2, ?3, ?4)", &insert_span_);
      if (!s.ok()) break;
    }
    const int bind_rc =
        Binder(insert_span_).Int(span.step).Text(span.phase).Real(span.start).Real(span.duration).rc();
    s = StepDone(insert_span_, bind_rc, "write span");
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
    s = StepDone(insert_finding_, bind_rc, "write finding");
  }
  if (s.ok()) s = SetMetaValue("heartbeat", fmt_double(Now()));
  if (s.ok() && backward_steps_ != backward_before) s = SetMetaValue("backward_steps", std::to_string(backward_steps_));
  if (s.ok()) s = Exec("COMMIT");  // a full disk may refuse the commit itself
  if (!s.ok()) {
    Rollback();
    // Buffered chunks may hold points of the failed batch, and rowids of partial rows the
    // rollback took back; start clean so nothing is written twice or deleted by mistake.
    open_chunks_.clear();
    backward_steps_ = backward_before;
    return s;
  }
  return Status::Ok();
}

Status RunStore::SetMetaValue(const std::string& key, const std::string& value) {
  Statement stmt;
  if (sqlite3_prepare_v2(db_, "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                         -1, stmt.out(), nullptr) != SQLITE_OK) {
    return SqlError("write run metadata");
  }
  return StepDone(stmt.get(), Binder(stmt.get()).Text(key).Text(value).rc(), "write run metadata");
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

Status RunStore::Close(const std::string& status, const std::string& exit_reason,
                       const std::vector<std::pair<std::string, std::string>>& meta) {
  Status s = Exec("BEGIN");
  for (const auto& [key, value] : meta) {
    if (s.ok()) s = SetMetaValue(key, value);
  }
  if (s.ok()) s = SetMetaValue("status", status);
  if (s.ok()) s = SetMetaValue("exit_reason", exit_reason);
  if (s.ok()) s = SetMetaValue("end_time", fmt_double(Now()));
  if (s.ok()) s = SetMetaValue("heartbeat", fmt_double(Now()));
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

void RunStore::UnmapReads() {
  (void)Exec("PRAGMA mmap_size=0");
  // Pages are then SQLite's own cache: large enough that the rows of one window, which the
  // series share pages with, are read from the file once rather than once per series.
  (void)Exec("PRAGMA cache_size=-32768");  // KiB
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
  if (IsDamage(rc)) {
    // The keys read before the damage are kept; the rest take their defaults.
    ReportDamage({"", "meta", 0, std::string("the metadata stop at damage: ") + sqlite3_errmsg(db_)});
    return Status::Ok();
  }
  if (rc != SQLITE_DONE) return SqlError("read run metadata", rc);
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


// How one read finds its rows. Every query binds ?1 the series id, ?2 the lowest step and
// ?3 the highest, as far as it has parameters; `one` binds ?4, a rowid. Each query's
// first two columns are the rowid and the order key (rows come in key, rowid order).
struct RunStore::ReadPlan {
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
Status RunStore::ReadRows(const ReadPlan& plan, const std::string& series, int64_t series_id, int64_t lo, int64_t hi,
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

constexpr int64_t kChunkPointBytes = sizeof(int64_t) + sizeof(double) + sizeof(float);

// Scalar chunks in append (rowid) order; the range test on min/max step is in the scan, the
// listings come from the series index alone (it holds the rowid), so they read no table page.
// Stores from before the checksum have no crc column: NULL stands in.
const char* const kChunkColumns = "id, id, count, base_time, data, min_step, max_step, crc";
const char* const kChunkColumnsWithoutCrc = "id, id, count, base_time, data, min_step, max_step, NULL";

}  // namespace

Status RunStore::ListSeries(std::vector<SeriesInfo>* out) {
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

Status RunStore::FindSeries(std::string_view tag, SeriesInfo* info) {
  Statement stmt;
  int rc = sqlite3_prepare_v2(db_, "SELECT id, kind FROM series WHERE tag=?", -1, stmt.out(), nullptr);
  if (rc == SQLITE_OK) rc = Binder(stmt.get()).Text(tag).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return Status::NotFound(db_path_ + ": no series '" + std::string(tag) + "'");
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
  const auto stored = static_cast<uint32_t>(sqlite3_column_int64(r, column));
  if (stored == computed.value()) return {};
  char text[64];
  std::snprintf(text, sizeof(text), "checksum mismatch (CRC-32 %08x, stored %08x)", computed.value(), stored);
  return std::string(text) + ": the row's values changed after they were written";
}

// Checks one scalar_chunk row of kChunkColumns and hands its arrays to
// visit(steps, values, offsets, n, base_time). Returns what is wrong with a damaged row.
template <class Visit>
std::string VisitChunk(sqlite3_stmt* r, Visit& visit) {
  const int64_t n = sqlite3_column_int64(r, 2);
  const double base_time = sqlite3_column_double(r, 3);
  const auto* data = static_cast<const unsigned char*>(sqlite3_column_blob(r, 4));
  const int64_t bytes = sqlite3_column_bytes(r, 4);
  if (n < 0 || n > RunStore::kChunkPoints || bytes != n * kChunkPointBytes || (n > 0 && !data)) {
    return "chunk of " + std::to_string(n) + " points holds " + std::to_string(bytes) + " bytes, expected " +
           std::to_string(kChunkPointBytes) + " per point and at most " + std::to_string(RunStore::kChunkPoints) +
           " points";
  }
  if (std::string wrong = CrcMismatch(r, 7, RowCrc().Int(n).Real(base_time).Bytes(data, static_cast<size_t>(bytes)));
      !wrong.empty()) {
    return wrong;
  }
  if (n > 0) visit(data, data + n * sizeof(int64_t), data + n * (sizeof(int64_t) + sizeof(double)), n, base_time);
  return {};
}

std::string WrongKind(const std::string& db_path, std::string_view tag, SeriesKind kind, const char* expected) {
  return db_path + ": series '" + std::string(tag) + "' is " + SeriesKindName(kind) + ", not " + expected;
}

}  // namespace

template <class Visit>
Status RunStore::ForEachChunk(const SeriesInfo& info, int64_t lo, int64_t hi, Visit&& visit) {
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

Status RunStore::ReadScalars(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<Point>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  if (info.kind != SeriesKind::kScalar) return Status::InvalidArgument(WrongKind(db_path_, tag, info.kind, "scalar"));
  return ReadScalars(info, step_min, step_max, out);
}

namespace {

// A chunk visitor (VisitChunk) that appends the points with step in [lo, hi] to `out`.
struct AppendPointsIn {
  int64_t lo, hi;
  std::vector<Point>* out;
  void operator()(const unsigned char* steps, const unsigned char* values, const unsigned char* offsets, int64_t n,
                  double base_time) const {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t step = LoadUnaligned<int64_t>(steps + i * 8);
      if (step < lo || step > hi) continue;
      out->push_back({step, base_time + LoadUnaligned<float>(offsets + i * 4), LoadUnaligned<double>(values + i * 8)});
    }
  }
};

}  // namespace

Status RunStore::ReadScalars(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<Point>* out) {
  out->clear();
  return ForEachChunk(info, step_min, step_max, AppendPointsIn{step_min, step_max, out});
}

Status RunStore::ListChunks(const SeriesInfo& info, std::vector<ChunkSpan>* chunks) {
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

Status RunStore::ReadChunks(const SeriesInfo& info, const std::vector<int64_t>& ids, int64_t step_min,
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
  AppendPointsIn visit{step_min, step_max, out};
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

Status RunStore::ReadDecimated(std::string_view tag, size_t buckets, int64_t step_min, int64_t step_max,
                               std::vector<Bucket>* out) {
  out->clear();
  if (buckets == 0) return Status::InvalidArgument("decimation needs at least one bucket");
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  if (info.kind != SeriesKind::kScalar) return Status::InvalidArgument(WrongKind(db_path_, tag, info.kind, "scalar"));
  // Narrow the requested range to the steps the series has, so buckets span real data.
  {
    Statement range;
    int rc = sqlite3_prepare_v2(db_, "SELECT min(min_step), max(max_step) FROM scalar_chunk WHERE series_id=?", -1,
                                range.out(), nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(range.get(), 1, info.id);
    if (rc == SQLITE_OK) rc = sqlite3_step(range.get());
    if (rc == SQLITE_ROW) {
      if (sqlite3_column_type(range.get(), 0) == SQLITE_NULL) return Status::Ok();  // no points
      step_min = std::max<int64_t>(step_min, sqlite3_column_int64(range.get(), 0));
      step_max = std::min<int64_t>(step_max, sqlite3_column_int64(range.get(), 1));
    } else if (IsDamage(rc)) {
      // The range cannot be narrowed; bucket the range asked for, over the rows that read.
      // The chunk read below meets the same damage and reports it.
    } else {
      return SqlError("read series range", rc);
    }
  }
  if (step_min > step_max) return Status::Ok();
  // Bucket width in steps, rounded up so `buckets` buckets cover the range: the ceiling of
  // (span_less_one + 1) / buckets, in a form that cannot overflow, since the range may span
  // the whole int64 line (2^64 steps, one more than a uint64_t holds; chunks of a damaged
  // file may claim that). Only one bucket over the whole line overflows: it gets the
  // largest width, and the bucket index is capped.
  const uint64_t span_less_one = static_cast<uint64_t>(step_max) - static_cast<uint64_t>(step_min);
  uint64_t width = span_less_one / buckets + 1;
  if (width == 0) width = std::numeric_limits<uint64_t>::max();
  const size_t used_buckets = static_cast<size_t>(std::min<uint64_t>(span_less_one / width + 1, buckets));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<Bucket> all(used_buckets);
  for (size_t b = 0; b < used_buckets; ++b) {
    all[b] = Bucket{static_cast<int64_t>(static_cast<uint64_t>(step_min) + b * width),
                    static_cast<int64_t>(static_cast<uint64_t>(step_min) + (b + 1) * width),
                    0, kInf, -kInf, 0, 0, 0, 0};
  }
  s = ForEachChunk(info, step_min, step_max,
                   [&](const unsigned char* steps, const unsigned char* values, const unsigned char* offsets,
                       int64_t n, double base_time) {
                     for (int64_t i = 0; i < n; ++i) {
                       const int64_t step = LoadUnaligned<int64_t>(steps + i * 8);
                       if (step < step_min || step > step_max) continue;
                       const double v = LoadUnaligned<double>(values + i * 8);
                       const uint64_t index = (static_cast<uint64_t>(step) - static_cast<uint64_t>(step_min)) / width;
                       Bucket& b = all[std::min<uint64_t>(index, used_buckets - 1)];
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
  if (!s.ok()) return s;
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
  return ReadTensorStats(info, step_min, step_max, out);
}

Status RunStore::ReadTensorStats(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<TensorStatsPoint>* out) {
  out->clear();
  struct Plan {
    explicit Plan(const char* crc)
        : columns(std::string("rowid, step, step, wall_time, numel, nan, inf, zeros, min, max, sum, sum_squares, "
                              "abs_max, dead_fraction, saturated_fraction, histogram, ") +
                  crc + " FROM tensor_stats "),
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
  static const Plan kWithCrc("crc"), kWithoutCrc("NULL");
  const ReadPlan& kStats = row_crc_ ? kWithCrc.plan : kWithoutCrc.plan;
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
    p.stats.dead_fraction = ColumnDouble(r, 13);
    p.stats.saturated_fraction = ColumnDouble(r, 14);
    RowCrc crc = StatsCrc(p.step, ColumnDouble(r, 3), p.stats);
    if (sqlite3_column_type(r, 15) == SQLITE_BLOB) {
      crc.Bytes(sqlite3_column_blob(r, 15), static_cast<size_t>(sqlite3_column_bytes(r, 15)));
    }
    if (std::string wrong = CrcMismatch(r, 16, crc); !wrong.empty()) return wrong;
    if (sqlite3_column_type(r, 15) == SQLITE_BLOB) {
      // The statistics stand without their histogram: keep the row, report the histogram.
      std::string problem = DecodeHistogram(static_cast<const unsigned char*>(sqlite3_column_blob(r, 15)),
                                            sqlite3_column_bytes(r, 15), &p.stats);
      if (!problem.empty()) ReportDamage({info.tag, "tensor_stats", rowid, problem + "; the row is kept without it"});
    }
    out->push_back(p);
    return {};
  });
}

Status RunStore::ReadVectors(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out) {
  out->clear();
  SeriesInfo info;
  Status s = FindSeries(tag, &info);
  if (!s.ok()) return s;
  return ReadVectors(info, step_min, step_max, out);
}

Status RunStore::ReadVectors(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out) {
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
    if (std::string wrong = CrcMismatch(r, 5, RowCrc()
                                                  .Int(sqlite3_column_int64(r, 2))
                                                  .Real(ColumnDouble(r, 3))
                                                  .Bytes(data, static_cast<size_t>(bytes)));
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

Status RunStore::ReadSpans(int64_t step_min, int64_t step_max, std::vector<Span>* out) {
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

Status RunStore::ReadFindings(std::vector<Finding>* out) {
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
    const json causes = json::parse(ColumnText(r, 9), nullptr, /*allow_exceptions=*/false);
    if (causes.is_array()) {
      for (const auto& c : causes) {
        if (c.is_object()) f.causes.push_back({c.value("id", ""), c.value("confidence", 0.0)});
      }
    }
    const json actions = json::parse(ColumnText(r, 10), nullptr, false);
    if (actions.is_array()) {
      for (const auto& a : actions) {
        if (a.is_string()) f.actions.push_back(a.get<std::string>());
      }
    }
    out->push_back(std::move(f));
    return {};
  });
}

Status RunStore::MaxStep(int64_t* step) {
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

Status ListRuns(const std::string& logdir, std::vector<RunEntry>* runs) {
  runs->clear();
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
