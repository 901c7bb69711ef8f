// The first steps as evidence of their own: a loss that is many times its starting value
// within the first few steps means the first updates were far too large (the learning
// rate), whatever comes after. It needs no warm-up of "normal" points: nothing about a
// training makes its loss 10x its initial value in step 1.
#pragma once

#include <optional>
#include <string>

#include "doctor/detector.h"

namespace trainscope::doctor {

struct EarlyBlowupOptions {
  // Judged on the loss's first `points` points after its first value.
  size_t points = 10;
  // A blow-up: a point >= jump_ratio x the first loss (critical at >= critical_ratio).
  // Cross-entropy starts at ~ln(classes) and a regression of standardised targets near 1:
  // a healthy first step moves the loss by percents, not by a factor of 10.
  double jump_ratio = 10;
  double critical_ratio = 100;
  // A first loss below this is too close to 0 for a ratio to mean anything (a converged
  // fine-tune's noise).
  double min_first_loss = 1e-2;
  // Corroboration: a weight matrix whose first updates changed it by >= this fraction of
  // its norm, or a global gradient norm >= grad_ratio x its first value.
  double update_ratio = 0.3;
  double grad_ratio = 10;
  // Offline: no finding when the loss ends at or below this fraction of its first value (a
  // network the blow-up killed ends near its start, ln K; one that learns ends well below).
  double recovered_fraction = 0.5;
  // Online and offline alike: the jump opens an info finding, and its severity waits for
  // the next recovery_points points. A loss back below recovery_level x its first value in
  // them came back from an overshoot of the first updates (Adam's first steps on a small
  // image model, a siamese net on raw pixels): it stays info. One that stays up, or goes
  // non-finite, is the divergence (warning, critical at critical_ratio).
  size_t recovery_points = 20;
  double recovery_level = 0.9;
};

class EarlyBlowupDetector : public Detector {
 public:
  explicit EarlyBlowupDetector(EarlyBlowupOptions options = {}) : options_(options) {}
  const char* name() const override { return "early_blowup"; }
  DetectorSpec spec() const override { return {{"LOSS_DIVERGENCE"}, {{Input::kLoss}, {Input::kProgressLoss}}}; }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  // Settles the open finding's severity: recovered (info) or not (its jump's severity).
  void Settle(const DetectorContext& ctx, int64_t recovered_step, double recovered_loss);
  void NoteUpdateSizes(const StepFrame& frame, const RunFacts& facts);
  EarlyBlowupOptions options_;
  std::optional<Finding> open_;        // the jump's finding while its recovery is not known
  Severity severity_if_lasting_ = Severity::kWarning;
  size_t points_after_jump_ = 0;
  double first_loss_ = kNaN;
  int64_t first_step_ = 0;
  size_t points_ = 0;
  bool done_ = false;
  double first_grad_ = kNaN, max_grad_ = kNaN;
  int64_t max_grad_step_ = 0;
  double max_update_ = 0;  // the largest update/weight ratio of a weight matrix so far
  std::string max_update_param_;
  int64_t max_update_step_ = 0;
};

}  // namespace trainscope::doctor
