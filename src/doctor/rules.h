// Alert rules the user sets: thresholds over any series, with a severity and actions.
// A rules file is TOML (docs/doctor.md "Alert rules"):
//
//   [[rule]]
//   name = "loss blew up"
//   series = "train/loss"      # a tag; a trailing * matches a prefix ("grad/*")
//   stat = "l2_norm"           # for tensor-stats series: l2_norm, abs_max, mean, std, min,
//                              # max, nonfinite, zeros_fraction or a measured statistic
//                              # (data/tensor_stats.json: dead_fraction, saturated_fraction ...)
//   above = 10.0               # conditions (all given must hold):
//   below = 0.0                #   absolute thresholds
//   above_ema = 3.0            #   value > 3 x its EMA (ema = 0.98 sets the EMA's weight)
//   below_ema = 0.3
//   above_median = 3.0         #   value > 3 x its rolling median (window = 50 points)
//   below_median = 0.3
//   no_improvement = 500       #   no new best (mode = "min" | "max", min_delta) for 500 steps
//   rate_above = 0.01          #   change per step above / below
//   rate_below = -0.01
//   nonfinite = true           #   value is NaN or Inf
//   for = 3                    # ... for 3 consecutive points (default 1)
//   severity = "warning"       # info | warning | critical
//   actions = ["print", "stop", "callback", "pdb"]
//   shell = "notify-send 'trainscope: {rule} at step {step}'"   # runs a command
//   callback = "on_loss"       # name of a Python callback (ts.on_alert registry)
//   cooldown = 100             # steps before the same rule may fire again (default 100)
//
// The RuleEngine is a SampleSink: feed it the sample stream; it queues the alerts that
// fire. The training side polls TakeAlerts() at each step boundary and performs the
// actions that belong to it (print, Python callback, StopTraining, pdb); shell commands can
// run from C++ (RunShellAction). Without a file there are no rules: the doctor's own
// detectors are the defaults.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"
#include "core/status.h"

namespace trainscope::doctor {

struct AlertRule {
  std::string name;
  std::string series;  // tag or prefix* pattern
  std::string stat;    // for tensor stats ("" = l2_norm)
  std::optional<double> above, below, above_ema, below_ema, above_median, below_median, rate_above, rate_below;
  std::optional<int64_t> no_improvement;
  bool maximize = false;  // no_improvement mode "max"
  double min_delta = 0;
  bool nonfinite = false;
  double ema_weight = 0.98;
  size_t window = 50;
  size_t for_points = 1;
  int64_t cooldown = 100;
  Severity severity = Severity::kWarning;
  std::vector<std::string> actions;  // print, stop, callback, pdb, shell
  std::string shell;
  std::string callback;
  std::string message;  // optional text; {rule} {series} {step} {value} are replaced
};

struct Alert {
  std::string rule;
  std::string series;  // the tag that matched
  Severity severity = Severity::kWarning;
  int64_t step = 0;
  double value = 0;
  std::string message;
  std::vector<std::string> actions;
  std::string shell;
  std::string callback;
};

// Parses a rules file's text; `origin` (the file name) appears in errors, which give the
// line and what was expected.
Status ParseRules(std::string_view toml_text, std::string_view origin, std::vector<AlertRule>* rules);
Status LoadRulesFile(const std::string& path, std::vector<AlertRule>* rules);

class RuleEngine : public SampleSink {
 public:
  explicit RuleEngine(std::vector<AlertRule> rules);
  void OnScalar(std::string_view tag, int64_t step, double wall_time, double value) override;
  void OnTensorStats(std::string_view tag, int64_t step, double wall_time, const TensorStats& stats) override;

  // Alerts fired since the last call, oldest first.
  std::vector<Alert> TakeAlerts();
  // Whether a fired alert asked to stop the training (sticky).
  bool stop_requested() const { return stop_requested_; }
  const std::vector<AlertRule>& rules() const { return rules_; }

 private:
  struct State {
    double ema_biased = 0, ema_power = 1;
    size_t ema_count = 0;
    std::deque<double> window;
    double best = std::numeric_limits<double>::quiet_NaN();
    int64_t best_step = 0;
    bool has_prev = false;
    double prev = 0;
    int64_t prev_step = 0;
    size_t streak = 0;
    int64_t last_fired = std::numeric_limits<int64_t>::min();
  };
  void Evaluate(size_t rule_index, std::string_view tag, int64_t step, double value);

  std::vector<AlertRule> rules_;
  std::unordered_map<std::string, State> state_;  // rule index + tag
  std::vector<Alert> pending_;
  bool stop_requested_ = false;
};

// Whether `tag` matches a rule's series pattern (exact, or prefix when it ends in '*').
bool SeriesMatches(std::string_view pattern, std::string_view tag);
// The statistic a rule reads from tensor stats; NaN for an unknown name.
double TensorStatValue(const TensorStats& stats, std::string_view stat);
// Runs the alert's shell command with /bin/sh, TRAINSCOPE_ALERT_{RULE,SERIES,STEP,VALUE,
// SEVERITY} in its environment and {rule} {series} {step} {value} replaced in the text.
// Returns the command's exit status (-1 when it could not run).
int RunShellAction(const Alert& alert);
// The alert as a finding (code USER_ALERT, location the series) for the run's record.
Finding AlertToFinding(const Alert& alert);

}  // namespace trainscope::doctor
