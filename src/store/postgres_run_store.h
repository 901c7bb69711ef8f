// PostgresRunStore: runs in a PostgreSQL database, many projects' runs in one database, for
// a team server (docs/server.md). The rows are those of the SQLite file (store_format.h),
// with the run's id in front; the bulk tables are partitioned by run, so a run is dropped,
// or moved to another database, as whole tables. The schema is versioned (postgres_schema.cc):
// an older binary refuses a newer schema by name.
//
// A location: postgresql://[user[:password]@]host[:port]/database#project/run. Messages
// name it without the password.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/pg_connection.h"
#include "store/run_store.h"
#include "store/store_format.h"

namespace trainscope {

// A location split into the database's connection string and the run's names.
struct DatabaseLocation {
  std::string conninfo;  // the URI libpq connects with
  std::string shown;     // the URI without a password, for messages
  std::string project;
  std::string run;
  std::string Describe() const { return shown + "#" + project + "/" + run; }
};
// Fails with InvalidArgument naming what is missing. `need_run` false accepts a database
// alone, or a database and a project.
Status ParseDatabaseLocation(const std::string& location, bool need_run, DatabaseLocation* out);

class PostgresRunStore final : public RunStore, private ChunkTable {
 public:
  static Status Create(const std::string& location, const RunMeta& meta, std::unique_ptr<RunStore>* store,
                       std::string* fault);
  static Status Open(const std::string& location, bool read_only, std::unique_ptr<RunStore>* store,
                     DamageReporter* reporter);
  // The runs of a database (postgresql://.../database) or of one project in it (#project).
  static Status ListRuns(const std::string& location, std::vector<RunEntry>* runs);
  // Drops a run and every row of it.
  static Status DropRun(const std::string& location);
  ~PostgresRunStore() override;

  // How far the run holds each stream a source sends (the ingest's exactly-once: a scalar
  // series' points in append order, "scalar:TAG"; a table's rows by the source's row id,
  // "tensor_stats", "vector", "span").
  using StreamPositions = std::map<std::string, int64_t>;
  // One ingest batch in one transaction, the run locked against other writers (other server
  // processes): reads the positions, lets `build` fill `batch` with what is new and set the
  // positions after it (and write metadata through SetMetaValue), then writes both. With
  // `replace_findings`, the batch's findings replace the run's.
  using BatchBuilder = std::function<Status(const StreamPositions& held, WriteBatch* batch, StreamPositions* after)>;
  Status WriteAdvancing(const BatchBuilder& build, bool replace_findings);
  Status ReadPositions(StreamPositions* positions);

  Status EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id) override;
  Status EnsureSeriesAll(const std::vector<std::pair<std::string, SeriesKind>>& series,
                         std::vector<int64_t>* ids) override;
  Status Write(const WriteBatch& batch) override;
  Status UpdateFindings(const std::vector<Finding>& findings) override;
  Status SetMetaValue(const std::string& key, const std::string& value) override;
  Status Close(const std::string& status, const std::string& exit_reason,
               const std::vector<std::pair<std::string, std::string>>& meta) override;

  Status ReadMeta(RunMeta* meta) override;
  Status ListSeries(std::vector<SeriesInfo>* series) override;
  Status FindSeries(std::string_view tag, SeriesInfo* info) override;
  Status ListChunks(const SeriesInfo& info, std::vector<ChunkSpan>* chunks) override;
  Status ReadChunks(const SeriesInfo& info, const std::vector<int64_t>& ids, int64_t step_min, int64_t step_max,
                    std::vector<Point>* points) override;
  Status ReadTensorStats(const SeriesInfo& info, int64_t step_min, int64_t step_max,
                         std::vector<TensorStatsPoint>* out) override;
  Status ReadVectors(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out) override;
  Status ReadSpans(int64_t step_min, int64_t step_max, std::vector<Span>* out) override;
  Status ReadFindings(std::vector<Finding>* out) override;
  Status MaxStep(int64_t* step) override;

  using RunStore::ReadScalars;
  using RunStore::ReadTensorStats;
  using RunStore::ReadVectors;

 private:
  PostgresRunStore(std::string path, std::unique_ptr<PgConnection> db, int64_t run_id, bool read_only);
  Status VisitChunks(const SeriesInfo& info, int64_t lo, int64_t hi, const ChunkVisitor& visit) override;
  Status ScalarStepRange(const SeriesInfo& info, bool* any, int64_t* lo, int64_t* hi) override;
  Status InsertChunk(const ChunkRow& row, int64_t* id) override;
  Status DeleteChunks(const std::vector<int64_t>& ids) override;
  Status Fail(Status s);  // keeps the fault's cause, rolls back an open transaction
  Status FlushChunks();   // sends the chunk rows and deletions InsertChunk and DeleteChunks queued
  Status WriteRows(const WriteBatch& batch);
  Status WriteInTransaction(const WriteBatch& batch);  // after BEGIN: chunks and rows

  std::unique_ptr<PgConnection> db_;
  int64_t run_id_;
  bool read_only_;
  ScalarChunker chunker_;
  std::unordered_map<std::string, std::pair<int64_t, SeriesKind>> series_cache_;
  // Chunk ids come from the database in blocks (one round trip a block), so that a batch's
  // chunk rows go in one COPY with their ids known.
  int64_t next_chunk_id_ = 0;
  int64_t chunk_ids_left_ = 0;
  std::vector<ChunkRow> chunk_rows_;
  std::vector<int64_t> chunk_row_ids_;
  std::vector<int64_t> chunks_to_delete_;
};

}  // namespace trainscope
