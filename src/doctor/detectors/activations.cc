#include "doctor/detectors/activations.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/tag.h"
#include "doctor/param_roles.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

// Dead units, by what they were at first: units that died in training point at the
// learning rate, units dead from the first record at the initialisation.
// Units alive at first that all died within the first steps were killed by the first
// updates (an LR too high for the layer: the VAE at Adam 0.1 loses fc1 at step 3); ReLUs
// dying is then the mechanism, not the root.
constexpr int64_t kEarlyDeathSteps = 20;

std::vector<Cause> DeadUnitCauses(double dying_relu, double first_fraction, double threshold, int64_t steps_in) {
  std::vector<Cause> causes;
  RaiseCause(&causes, "dying_relu", dying_relu);
  const bool alive_at_first = first_fraction < threshold;
  RaiseCause(&causes, alive_at_first ? "lr_too_high" : "bad_init",
             alive_at_first && steps_in <= kEarlyDeathSteps ? 0.85 : 0.4);
  return causes;
}

}  // namespace

void DeadUnitsDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kAct.Holds(tag, &rest) || std::isnan(s.dead_fraction)) continue;
    const std::string m(rest);
    first_.try_emplace(m, s.dead_fraction);
    StepStreak& streak = streak_[m];
    const int64_t covered = streak.Add(frame.step, s.dead_fraction >= options_.threshold);
    if (covered < static_cast<int64_t>(options_.sustain) || streak.records < options_.min_records) continue;
    const int64_t start = streak.covered_from;
    Finding f;
    f.code = "DEAD_UNITS";
    f.severity = Severity::kWarning;
    f.step = start;
    f.last_step = frame.step;
    f.location = m;
    f.summary = FormatNumber(100 * s.dead_fraction, 3) + "% of the units of " + m + " output zero for every sample (since step " +
                std::to_string(start) + "; " + FormatNumber(100 * first_[m], 3) + "% at first)";
    f.evidence_json = json{{"dead_fraction", Num(s.dead_fraction)}, {"first_dead_fraction", Num(first_[m])},
                           {"since_step", start}, {"lr", Num(ctx.facts.lr)}}.dump();
    f.causes = DeadUnitCauses(0.8, first_[m], options_.threshold, start - ctx.facts.first_step);
    ctx.Report(std::move(f));
  }
  if (ctx.facts.has_dead) return;  // ReLU modules measure it on their outputs (above)
  // Every gradient of the model exactly 0 since the first step is not units that died: the
  // gradients were cleared or the graph cut (GRAD_VANISHING's gradients_cleared_before_step).
  if (ctx.facts.grads_zero_from_start) return;
  // Dead units stop the gradient: every layer before the dead one (in forward order) gets
  // zero rows too, and the layer after it zero rows from its zero input (but a non-zero
  // bias gradient: its units do get one). The dead layer is the latest in forward order
  // whose rows are zero and whose bias gradient, when recorded, is zero as well.
  std::string dead_param;
  double dead_fraction_now = 0;
  int dead_index = -1;
  for (const auto& [tag, norms] : frame.vectors) {
    std::string_view rest;
    if (!tags::kGradUnits.Holds(tag, &rest) || norms.size() < options_.min_units) continue;
    const std::string param(rest);
    if (ClassifyParam(param, ctx.facts) != ParamRole::kWeight) continue;  // embedding rows of unseen tokens are 0
    // The rows of a Linear's or a conv's `weight` are its output units. An LSTM's
    // `weight_hh_l0` rows are gates fed by the hidden state: zero whenever that state is
    // (a reverse direction read at its first step), which says nothing of dead units.
    if (param != "weight" && !param.ends_with(".weight")) continue;
    size_t zero = 0, finite = 0;
    for (float v : norms) {
      if (!std::isfinite(v)) continue;
      ++finite;
      zero += v == 0.0f;
    }
    if (finite < options_.min_units) continue;
    const double fraction = static_cast<double>(zero) / static_cast<double>(finite);
    unit_first_.try_emplace(param, fraction);
    auto& [len, start] = unit_streak_[param];
    const std::string module = RunFacts::ModuleOfParam(param);
    const TensorStats* bias = frame.Stats(tags::kGrad.Of(module.empty() ? std::string("bias") : module + ".bias"));
    const bool units_get_gradient = bias && bias->finite() > 0 && bias->zeros < bias->finite();
    if (fraction < options_.threshold || units_get_gradient) {
      len = 0;
      continue;
    }
    if (len == 0) start = frame.step;
    ++len;
    const int index = ctx.facts.ParamIndex(param);
    if (dead_param.empty() || index > dead_index) {
      dead_param = param;
      dead_index = index;
      dead_fraction_now = fraction;
    }
  }
  if (dead_param.empty()) return;
  const auto [len, start] = unit_streak_[dead_param];
  if (len < options_.units_sustain) return;
  const std::string module = RunFacts::ModuleOfParam(dead_param);
  Finding f;
  f.code = "DEAD_UNITS";
  f.severity = Severity::kWarning;
  f.step = start;
  f.last_step = frame.step;
  f.location = module.empty() ? dead_param : module;
  f.summary = FormatNumber(100 * dead_fraction_now, 3) + "% of the units of " + f.location +
              " get no gradient at all (their weight rows' and bias's gradients are exactly 0, " + std::to_string(len) +
              " records since step " + std::to_string(start) + "; " + FormatNumber(100 * unit_first_[dead_param], 3) +
              "% at first): their activation is 0 for every sample (a ReLU, F.relu included, that died); the layers "
              "before it get no gradient through it";
  f.evidence_json = json{{"zero_gradient_unit_fraction", Num(dead_fraction_now)},
                         {"first_zero_gradient_unit_fraction", Num(unit_first_[dead_param])},
                         {"param", dead_param}, {"since_step", start}, {"source", "grad_units"},
                         {"lr", Num(ctx.facts.lr)}}.dump();
  f.causes = DeadUnitCauses(0.7, unit_first_[dead_param], options_.threshold, start - ctx.facts.first_step);
  ctx.Report(std::move(f));
}

void SaturationDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kAct.Holds(tag, &rest) || std::isnan(s.saturated_fraction)) continue;
    const std::string m(rest);
    StepStreak& streak = streak_[m];
    const int64_t covered = streak.Add(frame.step, s.saturated_fraction >= options_.threshold);
    if (covered < static_cast<int64_t>(options_.sustain) || streak.records < options_.min_records) continue;
    const int64_t start = streak.covered_from;
    Finding f;
    f.code = "ACTIVATION_SATURATION";
    f.severity = Severity::kWarning;
    f.step = start;
    f.last_step = frame.step;
    f.location = m;
    f.summary = FormatNumber(100 * s.saturated_fraction, 3) + "% of the outputs of " + m +
                " sit in the flat tails of the activation (since step " + std::to_string(start) +
                "): their gradient is nearly zero";
    f.evidence_json = json{{"saturated_fraction", Num(s.saturated_fraction)}, {"since_step", start}}.dump();
    f.causes = {{"saturating_activation", 0.8}, {"bad_init", 0.4}, {"unnormalized_input", 0.3}};
    ctx.Report(std::move(f));
  }
}

void ActivationDriftDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  // Drift from the early distribution means something only when the data holds still
  // (Input::kStationaryData): a reinforcement-learning run's states follow its policy.
  if (!ctx.facts.rl_tag.empty()) return;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kAct.Holds(tag, &rest) || s.nan + s.inf || !s.finite()) continue;
    // The model's output moves toward the targets' scale as it learns (an LSTM's regression
    // head from 0.002 to the sine's 0.8): that is fitting, not drift.
    if (ctx.facts.IsModelOutput(std::string(rest))) continue;
    Layer& L = layers_[std::string(rest)];
    const size_t i = L.count++;
    const double sd = s.stddev(), mean = s.mean();
    if (i < options_.skip) continue;
    if (i < options_.skip + options_.window) {
      L.base_std.push_back(sd);
      L.base_mean.push_back(mean);
      continue;
    }
    L.std.push_back(sd);
    L.mean.push_back(mean);
    if (L.std.size() > options_.window) {
      L.std.pop_front();
      L.mean.pop_front();
    }
    if (L.std.size() < options_.window || L.count % 10 != 0) continue;
    const double b_sd = Median(L.base_std), b_mean = Median(L.base_mean);
    const double n_sd = Median(L.std), n_mean = Median(L.mean);
    if (!(b_sd > 0) || !(n_sd > 0)) continue;
    const double ratio = std::max(n_sd / b_sd, b_sd / n_sd);
    const double shift = std::fabs(n_mean - b_mean) / b_sd;
    if (ratio < options_.ratio && shift < options_.mean_shift) continue;
    const Severity sev = ratio >= options_.warning_ratio ? Severity::kWarning : Severity::kInfo;
    if (L.any && sev <= L.reported) {
      Finding f;
      f.code = "ACTIVATION_DRIFT";
      f.location = std::string(rest);
      f.severity = L.reported;
      f.step = f.last_step = frame.step;
      ctx.Report(std::move(f));
      continue;
    }
    L.any = true;
    L.reported = sev;
    Finding f;
    f.code = "ACTIVATION_DRIFT";
    f.severity = sev;
    f.step = f.last_step = frame.step;
    f.location = std::string(rest);
    f.summary = "the output of " + std::string(rest) + " drifted from its early distribution: std " + FormatNumber(b_sd, 3) +
                " -> " + FormatNumber(n_sd, 3) + ", mean " + FormatNumber(b_mean, 3) + " -> " + FormatNumber(n_mean, 3);
    f.evidence_json = json{{"baseline_std", Num(b_sd)}, {"std", Num(n_sd)}, {"baseline_mean", Num(b_mean)},
                           {"mean", Num(n_mean)}, {"std_ratio", Num(ratio)}, {"mean_shift_in_std", Num(shift)}}.dump();
    f.causes = {{"missing_normalization", 0.5}, {"lr_too_high", 0.3}};
    ctx.Report(std::move(f));
  }
}

void InputScaleDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kInput.Holds(tag, &rest) || !s.finite()) continue;
    auto& v = rms_[std::string(rest)];
    if (v.size() >= options_.points) continue;
    v.push_back(std::sqrt(s.sum_squares / static_cast<double>(s.finite())));
    if (v.size() < options_.points) continue;
    const double med = Median(v);
    if (med < options_.rms) continue;
    Finding f;
    f.code = "UNNORMALIZED_INPUT";
    f.severity = Severity::kWarning;
    f.step = ctx.facts.first_step;
    f.last_step = frame.step;
    f.location = tags::kInput.Of(rest);
    f.summary = "input " + std::string(rest) + " has RMS " + FormatNumber(med, 3) +
                " (median of the first batches): far from unit scale, it pushes the first layer into large "
                "activations and gradients";
    json evidence = {{"rms_median", Num(med)}, {"abs_max", Num(s.abs_max)}, {"mean", Num(s.mean())}};
    // A first layer whose output a normalisation layer takes next (a ResNet's conv1 -> bn1):
    // BatchNorm(W (c x)) = BatchNorm(W x), and the gradient of W does not depend on c either,
    // so the input's scale cancels. True, not harmful: info.
    const auto& order = ctx.facts.module_order;
    if (order.size() >= 2) {
      const std::string first = ctx.facts.ModuleType(order[0]), next = ctx.facts.ModuleType(order[1]);
      const bool weighted = first.find("Conv") != std::string::npos || first == "Linear";
      const bool normalizes = next.find("Norm") != std::string::npos;
      if (weighted && normalizes) {
        f.severity = Severity::kInfo;
        f.summary += "; but its first layer (" + order[0] + ", " + first + ") feeds " + order[1] + " (" + next +
                     "), which normalises that output: the input's scale cancels there";
        evidence["normalized_by"] = order[1];
      }
    }
    f.evidence_json = evidence.dump();
    f.causes = {{"unnormalized_input", 0.9}};
    ctx.Report(std::move(f));
  }
}

void BatchNormBatchDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  if (done_) return;
  const int batch = ctx.facts.batch_size;
  if (batch <= 0 || batch > options_.max_batch) {
    done_ = batch > options_.max_batch;
    return;
  }
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kAct.Holds(tag, &rest)) continue;
    const std::string m(rest);
    if (!IsBatchNormModule(m, ctx.facts)) continue;
    done_ = true;
    Finding f;
    f.code = "ARCHITECTURE_WARNING";
    f.severity = Severity::kWarning;
    f.step = f.last_step = frame.step;
    f.location = m;
    f.summary = "BatchNorm layer " + m + " is trained on batches of " + std::to_string(batch) +
                ": its batch statistics are noise and its running statistics will not match evaluation";
    f.evidence_json = json{{"batch_size", batch}, {"module", m}, {"max_batch", options_.max_batch}}.dump();
    f.causes = {{"batchnorm_stats", 0.8}};
    f.actions = {"Use GroupNorm or LayerNorm (independent of the batch size), or a batch of at least 16-32",
                 "If memory limits the batch, accumulate gradients but keep BatchNorm's batch >= 16, or freeze its "
                 "statistics (model.eval() for the BN layers)"};
    ctx.Report(std::move(f));
    return;
  }
}

}  // namespace trainscope::doctor
