// TARGET_LEAK: the targets are (nearly) in the inputs, so the loss falls far below what the
// task allows, and fast. A language model trained on its current token instead of the
// next one is the canonical case: it learns to copy its input, and its loss goes to ~0,
// where natural text leaves a next-token loss of a nat or more. How it is decided
// (docs/doctor.md "Targets that leak"):
//
//   - the data: `data/target_copy_fraction` (run.data() compares integer targets with the
//     integer inputs of its first batches: the fraction of positions where they are equal)
//     >= copy_fraction, with `data/target_next_fraction` (equal to the input one position
//     on) below it: the targets are the inputs;
//   - the loss: a loss that started at >= min_first_loss (a cross-entropy over a few
//     classes or more starts at ln(classes)) falls to <= collapse_with_data x its first
//     value with the data's evidence, or, on the loss alone, to <= collapse_alone x its
//     first value and <= absolute_alone, within the first fast_points points; a
//     validation loss, when one is logged, must be as low (<= val_ratio x the training
//     loss or <= absolute_alone): memorising a small training set is OVERFITTING, not this.
//   Never for a loss that goes negative (an ELBO or log-likelihood), nor on a run of several
//   models with their own optimizers (a GAN's discriminator wins fast; Doctor skips the
//   loss-progress detectors there). On the loss alone the verdict is given at the run's end.
//   Severity: warning with the data's evidence, info on the loss alone (an easy task
//   reaches near-zero loss honestly: the scenarios' template-matching CNN does). The loss
//   alone speaks only for a classifier (integer labels recorded, an accuracy, or a declared
//   class count): a regression onto a noiseless function (pytorch/examples' polynomial fit)
//   has targets derived from its inputs by design, and its loss goes to ~0 honestly.
#pragma once

#include <optional>
#include <string>

#include "doctor/detector.h"

namespace trainscope::doctor {

struct TargetLeakOptions {
  double copy_fraction = 0.9;
  double min_first_loss = 1.0;  // ~ln(3): a classification loss over 3+ classes
  double collapse_with_data = 0.05;
  double collapse_alone = 0.01;
  double absolute_alone = 0.05;
  size_t median_points = 5;     // the loss level: median of the last points
  size_t fast_points = 1000;
  double val_ratio = 3;
};

class TargetLeakDetector : public Detector {
 public:
  explicit TargetLeakDetector(TargetLeakOptions options = {}) : options_(options) {}
  const char* name() const override { return "target_leak"; }
  DetectorSpec spec() const override { return {{"TARGET_LEAK"}, {{Input::kLoss}, {Input::kProgressLoss}}}; }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  void Judge(int64_t step, const DetectorContext& ctx, bool at_end);
  TargetLeakOptions options_;
  double first_loss_ = kNaN;
  int64_t first_step_ = 0;
  size_t points_ = 0;
  std::vector<double> recent_;
  double copy_sum_ = 0, next_sum_ = 0;
  int copy_points_ = 0;
  int64_t copy_first_step_ = -1;
  double val_loss_ = kNaN;
  int64_t last_loss_step_ = 0;
  bool done_ = false;
  // A loss that goes below zero is a log-likelihood or an ELBO (a VAE's), not a supervised
  // loss against labels: its fall says nothing about targets in the inputs. Online the
  // sign may come later than the collapse, so the verdict on the loss alone (no data
  // evidence) waits for the run's end.
  bool negative_seen_ = false;
  std::optional<Finding> deferred_;
};

}  // namespace trainscope::doctor
