// SqliteRunStore: one run in one SQLite file, <logdir>/<run>/trainscope.db; the embedded
// default. Any number of readers may open the file while its writer writes (WAL mode).
// A damaged file is read as far as it can be: the reads go row by row past a page SQLite
// cannot read (ReadPlan in sqlite_run_store_read.cc).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/run_store.h"
#include "store/store_format.h"

struct sqlite3;
struct sqlite3_stmt;

namespace trainscope {

class SqliteRunStore final : public RunStore, private ChunkTable {
 public:
  static Status Create(const std::string& run_dir, const RunMeta& meta, std::unique_ptr<RunStore>* store,
                       std::string* fault);
  // `path` is a run directory or the .db file itself.
  static Status OpenForWrite(const std::string& path, std::unique_ptr<RunStore>* store);
  static Status OpenReadOnly(const std::string& path, std::unique_ptr<RunStore>* store, DamageReporter* reporter);
  ~SqliteRunStore() override;

  // PRAGMA max_page_count.
  Status LimitFileSize(int64_t max_bytes) override;
  // SQLITE_LIMIT_LENGTH: a write of a bigger value fails at that statement, SQLite keeps the
  // transaction open, and the store rolls it back.
  void LimitValueSize(int max_bytes) override;

  Status EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id) override;
  Status EnsureSeriesAll(const std::vector<std::pair<std::string, SeriesKind>>& series,
                         std::vector<int64_t>* ids) override;
  Status Write(const WriteBatch& batch) override;
  Status UpdateFindings(const std::vector<Finding>& findings) override;
  Status SetMetaValue(const std::string& key, const std::string& value) override;
  Status Close(const std::string& status, const std::string& exit_reason,
               const std::vector<std::pair<std::string, std::string>>& meta) override;
  // Folds the WAL into the file and truncates it: after a failed write this gives back the
  // WAL's space (a full disk) or its length (a file size limit).
  Status Checkpoint() override;

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
  void UnmapReads() override;

  using RunStore::ReadScalars;
  using RunStore::ReadTensorStats;
  using RunStore::ReadVectors;

 private:
  explicit SqliteRunStore(std::string db_path) : RunStore(std::move(db_path)) {}
  static Status OpenDb(const std::string& db_path, bool read_only, std::unique_ptr<SqliteRunStore>* store);
  Status VisitChunks(const SeriesInfo& info, int64_t lo, int64_t hi, const ChunkVisitor& visit) override;
  Status ScalarStepRange(const SeriesInfo& info, bool* any, int64_t* lo, int64_t* hi) override;
  Status InsertChunk(const ChunkRow& row, int64_t* id) override;
  Status DeleteChunks(const std::vector<int64_t>& ids) override;

  Status Exec(const char* sql);
  Status Prepare(const char* sql, sqlite3_stmt** stmt);  // kept until the store closes
  Status SqlError(const char* what);
  Status SqlError(const char* what, int rc);
  void NoteFailure(int rc);  // keeps the cause of a failure in last_fault_
  void NoteFileId();         // the file a writer opened, to tell when it is deleted
  // Steps a write statement once (after its binds, whose first failure is bind_rc) and resets it.
  Status StepDone(sqlite3_stmt* stmt, int bind_rc, const char* what);
  void Rollback();  // ends a failed transaction, if SQLite has not ended it already
  // The rows of one read, by the plan in sqlite_run_store_read.cc (ReadPlan): the fast scan
  // first, and after damage, the rows it did not reach one by one.
  struct ReadPlan;
  template <class Row>
  Status ReadRows(const ReadPlan& plan, const std::string& series, int64_t series_id, int64_t lo, int64_t hi,
                  Row&& row);
  Status CreateSchema(const RunMeta& meta);
  Status CheckSchema();
  Status WriteTensorStats(const std::vector<WriteBatch::StatsPoint>& records);
  Status WriteVectors(const std::vector<WriteBatch::VectorRecord>& records);
  Status WriteSpans(const std::vector<Span>& spans);
  Status WriteFindings(const std::vector<Finding>& findings);

  sqlite3* db_ = nullptr;
  bool read_only_ = true;
  ScalarChunker chunker_;
  std::unordered_map<std::string, std::pair<int64_t, SeriesKind>> series_cache_;
  std::vector<sqlite3_stmt*> statements_;  // finalized on close
  sqlite3_stmt* insert_chunk_ = nullptr;
  sqlite3_stmt* read_chunk_ = nullptr;  // ReadChunks
  bool row_crc_ = false;  // scalar_chunk, tensor_stats and vector have their crc columns (CheckSchema)
  std::string measured_columns_;  // tensor_stats' measured columns as a SELECT list (CheckSchema)
  sqlite3_stmt* delete_chunk_ = nullptr;
  sqlite3_stmt* insert_stats_ = nullptr;
  sqlite3_stmt* insert_span_ = nullptr;
  sqlite3_stmt* insert_vector_ = nullptr;
  sqlite3_stmt* insert_finding_ = nullptr;
  std::pair<uint64_t, uint64_t> file_id_{0, 0};  // device and inode of the file a writer opened
};

}  // namespace trainscope
