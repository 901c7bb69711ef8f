// Moving whole runs between a RunStore and the sample stream (core/run_data.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/run_data.h"
#include "core/tag.h"
#include "store/run_store.h"

namespace trainscope {

// Reads every series, span, finding and metadata key of a store into `sink`
// (meta keys: name, status, config, host, ... as stored; plus "format" = "trainscope").
Status ReadRun(RunStore& store, SampleSink* sink);

// The metadata keys ReadRun gives, and the recorded findings; no series.
Status ReadRunMeta(RunStore& store, SampleSink* sink);

// Every series and span of the store in step order, as RunData::ReplaySteps gives a whole
// run (each step's samples, then step_done(step)), read one window of steps at a time:
// about `window_points` points in memory, whatever the run's length (on a store opened
// with RunStore::UnmapReads; mapped, the pages read stay in RSS). A damaged record is
// skipped and reported as a whole read would, once per window it overlaps.
Status ReplayStepsInWindows(RunStore& store, SampleSink* sink, const std::function<void(int64_t step)>& step_done,
                            int64_t window_points = 1 << 18);

// Reads every record of the store at `path` (a run directory or its .db file) and keeps
// none of it: `damage` gets each damaged record a whole read skips. What `show`, `runs`,
// `report` and the server say about a run's damage, so that they say what `diagnose` would.
// Costs one read of the run (about a second per 4 M points here).
Status CheckRun(const std::string& path, DamageLog* damage);

// Copies a whole run, its metadata as stored, every series, span and finding, into `to` (a
// new run of any backend): `trainscope push` from a run file into a team's database.
Status CopyRun(RunStore& from, RunStore* to);

// A sink that writes what it receives into a store, in batches. Used by importers.
// Call Finish() at the end; errors are kept and returned by Finish().
class StoreSink : public SampleSink {
 public:
  explicit StoreSink(RunStore* store) : store_(store) {}
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override;
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override;
  void OnVector(std::string_view tag, int64_t step, double wall_time, const std::vector<float>& values) override;
  void OnSpan(const Span& span) override;
  void OnFinding(const Finding& finding) override;
  void OnMeta(std::string_view key, std::string_view value) override;
  Status Finish();

 private:
  int64_t Id(std::string_view tag, SeriesKind kind);
  void MaybeWrite();

  RunStore* store_;
  WriteBatch batch_;
  size_t pending_ = 0;
  Status status_;
  std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace trainscope
