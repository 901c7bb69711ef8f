#include "forward/forwarder.h"

#include <sqlite3.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <random>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "store/json_forms.h"
#include "store/sqlite_util.h"
#include "store/store_format.h"

namespace trainscope {

namespace {

using json = nlohmann::json;
using namespace sqlite;
using Positions = std::map<std::string, int64_t>;

json Number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string Hex(const void* data, size_t bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// A series' points in the ingest's packed form: int64 steps[n], float64 wall_times[n],
// float64 values[n], little-endian, in base64.
std::string PackPoints(const std::vector<int64_t>& steps, const std::vector<double>& walls,
                       const std::vector<double>& values) {
  const size_t n = steps.size();
  std::string bytes(24 * n, '\0');
  std::memcpy(bytes.data(), steps.data(), 8 * n);
  std::memcpy(bytes.data() + 8 * n, walls.data(), 8 * n);
  std::memcpy(bytes.data() + 16 * n, values.data(), 8 * n);
  return Base64Encode(bytes);
}

std::string Gzip(const std::string& text) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
}

std::string Query(const ForwardTarget& t) {
  return "?project=" + httplib::detail::encode_query_param(t.project) +
         "&run=" + httplib::detail::encode_query_param(t.run);
}

// The run file as the forwarder reads it: its own read-only connection, one read
// transaction per batch (a consistent view while the recorder writes).
class LocalRun {
 public:
  ~LocalRun() { sqlite3_close_v2(db_); }
  Status Open(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
      return Status::IOError(path + ": cannot open the run to forward it");
    }
    sqlite3_busy_timeout(db_, 5000);
    path_ = path;
    return Status::Ok();
  }
  sqlite3* db() { return db_; }
  Status Exec(const char* sql) {
    return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) == SQLITE_OK
               ? Status::Ok()
               : Status::IOError(path_ + ": " + sqlite3_errmsg(db_));
  }
  Status Error() const { return Status::IOError(path_ + ": " + sqlite3_errmsg(db_)); }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// One batch: what the server does not hold, at most about `budget` records. `complete` when
// nothing was left out for the budget.
class BatchBuilder {
 public:
  BatchBuilder(LocalRun* run, const Positions& held, int64_t budget) : run_(run), held_(held), budget_(budget) {}

  Status Build(json* body, bool* complete, ForwardStats* stats) {
    Status s = Scalars(body, stats);
    if (s.ok()) s = Rows(body, stats);
    *complete = budget_ > 0;
    return s;
  }

  static Status Meta(LocalRun* run, json* meta) {
    Statement stmt;
    if (sqlite3_prepare_v2(run->db(), "SELECT key, value FROM meta", -1, stmt.out(), nullptr) != SQLITE_OK) {
      return run->Error();
    }
    *meta = json::object();
    while (sqlite3_step(stmt.get()) == SQLITE_ROW) (*meta)[ColumnText(stmt.get(), 0)] = ColumnText(stmt.get(), 1);
    return Status::Ok();
  }

  static Status Findings(LocalRun* run, json* findings) {
    Statement stmt;
    if (sqlite3_prepare_v2(run->db(),
                           "SELECT code, severity, step, last_step, location, summary, evidence, causes, actions FROM "
                           "finding ORDER BY id",
                           -1, stmt.out(), nullptr) != SQLITE_OK) {
      return run->Error();
    }
    *findings = json::array();
    while (sqlite3_step(stmt.get()) == SQLITE_ROW) {
      Finding f;
      f.code = ColumnText(stmt.get(), 0);
      (void)ParseSeverity(ColumnText(stmt.get(), 1), &f.severity);
      f.step = sqlite3_column_int64(stmt.get(), 2);
      f.last_step = sqlite3_column_int64(stmt.get(), 3);
      f.location = ColumnText(stmt.get(), 4);
      f.summary = ColumnText(stmt.get(), 5);
      f.evidence_json = ColumnText(stmt.get(), 6);
      ReadStoredCauses(ColumnText(stmt.get(), 7), &f.causes);
      ReadStoredActions(ColumnText(stmt.get(), 8), &f.actions);
      findings->push_back(FindingToJson(f));
    }
    return Status::Ok();
  }

 private:
  int64_t Held(const std::string& stream) const {
    auto it = held_.find(stream);
    return it == held_.end() ? 0 : it->second;
  }

  // Each scalar series' points past the server's position, in append order: whole chunks
  // the server holds are skipped by their counts, without reading their data.
  Status Scalars(json* body, ForwardStats* stats) {
    Statement series, chunks, chunk;
    sqlite3* db = run_->db();
    if (sqlite3_prepare_v2(db, "SELECT id, tag FROM series WHERE kind = 0 ORDER BY id", -1, series.out(), nullptr) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT id, count FROM scalar_chunk WHERE series_id = ? ORDER BY id", -1, chunks.out(),
                           nullptr) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT count, base_time, data FROM scalar_chunk WHERE id = ?", -1, chunk.out(),
                           nullptr) != SQLITE_OK) {
      return run_->Error();
    }
    while (budget_ > 0 && sqlite3_step(series.get()) == SQLITE_ROW) {
      const int64_t series_id = sqlite3_column_int64(series.get(), 0);
      const std::string tag = ColumnText(series.get(), 1);
      const int64_t from = Held("scalar:" + tag);
      std::vector<int64_t> steps;
      std::vector<double> walls, values;
      int64_t seen = 0;
      sqlite3_bind_int64(chunks.get(), 1, series_id);
      while (budget_ > 0 && sqlite3_step(chunks.get()) == SQLITE_ROW) {
        const int64_t id = sqlite3_column_int64(chunks.get(), 0), count = sqlite3_column_int64(chunks.get(), 1);
        const int64_t first = seen;
        seen += count;
        if (seen <= from) continue;
        sqlite3_bind_int64(chunk.get(), 1, id);
        if (sqlite3_step(chunk.get()) == SQLITE_ROW) {
          ChunkView view;
          const std::string wrong =
              CheckChunk(sqlite3_column_int64(chunk.get(), 0), sqlite3_column_double(chunk.get(), 1),
                         static_cast<const unsigned char*>(sqlite3_column_blob(chunk.get(), 2)),
                         sqlite3_column_bytes(chunk.get(), 2), nullptr, &view);
          if (!wrong.empty()) return Status::Corruption("series '" + tag + "': " + wrong);
          for (int64_t i = std::max<int64_t>(0, from - first); i < view.n && budget_ > 0; ++i, --budget_) {
            steps.push_back(view.Step(i));
            walls.push_back(view.WallTime(i));
            values.push_back(view.Value(i));
          }
        }
        sqlite3_reset(chunk.get());
      }
      sqlite3_reset(chunks.get());
      if (!steps.empty()) {
        stats->points += static_cast<int64_t>(steps.size());
        (*body)["scalars"][tag] = {{"from", from}, {"packed", PackPoints(steps, walls, values)}};
      }
    }
    return Status::Ok();
  }

  // Tensor statistics, vectors and spans past the server's position, by row id.
  Status Rows(json* body, ForwardStats* stats) {
    sqlite3* db = run_->db();
    struct Table {
      const char* stream;
      std::string sql;
    };
    // The wire row (server/ingest.cc StatsRow): the first schema's measured statistics before
    // the histogram, those added since after it.
    const int first = static_cast<int>(tensor_stats::FirstSchemaCount());
    const int measured = static_cast<int>(tensor_stats::kMeasuredCount), histogram = 13 + measured;
    const Table kTables[] = {
        {"tensor_stats",
         "SELECT t.rowid, s.tag, t.step, t.wall_time, t.numel, t.nan, t.inf, t.zeros, t.min, t.max, t.sum, "
         "t.sum_squares, t.abs_max, " + MeasuredColumnsSelect(TableColumns(db, "tensor_stats"), "t.") +
         ", t.histogram FROM tensor_stats t JOIN "
         "series s ON s.id = t.series_id WHERE t.rowid > ?1 ORDER BY t.rowid LIMIT ?2"},
        {"vectors",
         "SELECT v.rowid, s.tag, v.step, v.wall_time, v.data FROM vector v JOIN series s ON s.id = v.series_id WHERE "
         "v.rowid > ?1 ORDER BY v.rowid LIMIT ?2"},
        {"spans", "SELECT rowid, step, phase, start, duration FROM span WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"},
    };
    for (const Table& table : kTables) {
      if (budget_ <= 0) break;
      Statement stmt;
      if (sqlite3_prepare_v2(db, table.sql.c_str(), -1, stmt.out(), nullptr) != SQLITE_OK) return run_->Error();
      sqlite3_bind_int64(stmt.get(), 1, Held(table.stream));
      sqlite3_bind_int64(stmt.get(), 2, budget_);
      json rows = json::array();
      sqlite3_stmt* r = stmt.get();
      while (sqlite3_step(r) == SQLITE_ROW) {
        json row = json::array({sqlite3_column_int64(r, 0)});
        if (table.stream == std::string("tensor_stats")) {
          row.push_back(ColumnText(r, 1));
          row.push_back(sqlite3_column_int64(r, 2));
          row.push_back(Number(ColumnDouble(r, 3)));
          for (int c = 4; c < 8; ++c) row.push_back(sqlite3_column_int64(r, c));
          for (int c = 8; c < 13 + first; ++c) row.push_back(Number(ColumnDouble(r, c)));
          if (sqlite3_column_type(r, histogram) == SQLITE_BLOB) {
            row.push_back(Hex(sqlite3_column_blob(r, histogram), static_cast<size_t>(sqlite3_column_bytes(r, histogram))));
          } else {
            row.push_back(nullptr);
          }
          for (int c = 13 + first; c < histogram; ++c) row.push_back(Number(ColumnDouble(r, c)));
        } else if (table.stream == std::string("vectors")) {
          row.push_back(ColumnText(r, 1));
          row.push_back(sqlite3_column_int64(r, 2));
          row.push_back(Number(ColumnDouble(r, 3)));
          json values = json::array();
          const auto* data = static_cast<const unsigned char*>(sqlite3_column_blob(r, 4));
          const int bytes = sqlite3_column_bytes(r, 4);
          for (int i = 0; i + 4 <= bytes; i += 4) values.push_back(Number(LoadUnaligned<float>(data + i)));
          row.push_back(std::move(values));
        } else {
          row.push_back(sqlite3_column_int64(r, 1));
          row.push_back(ColumnText(r, 2));
          row.push_back(Number(ColumnDouble(r, 3)));
          row.push_back(Number(ColumnDouble(r, 4)));
        }
        rows.push_back(std::move(row));
        --budget_;
      }
      if (!rows.empty()) {
        stats->rows += static_cast<int64_t>(rows.size());
        (*body)[table.stream] = std::move(rows);
      }
    }
    return Status::Ok();
  }

  LocalRun* run_;
  const Positions& held_;
  int64_t budget_;
};

Status PositionsFrom(const httplib::Result& result, Positions* positions, const char* what) {
  if (!result) return Status::IOError(std::string(what) + ": " + httplib::to_string(result.error()));
  const json reply = json::parse(result->body, nullptr, false);
  if ((result->status != 200 && result->status != 409) || !reply.is_object() || !reply.contains("positions")) {
    return Status::IOError(std::string(what) + ": HTTP " + std::to_string(result->status) + ": " +
                           result->body.substr(0, 300));
  }
  positions->clear();
  for (const auto& [stream, position] : reply["positions"].items()) (*positions)[stream] = position.get<int64_t>();
  return Status::Ok();
}

std::string SourceId() {
  std::random_device random;
  char id[17];
  std::snprintf(id, sizeof(id), "%08x%08x", random(), random());
  return id;
}

}  // namespace

ForwardTarget ForwardTargetFromEnvironment(const std::string& project, const std::string& run) {
  ForwardTarget t;
  const char* server = std::getenv("TRAINSCOPE_SERVER");
  const char* token = std::getenv("TRAINSCOPE_TOKEN");
  const char* env_project = std::getenv("TRAINSCOPE_PROJECT");
  t.server = server ? server : "";
  t.token = token ? token : "";
  t.project = !project.empty() ? project : env_project ? env_project : "";
  t.run = run;
  return t;
}

Status ForwardOnce(const std::string& db_path, const ForwardTarget& target, bool close, ForwardStats* stats,
                   int64_t batch_points) {
  LocalRun run;
  Status s = run.Open(db_path);
  if (!s.ok()) return s;
  httplib::Client client(target.server);
  client.set_bearer_token_auth(target.token);
  client.set_connection_timeout(5);
  client.set_read_timeout(60);
  Positions held;
  s = PositionsFrom(client.Get("/api/v1/positions" + Query(target)), &held, "ask the server where the run is");
  static const std::string source = SourceId();
  static std::atomic<int64_t> sequence{0};
  std::string last_meta, last_findings;
  bool closed = false;
  while (s.ok() && !closed) {
    json body = {{"version", 1}, {"batch", source + ":" + std::to_string(++sequence)}};
    bool complete = false;
    json meta, findings;
    s = run.Exec("BEGIN");
    if (s.ok()) s = BatchBuilder(&run, held, batch_points).Build(&body, &complete, stats);
    if (s.ok()) s = BatchBuilder::Meta(&run, &meta);
    if (s.ok()) s = BatchBuilder::Findings(&run, &findings);
    (void)run.Exec("COMMIT");
    if (!s.ok()) break;
    // The run's end goes with the last batch, once the recorder has marked it.
    const std::string status = meta.value("status", "running");
    if (close && complete && status != "running") {
      body["close"] = {{"status", status}, {"exit_reason", meta.value("exit_reason", "")}};
      closed = true;
    }
    const std::string meta_text = meta.dump(), findings_text = findings.dump();
    if (meta_text != last_meta) body["meta"] = meta;
    if (findings_text != last_findings) body["findings"] = findings;
    if (body.size() == 2) break;  // nothing new
    const httplib::Headers headers = {{"Content-Encoding", "gzip"}};
    const std::string packed = Gzip(body.dump(-1, ' ', false, json::error_handler_t::replace));
    auto result = client.Post("/api/v1/ingest" + Query(target), headers, packed, "application/json");
    s = PositionsFrom(result, &held, "send a batch");
    if (!s.ok()) break;
    ++stats->batches;
    if (result->status == 409) {
      closed = false;
      continue;
    }
    if (closed) stats->closed = true;  // the server was behind (restored?): resend from its positions
    last_meta = meta_text;
    last_findings = findings_text;
    if (complete && !close) break;
  }
  if (!s.ok()) {
    ++stats->failures;
    stats->last_error = s.message();
  }
  return s;
}

// ---- the observer ----

Forwarder::Forwarder(ForwardTarget target, double close_timeout_seconds)
    : target_(std::move(target)), close_timeout_seconds_(close_timeout_seconds) {}

Forwarder::~Forwarder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Forwarder::OnOpen(const RunStart& run, ObserverHost&) {
  if (target_.project.empty() || target_.project.find('/') != std::string::npos) {
    return Status::InvalidArgument("forwarding to " + target_.server + ": project '" + target_.project +
                                   "': expected one name without '/' (ts.init(project=...) or TRAINSCOPE_PROJECT)");
  }
  if (target_.run.empty()) target_.run = run.name;
  db_path_ = run.run_dir + "/" + kStoreFileName;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void Forwarder::OnCommit(Commit&) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
  }
  wake_.notify_all();
}

void Forwarder::OnClose(std::vector<Finding>*) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    run_closed_ = true;
  }
  wake_.notify_all();
}

ForwardStats Forwarder::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Forwarder::Loop() {
  using Clock = std::chrono::steady_clock;
  double backoff = 0.5;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait_for(lock, std::chrono::seconds(2), [&] { return pending_ || closing_; });
    const bool closing = closing_;
    pending_ = false;
    lock.unlock();
    ForwardStats stats;
    Status s = ForwardOnce(db_path_, target_, false, &stats);
    lock.lock();
    stats_.batches += stats.batches, stats_.points += stats.points, stats_.rows += stats.rows;
    stats_.failures += stats.failures;
    if (!stats.last_error.empty()) stats_.last_error = stats.last_error;
    if (closing) break;
    if (!s.ok()) {
      // The server is away: try again later, from where it says it is.
      wake_.wait_for(lock, std::chrono::duration<double>(backoff), [&] { return closing_; });
      backoff = std::min(30.0, backoff * 2);
    } else {
      backoff = 0.5;
    }
  }
  // A forwarder let go without the run closed (the process ends) has sent what it could.
  if (!run_closed_) return;
  // The close: everything left, then the run's end once the recorder has marked it, for at
  // most close_timeout_seconds_ (what is left stays in the file for `trainscope push`).
  const auto deadline = Clock::now() + std::chrono::duration<double>(close_timeout_seconds_);
  while (Clock::now() < deadline && !stats_.closed) {
    lock.unlock();
    ForwardStats stats;
    (void)ForwardOnce(db_path_, target_, true, &stats);
    lock.lock();
    stats_.batches += stats.batches, stats_.points += stats.points, stats_.rows += stats.rows;
    stats_.failures += stats.failures;
    stats_.closed = stats.closed;
    if (!stats.last_error.empty()) stats_.last_error = stats.last_error;
    if (!stats_.closed) wake_.wait_for(lock, std::chrono::milliseconds(stats.failures ? 1000 : 50), [] { return false; });
  }
}

}  // namespace trainscope
