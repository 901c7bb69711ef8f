// A thin layer over libpq for the PostgreSQL store: statements with parameters and results
// in PostgreSQL's binary form (no text round trip for doubles, bytes as they are), and
// binary COPY for bulk rows. Every failure is a Status naming the database (without its
// password) and what was being done.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct pg_conn;
struct pg_result;

namespace trainscope {

// Parameters of one statement, $1 on, in binary form.
class PgParams {
 public:
  PgParams& Int(int64_t v);
  PgParams& Real(double v);
  PgParams& Text(std::string_view v);
  PgParams& Bytes(const void* data, size_t bytes);
  PgParams& IntArray(const std::vector<int64_t>& values);  // int8[]
  PgParams& TextArray(const std::vector<std::string>& values);  // text[]
  size_t size() const { return types_.size(); }

 private:
  friend class PgConnection;
  PgParams& Add(unsigned type, std::string value);
  std::vector<unsigned> types_;
  std::vector<std::string> values_;
};

// The rows of one statement, in binary form: integer columns of 2, 4 or 8 bytes, float8,
// text and bytea.
class PgResult {
 public:
  PgResult() = default;
  ~PgResult();
  PgResult(PgResult&& other) noexcept;
  PgResult& operator=(PgResult&& other) noexcept;
  int rows() const;
  bool IsNull(int row, int column) const;
  int64_t Int(int row, int column) const;
  double Real(int row, int column) const;
  std::string Text(int row, int column) const;
  const unsigned char* Bytes(int row, int column, int64_t* length) const;

 private:
  friend class PgConnection;
  explicit PgResult(pg_result* result) : result_(result) {}
  pg_result* result_ = nullptr;
};

// Rows for COPY ... FROM STDIN (FORMAT binary), built in memory.
class PgCopyRows {
 public:
  PgCopyRows();
  void BeginRow(int16_t fields);
  void Int(int64_t v);
  void Real(double v);
  void Text(std::string_view v);
  void Bytes(const void* data, size_t bytes);
  void Null();
  bool empty() const { return rows_ == 0; }
  // The whole COPY stream, with its trailer.
  std::string Finish();

 private:
  std::string data_;
  int64_t rows_ = 0;
};

class PgConnection {
 public:
  // `shown` names the database in messages (the URI without its password).
  static Status Connect(const std::string& conninfo, const std::string& shown, std::unique_ptr<PgConnection>* out);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // Statements without parameters (several, separated by semicolons).
  Status Exec(const std::string& sql, const char* what);
  Status Query(const std::string& sql, const PgParams& params, const char* what, PgResult* out = nullptr);
  Status CopyIn(const std::string& copy_sql, const std::string& rows, const char* what);
  // A connection the server dropped (a restart) is opened again; false if that fails.
  bool Reconnect();
  bool in_transaction() const;
  const std::string& shown() const { return shown_; }
  // The cause of the last failure, in StoreFaultCause's words.
  const std::string& last_fault() const { return last_fault_; }

 private:
  PgConnection(pg_conn* conn, std::string shown) : conn_(conn), shown_(std::move(shown)) {}
  Status Failure(const char* what, pg_result* result);

  pg_conn* conn_;
  std::string shown_;
  std::string last_fault_;
};

}  // namespace trainscope
