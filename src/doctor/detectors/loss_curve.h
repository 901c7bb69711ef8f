// Detectors on the training-loss curve (the `loss` role): spikes, divergence, plateaus
// (stuck at the initial value or at chance level), oscillation and negative values. They
// work point by point, so a log with the loss every 50 steps works as well as one with
// every step (thresholds in "points" are points of the series).
#pragma once

#include <deque>
#include <optional>

#include "doctor/detector.h"
#include "doctor/thinning.h"

namespace trainscope::doctor {

struct LossSpikeOptions {
  // Rolling median/MAD window: long enough to be stable, short enough to follow a
  // falling loss (50 points ~ the last few percent of a typical run).
  size_t window = 50;
  size_t warmup = 20;  // points before judging: the first steps fall fast and are not "normal"
  // A spike is robust z > z AND above median * (1 + rel). MAD-z alone fires on the
  // heavy-tailed noise of small batches; the relative floor keeps "2x the median" from the
  // common rule, without its noisy mean.
  double z = 6;
  double rel = 1.0;
  // And the jump is >= 5 % of the loss's initial level (median of its first 10 points): a
  // "10x" jump of a loss that has converged to 0.003 is noise on the scale of the run.
  double min_jump_of_initial = 0.05;
  // Confirmation (severity warning rather than info): the update ratio or gradient norm
  // jumped >= leading_ratio x its rolling median at the spike's step or up to
  // leading_steps before (large runs see the update jump before the loss does), or the
  // next point is still elevated (>= median * (1 + rel/2)). A lone unconfirmed outlier is a
  // hard batch more often than a problem: info.
  double leading_ratio = 5;
  int64_t leading_steps = 3;
  // The jump's size decides too: >= big_jump x the rolling median is a warning without
  // confirmation (a lone 2x outlier is a hard batch; a lone 10x one is not noise).
  double big_jump = 10;
  // Between early_points and warmup points the median is still falling fast: only a jump
  // of early_ratio x the median of the points so far is judged there.
  size_t early_points = 8;
  double early_ratio = 5;
  // An epoch-level aggregate of the loss (Lightning's *_epoch, Keras' epoch_loss) that rose
  // by >= epoch_rise over the previous epoch's right after the spike confirms it.
  double epoch_rise = 0.1;
  size_t max_listed = 50;  // spikes listed in the evidence
  // A warning needs evidence beyond the run's own noise: the spike's log-excess over the
  // rolling median, log(value / median), must be >= noise_z x the run's noise in log
  // space (1.4826 x the MAD of successive log-loss differences / sqrt 2: the batch-to-batch
  // scatter, free of the loss's trend), and a leading jump of the update ratio or gradient
  // norm counts only when it is as far beyond that series' own log-scale noise. A batch-4
  // run's loss and gradient norm swing 10x from batch to batch: there a 10x point is its
  // noise, not evidence (it stays listed, as info). A loss that is not positive has no log
  // scale: the rules above it apply alone.
  double noise_z = 4;
  // A spike the loss recovers from at once, and that stays below where the loss started,
  // is a hard batch on a model that has learned (the 0.007 -> 0.27 -> 0.003 of a
  // transformer that has solved its task, or a burst of them that passes within the rolling
  // median's window), not instability: it stays info when, within
  // recovery_points (= window) points, the loss is back within the confirmation band (median * (1 +
  // rel/2)) or has given back recovery_share of the jump (0.011 -> 0.89 -> 0.065), and the
  // spike is below the loss's initial level (the highest of its first 10 points). Until that is
  // known (recovery_points later) such a spike is info; severity only goes up. A spike
  // above the start (the highest of the first 10 points) undid all the learning: it warns
  // however fast it passed.
  int64_t recovery_points = 50;
  double recovery_share = 0.9;
};

class LossSpikeDetector : public Detector {
 public:
  explicit LossSpikeDetector(LossSpikeOptions options = {})
      : options_(options), loss_(options.window), grad_(options.window), update_(options.window) {}
  const char* name() const override { return "loss_spike"; }
  DetectorSpec spec() const override {
    return {{"LOSS_SPIKE"}, {{Input::kLoss}, {Input::kProgressLoss}}};
  }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  struct Pending {
    int64_t step;
    double value, median, z;
    double noise_z;  // log(value / median) in units of the run's log-scale noise (NaN: not measurable)
  };
  struct Spike {
    int64_t step;
    double value, median, z;
    bool confirmed;
    std::string why;
    double noise_z;
    int64_t points_after = 0;  // loss points seen since the spike
    bool settled = false;      // whether the loss recovered is known
    bool recovered = false;    // back in the confirmation band within recovery_points
  };
  bool BeyondNoise(const Spike& s) const { return !(s.noise_z < options_.noise_z); }
  // A spike below the loss's initial level: it matters only if the loss stays up.
  bool Transient(const Spike& s) const;
  // Follows the unsettled spikes' recovery at loss point x; true when one settled unrecovered.
  bool TrackRecovery(double x);
  // log(x / median) over the noise of the log differences (NaN when not measurable).
  double LogNoiseZ(double x, double median) const;
  void Emit(const Pending& p, bool confirmed, const std::string& why, const DetectorContext& ctx);
  // One finding for the loss, amended with every spike: summary, evidence list, severity.
  void Publish(const DetectorContext& ctx, bool amend);
  void NoteEpochAggregate(const StepFrame& frame, const DetectorContext& ctx);
  LossSpikeOptions options_;
  RollingMedianMad loss_, grad_, update_;
  RollingMedianMad log_diff_{50}, grad_log_{50}, update_log_{50};  // the runs' own noise, in log space
  double last_log_ = kNaN;
  std::vector<double> first_;
  size_t seen_ = 0;
  std::optional<Pending> pending_;
  std::vector<Spike> spikes_;
  std::string epoch_tag_;  // the loss's epoch aggregate, once found
  std::string epoch_names_of_;             // the loss tag epoch_names_ were made for
  std::vector<std::string> epoch_names_;   // the names its epoch aggregate may have
  std::vector<std::pair<int64_t, double>> epoch_points_;
  int64_t last_lead_step_ = std::numeric_limits<int64_t>::min();
  std::string lead_what_;
  double lead_ratio_ = 0;
};

struct DivergenceOptions {
  size_t initial_points = 10;  // the "initial level" is the median of the first points
  size_t window = 9;           // current level: median of the last 9 points (kills single spikes)
  // The best level is the lowest median of `best_window` points: a longer median, so that
  // the minimum over a long run is not just the luckiest noise.
  size_t best_window = 20;
  // Diverging when the current level climbed back more than rise_fraction of the way from
  // the best level to the initial one AND is >= rise_ratio x the best level, or is above
  // the initial level by above_initial_ratio; with a rising trend over the last
  // trend_points (Mann-Kendall z >= trend_z) and for `sustain` points in a row. A healthy
  // noisy run wanders around its best by far less than half of what it has gained, and
  // has no sustained upward trend.
  double rise_fraction = 0.5;
  double rise_ratio = 1.5;
  double above_initial_ratio = 1.5;
  size_t trend_points = 15;
  double trend_z = 2;
  size_t sustain = 3;
  double critical_ratio = 10;  // >= 10x the initial level: critical
  // The rise must also clear the noise: >= noise_sigmas standard deviations of the current
  // level (estimated from the MAD of the last 50 raw points / sqrt(window)). Batch-4 losses
  // swing 10x from batch to batch; their 5-point median still moves by a lot.
  double noise_sigmas = 4;
};

class LossDivergenceDetector : public Detector {
 public:
  explicit LossDivergenceDetector(DivergenceOptions options = {}) : options_(options) {}
  const char* name() const override { return "loss_divergence"; }
  DetectorSpec spec() const override {
    return {{"LOSS_DIVERGENCE"}, {{Input::kLoss}, {Input::kProgressLoss}}};
  }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  // Offline (the whole run known) a climb is reported only if the loss is still up at the
  // end: a noisy excursion that came back is not a divergence.
  void Finish(const DetectorContext& ctx) override;

 private:
  bool Record(int64_t step, double x);
  bool Climbing(int64_t step, double x, double initial, double cur);
  Finding DescribeClimb(int64_t step, double initial, double cur, bool critical, const DetectorContext& ctx) const;
  DivergenceOptions options_;
  std::string location_;  // the loss tag the climb was reported on
  std::deque<double> tail_;  // the last `window` finite points (end level)
  bool end_nonfinite_ = false;
  std::vector<double> first_;
  std::deque<double> recent_, long_;
  std::deque<int64_t> recent_steps_, long_steps_;
  RollingMedianMad spread_{50};
  double best_ = std::numeric_limits<double>::infinity();
  int64_t best_step_ = 0;  // the middle of the window whose median is best_
  size_t streak_ = 0;
  int64_t streak_start_ = 0;
  int64_t climb_start_ = 0;
  int64_t near_best_step_ = 0;
  bool reported_ = false;
  bool critical_ = false;
};

struct PlateauOptions {
  // Judge only after min_points points (and every eval_every points after that): before
  // ~100 steps a slow start is normal (warm-up, Adam's bias correction).
  size_t min_points = 100;
  size_t eval_every = 10;
  size_t initial_points = 10;
  double recent_fraction = 0.2;  // "now" = median of the last 20 % of points (>= 20 points)
  // Improved by less than 5 % of the initial level: stuck at its initial value.
  double min_improvement = 0.05;
  // Within 3 % of ln(num_classes) with no downward trend over the recent points
  // (Mann-Kendall z > -2): at chance level, what a model predicting uniform probabilities
  // scores with cross-entropy. A loss 9 % under chance and still falling is learning.
  double chance_tolerance = 0.03;
  // Without a known class count, a loss whose whole-run median and recent level are both
  // within chance_tolerance of ln K for K in [2, max_inferred_classes] and that never was
  // far below it is at chance for K classes (K inferred; a random classifier starts at
  // ln K). Only K <= 4 (ln K 0.69, 1.10, 1.39): their levels are far enough apart that a
  // loss of another kind (an LM's, a regression's) rarely sits within 3 % of one by chance,
  // and the summary says the class count was inferred.
  int max_inferred_classes = 4;
  // "Still going down" at chance needs a fall over the recent points of >= 1 % of chance
  // level, not only a significant trend.
  double chance_fall = 0.01;
  // Settled: the recent points' median absolute deviation under 0.1 % of their level (a
  // minibatch's noise alone is ~1 %; a step too large makes it bounce).
  double settled_spread = 0.001;
  // The same value printed `frozen_points` times in a row (and over >= 10 % of the points
  // so far), at >= 5 % of the initial level: the weights do not change (skipped updates,
  // lr 0, a detached loss). Works on short logs. A loss printed with fewer digits than it
  // moves per line would look frozen: logs print 4 or more significant digits.
  size_t frozen_points = 5;
  // A run whose loss got this far below both its start and its level now (rolling median of
  // initial_points points) learned and then lost it: the finding says where it went back up,
  // and blames what undoes learning (a too-high learning rate, dead units), not a slow start.
  double regressed_ratio = 0.7;
};

struct PlateauLevel;  // where the recent loss sits (loss_plateau.cc)

class LossPlateauDetector : public Detector {
 public:
  explicit LossPlateauDetector(PlateauOptions options = {}) : options_(options) {}
  const char* name() const override { return "loss_plateau"; }
  DetectorSpec spec() const override {
    return {{"LOSS_PLATEAU", "ARCHITECTURE_WARNING"}, {{Input::kLoss}, {Input::kProgressLoss}}};
  }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  void Check(const DetectorContext& ctx, bool final, double min_improvement);
  bool JudgeLevel(const DetectorContext& ctx, bool final, double min_improvement, PlateauLevel* level) const;
  Finding DescribePlateau(const DetectorContext& ctx, PlateauLevel* level) const;
  nlohmann::json PlateauEvidence(const PlateauLevel& level) const;
  void ReportRegressed(Finding f, nlohmann::json ev, const DetectorContext& ctx) const;
  void ReportStuck(Finding f, nlohmann::json ev, const PlateauLevel& level, const DetectorContext& ctx) const;
  void ReportFrozen(const DetectorContext& ctx);
  // Cross-entropy fed probabilities (a softmax before a loss that applies its own) cannot go
  // below ln(1 + (C - 1) / e), whatever the model learns: a run whose accuracy is high while
  // its loss sits on that floor (and a softmax is in the forward) gets ARCHITECTURE_WARNING.
  void CheckProbabilityFloor(const DetectorContext& ctx);
  double accuracy_ = kNaN;  // the latest accuracy (val_acc role, else acc)
  PlateauOptions options_;
  // The whole run's loss, evenly thinned (thinning.h), one row per kept point: its step,
  // value, learning rate, global update/weight ratio (NaN when not measured) and the median
  // of the initial_points points up to it (NaN before).
  Thinning thin_;
  std::vector<int64_t> steps_;
  std::vector<double> values_;
  std::vector<double> lrs_;
  std::vector<double> update_ratios_;
  std::vector<double> rolling_;
  // Over every point, kept or not: the first and the last initial_points values, the newest
  // point, and the lowest rolling median with its step.
  std::vector<double> first_values_, last_values_;
  double last_value_ = kNaN;
  int64_t last_step_ = 0;
  double best_rolling_ = kNaN;
  int64_t best_step_ = 0;
  bool reported_ = false;
  bool candidate_ = false;  // offline: a plateau was seen during the run
  int64_t candidate_step_ = 0;
  size_t run_ = 0;  // identical consecutive values ending at the last point
  int64_t run_start_ = 0;
  double label_min_ = kNaN, label_max_ = -1;
};

struct OscillationOptions {
  size_t window = 60;
  // Fraction of successive differences that change sign. Independent noise gives 2/3
  // (sd ~0.06 over 60 points); 0.9 is > 4 sd above it: a real see-saw, as an LR past
  // the stability edge makes.
  double min_alternation = 0.9;
  // The swings are large: mean |difference| >= 0.3 x the median level.
  double min_amplitude = 0.3;
  // And no progress: |Mann-Kendall z| over the window below this.
  double max_trend_z = 2;
};

class LossOscillationDetector : public Detector {
 public:
  explicit LossOscillationDetector(OscillationOptions options = {}) : options_(options) {}
  const char* name() const override { return "loss_oscillation"; }
  DetectorSpec spec() const override {
    return {{"LOSS_OSCILLATION"}, {{Input::kLoss}, {Input::kProgressLoss}}};
  }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  OscillationOptions options_;
  std::deque<std::pair<int64_t, double>> window_;
};

struct NegativeLossOptions {
  double tolerance = 1e-6;  // float round-off around 0 is not negative
  size_t sustain = 3;       // points in a row
};

// A negative training loss where the loss cannot be negative (cross-entropy, MSE, ...):
// almost always a sign error, log-probabilities passed as probabilities or soft targets
// that do not sum to one. Losses whose names say they may be negative (nll of a density,
// elbo, kl, gan/generator/discriminator, reward) are left alone.
// Whether a loss of this name may legitimately be negative: log-likelihoods of densities,
// ELBO/KL terms, GAN losses, and policy-gradient losses of reinforcement learning (PPO's
// actor loss is the advantage-weighted ratio, negative whenever advantages are positive).
bool LossMayBeNegative(std::string_view name);

class NegativeLossDetector : public Detector {
 public:
  explicit NegativeLossDetector(NegativeLossOptions options = {}) : options_(options) {}
  const char* name() const override { return "negative_loss"; }
  DetectorSpec spec() const override {
    return {{"NEGATIVE_LOSS"}, {{Input::kLoss}, {Input::kProgressLoss}}};
  }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;

 private:
  NegativeLossOptions options_;
  size_t streak_ = 0;
  int64_t streak_start_ = 0;
};

struct LossMagnitudeOptions {
  size_t initial_points = 10;  // the initial level is the median of the first points
  // The largest finite FP16 value. No normalised objective starts above it: cross-entropy
  // starts near ln(classes) (11.5 for a 100k vocabulary), an MSE on standardised targets
  // near 1. A loss this large says unscaled targets, a sum over a huge batch, or a loss
  // term weighted out of proportion; under FP16 it cannot even be represented.
  double max_initial = 65504;
  // Loss terms logged beside the total whose initial levels differ by this many decades
  // cannot all be steering the gradient: the small ones are ignored by the optimiser.
  double unbalanced_decades = 6;
};

// A training loss on an absurd scale (LOSS_MAGNITUDE). Reported once the initial level is
// known; at the end amended with the largest value, the final level and the loss terms
// logged beside it (tags with "loss" in their name that are neither the loss nor a
// validation loss).
class LossMagnitudeDetector : public Detector {
 public:
  explicit LossMagnitudeDetector(LossMagnitudeOptions options = {}) : options_(options) {}
  const char* name() const override { return "loss_magnitude"; }
  DetectorSpec spec() const override {
    return {{"LOSS_MAGNITUDE"}, {}};
  }
  bool judges_loss_progress() const override { return true; }
  void OnStep(const StepFrame& frame, const DetectorContext& ctx) override;
  void Finish(const DetectorContext& ctx) override;

 private:
  struct Term {
    std::vector<double> first;
    double last = kNaN;
  };
  Finding Describe(const DetectorContext& ctx) const;
  LossMagnitudeOptions options_;
  std::vector<double> first_;
  int64_t first_step_ = 0;
  double max_ = -std::numeric_limits<double>::infinity(), last_ = kNaN;
  int64_t max_step_ = 0, last_step_ = 0;
  std::map<std::string, Term, std::less<>> terms_;
  bool reported_ = false;
};

}  // namespace trainscope::doctor
