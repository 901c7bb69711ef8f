// Recorder: what a training process talks to. The training thread only enqueues into a
// bounded in-memory queue (never waits for disk); a writer thread batches the queue into
// the run store at least every flush interval, at once on a critical finding or Flush().
// When the queue is full, points are dropped and counted, never blocking the caller.
//
// All methods are thread-safe. A failure inside the recorder (disk full, a bad tag) is
// reported once on stderr and recording goes on: the training it watches is never stopped.
#pragma once

#include <atomic>
#include <map>
#include <condition_variable>
#include <deque>
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
#include "store/run_store.h"

namespace trainscope {

// Optional parts, used only by recorder.cc (built with them or not).
namespace doctor { class RuleEngine; }
namespace ingest { class TfEventsWriter; }

// A user alert rule that fired (rules from a TOML file, doctor/rules.h), as the training
// side receives it at a step boundary. Its finding (USER_ALERT) is already in the run and
// its shell command already started; print, callback, stop and pdb are the client's.
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
    std::map<std::string, std::string> extra_meta;  // e.g. rank, world_size
    // Judge the samples on the writer thread as they are stored (when the doctor is built):
    // findings are stored with the run and printed as a one-line alert on stderr.
    bool online_doctor = true;
    // Alert rules (docs/doctor.md "Alert rules"): a TOML file, or TOML text with the name
    // to give it in errors. A bad rule fails Open (naming file and line), before the run
    // is created. Rules are judged on the writer thread every kRuleTick, not only at commits.
    std::string alert_rules_file;
    std::string alert_rules_text;
    std::string alert_rules_origin = "alert rules";
    // The TensorBoard mirror (needs the ingest part): scalars and tensor stats are also
    // written to an event file in tensorboard_dir (empty: <run_dir>/tensorboard), flushed
    // with every store commit.
    bool tensorboard = false;
    std::string tensorboard_dir;
  };
  // How often the writer judges the alert rules on what is queued, between commits.
  static constexpr double kRuleTick = 0.05;
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
  // The first error the writer met, if any (it keeps going and counts drops after it).
  Status writer_status() const;
  // The findings the online doctor has opened so far, in the order they opened.
  std::vector<Finding> live_findings() const;

  // ---- alert rules: polled by the training thread at step boundaries ----
  // One relaxed atomic load: whether an alert waits to be taken.
  bool alerts_pending() const { return alerts_pending_.load(std::memory_order_relaxed); }
  // The alerts fired at steps before `before_step`, oldest first; later ones stay pending
  // (their step has not ended yet).
  std::vector<RuleAlert> TakeAlerts(int64_t before_step);
  size_t alert_rule_count() const { return alert_rule_count_; }
  // The TensorBoard mirror's file, or "" when there is none.
  const std::string& tensorboard_path() const { return tensorboard_path_; }

 private:
  Recorder() = default;
  void WriterLoop();
  void WriteOnce();  // writer thread: drain the queue into the store
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
  WriteBatch queue_;  // series ids are recorder ids until the writer maps them
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

  // The online doctor runs on a thread of its own, fed by the writer after each commit, so
  // a slow judgement never delays a write. Its backlog is bounded: past kDoctorBacklog
  // batches the samples are skipped (counted), the metadata and tags still go through.
  struct DoctorWork {
    std::vector<std::string> new_tags;
    std::vector<std::pair<std::string, std::string>> meta;
    WriteBatch batch;  // series ids are recorder ids
  };
  static constexpr size_t kDoctorBacklog = 8;
  void DoctorLoop();
  void FeedDoctor(DoctorWork& work);
  void OnDoctorFinding(const Finding& finding);

  std::vector<Finding> live_findings_;  // guarded by mu_

  std::unique_ptr<SampleSink> doctor_;  // the online doctor, or null (doctor thread only)
  std::function<void()> finish_doctor_;
  std::function<void()> end_batch_doctor_;  // a batch was fed: the doctor may judge its steps
  std::function<std::vector<Finding>()> doctor_findings_;  // its findings in their latest state
  std::vector<std::string> doctor_tags_;  // recorder id -> tag (doctor thread)
  std::mutex doctor_mu_;
  std::condition_variable doctor_cv_;
  std::deque<DoctorWork> doctor_queue_;  // guarded by doctor_mu_
  // Batches the doctor has judged, emptied with their capacity kept, for the writer to
  // reuse: the doctor takes each batch over instead of a copy (a TensorStats is ~1.1 KB).
  std::vector<WriteBatch> spare_batches_;  // guarded by doctor_mu_
  bool doctor_stop_ = false;             // guarded by doctor_mu_
  uint64_t doctor_skipped_ = 0;          // guarded by doctor_mu_
  std::thread doctor_thread_;

  // Alert rules (doctor/rules.h), judged on the writer thread: every kRuleTick on the new
  // part of the queue (copied under mu_, only the series a rule matches), and at each
  // write on what the ticks have not seen yet.
  std::shared_ptr<doctor::RuleEngine> rules_;  // null without rules
  size_t alert_rule_count_ = 0;
  std::vector<uint8_t> rule_watched_;  // recorder id -> some rule matches (writer, under mu_)
  size_t rule_seen_scalars_ = 0;       // queue_ points the rules have judged (under mu_)
  size_t rule_seen_stats_ = 0;
  void SyncWriterTagsLocked();
  void JudgeRules(const std::vector<WriteBatch::ScalarPoint>& scalars,
                  const std::vector<WriteBatch::StatsPoint>& stats, std::vector<Finding>* findings);
  void PeekRules();  // writer thread, between commits
  mutable std::mutex alert_mu_;
  std::vector<RuleAlert> alerts_;  // guarded by alert_mu_
  std::atomic<bool> alerts_pending_{false};

  // The TensorBoard mirror, writer thread only.
  std::shared_ptr<ingest::TfEventsWriter> mirror_;
  void WriteMirror(const WriteBatch& batch);
  std::string tensorboard_path_;
  bool mirror_failed_ = false;

  // Writer-thread state.
  std::vector<std::string> writer_tags_;  // recorder id -> tag (extended under mu_)
  std::vector<int64_t> store_ids_;  // recorder id -> store series id
  WriteBatch recycled_;
  double last_commit_ = 0;
  std::thread writer_;
};

// Facts about the process a run is recorded from.
std::string HostName();
// The commit checked out in the git work tree holding `dir` (read from .git, no git
// process), or "" when there is none.
std::string GitCommit(const std::string& dir);
// A run name is one path component: 1-255 bytes, no "/", not "." or "..".
Status ValidateRunName(const std::string& name);

}  // namespace trainscope
