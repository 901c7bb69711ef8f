// SqliteRunStore: opening and creating the file, its schema, and what a failure means.
#include "store/sqlite_run_store.h"

#include "store/sqlite_util.h"

#include <sqlite3.h>
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

namespace trainscope {

namespace fs = std::filesystem;
using namespace sqlite;

namespace {

constexpr int kSchemaVersion = 1;

// Page size 16 KiB: a full chunk (2048 points x 20 bytes) spans three pages, and the
// partial-chunk rewrites of slow series stay small in the WAL. @MEASURED@: a REAL column per
// measured statistic (data/tensor_stats.json).
constexpr const char* kSchemaTemplate = R"sql(
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
  @MEASURED@, histogram BLOB, crc INTEGER);
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

// Readers map the file: a decimation scan then reads pages without copying them. An
// optimisation only: without it pages are read by read(2), so its failure is no error.
constexpr const char* kMapReads = "PRAGMA mmap_size=1073741824";

std::string Schema() {
  std::string measured;
  for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
    if (!measured.empty()) measured += ", ";
    measured += std::string(stat->name) + " REAL";
  }
  std::string schema = kSchemaTemplate;
  schema.replace(schema.find("@MEASURED@"), std::string_view("@MEASURED@").size(), measured);
  return schema;
}

std::string ResolveDbPath(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return (fs::path(path) / kStoreFileName).string();
  return path;
}


}  // namespace

SqliteRunStore::~SqliteRunStore() {
  if (!read_only_) {
    // Write what is still buffered; a failure here has nowhere to go but is not fatal.
    (void)chunker_.WritePartial(this);
  }
  for (sqlite3_stmt* stmt : statements_) sqlite3_finalize(stmt);
  if (db_) sqlite3_close_v2(db_);
}

Status SqliteRunStore::SqlError(const char* what) {
  if (!db_) return Status::IOError(path_ + ": " + what + ": cannot open");
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

void SqliteRunStore::NoteFailure(int rc) {
  last_fault_ = StoreFaultCause(rc, db_ ? sqlite3_system_errno(db_) : 0);
  if (last_fault_ != "I/O error") return;
  // SQLite reports a write refused for want of space as a plain I/O error when the OS said
  // EFBIG (a file size limit), and its errno is often gone by then: the file system and
  // the limit are asked instead.
  const std::string dir = fs::path(path_).parent_path().string();
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
      if (::stat((path_ + suffix).c_str(), &st) == 0 &&
          static_cast<uint64_t>(st.st_size) + (64u << 10) > static_cast<uint64_t>(limit.rlim_cur)) {
        last_fault_ = "disk full";
        return;
      }
    }
  }
}

Status SqliteRunStore::SqlError(const char* what, int rc) {
  NoteFailure(rc);
  // The connection's message belongs to its last failure, which may not be rc's.
  const char* detail = db_ && sqlite3_extended_errcode(db_) == rc ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  return StatusFromSqlite(rc, path_ + ": " + what + ": " + detail);
}

Status SqliteRunStore::StepDone(sqlite3_stmt* stmt, int bind_rc, const char* what) {
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

Status SqliteRunStore::Exec(const char* sql) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    NoteFailure(sqlite3_extended_errcode(db_));
    std::string message = path_ + ": " + (error ? error : sqlite3_errstr(rc));
    sqlite3_free(error);
    return StatusFromSqlite(rc, std::move(message));
  }
  return Status::Ok();
}

Status SqliteRunStore::Prepare(const char* sql, sqlite3_stmt** stmt) {
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, stmt, nullptr) != SQLITE_OK) {
    return SqlError("prepare");
  }
  statements_.push_back(*stmt);
  return Status::Ok();
}

void SqliteRunStore::LimitValueSize(int max_bytes) {
  (void)sqlite3_limit(db_, SQLITE_LIMIT_LENGTH, max_bytes);  // returns the old limit: nothing to check
}

Status SqliteRunStore::LimitFileSize(int64_t max_bytes) {
  Statement page_size;
  if (sqlite3_prepare_v2(db_, "PRAGMA page_size", -1, page_size.out(), nullptr) != SQLITE_OK ||
      sqlite3_step(page_size.get()) != SQLITE_ROW) {
    return SqlError("read page size");
  }
  const int64_t pages = std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, sqlite3_column_int64(page_size.get(), 0)));
  return Exec(("PRAGMA max_page_count=" + std::to_string(pages)).c_str());
}

Status SqliteRunStore::OpenDb(const std::string& db_path, bool read_only, std::unique_ptr<SqliteRunStore>* out) {
  std::unique_ptr<SqliteRunStore> store(new SqliteRunStore(db_path));
  store->path_ = db_path;
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

Status SqliteRunStore::Create(const std::string& run_dir, const RunMeta& meta, std::unique_ptr<RunStore>* out,
                        std::string* fault) {
  std::error_code ec;
  const bool created_dir = fs::create_directories(run_dir, ec);
  if (ec) {
    if (fault) *fault = StoreFaultCause(0, ec.value());
    return Status::IOError(run_dir + ": cannot create run directory: " + ec.message());
  }
  const std::string db_path = (fs::path(run_dir) / kStoreFileName).string();
  if (fs::exists(db_path, ec)) return Status::InvalidArgument(db_path + ": a run store already exists here");
  std::unique_ptr<SqliteRunStore> store;
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

void SqliteRunStore::NoteFileId() {
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0) file_id_ = {st.st_dev, st.st_ino};
}

Status SqliteRunStore::Checkpoint() { return Exec("PRAGMA wal_checkpoint(TRUNCATE)"); }

Status SqliteRunStore::CreateSchema(const RunMeta& meta) {
  // A new, empty file needs no syncs while its schema is laid down (a crash now only means
  // the run never started); from the first data on, WAL with synchronous=NORMAL: a
  // process killed at any moment leaves every committed batch readable.
  Status s = Exec("PRAGMA synchronous=OFF; PRAGMA page_size=16384; PRAGMA journal_mode=WAL;");
  if (!s.ok()) return s;
  s = Exec("BEGIN");
  if (!s.ok()) return s;
  s = Exec(Schema().c_str());
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

Status SqliteRunStore::OpenForWrite(const std::string& run_dir, std::unique_ptr<RunStore>* out) {
  const std::string db_path = ResolveDbPath(run_dir);
  std::error_code ec;
  if (!fs::exists(db_path, ec)) return Status::NotFound(db_path + ": no run store here");
  if (Status regular = CheckRegularFile(db_path); !regular.ok()) return regular;
  std::unique_ptr<SqliteRunStore> store;
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

Status SqliteRunStore::OpenReadOnly(const std::string& path, std::unique_ptr<RunStore>* out, DamageReporter* reporter) {
  const std::string db_path = ResolveDbPath(path);
  std::error_code ec;
  if (!fs::exists(db_path, ec)) {
    return Status::NotFound(db_path + ": no such file (expected a run directory holding " +
                            std::string(kStoreFileName) + ")");
  }
  if (Status regular = CheckRegularFile(db_path); !regular.ok()) return regular;
  std::unique_ptr<SqliteRunStore> store;
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

Status SqliteRunStore::CheckSchema() {
  Statement stmt;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, stmt.out(), nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_ROW) return SqlError("not a trainscope store", rc);
  const int version = sqlite3_column_int(stmt.get(), 0);
  std::error_code ec;
  if (version == 0 && fs::exists(path_, ec) && fs::file_size(path_, ec) == 0) {
    return Status::Corruption(path_ + ": empty store (0 bytes): nothing was ever written to it; the disk was "
                              "full or not writable when the run started");
  }
  if (version != kSchemaVersion) {
    return Status::Corruption(path_ + ": not a trainscope store: schema version " + std::to_string(version) +
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
  // A store written before a measured statistic existed gains its column when opened for
  // writing (its earlier rows read NULL: not measured); a reader reads NULL in its place.
  std::set<std::string, std::less<>> columns = TableColumns(db_, "tensor_stats");
  if (!read_only_) {
    for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
      if (columns.count(std::string_view(stat->name))) continue;
      Status added = Exec(("ALTER TABLE tensor_stats ADD COLUMN " + std::string(stat->name) + " REAL").c_str());
      if (!added.ok()) return added;
      columns.emplace(stat->name);
    }
  }
  measured_columns_ = MeasuredColumnsSelect(columns, "");
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
    return Status::Corruption(path_ + ": damaged trainscope store: expected the tables meta, series, "
                              "scalar_chunk, tensor_stats, vector, span and finding");
  }
  return Status::Ok();
}


}  // namespace trainscope
