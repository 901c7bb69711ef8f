// The online doctor: a Doctor (doctor.h) judging a run while it is recorded, as a recorder
// observer (recorder/observer.h). It runs on a thread of its own, at lower priority, fed
// after each commit, so judging never delays a write nor the training. It takes each
// committed batch over instead of a copy (a TensorStats is ~1.1 KB) and gives it back
// emptied for the recorder's queue. Its backlog is bounded (kBacklog batches and
// kBacklogBytes of samples, whichever comes first; one batch is always taken): past that,
// samples are skipped and counted (`trainscope diagnose` judges every stored sample later);
// metadata and tags still go through.
//
// A finding is printed as a one-line alert on stderr when it opens and added to the run
// (stored, a critical one at once; kept in the recorder's live_findings). At Close the
// doctor judges its backlog and the last steps, runs its end-of-run checks, and hands the
// recorder every finding in its final state. A doctor failure turns the doctor off, never
// the recording.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "doctor/doctor.h"
#include "recorder/observer.h"

namespace trainscope::doctor {

class OnlineDoctor : public RecorderObserver {
 public:
  static constexpr size_t kBacklog = 8;
  // A heavy logger's batch is tens of MB (a second of 240 scalars and 5 tensor statistics a
  // step at 2,000 steps/s is ~25 MB): eight of them held 200 MB more of the training's memory
  // whenever the doctor fell behind, and MEMORY_LEAK then reported it (bench/store/soak.py).
  static constexpr size_t kBacklogBytes = size_t{32} << 20;

  // on_finding and judge_at_batch_end are set by the observer.
  explicit OnlineDoctor(DoctorOptions options = {});
  ~OnlineDoctor() override;

  Status OnOpen(const RunStart& run, ObserverHost& host) override;
  bool takes_batches() const override { return true; }
  void OnCommit(Commit& commit) override;
  void OnClose(std::vector<Finding>* final_state) override;

  // Samples skipped because the backlog was full (after Close: all of them).
  uint64_t skipped() const;

 private:
  struct Work {
    std::vector<std::string> new_tags;
    std::vector<std::pair<std::string, std::string>> meta;
    WriteBatch batch;  // series ids are recorder ids
    size_t bytes = 0;  // BatchBytes(batch) when taken
  };
  void Loop();
  void Feed(Work& work);
  void Stop();

  DoctorOptions options_;
  ObserverHost* host_ = nullptr;
  std::unique_ptr<Doctor> doctor_;  // doctor thread only once started; null after a failure
  std::vector<std::string> tags_;   // recorder id -> tag (doctor thread)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> queue_;  // guarded by mu_
  size_t queued_bytes_ = 0; // guarded by mu_: the batches in queue_
  bool stop_ = false;       // guarded by mu_
  uint64_t skipped_ = 0;    // guarded by mu_
  std::thread thread_;
};

}  // namespace trainscope::doctor
