// Detectors on validation and classification metrics: over-fitting (validation loss
// rising while the training loss falls, a growing gap), a metric that stopped improving,
// and an accuracy that hides classes the model never predicts (macro-F1 far below it).
#pragma once

#include <deque>
#include <map>
#include <unordered_map>
#include <optional>

#include "doctor/detector.h"
#include "doctor/thinning.h"

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
  // The rise (smoothed, end against minimum) is >= 2 sigma of the evaluation noise: a
  // validation loss that wanders by as much as it "rose" has not turned.
  double noise_sigmas = 2;
};

class OverfittingDetector : public Detector {
 public:
  explicit OverfittingDetector(OverfittingOptions options = {}) : options_(options) {}
  const char* name() const override { return "overfitting"; }
  DetectorSpec spec() const override {
    return {{"OVERFITTING"}, {{Input::kValLoss}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  // Offline the verdict waits for the whole curve: dated at the minimum of the smoothed
  // validation curve, and only if the rise after it holds to the end.
  void Finish(const DetectorContext& ctx) override;

 private:
  struct Eval {
    int64_t step;
    double val, train;
  };
  // The curve judged: each evaluation replaced by the median of it and its neighbours (3
  // points), so one noisy evaluation neither makes the minimum nor the rise.
  static std::vector<double> Smoothed(const std::vector<Eval>& evals);
  // The finding for the evaluations so far, if they show over-fitting.
  std::optional<Finding> Judge(const DetectorContext& ctx) const;
  OverfittingOptions options_;
  std::deque<double> train_recent_;
  std::vector<Eval> evals_;
  std::string val_tag_;
  bool reported_ = false;
};

// Non-finite values in any loss or metric other than the training loss (the non-finite
// detector's): validation losses, accuracies, perplexities, scores. Each series is named
// (one finding per series): NONFINITE_LOSS for a loss, NONFINITE_METRIC for other metrics.
// Warning; info when the training loss had already gone non-finite (then it follows).
// Gradient norms, learning rates, timings, memory and system series are not metrics here.
bool IsMetricTag(std::string_view tag);

class NonfiniteMetricDetector : public Detector {
 public:
  const char* name() const override { return "nonfinite_metric"; }
  DetectorSpec spec() const override {
    return {{"NONFINITE_LOSS", "NONFINITE_METRIC"}, {}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  struct PerTag {
    int64_t first_step = 0, last_step = 0;
    double first_value = 0;
    uint64_t nonfinite = 0, points = 0;
    int64_t train_nonfinite_step = -1;  // the training loss was non-finite at or before first_step
  };
  bool IsMetric(std::string_view tag);  // IsMetricTag, once per tag

  std::map<std::string, PerTag, std::less<>> tags_;
  TagMap<bool> is_metric_;
  int64_t train_nonfinite_step_ = -1;
};

struct ChanceLevelOptions {
  size_t min_evals = 5;
  // Validation loss within 3 % of ln K at each of the last min_evals evaluations and in
  // median (K declared, from the label range, or the K in [2, 4] the median is within
  // 3 % of: see PlateauOptions), with no downward trend.
  double tolerance = 0.03;
  int max_inferred_classes = 4;
  // An accuracy that repeats one value over the last `constant_evals` evaluations and half
  // of all of them: the model gives every example the same class, so the accuracy is that
  // class's share (the majority rate).
  size_t constant_evals = 5;
};

// Chance level on held-out data: a validation loss at ln K that does not move
// (LOSS_PLATEAU on the validation series, at_chance), and an accuracy frozen at one value
// (METRIC_STALL, warning). Judged at the end of the run.
class ChanceLevelDetector : public Detector {
 public:
  explicit ChanceLevelDetector(ChanceLevelOptions options = {}) : options_(options) {}
  const char* name() const override { return "chance_level"; }
  DetectorSpec spec() const override {
    return {{"LOSS_PLATEAU", "METRIC_STALL"}, {{Input::kValLoss}, {Input::kMetric}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  void JudgeValLoss(const DetectorContext& ctx);
  void JudgeAccuracy(const DetectorContext& ctx);
  ChanceLevelOptions options_;
  // The validation loss over the run, evenly thinned (thinning.h), and its last min_evals
  // values; the accuracy's trailing run of one value (its length, first step, value).
  Thinning val_thin_;
  std::vector<double> val_steps_, val_values_, val_last_;
  int64_t val_last_step_ = 0;
  size_t acc_evals_ = 0, acc_run_ = 0;
  int64_t acc_run_start_ = 0, acc_last_step_ = 0;
  double acc_last_ = kNaN;
  std::string val_tag_, acc_tag_;
  double label_min_ = kNaN, label_max_ = -1;
};

struct MetricStallOptions {
  // The validation metric (val acc, else train acc) has not beaten its best by min_delta
  // for `evals` evaluations and half the run, while the training loss still fell by
  // train_drop since then: training goes on, the metric does not follow. Info: it is a
  // "stop or change something" hint, not a fault.
  size_t evals = 10;
  double min_delta = 0.005;
  double train_drop = 0.2;
  // A training accuracy is one batch's: its best point is the luckiest batch (a 64-sample
  // batch all right, once), which the model's level may never reach again. It is judged by
  // its median over this many points; the validation metric, over the whole set, as it is.
  size_t per_batch_window = 9;
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
  // The best evaluation (the first to beat the one before it by min_delta) and its index,
  // the latest, and how many there were.
  Point best_{}, now_{};
  size_t best_index_ = 0, evaluations_ = 0;
  std::deque<double> train_recent_;
  std::deque<double> batch_metric_;  // the training accuracy's last per_batch_window points
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
