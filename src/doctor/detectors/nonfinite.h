// NaN/Inf forensics. At the first step with a non-finite value anywhere (input, activation,
// loss, gradient, weight) it names the first producer (DESIGN.md: the earliest module in
// forward order whose output went non-finite, else the parameter whose gradient did, else
// the input or the loss), says whether it arose in the forward pass, the backward pass or
// the optimizer step, ranks causes from the evidence and attaches the flight recorder.
// Later non-finite steps extend the same finding; consequences are not reported again.
#pragma once

#include <optional>

#include <deque>

#include "doctor/detector.h"

namespace trainscope::doctor {

struct NonFiniteOptions {
  // "Early" for the LR-too-high cause: most LR blow-ups happen in the first ~100 steps,
  // before warm-up would have helped (the seeds' figure).
  int64_t early_steps = 100;
  // An LR at or above this is "large" for SGD-family optimizers; Adam-family optimizers
  // (meta/config optimizer names adam/adamw/...) use adam_high_lr: typical working LRs are
  // 1e-1..1e-2 for SGD and 1e-3..1e-4 for Adam.
  double high_lr = 0.1;
  double adam_high_lr = 0.01;
  // Adadelta and L-BFGS: lr is a multiplier of the optimizer's own step, 1 by default.
  double unit_scale_high_lr = 10;
  // A non-finite loss after finite outputs: the model's output (the last module in forward
  // order) climbing to a largest |value| >= saturation_abs_max, at >= 2x its first record,
  // saturates a sigmoid to exactly 1 in float32 (at ~16.6; the records are sparse, so the
  // last one seen is lower) and log(1 - p) or log(p) is -inf; >= exp_overflow_abs_max
  // overflows exp() in float32 (88.7).
  double saturation_abs_max = 8;
  double exp_overflow_abs_max = 80;
  // Gradient norm at the step before the NaN this many times its median over the flight
  // recorder window = "climbing before" -> gradient_explosion.
  double explosion_ratio = 10;
  // Largest finite float16 value: a finite activation past it before an Inf means the Inf
  // came from a cast to half precision.
  double fp16_max = 65504;
  // ... but far below float32's range: a float32 tensor overflowing after values of 1e30
  // is plain explosion, not a cast.
  double fp32_plausible_max = 1e15;
};

class NonFiniteDetector : public Detector {
 public:
  explicit NonFiniteDetector(NonFiniteOptions options = {}) : options_(options) {}
  const char* name() const override { return "nonfinite"; }
  DetectorSpec spec() const override {
    return {{"NONFINITE_INPUT", "NONFINITE_ACTIVATION", "NONFINITE_LOSS", "NONFINITE_GRAD", "NONFINITE_WEIGHT"},
                {{Input::kLoss, {"NONFINITE_LOSS"}, /*listed_last=*/true},
                 {Input::kGradStats, {"NONFINITE_GRAD"}},
                 {Input::kWeightUpdates, {"NONFINITE_WEIGHT"}},
                 {Input::kActivations, {"NONFINITE_ACTIVATION"}},
                 {Input::kInputBatch, {"NONFINITE_INPUT"}}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  NonFiniteOptions options_;
  bool found_ = false;
  std::string code_, location_;
  Severity severity_ = Severity::kCritical;
  // Largest finite |activation| per module at the previous step (precision overflow).
  std::unordered_map<std::string, double> prev_abs_max_;
  // Causes of a non-finite loss from the recorded outputs (options: saturation_abs_max).
  void OutputCauses(const DetectorContext& ctx, std::vector<Cause>* causes, nlohmann::json* evidence) const;
};

// Labels used outside [0, num_classes): `input/label_max` >= num_classes (meta/config
// num_classes), or `input/label_min` < 0 where the evidence says the loss used it: the loss
// is non-finite at that step, or the run stopped there with an exception. PyTorch's
// cross_entropy/nll_loss raise on CPU (device-assert on CUDA) for a negative target that
// is not the ignore_index, so a run that goes on training with a finite loss ignores its
// negative labels: -100 (the default) or whatever value the script set (minGPT masks
// with -1): RunFacts::label_ignore_value. Code LABEL_OUT_OF_RANGE (critical). Only integer
// targets are recorded as labels (float targets are soft labels, not class indices).
class LabelRangeDetector : public Detector {
 public:
  const char* name() const override { return "label_range"; }
  DetectorSpec spec() const override {
    return {{"LABEL_OUT_OF_RANGE"}, {{Input::kInputBatch}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  void Report(int64_t step, double lo, double hi, const std::string& why, const DetectorContext& ctx);
  struct Pending {
    int64_t step;
    double lo, hi;
  };
  std::optional<Pending> pending_;
};

// Whether the labels at this frame are out of range, the run's ignore value apart (used as
// NaN evidence as well).
bool LabelsOutOfRange(const StepFrame& frame, const RunFacts& facts, double* min_label, double* max_label);

}  // namespace trainscope::doctor
