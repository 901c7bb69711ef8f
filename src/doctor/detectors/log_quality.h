// The log itself: points of one series that share a step. Writers do it for a reason (YOLO
// logs a running mean every batch with the epoch as its step; a resumed run writes steps
// 90..99 again), and the doctor judges one value per series and step: the last one logged.
// It says so (DUPLICATE_STEPS, info) rather than judging silently what it dropped.
#pragma once

#include <map>
#include <string_view>
#include <unordered_map>

#include "doctor/detector.h"

namespace trainscope::doctor {

class DuplicateStepsDetector : public Detector {
 public:
  const char* name() const override { return "duplicate_steps"; }
  DetectorSpec spec() const override {
    return {{"DUPLICATE_STEPS"}, {}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  struct PerTag {
    uint64_t extra_points = 0;  // points beyond the first at their step
    uint64_t steps = 0;         // steps with more than one point
    uint64_t most = 0;          // most points at one step
    int64_t most_step = 0;
    int64_t first_step = 0;
  };
  // A scalar series: whether it is the user's (not sampled by the clock, not trainscope's
  // own), and its points in the frame being judged (frame_index_).
  struct Series {
    bool user = false;
    uint64_t frame = 0;
    uint64_t n = 0;
    double first = 0;
    bool differs = false;
  };
  std::map<std::string, PerTag> tags_;
  uint64_t extra_points_ = 0;
  uint64_t frame_index_ = 0;
  TagMap<Series> series_;
  std::vector<const TagMap<Series>::value_type*> repeated_;  // of this frame, with two points or more
};

// How the run ended, from what the log says: meta "exception" (a recorded run that
// crashed, or the traceback at the end of an imported console log) and meta
// "wandb_exit_code". RUN_CRASHED: critical for an exception (out of memory named as such),
// info for KeyboardInterrupt (stopped by its user); a non-zero exit code without an
// exception is a warning. The finding sits at the last step judged.
class RunExitDetector : public Detector {
 public:
  const char* name() const override { return "run_exit"; }
  DetectorSpec spec() const override {
    return {{"RUN_CRASHED"}, {}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override { last_step_ = frame.step; }
  void Finish(const DetectorContext& ctx) override;

 private:
  int64_t last_step_ = 0;
};

}  // namespace trainscope::doctor
