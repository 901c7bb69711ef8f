// The PostgreSQL store's schema and its migrations. Each migration is applied once, in order,
// in one transaction, under an advisory lock, so that several servers and ranks opening the
// same database at once apply it once. A database whose schema is newer than this binary
// knows is refused with the two versions named: an older binary would misread it.
#include "store/postgres_schema.h"

#include <string>
#include <string_view>

#include "core/measured_stats.h"

namespace trainscope {

namespace {

// Migration k (from 1) brings the schema from version k-1 to k.
//
// The bulk tables (scalar_chunk, tensor_stats, vector, span) are partitioned by run: a run's
// rows are whole tables (PartitionsSql), dropped or detached to move in one statement,
// without a vacuum of anyone else's rows. Columns and blobs are those of the SQLite file
// (store_format.h), so a run copied between the two keeps its bytes and checksums.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE run(
  id bigserial PRIMARY KEY, project text NOT NULL, name text NOT NULL, created double precision NOT NULL,
  UNIQUE(project, name));
CREATE TABLE meta(
  run_id bigint NOT NULL REFERENCES run(id) ON DELETE CASCADE, key text NOT NULL, value text NOT NULL,
  PRIMARY KEY(run_id, key));
CREATE TABLE series(
  run_id bigint NOT NULL REFERENCES run(id) ON DELETE CASCADE, id bigint NOT NULL, tag text NOT NULL,
  kind smallint NOT NULL, PRIMARY KEY(run_id, id), UNIQUE(run_id, tag));
-- Chunk ids are taken a block at a time by a writer (PostgresRunStore::InsertChunk).
CREATE SEQUENCE scalar_chunk_block INCREMENT BY 1024;
CREATE TABLE scalar_chunk(
  run_id bigint NOT NULL, id bigint NOT NULL, series_id bigint NOT NULL, count bigint NOT NULL,
  min_step bigint NOT NULL, max_step bigint NOT NULL, last_step bigint NOT NULL, last_value double precision,
  base_time double precision NOT NULL, data bytea NOT NULL, crc bigint NOT NULL) PARTITION BY LIST (run_id);
CREATE INDEX scalar_chunk_by_series ON scalar_chunk(run_id, series_id, id);
CREATE TABLE tensor_stats(
  run_id bigint NOT NULL, id bigserial, series_id bigint NOT NULL, step bigint NOT NULL,
  wall_time double precision NOT NULL, numel bigint, nan bigint, inf bigint, zeros bigint,
  min double precision, max double precision, sum double precision, sum_squares double precision,
  abs_max double precision, @FIRST_MEASURED@
  histogram bytea, crc bigint NOT NULL) PARTITION BY LIST (run_id);
CREATE INDEX tensor_stats_by_series ON tensor_stats(run_id, series_id, step, id);
CREATE TABLE vector(
  run_id bigint NOT NULL, id bigserial, series_id bigint NOT NULL, step bigint NOT NULL,
  wall_time double precision NOT NULL, data bytea NOT NULL, crc bigint NOT NULL) PARTITION BY LIST (run_id);
CREATE INDEX vector_by_series ON vector(run_id, series_id, step, id);
CREATE TABLE span(
  run_id bigint NOT NULL, id bigserial, step bigint NOT NULL, phase text NOT NULL,
  start double precision NOT NULL, duration double precision NOT NULL) PARTITION BY LIST (run_id);
CREATE INDEX span_by_step ON span(run_id, step, id);
CREATE TABLE finding(
  run_id bigint NOT NULL REFERENCES run(id) ON DELETE CASCADE, id bigserial PRIMARY KEY, code text NOT NULL,
  severity text NOT NULL, step bigint NOT NULL, last_step bigint NOT NULL, location text NOT NULL,
  summary text NOT NULL, evidence text NOT NULL, causes text NOT NULL, actions text NOT NULL);
CREATE INDEX finding_by_run ON finding(run_id, id);
)sql",
    // 2: the ingest's positions: of each stream a source sends (a scalar series' points in
    // the order they were appended, a table's rows by the source's row id), how far the run
    // holds it, advanced in the transaction that stores the records (exactly once).
    R"sql(
CREATE TABLE ingest_position(
  run_id bigint NOT NULL REFERENCES run(id) ON DELETE CASCADE, stream text NOT NULL, position bigint NOT NULL,
  PRIMARY KEY(run_id, stream));
)sql",
    // 3: chunk and vector blobs stored out of line without compression: they are doubles and
    // floats, which PostgreSQL's compression barely shrinks, and compressing each 40 KB chunk
    // took a third of the database's time under load (docs/benchmarks.md).
    R"sql(
ALTER TABLE scalar_chunk ALTER COLUMN data SET STORAGE EXTERNAL;
ALTER TABLE vector ALTER COLUMN data SET STORAGE EXTERNAL;
)sql",
};

constexpr int kKnownVersion = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));

// The SQL of migration `from` + 1. The first creates the columns of the measured statistics
// in the stores' first schema (data/tensor_stats.json).
std::string Migration(int from) {
  std::string sql = kMigrations[from];
  if (const size_t at = sql.find("@FIRST_MEASURED@"); at != std::string::npos) {
    std::string columns;
    for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
      if (stat->first_schema) columns += std::string(stat->name) + " double precision, ";
    }
    sql.replace(at, std::string_view("@FIRST_MEASURED@").size(), columns);
  }
  return sql;
}

// A measured statistic added to the table after a database was made has no column there:
// its column is added beside the versioned migrations, by name, so that the versions stay the
// fixed migrations' and an older trainscope goes on reading the database (it names the
// columns it reads). Statistics not yet measured read NULL.
std::string MeasuredColumnsPresentSql() {
  std::string names;
  for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
    names += (names.empty() ? "'" : ", '") + std::string(stat->name) + "'";
  }
  return "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('tensor_stats') AND NOT attisdropped AND "
         "attname IN (" + names + ")";
}

// Any constant: the key of the advisory lock that serialises migrations.
constexpr const char* kMigrationLock = "SELECT pg_advisory_xact_lock(7471727)";

std::string AddMeasuredColumnsSql() {
  std::string sql;
  for (const tensor_stats::MeasuredStat* stat : tensor_stats::kMeasured) {
    sql += "ALTER TABLE tensor_stats ADD COLUMN IF NOT EXISTS " + std::string(stat->name) + " double precision; ";
  }
  return sql;
}

}  // namespace

const char* const kPartitionedTables[4] = {"scalar_chunk", "tensor_stats", "vector", "span"};

int KnownSchemaVersion() { return kKnownVersion; }

std::string PartitionName(const char* table, int64_t run_id) {
  return std::string(table) + "_run_" + std::to_string(run_id);
}

Status MigrateSchema(PgConnection* db) {
  // Fast path: the schema is there and current (no lock, no DDL).
  PgResult version;
  Status s = db->Query("SELECT to_regclass('trainscope_schema') IS NOT NULL", PgParams(), "read schema version",
                       &version);
  if (!s.ok()) return s;
  auto read_version = [&](int* out) {
    PgResult row;
    Status r = db->Query("SELECT version::bigint FROM trainscope_schema", PgParams(), "read schema version", &row);
    if (r.ok()) *out = row.rows() ? static_cast<int>(row.Int(0, 0)) : 0;
    return r;
  };
  auto measured_columns_present = [&](bool* all) {
    PgResult count;
    Status r = db->Query(MeasuredColumnsPresentSql(), PgParams(), "read schema version", &count);
    if (r.ok()) *all = count.Int(0, 0) == static_cast<int64_t>(tensor_stats::kMeasuredCount);
    return r;
  };
  int current = 0;
  if (version.Int(0, 0)) {
    s = read_version(&current);
    if (!s.ok()) return s;
    bool all_measured = false;
    if (current == kKnownVersion) s = measured_columns_present(&all_measured);
    if (!s.ok()) return s;
    if (current == kKnownVersion && all_measured) return Status::Ok();
  }
  s = db->Exec("BEGIN", "migrate schema");
  if (s.ok()) s = db->Exec(kMigrationLock, "migrate schema");
  if (s.ok()) s = db->Exec("CREATE TABLE IF NOT EXISTS trainscope_schema(version integer NOT NULL)", "migrate schema");
  if (s.ok()) s = read_version(&current);  // again, under the lock: another process may have migrated
  if (s.ok() && current > kKnownVersion) {
    s = Status::InvalidArgument(db->shown() + ": the database's trainscope schema is version " +
                                std::to_string(current) + ", newer than this trainscope knows (" +
                                std::to_string(kKnownVersion) + "): upgrade trainscope to use it");
  }
  for (int v = current; s.ok() && v < kKnownVersion; ++v) s = db->Exec(Migration(v), "migrate schema");
  if (s.ok() && current <= kKnownVersion) s = db->Exec(AddMeasuredColumnsSql(), "migrate schema");
  if (s.ok() && current < kKnownVersion) {
    s = db->Exec("DELETE FROM trainscope_schema; INSERT INTO trainscope_schema VALUES (" +
                     std::to_string(kKnownVersion) + ")",
                 "migrate schema");
  }
  if (s.ok()) s = db->Exec("COMMIT", "migrate schema");
  if (!s.ok()) (void)db->Exec("ROLLBACK", "migrate schema");
  return s;
}

std::string PartitionsSql(int64_t run_id) {
  std::string sql;
  for (const char* table : kPartitionedTables) {
    sql += "CREATE TABLE " + PartitionName(table, run_id) + " PARTITION OF " + table + " FOR VALUES IN (" +
           std::to_string(run_id) + ");";
  }
  return sql;
}

std::string DropPartitionsSql(int64_t run_id) {
  std::string sql;
  for (const char* table : kPartitionedTables) sql += "DROP TABLE IF EXISTS " + PartitionName(table, run_id) + ";";
  return sql;
}

}  // namespace trainscope
