// Mixed-precision numerics from what the training printed: steps skipped because float16
// gradients overflowed (dynamic loss scaling), the loss-scale trajectory, and iterations
// whose loss was NaN/Inf (Megatron's "number of nan iterations").
//
// Dynamic loss scaling overflows on purpose: the scaler doubles the scale after a window of
// clean steps (torch GradScaler: 2000, DeepSpeed: loss_scale_window 1000, DeepSpeed-Chat:
// 100, Megatron: 1000) and halves it (DeepSpeed: after `hysteresis` overflows) when the
// scaled gradients overflow. So a healthy fp16 run skips
//   - a burst at the start, one step per halving from the initial scale (2^16 DeepSpeed and
//     GradScaler, 2^32 Megatron) to a working one: up to ~32 steps, and
//   - about one or two steps per growth window after that: 0.05 % to 2 % of steps.
// Those are reported as info (the count, the steps, the scale trajectory). Skipping many
// steps, long runs of consecutive skips, or a scale that collapses towards 1 (gradients
// overflow float16 even unscaled) lose updates and are the real problem.
#pragma once

#include <deque>
#include <vector>

#include "doctor/detector.h"

namespace trainscope::doctor {

struct Fp16OverflowOptions {
  // The start-up burst: skips before the first `calibration_gap` clean steps, when the first
  // skip comes within `calibration_start` steps of the run's first step.
  int64_t calibration_start = 20;
  int64_t calibration_gap = 10;
  // Warning: more than `warning_rate` of the steps of a `rate_window`-step window skipped
  // after the calibration (5x the 2 % of a 100-step growth window with hysteresis 2);
  // critical above `critical_rate` (half the updates lost).
  int64_t rate_window = 200;
  double warning_rate = 0.1;
  double critical_rate = 0.5;
  // Warning: this many consecutive skipped steps after the calibration (the scale fell
  // 2^8 = 256x in one go: the gradients jumped, the scaler did not absorb it).
  int64_t max_consecutive = 8;
  // Warning: the scale fell >= 2^10 below its highest value after the calibration.
  double collapse_ratio = 1024;
  // Critical: the scale reached this (DeepSpeed's default min_loss_scale): even unscaled
  // gradients overflow float16.
  double min_scale = 1;
  // Trajectory points kept in the evidence (first and last halves when longer).
  size_t max_trajectory = 64;
};

class Fp16OverflowDetector : public Detector {
 public:
  explicit Fp16OverflowDetector(Fp16OverflowOptions options = {}) : options_(options) {}
  const char* name() const override { return "fp16_overflow"; }
  DetectorSpec spec() const override {
    return {{"FP16_OVERFLOW", "NONFINITE_LOSS"}, {{Input::kLossScaling, {"FP16_OVERFLOW"}}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  void AddSkip(int64_t step);
  Severity Judge(std::string* why) const;
  Finding Build(Severity severity, const std::string& why, const DetectorContext& ctx) const;

  Fp16OverflowOptions options_;
  bool any_frame_ = false;
  int64_t first_step_ = 0, last_step_ = 0;
  // Skip events (one per skipped step, in step order).
  std::vector<int64_t> skips_;
  std::string skip_source_;     // the tag the skips came from
  bool from_events_ = false;    // overflow_skip points seen: counters are only cross-checks
  double counter_last_ = 0;     // last value of a cumulative counter
  int64_t counter_step_ = 0;    // step of the last counter point
  bool counter_seen_ = false;
  double counter_value_ = kNaN; // the counter's latest value (evidence)
  // Calibration bookkeeping.
  bool calibration_open_ = true;
  size_t calibration_skips_ = 0;
  // Consecutive run and windowed rate after the calibration.
  int64_t run_length_ = 0, max_run_ = 0, max_run_end_ = 0;
  std::deque<int64_t> window_;
  size_t max_window_skips_ = 0;
  int64_t max_window_end_ = 0;
  // Loss scale.
  std::vector<std::pair<int64_t, double>> scale_changes_;
  double scale_min_ = kNaN, scale_peak_after_calibration_ = kNaN;
  int64_t scale_min_step_ = 0;
  // NaN iterations (Megatron).
  double nan_total_ = 0;
  int64_t nan_first_step_ = -1, nan_last_step_ = -1;
  Severity reported_ = Severity::kInfo;
  bool reported_any_ = false;
};

}  // namespace trainscope::doctor
