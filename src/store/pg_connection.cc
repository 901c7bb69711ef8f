#include "store/pg_connection.h"

#include <libpq-fe.h>

#include <cstring>
#include <limits>

namespace trainscope {

namespace {

// Type OIDs (pg_type.dat): the parameters say their types, so no statement depends on
// PostgreSQL guessing them.
constexpr unsigned kInt8 = 20, kFloat8 = 701, kText = 25, kBytea = 17, kInt8Array = 1016, kTextArray = 1009;

std::string BigEndian(uint64_t v, int bytes) {
  std::string out(static_cast<size_t>(bytes), '\0');
  for (int i = bytes - 1; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

uint64_t ReadBigEndian(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

uint64_t DoubleBits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// A failed statement's kind, by its SQLSTATE class: what the caller sent (integrity, data),
// what this code got wrong (syntax, undefined objects), or the database (anything else).
Status StatusOf(const char* sqlstate, std::string message) {
  const std::string code = sqlstate ? sqlstate : "";
  const std::string cls = code.substr(0, 2);
  if (cls == "22" || cls == "23") return Status::InvalidArgument(std::move(message));
  if (cls == "42") return Status::Internal(std::move(message));
  return Status::IOError(std::move(message));
}

// The cause in StoreFaultCause's words.
std::string FaultOf(const char* sqlstate, bool connection_bad) {
  if (connection_bad) return "I/O error";
  const std::string code = sqlstate ? sqlstate : "";
  if (code == "53100") return "disk full";
  if (code == "25006") return "read-only";
  if (code.rfind("55P03", 0) == 0 || code == "40P01") return "locked by another process";
  return "I/O error";
}

std::string Trimmed(const char* text) {
  std::string s = text ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

// ---- parameters ----

PgParams& PgParams::Add(unsigned type, std::string value) {
  types_.push_back(type);
  values_.push_back(std::move(value));
  return *this;
}

PgParams& PgParams::Int(int64_t v) { return Add(kInt8, BigEndian(static_cast<uint64_t>(v), 8)); }
PgParams& PgParams::Real(double v) { return Add(kFloat8, BigEndian(DoubleBits(v), 8)); }
PgParams& PgParams::Text(std::string_view v) { return Add(kText, std::string(v)); }
PgParams& PgParams::Bytes(const void* data, size_t bytes) {
  return Add(kBytea, std::string(static_cast<const char*>(data), bytes));
}

PgParams& PgParams::IntArray(const std::vector<int64_t>& values) {
  std::string text = "{";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return Add(kInt8Array, text + "}");
}

PgParams& PgParams::TextArray(const std::vector<std::string>& values) {
  std::string text = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    text += i ? ",\"" : "\"";
    for (char c : values[i]) {
      if (c == '"' || c == '\\') text += '\\';
      text += c;
    }
    text += '"';
  }
  return Add(kTextArray, text + "}");
}

// ---- results ----

PgResult::~PgResult() { PQclear(result_); }
PgResult::PgResult(PgResult&& other) noexcept : result_(other.result_) { other.result_ = nullptr; }
PgResult& PgResult::operator=(PgResult&& other) noexcept {
  if (this != &other) {
    PQclear(result_);
    result_ = other.result_;
    other.result_ = nullptr;
  }
  return *this;
}

int PgResult::rows() const { return result_ ? PQntuples(result_) : 0; }
bool PgResult::IsNull(int row, int column) const { return PQgetisnull(result_, row, column) != 0; }

int64_t PgResult::Int(int row, int column) const {
  if (IsNull(row, column)) return 0;
  const int length = PQgetlength(result_, row, column);
  const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(result_, row, column));
  const uint64_t raw = ReadBigEndian(p, length);
  switch (length) {  // sign-extend the narrower integer types
    case 2: return static_cast<int16_t>(raw);
    case 4: return static_cast<int32_t>(raw);
    default: return static_cast<int64_t>(raw);
  }
}

double PgResult::Real(int row, int column) const {
  if (IsNull(row, column)) return std::numeric_limits<double>::quiet_NaN();
  const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(result_, row, column));
  const uint64_t bits = ReadBigEndian(p, 8);
  double v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

std::string PgResult::Text(int row, int column) const {
  return std::string(PQgetvalue(result_, row, column), static_cast<size_t>(PQgetlength(result_, row, column)));
}

const unsigned char* PgResult::Bytes(int row, int column, int64_t* length) const {
  *length = PQgetlength(result_, row, column);
  return reinterpret_cast<const unsigned char*>(PQgetvalue(result_, row, column));
}

// ---- COPY rows ----

PgCopyRows::PgCopyRows() {
  // Signature, flags (no OIDs), header extension length.
  data_.assign("PGCOPY\n\377\r\n\0", 11);
  data_ += BigEndian(0, 4) + BigEndian(0, 4);
}

void PgCopyRows::BeginRow(int16_t fields) {
  data_ += BigEndian(static_cast<uint16_t>(fields), 2);
  ++rows_;
}
void PgCopyRows::Int(int64_t v) { data_ += BigEndian(8, 4) + BigEndian(static_cast<uint64_t>(v), 8); }
void PgCopyRows::Real(double v) { data_ += BigEndian(8, 4) + BigEndian(DoubleBits(v), 8); }
void PgCopyRows::Text(std::string_view v) { Bytes(v.data(), v.size()); }
void PgCopyRows::Bytes(const void* data, size_t bytes) {
  data_ += BigEndian(bytes, 4);
  data_.append(static_cast<const char*>(data), bytes);
}
void PgCopyRows::Null() { data_ += BigEndian(0xffffffffu, 4); }

std::string PgCopyRows::Finish() {
  data_ += BigEndian(0xffffu, 2);  // the trailer: a field count of -1
  return std::move(data_);
}

// ---- connection ----

Status PgConnection::Connect(const std::string& conninfo, const std::string& shown, std::unique_ptr<PgConnection>* out) {
  pg_conn* conn = PQconnectdb(conninfo.c_str());
  if (!conn) return Status::IOError(shown + ": cannot connect: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = shown + ": cannot connect: " + Trimmed(PQerrorMessage(conn));
    PQfinish(conn);
    return Status::IOError(std::move(message));
  }
  out->reset(new PgConnection(conn, shown));
  // The store's own messages are in its Status; the server's notices (IF NOT EXISTS ...) are
  // of no use to a user.
  return (*out)->Exec("SET client_min_messages = warning", "configure connection");
}

PgConnection::~PgConnection() { PQfinish(conn_); }

bool PgConnection::in_transaction() const { return PQtransactionStatus(conn_) != PQTRANS_IDLE; }

bool PgConnection::Reconnect() {
  if (PQstatus(conn_) == CONNECTION_OK) return true;
  PQreset(conn_);
  return PQstatus(conn_) == CONNECTION_OK &&
         Exec("SET client_min_messages = warning", "configure connection").ok();
}

Status PgConnection::Failure(const char* what, pg_result* result) {
  const char* sqlstate = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const bool bad = PQstatus(conn_) != CONNECTION_OK;
  last_fault_ = FaultOf(sqlstate, bad);
  std::string detail = Trimmed(result ? PQresultErrorMessage(result) : PQerrorMessage(conn_));
  if (detail.empty()) detail = Trimmed(PQerrorMessage(conn_));
  Status s = bad ? Status::IOError(shown_ + ": " + what + ": connection lost: " + detail)
                 : StatusOf(sqlstate, shown_ + ": " + what + ": " + detail);
  PQclear(result);
  return s;
}

Status PgConnection::Exec(const std::string& sql, const char* what) {
  pg_result* result = PQexec(conn_, sql.c_str());
  const ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return Failure(what, result);
  PQclear(result);
  return Status::Ok();
}

Status PgConnection::Query(const std::string& sql, const PgParams& params, const char* what, PgResult* out) {
  const int n = static_cast<int>(params.size());
  std::vector<const char*> values(params.values_.size());
  std::vector<int> lengths(params.values_.size()), formats(params.values_.size());
  for (size_t i = 0; i < params.values_.size(); ++i) {
    values[i] = params.values_[i].c_str();  // text parameters need their terminating zero: c_str() has it
    lengths[i] = static_cast<int>(params.values_[i].size());
    const unsigned type = params.types_[i];
    formats[i] = (type == kText || type == kInt8Array || type == kTextArray) ? 0 : 1;
  }
  pg_result* result = PQexecParams(conn_, sql.c_str(), n, params.types_.data(), values.data(), lengths.data(),
                                   formats.data(), /*resultFormat=*/1);
  const ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return Failure(what, result);
  if (out) {
    *out = PgResult(result);
  } else {
    PQclear(result);
  }
  return Status::Ok();
}

Status PgConnection::CopyIn(const std::string& copy_sql, const std::string& rows, const char* what) {
  pg_result* result = PQexec(conn_, copy_sql.c_str());
  if (!result || PQresultStatus(result) != PGRES_COPY_IN) return Failure(what, result);
  PQclear(result);
  if (PQputCopyData(conn_, rows.data(), static_cast<int>(rows.size())) != 1 || PQputCopyEnd(conn_, nullptr) != 1) {
    return Failure(what, nullptr);
  }
  result = PQgetResult(conn_);
  const bool ok = result && PQresultStatus(result) == PGRES_COMMAND_OK;
  if (!ok) {
    Status s = Failure(what, result);
    while ((result = PQgetResult(conn_)) != nullptr) PQclear(result);
    return s;
  }
  PQclear(result);
  while ((result = PQgetResult(conn_)) != nullptr) PQclear(result);
  return Status::Ok();
}

}  // namespace trainscope
