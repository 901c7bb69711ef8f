// What the SQLite store's files share: a statement's lifetime, its parameter binding, and the
// reading of columns and error codes. Internal to src/store/sqlite_run_store*.cc.
#pragma once

#include <sqlite3.h>

#include <limits>
#include <set>
#include <string>
#include <string_view>

#include "core/measured_stats.h"
#include "core/status.h"

namespace trainscope::sqlite {

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
inline bool IsDamage(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_FORMAT;
}

inline Status StatusFromSqlite(int rc, std::string message) {
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

inline double ColumnDouble(sqlite3_stmt* stmt, int column) {
  // SQLite stores NaN as NULL; read it back as NaN.
  if (sqlite3_column_type(stmt, column) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt, column);
}

inline std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text ? std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt, column)) : std::string();
}

// The names of the table's columns (none when the schema cannot be read), in one query.
inline std::set<std::string, std::less<>> TableColumns(sqlite3* db, const char* table) {
  std::set<std::string, std::less<>> names;
  Statement info;
  if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info(?1)", -1, info.out(), nullptr) != SQLITE_OK) {
    return names;
  }
  sqlite3_bind_text(info.get(), 1, table, -1, SQLITE_STATIC);
  while (sqlite3_step(info.get()) == SQLITE_ROW) names.insert(ColumnText(info.get(), 0));
  return names;
}

// The measured statistics' columns of tensor_stats (data/tensor_stats.json) as a SELECT
// list, each name after `prefix` (a table alias and its dot, or nothing); a column the store
// was written without (before its statistic existed, so not in `columns`) reads as NULL.
inline std::string MeasuredColumnsSelect(const std::set<std::string, std::less<>>& columns, std::string_view prefix) {
  std::string list;
  for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
    if (!list.empty()) list += ", ";
    list += columns.count(std::string_view(stat->name)) ? std::string(prefix) + std::string(stat->name)
                                                        : std::string("NULL");
  }
  return list;
}

}  // namespace trainscope::sqlite
