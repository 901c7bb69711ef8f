// RunStore: one training run's series, spans, findings and metadata.
//
// Writes come from one writer (the recorder's writer thread, an importer, the server's
// ingest); any number of readers may open the same run at the same time. Every point is
// kept: the reader decimates for display, it never samples.
//
// Scalars are stored in chunks of up to kChunkPoints points per row (steps, values and
// wall-time offsets packed in one blob), as time-series stores do: one row costs about a
// microsecond, a point in a chunk costs a few nanoseconds. Each write adds the new points
// of a series as one small row; when a series has kChunkPoints points, they become one
// full row that replaces the small ones. So a series logged one point a second still reads
// back as few rows, and every point is written at most twice.
//
// A damaged store is read as far as it can be: a record that cannot be read (a corrupt
// page, a blob of the wrong size, a cut histogram, a checksum that does not match) is
// skipped and reported with its series and row id, and the rest is read. Writes fail
// whole: a failing write rolls back to the last commit.
//
// A store is not thread-safe: one RunStore object per thread.
#pragma once

#include <cstdint>
#include <functional>
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

struct ChunkView;  // store/store_format.h

// One run's store. Two backends hold it: a SQLite file per run (<logdir>/<run>/trainscope.db,
// the embedded default: nothing to start) and a PostgreSQL database holding many projects'
// runs (docs/server.md). Both keep every point, store the same chunk and histogram bytes
// with the same checksums (store/store_format.h), and answer every read alike.
//
// A location names the store: a run directory or its .db file, or
// postgresql://[user@]host[:port]/database#project/run (also postgres://).
class RunStore {
 public:
  static constexpr int kChunkPoints = 2048;

  // Creates a new run (for SQLite, its directory and file). Fails if the run already exists.
  // A store that cannot be laid down is removed again (no empty file is left), and `fault`
  // (when given) gets the cause in StoreFaultCause's words.
  static Status Create(const std::string& location, const RunMeta& meta, std::unique_ptr<RunStore>* store,
                       std::string* fault = nullptr);
  // Opens an existing run for appending (resume, import).
  static Status OpenForWrite(const std::string& location, std::unique_ptr<RunStore>* store);
  // Opens an existing run read-only. Every read of this store tells `reporter` (when given)
  // about the damaged records it skips; damage() counts them either way.
  static Status OpenReadOnly(const std::string& location, std::unique_ptr<RunStore>* store,
                             DamageReporter* reporter = nullptr);

  virtual ~RunStore() = default;
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  // Where the run is, as messages name it: the .db file, or the run's location in a database
  // (without a password).
  const std::string& path() const { return path_; }
  // Every damaged record the reads of this store have skipped so far.
  const DamageLog& damage() const { return damage_; }
  // Caps the store at max_bytes: a write past it fails as on a full disk, and rolls back.
  // For quotas, and for tests of what a failing write keeps. SQLite only.
  virtual Status LimitFileSize(int64_t max_bytes);
  // Caps the bytes of one stored value: a write of a bigger one fails and rolls back.
  // SQLite only (elsewhere a no-op).
  virtual void LimitValueSize(int max_bytes) { (void)max_bytes; }

  // ---- writing ----
  // Returns the id of the series for tag, creating it with kind if it is new. A tag may
  // hold only one kind.
  virtual Status EnsureSeries(std::string_view tag, SeriesKind kind, int64_t* id) = 0;
  // EnsureSeries for each, in one transaction (one commit for a thousand new series, not a
  // thousand); on failure none is made and `ids` are all 0.
  virtual Status EnsureSeriesAll(const std::vector<std::pair<std::string, SeriesKind>>& series,
                                 std::vector<int64_t>* ids) = 0;
  // Writes the batch in one transaction. Series ids come from EnsureSeries.
  virtual Status Write(const WriteBatch& batch) = 0;
  // Rewrites stored findings in their final state (severity, last step, summary, evidence,
  // causes, actions), each matched by code, location and first step: the online doctor
  // stores a finding when it opens, and it may grow or escalate afterwards.
  virtual Status UpdateFindings(const std::vector<Finding>& findings) = 0;
  Status SetMeta(const RunMeta& meta);
  virtual Status SetMetaValue(const std::string& key, const std::string& value) = 0;
  // Marks the run ended: status "finished" or "crashed", with the reason for a crash, and
  // `meta` keys written in the same transaction (what the run lost: one small commit that a
  // nearly full disk can still take).
  virtual Status Close(const std::string& status, const std::string& exit_reason,
                       const std::vector<std::pair<std::string, std::string>>& meta = {}) = 0;
  // Gives back the space a failed write took (SQLite: folds the WAL into the file).
  virtual Status Checkpoint() { return Status::Ok(); }
  // Why the last failed call failed, in StoreFaultCause's words.
  const std::string& last_fault() const { return last_fault_; }

  // ---- reading ----
  virtual Status ReadMeta(RunMeta* meta) = 0;
  // A run left "running" whose writer is gone is reported "crashed" (same host, pid dead).
  static std::string EffectiveStatus(const RunMeta& meta);
  virtual Status ListSeries(std::vector<SeriesInfo>* series) = 0;
  virtual Status FindSeries(std::string_view tag, SeriesInfo* info) = 0;  // NotFound if no such tag
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
  virtual Status ListChunks(const SeriesInfo& info, std::vector<ChunkSpan>* chunks) = 0;
  // The points with step in [step_min, step_max] of the chunks `ids`, in that order (as
  // ReadScalars gives them when `ids` are every chunk overlapping the steps).
  virtual Status ReadChunks(const SeriesInfo& info, const std::vector<int64_t>& ids, int64_t step_min,
                            int64_t step_max, std::vector<Point>* points) = 0;
  virtual Status ReadTensorStats(const SeriesInfo& info, int64_t step_min, int64_t step_max,
                                 std::vector<TensorStatsPoint>* out) = 0;
  virtual Status ReadVectors(const SeriesInfo& info, int64_t step_min, int64_t step_max,
                             std::vector<VectorPoint>* out) = 0;
  virtual Status ReadSpans(int64_t step_min, int64_t step_max, std::vector<Span>* out) = 0;
  virtual Status ReadFindings(std::vector<Finding>* out) = 0;
  // Largest step of any series (0 for an empty run).
  virtual Status MaxStep(int64_t* step) = 0;
  // For a reader that goes through a long run once (ReplayStepsInWindows): SQLite reads go
  // through read(2) into a 32 MB page cache instead of the file mapped, whose pages would
  // stay in the process's RSS until the store closes.
  virtual void UnmapReads() {}

 protected:
  explicit RunStore(std::string path) : path_(std::move(path)) {}
  // Calls visit on each chunk of one scalar series that overlaps [lo, hi], in append order;
  // damaged chunks are reported and skipped.
  using ChunkVisitor = std::function<void(const ChunkView&)>;
  virtual Status VisitChunks(const SeriesInfo& info, int64_t lo, int64_t hi, const ChunkVisitor& visit) = 0;
  // The smallest and largest step of a scalar series' chunks; `any` false when it has none.
  // A damaged store that cannot say leaves `any` true and the range as it was.
  virtual Status ScalarStepRange(const SeriesInfo& info, bool* any, int64_t* lo, int64_t* hi) = 0;
  void ReportDamage(DamagedRecord record);
  // A series id the store did not hand out (EnsureSeries failed, and the caller wrote on)
  // would store points no series lists: refused before anything is written.
  Status CheckSeriesIds(const WriteBatch& batch) const;
  Status WrongKind(std::string_view tag, SeriesKind kind, const char* expected) const;
  // The meta keys and values of RunMeta's fields, and RunMeta from stored keys and values.
  static std::vector<std::pair<std::string, std::string>> MetaValues(const RunMeta& meta);
  static void SetMetaField(const std::string& key, const std::string& value, RunMeta* meta);

  std::string path_;
  std::string last_fault_;
  DamageReporter* reporter_ = nullptr;  // the caller's, may be null
  DamageLog damage_;
};

// The cause of a failed store write in the user's words: "disk full", "read-only", "store
// deleted", "locked by another process", "cannot open" or "I/O error". system_errno (0 if
// none) decides first: SQLite reports a write refused with EFBIG as a plain I/O error.
std::string StoreFaultCause(int sqlite_code, int system_errno);


// Whether a location names a run in PostgreSQL (postgresql:// or postgres://).
bool IsDatabaseLocation(std::string_view location);

// The runs of a logdir: every directory below it (any depth) holding a trainscope.db; or the
// runs of a database (postgresql://.../database, optionally #project): "project/run" each.
struct RunEntry {
  std::string name;  // path relative to the logdir; "project/run" in a database
  std::string dir;   // the run's location, for RunStore::OpenReadOnly
};
Status ListRuns(const std::string& logdir, std::vector<RunEntry>* runs);

}  // namespace trainscope
