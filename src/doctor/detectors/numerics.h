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
#include <map>
#include <memory>
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

// What the recorded exponent histograms say about low-precision formats the run uses or
// considers (docs/numerics.md). It judges only what the run declares or shows:
//   - float16 is in use when the config says so (precision "16-mixed"/"fp16", fp16: true,
//     DeepSpeed's {"fp16": {"enabled": true}}, ...), when a loss-scale series is logged
//     (GradScaler), or when an activation turns Inf at a step where another activation's
//     finite values exceeded float16's range (the fingerprint of a cast to float16);
//   - bfloat16 weights when the config says the parameters are bfloat16 ("bf16-true",
//     param_dtype/torch_dtype bfloat16), and lost updates whatever the config says when
//     they are observed (a weight's update is exactly zero while its gradient is not);
//   - FP8 and TF32 only when the config names them.
// A healthy FP32 run declares none of these and observes no lost update: it gets nothing.
//
// Codes: FP16_OVERFLOW (activations or gradients past 65504, at the first step and layer),
// FP16_UNDERFLOW (gradients flushed to zero at the loss scale in use, with the loss scale
// 2^k that fixes it), BF16_STALE_UPDATE (updates below half a bfloat16 ulp of their weight),
// FP8_READINESS (per layer, delayed per-tensor scaling in E4M3 forward / E5M2 backward),
// TF32_PRECISION (matmul inputs whose spread needs more than TF32's 10 mantissa bits).
struct PrecisionFitOptions {
  // FP16_UNDERFLOW: over all gradient values recorded with histograms, at least this share
  // flushed to zero, or one gradient tensor with at least `underflow_tensor_fraction`.
  double underflow_fraction = 1e-3;
  double underflow_tensor_fraction = 0.05;
  // BF16_STALE_UPDATE: a parameter whose updates are lost for at least this share of its
  // values, on average over at least `stale_min_points` recorded updates; tensors smaller
  // than `min_numel` are not judged (a 4-element bias makes a noisy share).
  double stale_fraction = 0.25;
  size_t stale_min_points = 3;
  // Observed losses (weights that did not move) are reported when they are at least this
  // share of all the update values recorded: a conv bias before a BatchNorm, whose gradient
  // is ~0, loses its updates in FP32 too, and harmlessly.
  double stale_model_fraction = 0.1;
  // PARAM_NOT_UPDATED: a parameter not stored in 16 bits whose update is exactly 0 for at
  // least this share of its values (on average over stale_min_points recorded steps) while
  // its gradient is not: the tensor does not move at all.
  double not_updated_fraction = 0.99;
  size_t min_numel = 16;
  // FP8_READINESS: amax history length (recorded points) of the delayed scaling; a layer
  // losing more than `fp8_lost_warning` of its values makes the finding a warning.
  int fp8_history = 16;
  double fp8_lost_warning = 0.01;
  // TF32_PRECISION: an input needs log2(|mean| / std) + 3 mantissa bits (its spread resolved
  // to 1/8); noted above TF32's 10.
  double tf32_mantissa_bits = 10;
};

// Which low-precision formats a run declares (its config and meta), and why.
struct DeclaredPrecision {
  bool fp16 = false, bf16 = false, bf16_weights = false, fp8 = false, tf32 = false;
  std::string fp16_why, bf16_why, fp8_why, tf32_why;
};
DeclaredPrecision ParseDeclaredPrecision(const std::map<std::string, std::string>& meta);

// Whether a dtype name (meta `param_dtypes`: "bfloat16", "torch.float16", ...) is a 16-bit float.
bool IsSixteenBitFloat(const std::string& dtype);

struct PrecisionFitStale;  // a parameter's lost-update counts (precision_fit_state.h)
struct PrecisionFitLost;   // a parameter whose updates are lost, and how much

class PrecisionFitDetector : public Detector {
 public:
  explicit PrecisionFitDetector(PrecisionFitOptions options = {});
  ~PrecisionFitDetector() override;
  const char* name() const override { return "precision_fit"; }
  DetectorSpec spec() const override {
    return {{"FP16_OVERFLOW", "FP16_UNDERFLOW", "BF16_STALE_UPDATE", "FP8_READINESS", "TF32_PRECISION",
             "PARAM_NOT_UPDATED"},
            {{Input::kGradStats, {"FP16_UNDERFLOW"}, true},
             {Input::kWeightUpdates, {"BF16_STALE_UPDATE", "PARAM_NOT_UPDATED"}, true}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  struct State;
  // Finish's findings (precision_fit_findings.cc, precision_fit_updates.cc).
  void ReportUnderflow(const DetectorContext& ctx) const;
  void ReportUpdates(const DetectorContext& ctx) const;
  void ReportStaleUpdates(std::vector<PrecisionFitLost> lost, const DetectorContext& ctx) const;
  void ReportFp8Readiness(const DetectorContext& ctx) const;
  void ReportTf32(const DetectorContext& ctx) const;
  void ReportWithoutGradient(size_t moving, const std::vector<std::string>& moving_params,
                             const DetectorContext& ctx) const;
  void ReportNotUpdated(const std::vector<std::pair<std::string, const PrecisionFitStale*>>& params,
                        size_t moving, const DetectorContext& ctx) const;
  PrecisionFitOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace trainscope::doctor
