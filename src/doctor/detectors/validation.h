// Detectors on validation and classification metrics: over-fitting (validation loss
// rising while the training loss falls, a growing gap), a metric that stopped improving,
// and an accuracy that hides classes the model never predicts (macro-F1 far below it).
#pragma once

#include <deque>

#include "doctor/detector.h"

namespace trainscope::doctor {

struct OverfittingOptions {
  // Validation evaluations after the best one, all above best * (1 + rise): three
  // evaluations in a row 10 % worse is past evaluation noise on all but tiny val sets.
  size_t evals_after_best = 3;
  double rise = 0.1;
  // The gap (val - train) must have grown by this factor since the best evaluation.
  double gap_growth = 1.5;
  // And the rise is >= 2 % of the first validation loss: doubling a val loss of 0.001 on a
  // task solved to 0.0005 is no over-fitting worth a warning.
  double min_rise_of_first = 0.02;
  size_t train_window = 20;  // train level at a step: median of the last 20 train points
  // The training loss must have fallen by 5 % since the best evaluation: with a flat
  // training loss a rising validation loss is SGD noise (or a shift), not memorisation.
  double train_drop = 0.05;
};

class OverfittingDetector : public Detector {
 public:
  explicit OverfittingDetector(OverfittingOptions options = {}) : options_(options) {}
  const char* name() const override { return "overfitting"; }
  DetectorSpec spec() const override {
    return {{"OVERFITTING"}, {{Input::kValLoss}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  OverfittingOptions options_;
  std::deque<double> train_recent_;
  struct Eval {
    int64_t step;
    double val, train;
  };
  std::vector<Eval> evals_;
  bool reported_ = false;
};

struct MetricStallOptions {
  // The validation metric (val acc, else train acc) has not beaten its best by min_delta
  // for `evals` evaluations and half the run, while the training loss still fell by
  // train_drop since then: training goes on, the metric does not follow. Info: it is a
  // "stop or change something" hint, not a fault.
  size_t evals = 10;
  double min_delta = 0.005;
  double train_drop = 0.2;
};

class MetricStallDetector : public Detector {
 public:
  explicit MetricStallDetector(MetricStallOptions options = {}) : options_(options) {}
  const char* name() const override { return "metric_stall"; }
  DetectorSpec spec() const override {
    return {{"METRIC_STALL"}, {{Input::kMetric}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  MetricStallOptions options_;
  struct Point {
    int64_t step;
    double metric, train;
  };
  std::vector<Point> points_;
  std::deque<double> train_recent_;
};

struct MetricImbalanceOptions {
  // Accuracy minus macro-F1 above this while accuracy is at least min_accuracy, for
  // `sustain` evaluations: with balanced predictions the two are close; a gap of 0.2
  // means whole classes are (almost) never predicted.
  double gap = 0.2;
  double min_accuracy = 0.5;
  size_t sustain = 2;
};

class MetricImbalanceDetector : public Detector {
 public:
  explicit MetricImbalanceDetector(MetricImbalanceOptions options = {}) : options_(options) {}
  const char* name() const override { return "metric_imbalance"; }
  DetectorSpec spec() const override {
    return {{"METRIC_IMBALANCE"}, {{Input::kMacroF1}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  MetricImbalanceOptions options_;
  size_t streak_ = 0;
  int64_t streak_start_ = 0;
};

}  // namespace trainscope::doctor
