// Recorder: what a training process talks to. The training thread only enqueues into a
// bounded in-memory queue (never waits for disk); a writer thread batches the queue into
// the run store at least every flush interval, at once on a critical finding or Flush().
// When the queue is full, points are dropped and counted, never blocking the caller.
//
// All methods are thread-safe. A failure inside the recorder (disk full, a bad tag) is
// reported once on stderr and recording goes on: the training it watches is never stopped.
//
// The recorder keeps the queue, the writer thread and the tag table; everything else that
// watches a run while it is recorded (the online doctor, alert rules, the TensorBoard
// mirror) is an observer (observer.h) that the caller composes and passes to Open.
#pragma once

#include <atomic>
#include <map>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"
#include "core/status.h"
#include "core/tag.h"
#include "recorder/observer.h"
#include "store/run_store.h"

namespace trainscope {

// An alert for the training side, posted by an observer (the alert rules,
// doctor/rule_observer.h) and taken at a step boundary. Its finding (USER_ALERT) is already
// in the run and its shell command already started; print, callback, stop and pdb are the
// client's.
struct RuleAlert {
  std::string rule;
  std::string series;
  Severity severity = Severity::kWarning;
  int64_t step = 0;
  double value = 0;
  std::string message;
  std::vector<std::string> actions;  // print, stop, callback, pdb, shell
  std::string callback;              // name in the client's callback registry
  std::string shell;
};

// Beside the store in a run directory: space held back for the run's end (recorder.cc).
inline constexpr char kReserveFileName[] = "trainscope.db-reserve";

class Recorder {
 public:
  struct Options {
    std::string logdir = "runs";
    std::string name;  // empty: a name is made from the start time
    std::string config_json = "{}";
    std::string command_line;
    bool resume = false;  // append to an existing run of that name instead of failing
    size_t queue_capacity = size_t{1} << 22;  // queued records before dropping (~100 MB)
    double flush_interval_seconds = 1.0;
    // After a failed store write (full disk, read-only, ...): seconds between tries to write
    // again; what comes in between is dropped and counted.
    double store_retry_seconds = 5.0;
    // Caps the store file (RunStore::LimitFileSize), 0: no cap. A quota, and how the tests
    // fill a disk.
    int64_t max_store_bytes = 0;
    std::map<std::string, std::string> extra_meta;  // e.g. rank, world_size
    // Facts about the process, given by the caller (watch/run_facts.h finds the git commit).
    // host: empty is this machine's name, which readers compare with theirs to tell a
    // writer that died (with the pid) from one running elsewhere.
    std::string host;
    std::string git_commit;
    // What watches the run beside its store (observer.h): the online doctor, alert rules,
    // the TensorBoard mirror. Each is told of every commit; one observer serves one run.
    std::vector<std::shared_ptr<RecorderObserver>> observers;
  };
  // How often the writer ticks its ticking observers (the alert rules) on what is queued,
  // between commits.
  static constexpr double kRuleTick = 0.05;
  // The shortest gap between commits, however long they take.
  static constexpr double kMinFlushGap = 0.05;
  // Queued tensor statistics past which the writer commits at once (recorder.cc).
  static constexpr size_t kEarlyWriteStats = 4096;

  static Status Open(const Options& options, std::unique_ptr<Recorder>* recorder);
  ~Recorder();  // Close("finished") unless closed already

  // ---- training-thread side: O(1) each, no disk ----
  // The id of a series: validates the tag and remembers it. A tag keeps its first kind.
  Status Series(std::string_view tag, SeriesKind kind, uint32_t* id);
  void LogScalar(uint32_t id, int64_t step, double value);
  // Many named scalars at one step under one lock. Invalid tags are skipped; their error
  // messages are appended to `rejected` the first time each tag is seen.
  void LogNamedScalars(const std::vector<std::pair<std::string_view, double>>& values, int64_t step,
                       std::vector<std::string>* rejected);
  void LogTensorStats(uint32_t id, int64_t step, const TensorStats& stats);
  void LogVector(uint32_t id, int64_t step, std::vector<float> values);
  void LogSpan(Span span);
  void AddFinding(Finding finding);  // a critical finding is written at once
  // Sets one key of the run's meta (e.g. module_order) with the next write; a later call
  // for the same key wins. Never dropped.
  void SetMeta(std::string key, std::string value);

  // Blocks until everything enqueued before the call is committed to the store.
  void Flush();
  // Flushes, marks the run "finished" or "crashed" (with the reason) and stops the writer.
  Status Close(const std::string& status = "finished", const std::string& exit_reason = "");

  const std::string& run_dir() const { return run_dir_; }
  const std::string& name() const { return name_; }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // The dropped points by cause: "queue full", or a store fault (StoreFaultCause: "disk
  // full", "read-only", ...); they add up to dropped().
  std::map<std::string, uint64_t> drops() const;
  // A stretch of steps that lost points to a store fault: steps first..last lost some or all.
  struct Gap {
    int64_t first_step;
    int64_t last_step;
    std::string cause;
  };
  std::vector<Gap> gaps() const;
  // The first error the writer met, if any (it keeps going and counts drops after it).
  Status writer_status() const;
  // The findings the observers (the online doctor, the alert rules) have opened so far, in
  // the order they opened; after Close, in their final state.
  std::vector<Finding> live_findings() const;
  // The observers given to Open, in that order (a composition root finds its own here).
  const std::vector<std::shared_ptr<RecorderObserver>>& observers() const { return observers_; }

  // ---- alerts posted by observers: polled by the training thread at step boundaries ----
  // One relaxed atomic load: whether an alert waits to be taken.
  bool alerts_pending() const { return alerts_pending_.load(std::memory_order_relaxed); }
  // The alerts fired at steps before `before_step`, oldest first; later ones stay pending
  // (their step has not ended yet).
  std::vector<RuleAlert> TakeAlerts(int64_t before_step);

 private:
  Recorder() = default;
  static double WallNow();  // seconds since the epoch
  void WriterLoop();
  // Writer thread (Close's thread once it has stopped): drains the queue into the store.
  // While the store fails, a batch is written only every store_retry_seconds (always when
  // `last`), and dropped in between.
  void WriteOnce(bool last = false);
  // After a failed write: counts the batch's points as dropped for `cause`, widens the open
  // gap over its steps, and keeps its meta and findings for the next write.
  void DropBatch(const WriteBatch& batch, std::vector<std::pair<std::string, std::string>>* meta,
                 const std::string& cause);
  void NoteStoreFault(const Status& s, const std::string& cause);  // once per fault: stderr
  void NoteStoreRecovered();
  std::string DropsJsonLocked() const;
  std::string GapsJsonLocked() const;
  Status CreateStore();  // writer: the store Open could not create
  Status WriteToStore(WriteBatch& batch,  // writer: one try at meta, new series, kept findings, the batch
                      const std::vector<std::pair<std::string, std::string>>& meta);
  bool QueueFull() const;
  double Now() const;
  uint32_t InternLocked(std::string_view tag, SeriesKind kind, Status* status);

  struct TagHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::string run_dir_;
  std::string name_;
  std::unique_ptr<RunStore> store_;  // writer thread only (after Open)
  double flush_interval_ = 1.0;
  size_t capacity_ = 0;

  mutable std::mutex mu_;
  std::condition_variable wake_writer_;
  std::condition_variable flushed_cv_;
  WriteBatch queue_;  // series ids are recorder ids until the writer maps them; its tensor_stats stay empty
  // Tensor statistics as the training thread queues them (LogTensorStats): each point's
  // summary, and its histogram (1 KB of a TensorStats' 1.1) only when it has one. The queue's
  // memory was last read on the writer's core, and every cache line written there has to
  // come back: whole points cost the training thread ~1 us each (5.7 of the tiny MLP's 8.5 us
  // gradient statistics a step, docs/watch.md). The writer expands them into its batch.
  struct QueuedStats {
    struct Point {
      uint32_t series_id;
      uint32_t histogram;  // 1 + its index in histograms; 0: none
      int64_t step;
      double wall_time;
      TensorStatsSummary summary;
    };
    std::vector<Point> points;
    std::vector<TensorStats::Histogram> histograms;
    void Add(uint32_t id, int64_t step, double wall_time, const TensorStats& stats);
    WriteBatch::StatsPoint Expand(size_t i) const;
    void clear() {
      points.clear();
      histograms.clear();
    }
  };
  QueuedStats queued_stats_;  // under mu_
  std::vector<std::pair<std::string, std::string>> pending_meta_;  // SetMeta, in call order
  size_t queued_ = 0;
  std::unordered_map<std::string, uint32_t, TagHash, std::equal_to<>> ids_;
  std::vector<std::pair<std::string, SeriesKind>> tags_;  // by recorder id
  std::set<std::string> rejected_tags_;
  uint64_t flush_requested_ = 0;
  uint64_t flush_done_ = 0;
  bool urgent_ = false;
  bool stopping_ = false;
  bool closed_ = false;
  Status writer_status_;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> queue_full_drops_{0};
  // ---- store faults (writer thread; the counts and gaps under mu_ for readers) ----
  double retry_interval_ = 5.0;
  int64_t max_store_bytes_ = 0;
  bool store_failing_ = false;
  double next_retry_ = 0;  // WallNow() of the next try while failing
  std::string fault_cause_;
  std::map<std::string, uint64_t> store_drops_;  // under mu_
  std::vector<Gap> gaps_;                        // under mu_
  bool gap_open_ = false;                        // the last gap is still growing
  // What a failed write keeps for the next one: meta (never dropped) and findings (few).
  std::vector<std::pair<std::string, std::string>> unwritten_meta_;
  std::vector<Finding> unwritten_findings_;
  RunMeta create_meta_;       // while the store could not be created yet
  std::string create_fault_;  // why the last try to create it failed
  std::string reserve_path_;  // space held back to mark the run ended on a full disk
  void HoldReserve();
  void ReleaseReserve();
  std::vector<Finding> live_findings_;  // guarded by mu_

  // ---- observers (observer.h) ----
  // The host side of the observers: what they may do to this run, from any thread.
  class Host final : public ObserverHost {
   public:
    explicit Host(Recorder* recorder) : recorder_(recorder) {}
    void AddLiveFinding(Finding finding) override;
    void PostAlert(RuleAlert alert) override;
    void RecycleBatch(WriteBatch batch) override;

   private:
    Recorder* recorder_;
  };
  Host host_{this};
  // Those that take batches over are last: the others see each commit's batch first.
  std::vector<std::shared_ptr<RecorderObserver>> observers_;  // as given
  std::vector<RecorderObserver*> commit_order_;
  bool observers_closed_ = false;  // after OnClose: no tick or commit reaches them
  // Ticked observers: every kRuleTick the writer copies, under mu_, the points of the series
  // each one watches from the part of the queue no tick has seen, and hands them over
  // outside the lock; at each write, what the ticks have not seen yet.
  struct Ticked {
    RecorderObserver* observer;
    std::vector<uint8_t> watched;  // recorder id -> watched (writer, extended under mu_)
    std::vector<WriteBatch::ScalarPoint> scalars;  // scratch
    std::vector<WriteBatch::StatsPoint> stats;
  };
  std::vector<Ticked> ticked_;
  size_t tick_seen_scalars_ = 0;  // queue_ points the ticks have handed over (under mu_)
  size_t tick_seen_stats_ = 0;
  void SyncWriterTagsLocked();
  void Tick();  // writer thread, between commits
  // Hands each ticked observer its watched points of batch past the seen counts.
  void TickBatch(const WriteBatch& batch, const QueuedStats& stats, size_t seen_scalars, size_t seen_stats,
                 std::vector<Finding>* findings);
  // Into ticked_: the watched points of scalars and stats past the seen counts.
  void CollectWatched(const std::vector<WriteBatch::ScalarPoint>& scalars, size_t seen_scalars,
                      const QueuedStats& stats, size_t seen_stats);
  void HandOverWatched(std::vector<Finding>* findings);  // ticked_'s points to their observers
  // Batches given back by observers that took them over, emptied with their capacity.
  std::mutex spare_mu_;
  std::vector<WriteBatch> spare_batches_;  // guarded by spare_mu_
  static constexpr size_t kMaxSpareBytes = size_t{16} << 20;  // a spare's capacity kept, at most
  mutable std::mutex alert_mu_;
  std::vector<RuleAlert> alerts_;  // guarded by alert_mu_
  std::atomic<bool> alerts_pending_{false};

  // Writer-thread state.
  std::vector<std::string> writer_tags_;  // recorder id -> tag (extended under mu_)
  std::vector<SeriesKind> writer_kinds_;  // recorder id -> kind (extended under mu_)
  std::vector<int64_t> store_ids_;  // recorder id -> store series id, 0 until the store made it
  WriteBatch recycled_;
  QueuedStats taken_stats_;  // the queued statistics of the batch being written
  double last_commit_ = 0;
  std::thread writer_;
};

// A run name is one path component: 1-255 bytes, no "/", not "." or "..".
Status ValidateRunName(const std::string& name);

}  // namespace trainscope
