// RunStore: one training run in one SQLite file, <logdir>/<run>/trainscope.db.
//
// Writes come from one writer (the recorder's writer thread, or an importer); any number
// of readers may open the same file at the same time (WAL mode). Every point is kept: the
// reader decimates for display, it never samples.
//
// Scalars are stored in chunks of up to kChunkPoints points per row (steps, values and
// wall-time offsets packed in one blob), as time-series stores do: one SQLite row costs
// about a microsecond, a point in a chunk costs a few nanoseconds. Each write adds the
// new points of a series as one small row; when a series has kChunkPoints points, they
// become one full row that replaces the small ones. So a series logged one point a
// second still reads back as few rows, and every point is written at most twice.
//
// A damaged file is read as far as it can be: a record that cannot be read (a corrupt page,
// a blob of the wrong size, a cut histogram) is skipped and reported with its series and
// rowid, and the rest is read. Writes fail whole: a failing write rolls back to the last
// commit.
//
// A store is not thread-safe: one RunStore object per thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/sample.h"
#include "core/regular_file.h"
#include "core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace trainscope {

inline constexpr char kStoreFileName[] = "trainscope.db";

enum class SeriesKind : int { kScalar = 0, kTensorStats = 1, kSpan = 2, kVector = 3 };
const char* SeriesKindName(SeriesKind kind);
// The checksum stored with each scalar chunk, tensor_stats row and vector row: CRC-32 (zlib's)
// of the row's values in order, as they read back (integers and doubles as 8 little-endian
// bytes, NaN and -0.0 as SQLite returns them), so that a value changed in the file is caught.
class RowCrc {
 public:
  RowCrc& Int(int64_t v);
  RowCrc& Real(double v);
  RowCrc& Bytes(const void* data, size_t bytes);
  uint32_t value() const { return static_cast<uint32_t>(crc_); }

 private:
  unsigned long crc_ = 0;
};

struct SeriesInfo {
  int64_t id = 0;
  std::string tag;
  SeriesKind kind = SeriesKind::kScalar;
  int64_t points = 0;
  int64_t first_step = 0;  // smallest step
  int64_t last_step = 0;   // largest step
  double last_value = 0;   // value of the point appended last (scalars)
};

// One point as read back.
struct Point {
  int64_t step;
  double wall_time;
  double value;
};

// One decimation bucket: every point whose step falls in [step_begin, step_end) summarised
// by the extremes and the last point, so no spike is lost at any zoom.
struct Bucket {
  int64_t step_begin;
  int64_t step_end;
  int64_t count;
  double min;         // NaN-free: NaN/Inf points are counted in nonfinite, not here
  double max;
  int64_t last_step;  // the last point appended into this bucket
  double last_wall_time;
  double last;        // may be NaN/Inf: it is the value as logged
  int64_t nonfinite;
};

struct TensorStatsPoint {
  int64_t step;
  double wall_time;
  TensorStats stats;
};

struct VectorPoint {
  int64_t step;
  double wall_time;
  std::vector<float> values;
};

// Run metadata. status is one of "running", "finished", "crashed".
struct RunMeta {
  std::string name;
  double start_time = 0;
  double end_time = 0;  // 0 while running
  std::string host;
  int64_t pid = 0;
  std::string config_json = "{}";
  std::string command_line;
  std::string git_commit;
  std::string status = "running";
  std::string exit_reason;  // why a run ended as crashed: exception type, signal, ...
  double heartbeat = 0;     // wall time of the writer's last commit
  int64_t dropped_points = 0;
  int64_t backward_steps = 0;  // points whose step went backwards in their series
  std::map<std::string, std::string> extra;  // any other key
};

// A record a read skipped, or a part of one it left out, because the file is damaged.
struct DamagedRecord {
  std::string series;  // the series' tag; empty where the damage belongs to no one series
  std::string table;   // scalar_chunk, tensor_stats, vector, span, finding, series, meta or file
  int64_t rowid = 0;   // the row's id; 0 where it is not known
  std::string what;    // what was found, and what was expected
};
std::string DescribeDamage(const DamagedRecord& record);  // "series 'a': scalar_chunk row 7: ..."

// Store reads tell their reporter about each damaged record, then skip it and read on.
class DamageReporter {
 public:
  virtual ~DamageReporter() = default;
  virtual void Damaged(const DamagedRecord& record) = 0;
};

// A reporter that counts every record and keeps the first kMaxKept.
class DamageLog : public DamageReporter {
 public:
  static constexpr size_t kMaxKept = 1000;
  void Damaged(const DamagedRecord& record) override;
  int64_t count() const { return count_; }
  const std::vector<DamagedRecord>& records() const { return records_; }
  // "3 damaged records skipped (series 'a': scalar_chunk row 7: ...; ...)", empty if none.
  std::string Summary(size_t at_most = 3) const;
  // The series the kept records belong to, sorted, each once (damage outside any one series,
  // in the file or the series table, names none).
  std::vector<std::string> Series() const;

 private:
  int64_t count_ = 0;
  std::vector<DamagedRecord> records_;
};

// Everything the recorder hands the store in one flush; written in one transaction.
struct WriteBatch {
  struct ScalarPoint {
    int64_t series_id;
    int64_t step;
    double wall_time;
    double value;
  };
  struct StatsPoint {
    int64_t series_id;
    int64_t step;
    double wall_time;
    TensorStats stats;
  };
  struct VectorRecord {
    int64_t series_id;
    int64_t step;
    double wall_time;
    std::vector<float> values;
  };
  std::vector<ScalarPoint> scalars;
  std::vector<StatsPoint> tensor_stats;
  std::vector<Span> spans;
  std::vector<VectorRecord> vectors;
  std::vector<Finding> findings;
  bool empty() const {
    return scalars.empty() && tensor_stats.empty() && spans.empty() && vectors.empty() && findings.empty();
  }
};

// The memory a batch's samples take (elements, not the vectors' spare capacity; findings
// are few and not counted).
size_t BatchBytes(const WriteBatch& batch);

class RunStore {
 public:
  static constexpr int kChunkPoints = 2048;

  // Creates the run directory and a new store. Fails if a store is already there. A store
  // that cannot be laid down is removed again (no empty file is left), and `fault` (when
  // given) gets the cause in StoreFaultCause's words.
  static Status Create(const std::string& run_dir, const RunMeta& meta, std::unique_ptr<RunStore>* store,
                       std::string* fault = nullptr);
  // Opens an existing store for appending (resume, import).
  static Status OpenForWrite(const std::string& run_dir, std::unique_ptr<RunStore>* store);
  // Opens an existing store read-only. `path` is a run directory or the .db file itself.
  // Every read of this store tells `reporter` (when given) about the damaged records it
  // skips; damage() counts them either way.
  static Status OpenReadOnly(const std::string& path, std::unique_ptr<RunStore>* store,
                             DamageReporter* reporter = nullptr);

  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  const std::string& path() const { return db_path_; }
  // Every damaged record the reads of this store have skipped so far.
  const DamageLog& damage() const { return damage_; }
  // Caps the file at max_bytes (PRAGMA max_page_count): a write past it fails as on a full
  // disk, and rolls back. For quotas, and for tests of what a failing write keeps.
  Status LimitFileSize(int64_t max_bytes);
  // Caps the bytes of one stored value (SQLITE_LIMIT_LENGTH): a write of a bigger one fails
  // at that statement, SQLite keeps the transaction open, and the store rolls it back.
  void LimitValueSize(int max_bytes);

  // ---- writing ----
  // Returns the id of the series for tag, creating it with kind if it is new. A tag may
  // hold only one kind.
  Status EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id);
  // EnsureSeries for each, in one transaction (one commit for a thousand new series, not a
  // thousand); on failure none is made and `ids` are all 0.
  Status EnsureSeriesAll(const std::vector<std::pair<std::string, SeriesKind>>& series, std::vector<int64_t>* ids);
  // Writes the batch in one transaction. Series ids come from EnsureSeries.
  Status Write(const WriteBatch& batch);
  // Rewrites stored findings in their final state (severity, last step, summary, evidence,
  // causes, actions), each matched by code, location and first step: the online doctor
  // stores a finding when it opens, and it may grow or escalate afterwards.
  Status UpdateFindings(const std::vector<Finding>& findings);
  Status SetMeta(const RunMeta& meta);
  Status SetMetaValue(const std::string& key, const std::string& value);
  // Marks the run ended: status "finished" or "crashed", with the reason for a crash, and
  // `meta` keys written in the same transaction (what the run lost: one small commit that a
  // nearly full disk can still take).
  Status Close(const std::string& status, const std::string& exit_reason,
               const std::vector<std::pair<std::string, std::string>>& meta = {});
  // Folds the WAL into the file and truncates it: after a failed write this gives back the
  // WAL's space (a full disk) or its length (a file size limit).
  Status Checkpoint();
  // Why the last failed call failed, in StoreFaultCause's words.
  const std::string& last_fault() const { return last_fault_; }

  // ---- reading ----
  Status ReadMeta(RunMeta* meta);
  // A run left "running" whose writer is gone is reported "crashed" (same host, pid dead).
  std::string EffectiveStatus(const RunMeta& meta);
  Status ListSeries(std::vector<SeriesInfo>* series);
  Status FindSeries(std::string_view tag, SeriesInfo* info);  // NotFound if no such tag
  // Every point with step in [step_min, step_max], in the order it was appended.
  Status ReadScalars(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<Point>* points);
  // Points in [step_min, step_max] summarised into at most `buckets` buckets of equal step
  // width; empty buckets are left out.
  Status ReadDecimated(std::string_view tag, size_t buckets, int64_t step_min, int64_t step_max,
                       std::vector<Bucket>* out);
  Status ReadTensorStats(std::string_view tag, int64_t step_min, int64_t step_max,
                         std::vector<TensorStatsPoint>* out);
  Status ReadVectors(std::string_view tag, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out);
  // The same reads for a series from ListSeries, without looking its tag up again: for a
  // reader that reads every series one window of steps at a time.
  Status ReadScalars(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<Point>* points);
  // A scalar series' chunks (rows of up to kChunkPoints points): each one's id, steps and points,
  // in append order. With ReadChunks, a reader that goes through a long run window by
  // window reads each chunk where it is, instead of scanning the series' rows every window.
  struct ChunkSpan {
    int64_t id;
    int64_t min_step;
    int64_t max_step;
    int64_t count;  // points
  };
  Status ListChunks(const SeriesInfo& info, std::vector<ChunkSpan>* chunks);
  // The points with step in [step_min, step_max] of the chunks `ids`, in that order (as
  // ReadScalars gives them when `ids` are every chunk overlapping the steps).
  Status ReadChunks(const SeriesInfo& info, const std::vector<int64_t>& ids, int64_t step_min, int64_t step_max,
                    std::vector<Point>* points);
  Status ReadTensorStats(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<TensorStatsPoint>* out);
  Status ReadVectors(const SeriesInfo& info, int64_t step_min, int64_t step_max, std::vector<VectorPoint>* out);
  Status ReadSpans(int64_t step_min, int64_t step_max, std::vector<Span>* out);
  Status ReadFindings(std::vector<Finding>* out);
  // Largest step of any series (0 for an empty run).
  Status MaxStep(int64_t* step);
  // Reads go through read(2) into a 32 MB page cache instead of the file mapped: every page
  // a mapped read touches stays in the process's RSS until the store closes, which a reader
  // that goes through a long run once (ReplayStepsInWindows) does not want.
  void UnmapReads();

 private:
  RunStore() = default;
  static Status OpenDb(const std::string& db_path, bool read_only, std::unique_ptr<RunStore>* store);
  Status Exec(const char* sql);
  Status Prepare(const char* sql, sqlite3_stmt** stmt);  // kept until the store closes
  Status SqlError(const char* what);
  Status SqlError(const char* what, int rc);
  void NoteFailure(int rc);  // keeps the cause of a failure in last_fault_
  void NoteFileId();         // the file a writer opened, to tell when it is deleted
  // Steps a write statement once (after its binds, whose first failure is bind_rc) and resets it.
  Status StepDone(sqlite3_stmt* stmt, int bind_rc, const char* what);
  void ReportDamage(DamagedRecord record);
  void Rollback();  // ends a failed transaction, if SQLite has not ended it already
  // The rows of one read, by the plan in run_store.cc (ReadPlan): the fast scan first, and
  // after damage, the rows it did not reach one by one.
  struct ReadPlan;
  template <class Row>
  Status ReadRows(const ReadPlan& plan, const std::string& series, int64_t series_id, int64_t lo, int64_t hi,
                  Row&& row);
  Status CreateSchema(const RunMeta& meta);
  Status CheckSchema();
  struct OpenChunk;  // a series' last, partial chunk (writer side)
  Status WriteScalars(const std::vector<WriteBatch::ScalarPoint>& points);
  Status InsertChunkRow(int64_t series_id, const OpenChunk& chunk, size_t begin, int64_t* rowid);
  Status WriteFullChunk(int64_t series_id, OpenChunk* chunk);
  Status WritePartialChunks();
  // Walks the chunks of one scalar series overlapping [lo, hi] in append order, calling
  // visit(steps, values, offsets, n, base_time) on each chunk's raw arrays.
  template <class Visit>
  Status ForEachChunk(const SeriesInfo& info, int64_t lo, int64_t hi, Visit&& visit);

  sqlite3* db_ = nullptr;
  std::string db_path_;
  bool read_only_ = true;
  std::unordered_map<int64_t, std::unique_ptr<OpenChunk>> open_chunks_;
  std::unordered_map<std::string, std::pair<int64_t, SeriesKind>> series_cache_;
  std::vector<sqlite3_stmt*> statements_;  // finalized on close
  sqlite3_stmt* insert_chunk_ = nullptr;
  sqlite3_stmt* read_chunk_ = nullptr;  // ReadChunks
  bool row_crc_ = false;  // scalar_chunk, tensor_stats and vector have their crc columns (CheckSchema)
  sqlite3_stmt* delete_chunk_ = nullptr;
  sqlite3_stmt* insert_stats_ = nullptr;
  sqlite3_stmt* insert_span_ = nullptr;
  sqlite3_stmt* insert_vector_ = nullptr;
  sqlite3_stmt* insert_finding_ = nullptr;
  int64_t backward_steps_ = 0;
  std::string last_fault_;
  std::pair<uint64_t, uint64_t> file_id_{0, 0};  // device and inode of the file a writer opened
  DamageReporter* reporter_ = nullptr;  // the caller's, may be null
  DamageLog damage_;
};

// The cause of a failed store write in the user's words: "disk full", "read-only", "store
// deleted", "locked by another process", "cannot open" or "I/O error". system_errno (0 if
// none) decides first: SQLite reports a write refused with EFBIG as a plain I/O error.
std::string StoreFaultCause(int sqlite_code, int system_errno);


// The runs of a logdir: every directory below it (any depth) holding a trainscope.db.
struct RunEntry {
  std::string name;  // path relative to the logdir
  std::string dir;
};
Status ListRuns(const std::string& logdir, std::vector<RunEntry>* runs);

}  // namespace trainscope
