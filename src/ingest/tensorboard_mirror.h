// The TensorBoard mirror: a run's scalars and tensor statistics also written to an event
// file while it is recorded, as a recorder observer (recorder/observer.h). The mirror gets
// what the store gets, in logged order, and is flushed with each commit so `tensorboard
// --logdir` sees the run while it trains. A failure stops the mirror only, never the store.
#pragma once

#include <memory>
#include <string>

#include "ingest/tfevents_writer.h"
#include "recorder/observer.h"

namespace trainscope::ingest {

class TensorBoardMirror : public RecorderObserver {
 public:
  // dir: a TensorBoard logdir, where each run gets its own folder (<dir>/<run name>);
  // empty: <run_dir>/tensorboard.
  explicit TensorBoardMirror(std::string dir = "") : dir_(std::move(dir)) {}

  Status OnOpen(const RunStart& run, ObserverHost& host) override;  // creates the event file
  void OnCommit(Commit& commit) override;
  void OnClose(std::vector<Finding>* final_state) override;

  // The event file, or "" before Open.
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::unique_ptr<TfEventsWriter> writer_;
  std::string path_;
  bool failed_ = false;
};

}  // namespace trainscope::ingest
