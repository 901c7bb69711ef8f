// Recorder observers: what watches a run while it is recorded, beside its store. The online
// doctor (doctor/online_doctor.h), the alert rules (doctor/rule_observer.h) and the
// TensorBoard mirror (ingest/tensorboard_mirror.h) are observers; the recorder knows none
// of them. A composition root (the Python module, the LibTorch client, a test) builds the
// observers of the parts it has and hands them to Recorder::Open in Options::observers.
//
// Threads: OnOpen runs in Open, OnTick and OnCommit on the writer thread, OnClose on the
// thread that closes the run (after the writer has stopped). An observer that needs more
// time than a commit allows keeps a thread of its own (the online doctor does). Whatever an
// observer does, the training thread only enqueues: observers never see the queue's lock.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sample.h"
#include "core/status.h"
#include "core/tag.h"
#include "store/run_store.h"

namespace trainscope {

struct RuleAlert;

// The run being opened, as Open tells its observers before the store is created.
struct RunStart {
  std::string run_dir;
  std::string name;
  std::string config_json;  // "{}" when none was given
  const std::map<std::string, std::string>& extra_meta;
  bool resume = false;
};

// What an observer may do to the run it watches. Thread-safe: any thread, any time until
// OnClose returns.
class ObserverHost {
 public:
  // Stored with the next commit (a critical one at once) and kept in live_findings().
  virtual void AddLiveFinding(Finding finding) = 0;
  // Queued for the training side, which takes it at a step boundary (Recorder::TakeAlerts).
  virtual void PostAlert(RuleAlert alert) = 0;
  // Gives back a batch taken over in OnCommit once it is no longer needed: the recorder
  // reuses its capacity for the queue (the training thread does not regrow it).
  virtual void RecycleBatch(WriteBatch batch) = 0;

 protected:
  ~ObserverHost() = default;
};

// The points of the series an observer watches, logged since the last tick.
struct TickPoints {
  const std::vector<std::string>& tags;  // recorder series id -> tag
  const std::vector<WriteBatch::ScalarPoint>& scalars;
  const std::vector<WriteBatch::StatsPoint>& tensor_stats;
};

// One commit to the store, after the write.
struct Commit {
  const std::vector<std::string>& tags;  // recorder series id -> tag
  size_t first_new_tag = 0;               // tags[first_new_tag..] appeared with this commit
  const std::vector<std::pair<std::string, std::string>>& meta;  // SetMeta since the last commit
  // What was written, with the recorder's series ids. An observer whose takes_batches() is
  // true may move it out (and later give it back through RecycleBatch); observers that do
  // are told of each commit after all the others, so every observer sees the whole batch.
  WriteBatch& batch;
  const Status& status;  // the store's answer to the write
};

class RecorderObserver {
 public:
  virtual ~RecorderObserver() = default;

  // Once, in Open, after the name is checked and before the run's store is created: an
  // error fails Open and no run is made. `host` stays valid until OnClose returns.
  virtual Status OnOpen(const RunStart& run, ObserverHost& host) { return Status::Ok(); }

  // ---- ticks: between commits, every Recorder::kRuleTick ----
  // Whether this observer is ticked (asked once, in Open).
  virtual bool ticks() const { return false; }
  // Whether OnTick gets the points of a new series (asked once per series).
  virtual bool Watches(std::string_view tag, SeriesKind kind) { return false; }
  // The watched points queued since the last tick, in logged order; at each commit, before
  // the write, the ones no tick has had. Each point comes once. Findings appended here are
  // stored with the run (in this commit, or the next) and kept in live_findings().
  virtual void OnTick(const TickPoints& points, std::vector<Finding>* findings) {}

  // ---- commits ----
  virtual bool takes_batches() const { return false; }
  virtual void OnCommit(Commit& commit) {}

  // Close, after the writer's last commit. Findings added now (AddLiveFinding) are stored
  // before the run is marked closed; `final_state` gets findings in their final state,
  // written over the stored ones of the same code, location and first step, and over
  // live_findings(). No tick or commit reaches the observer afterwards.
  virtual void OnClose(std::vector<Finding>* final_state) {}
};

}  // namespace trainscope
