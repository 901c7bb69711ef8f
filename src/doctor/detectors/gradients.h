// Detectors on gradients, weights, updates and the learning rate: gradient explosion
// (global and per layer) and vanishing (per layer, by depth, all-zero), gradients not
// zeroed, the update/weight ratio, symmetric weights from constant initialisation,
// normalisation scales collapsing or blowing up, and learning-rate anomalies.
#pragma once

#include <deque>
#include <optional>
#include <set>

#include "doctor/detector.h"
#include "doctor/param_roles.h"  // ClassifyParam, IsBiasOrNormParam, IsNormModule

namespace trainscope::doctor {

struct GradExplosionOptions {
  size_t window = 50;
  size_t warmup = 10;
  // Global norm >= 10x its rolling median and robust z > 6. Small-batch noise moves the
  // gradient norm 2-4x; an order of magnitude in one step is not noise.
  double ratio = 10;
  double z = 6;
  // And above the run's early level (median of its first `early` points): gradients are
  // largest early in training; once the loss is near zero a hard sample moves a tiny
  // gradient norm 10x without anything exploding.
  size_t early = 20;
  // One layer's gradient norm >= 20x its own median (stricter: fewer values, more noise).
  double layer_ratio = 20;
  // By depth: the first layer's RMS gradient >= 1e3 x the last layer's (median over
  // depth_window steps): gradients grow as they flow back to the input.
  double depth_ratio = 1e3;
  size_t depth_window = 20;
  // And beyond the series' own noise in log space: log(norm / median) >= noise_z x
  // 1.4826 x the MAD of log(norm) over the window. A batch-4 run's gradient norm is
  // heavy-tailed (one hard sample in four sets it): 10x its median is its noise there; a
  // norm that sits within 2x of its median and then jumps 10x is not.
  double noise_z = 4;
  // An explosion hurts: a jump is judged by the loss of the next loss_response_steps steps.
  // When each stays under the highest of the last loss_baseline losses before the jump and
  // their median is >= loss_fall below those losses' median, the model learned through it
  // (an LSTM's gradient grows tenfold as it leaves its flat start): info, not a warning. An
  // RNN's true explosion shows in the loss right after the update it wrecks; a loss that
  // falls below zero (a sign error) is never taken for learning.
  size_t loss_response_steps = 5;
  size_t loss_baseline = 10;
  double loss_fall = 0.05;
};

class GradExplosionDetector : public Detector {
 public:
  explicit GradExplosionDetector(GradExplosionOptions options = {}) : options_(options) {}
  const char* name() const override { return "grad_explosion"; }
  DetectorSpec spec() const override {
    return {{"GRAD_EXPLOSION"}, {{Input::kGradNorm}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  void JudgeByLoss(const StepFrame& frame, const DetectorContext& ctx);
  bool BeyondLogNoise(const RollingMedianMad& logs, double norm) const;
  void FindLayerJump(const StepFrame& frame, const RunFacts& facts, std::string* worst_layer, double* worst_layer_ratio,
                     std::map<std::string, bool>* model_shows_jump);
  void CheckDepth(const StepFrame& frame, const DetectorContext& ctx);
  GradExplosionOptions options_;
  // The global norm's history, per model: one model's norm in a run of several (a GAN's
  // generator and discriminator, each with its own optimizer) is judged against its own
  // series, never against a sum over models that alternate.
  struct NormSeries {
    explicit NormSeries(size_t window) : values(window), logs(window) {}
    RollingMedianMad values, logs;
    std::vector<double> early;
  };
  std::map<std::string, NormSeries> global_;
  // The norm of each model's layers' gradients together (its logs and early level): a
  // layer's jump counts when this shows it too.
  std::map<std::string, NormSeries> layer_sums_;
  std::unordered_map<std::string, RollingMedianMad> layers_, layers_log_;
  std::unordered_map<std::string, std::vector<double>> layers_early_;
  std::deque<double> depth_;
  std::string location_;  // the first finding's location: later ones extend it
  std::deque<double> recent_losses_;  // the last loss_baseline losses
  // A jump waiting for the loss's response (JudgeByLoss); reported as it was if the run
  // ends first.
  struct Pending {
    Finding finding;
    double before_median, before_max;
    std::vector<double> after;
  };
  std::optional<Pending> pending_;
};

struct GradVanishingOptions {
  // By depth: first layer's RMS gradient <= 1e-3 x the last layer's, median over 20
  // steps. Healthy ReLU/residual nets stay within ~100x; ten saturated sigmoid layers
  // shrink gradients by 0.25^10 ~ 1e-6.
  double depth_ratio = 1e-3;
  size_t depth_window = 20;
  // A weight whose gradient is exactly zero everywhere for 20 steps in a row.
  size_t zero_steps = 20;
  // The global gradient norm below 1e-8 for 20 steps while the loss is above 1e-3.
  double global_floor = 1e-8;
};

class GradVanishingDetector : public Detector {
 public:
  explicit GradVanishingDetector(GradVanishingOptions options = {}) : options_(options) {}
  const char* name() const override { return "grad_vanishing"; }
  DetectorSpec spec() const override {
    return {{"GRAD_VANISHING"}, {{Input::kGradStats}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  GradVanishingOptions options_;
  std::deque<double> depth_;
  std::unordered_map<std::string, std::pair<size_t, int64_t>> zero_streak_;  // param -> (length, start)
  size_t floor_streak_ = 0;
  int64_t floor_start_ = 0;
  bool depth_reported_ = false;
};

struct GradNotZeroedOptions {
  // `train/grad_zeroed` = 0 at this many optimizer steps in a row (beyond declared
  // accumulation): one could be a deliberate trick, two in a row is accumulation nobody
  // declared.
  size_t sustain = 2;
};

class GradNotZeroedDetector : public Detector {
 public:
  explicit GradNotZeroedDetector(GradNotZeroedOptions options = {}) : options_(options) {}
  const char* name() const override { return "grad_not_zeroed"; }
  DetectorSpec spec() const override {
    return {{"GRAD_NOT_ZEROED"}, {{Input::kGradStats}, {Input::kGradZeroed}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  GradNotZeroedOptions options_;
  // Per model: train/grad_zeroed (the first, unnamed model) and train/<model>/grad_zeroed,
  // each judged on its own (one model's forgotten zero_grad is not the other's).
  struct Streak {
    size_t length = 0;
    int64_t start = 0;
    size_t longest = 0;      // the longest streak reported, and the steps not zeroed in all
    size_t not_zeroed = 0;
    std::string tag;
  };
  Finding Describe(const std::string& model, const Streak& streak, int64_t last_step, const DetectorContext& ctx) const;
  std::map<std::string, Streak> streaks_;
};

struct UpdateRatioOptions {
  // ||update|| / ||weight|| per weight matrix, median over `window` steps. ~1e-3 is
  // healthy (Karpathy's rule of thumb); Adam at common LRs sits at 1e-3..3e-2.
  // Above 0.1 each step rewrites a tenth of the weight: the LR is too high.
  double high = 0.1;
  // The median of the records of the last `window` steps (at least `min_records` of
  // them): steps, not records, so that a run whose weights are sampled every 10 steps is
  // judged after 20 steps too, not after 200.
  size_t window = 20;
  size_t min_records = 3;
  // Steps that large while the loss still falls clearly (Mann-Kendall z <= falling_z over
  // the losses of the last 4 windows of steps, at least 10 of them) make progress: info,
  // not a warning (the
  // word-LM example's decoder moves by 0.3 of its norm a step at its default lr 20 and
  // trains well).
  double falling_z = -2;
  // The high check skips the run's first `skip_steps` steps: a fresh model's first updates
  // are large against its small initial weights (AdamW's first step moves every weight by
  // ~lr: 0.15 of nanoGPT's 0.02-std matrices; the word-LM example's decoder, initialised at
  // +-0.1, moves by 0.6-0.9 of its norm a step for 10 steps, then 0.05, and trains well).
  // Watch records every step there (dense first steps), so 20 records were 20 steps of
  // that transient, not 200 steps of training. An LR that blows the run up in those steps
  // is the early_blowup detector's, with the loss as its evidence.
  int64_t skip_steps = 50;
  // Below 1e-5 the weights barely move: the LR is too low (unless a schedule has decayed
  // it to under low_lr_fraction of its peak, which is intended).
  double low = 1e-5;
  size_t low_window = 50;
  double decayed_lr_fraction = 0.1;
  // Steps that small after the loss fell to under converged_loss_fraction of its first
  // value, with gradients shrunk to under converged_grad_fraction of their early level
  // (the median of the first early_grad_points norms; not checked when no gradient norm is
  // known), come from small gradients: the run converged (a fixed batch learned by heart,
  // a task solved). Info, without the lr_too_low cause: "raise the LR" would be wrong advice.
  double converged_loss_fraction = 0.1;
  double converged_grad_fraction = 0.1;
  size_t early_grad_points = 20;
};

class UpdateRatioDetector : public Detector {
 public:
  explicit UpdateRatioDetector(UpdateRatioOptions options = {}) : options_(options) {}
  const char* name() const override { return "update_ratio"; }
  DetectorSpec spec() const override {
    return {{"UPDATE_RATIO_HIGH", "UPDATE_RATIO_LOW"}, {{Input::kWeightUpdates}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  void MeasureRatios(const StepFrame& frame, const RunFacts& facts, std::vector<double>* ratios, std::string* worst_param,
                     double* worst_param_median);
  void ReportHigh(int64_t step_now, const std::string& worst, double worst_median, const DetectorContext& ctx);
  void CheckLow(int64_t step_now, const std::vector<double>& step_ratios, const DetectorContext& ctx);
  UpdateRatioOptions options_;
  std::unordered_map<std::string, std::deque<std::pair<int64_t, double>>> ratios_;  // (step, ratio)
  std::deque<double> global_;
  std::string high_location_;
  std::deque<std::pair<int64_t, double>> losses_;  // (step, loss) of the recent steps
  std::vector<double> early_grad_;                 // the first early_grad_points gradient norms
  std::deque<double> recent_grad_;                 // the last low_window gradient norms
  bool low_reported_ = false;
  Severity low_severity_ = Severity::kWarning;
};

struct WeightSymmetryOptions {
  // A weight matrix whose values are all equal (std <= 1e-7 x max(1, |mean|)) when first
  // seen was initialised to a constant: every unit computes the same thing and gets the
  // same gradient, forever. With per-unit gradient norms (`grad_units/<param>` vectors)
  // the same shows after training started: coefficient of variation across units below
  // 1e-4 at `sustain` records.
  double rel_std = 1e-7;
  double units_cv = 1e-4;
  size_t sustain = 3;
};

class WeightSymmetryDetector : public Detector {
 public:
  explicit WeightSymmetryDetector(WeightSymmetryOptions options = {}) : options_(options) {}
  const char* name() const override { return "weight_symmetry"; }
  DetectorSpec spec() const override {
    return {{"WEIGHT_SYMMETRY"}, {{Input::kWeightUpdates}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  WeightSymmetryOptions options_;
  std::set<std::string> seen_;
  std::unordered_map<std::string, size_t> unit_streak_;
};

struct NormScaleOptions {
  // The RMS of a normalisation layer's scale (weight) against its first value (1 at the
  // usual init): below 0.1x it has collapsed (weight decay on norm scales, or a layer the
  // network learned to switch off), above 10x it blows up; for `sustain` steps.
  double collapse = 0.1;
  double blowup = 10;
  size_t sustain = 10;
};

class NormScaleDetector : public Detector {
 public:
  explicit NormScaleDetector(NormScaleOptions options = {}) : options_(options) {}
  const char* name() const override { return "norm_scale"; }
  DetectorSpec spec() const override {
    return {{"NORM_SCALE_COLLAPSE"}, {{Input::kWeightUpdates}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  NormScaleOptions options_;
  std::unordered_map<std::string, double> baseline_;
  std::unordered_map<std::string, std::pair<size_t, int64_t>> streak_;
};

struct LrAnomalyOptions {
  // The LR jumps up >= 10x from one point to the next, to >= 2x anything seen before
  // (a warm restart back to a known level is fine).
  double jump_ratio = 10;
  double above_max_ratio = 2;
  // The LR is 0 (or negative, or non-finite) for the first 20 points: nothing trains.
  size_t zero_points = 20;
  // The schedule collapsed: the LR fell below collapse_ratio x its maximum and stayed there
  // for collapse_points points in a row, and for collapse_fraction of the points before the
  // collapse (a per-epoch scheduler stepped per batch: StepLR with step_size=1 takes 1e-3
  // to 1e-31 in 28 batches, and is found 10 points after it fell). An annealing schedule
  // that reaches ~0 at its very last steps (cosine to eta_min=0: the last 0.06 % of its
  // steps) is below the ratio for far fewer than a quarter of the points before;
  // OneCycle ends at 4e-6 x its peak, above it.
  double collapse_ratio = 1e-6;
  size_t collapse_points = 10;
  double collapse_fraction = 0.25;
};

class LrAnomalyDetector : public Detector {
 public:
  explicit LrAnomalyDetector(LrAnomalyOptions options = {}) : options_(options) {}
  const char* name() const override { return "lr_anomaly"; }
  DetectorSpec spec() const override {
    return {{"LR_ANOMALY"}, {{Input::kLr}}};
  }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  LrAnomalyOptions options_;
  size_t points_ = 0;
  size_t bad_from_start_ = 0;
  double prev_ = kNaN;
  double max_before_ = 0;
  double max_ = 0;          // the largest LR so far, and its step
  int64_t max_step_ = 0;
  size_t collapsed_points_ = 0;
  size_t lr_points_ = 0;             // finite LR points seen
  size_t points_before_collapse_ = 0;
  int64_t collapsed_since_ = 0;
  bool collapse_reported_ = false;
};

}  // namespace trainscope::doctor
