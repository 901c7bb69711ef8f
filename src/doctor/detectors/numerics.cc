#include "doctor/detectors/numerics.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

std::string Percent(double fraction) { return FormatNumber(100 * fraction, 2) + " %"; }

}  // namespace

void Fp16OverflowDetector::AddSkip(int64_t step) {
  if (!skips_.empty() && step < skips_.back()) step = skips_.back();  // keep step order
  const int64_t previous = skips_.empty() ? first_step_ - 1 : skips_.back();
  skips_.push_back(step);
  if (calibration_open_) {
    const bool starts_early = skips_.size() > 1 || step - first_step_ <= options_.calibration_start;
    const bool continues = skips_.size() == 1 || step - previous <= options_.calibration_gap;
    if (starts_early && continues) {
      ++calibration_skips_;
      return;
    }
    calibration_open_ = false;
  }
  // After the calibration: runs of consecutive skipped steps and the windowed rate. Two
  // engines (an RLHF actor and critic) may skip the same step: that is still one run.
  if (run_length_ == 0 || step - previous > 1) {
    run_length_ = 1;
  } else if (step - previous == 1) {
    ++run_length_;
  }
  if (run_length_ > max_run_) {
    max_run_ = run_length_;
    max_run_end_ = step;
  }
  window_.push_back(step);
  while (!window_.empty() && window_.front() <= step - options_.rate_window) window_.pop_front();
  if (window_.size() > max_window_skips_) {
    max_window_skips_ = window_.size();
    max_window_end_ = step;
  }
}

void Fp16OverflowDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  if (!any_frame_) first_step_ = frame.step;
  any_frame_ = true;
  last_step_ = frame.step;
  if (calibration_open_ && !skips_.empty() && frame.step - skips_.back() > options_.calibration_gap) {
    calibration_open_ = false;
  }

  // Skip events: one point per skipped step (DeepSpeed's OVERFLOW lines, a client's
  // amp/overflow_skip), else a counter of skipped steps.
  // Every point counts: two engines (an RLHF actor and critic) may both skip at one step.
  const std::string& event_tag = facts.roles.Get(Role::kOverflowSkip);
  if (!event_tag.empty()) {
    for (const auto& [tag, v] : frame.scalars) {
      if (tag != event_tag || !std::isfinite(v) || v <= 0) continue;
      from_events_ = true;
      skip_source_ = event_tag;
      const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(std::lround(std::min(v, 1e6))));
      for (int64_t i = 0; i < n; ++i) AddSkip(frame.step);
    }
  }
  const std::string& counter_tag = facts.roles.Get(Role::kSkippedSteps);
  if (const double* v = counter_tag.empty() ? nullptr : frame.Scalar(counter_tag)) {
    if (std::isfinite(*v) && *v >= 0) {
      // Megatron prints skips per logging interval ("number of skipped iterations"),
      // DeepSpeed a running total (`skipped=K`).
      const bool per_interval = counter_tag.rfind("number of", 0) == 0;
      double added = per_interval ? *v : *v >= counter_last_ ? *v - counter_last_ : *v;
      counter_last_ = *v;
      counter_value_ = *v;
      if (!from_events_ && added > 0) {
        // A counter says how many steps of the interval were skipped, not which: they are
        // placed at the interval's start, as a start-up burst would be.
        skip_source_ = counter_tag;
        const int64_t from = counter_seen_ ? counter_step_ + 1 : first_step_;
        const int64_t n = static_cast<int64_t>(std::min(added, 1e6));
        for (int64_t i = 0; i < n; ++i) AddSkip(std::min(from + i, frame.step));
      }
      counter_seen_ = true;
      counter_step_ = frame.step;
    }
  }
  const std::string& nan_tag = facts.roles.Get(Role::kNanSteps);
  if (const double* v = nan_tag.empty() ? nullptr : frame.Scalar(nan_tag)) {
    if (std::isfinite(*v) && *v > 0) {
      nan_total_ += *v;
      if (nan_first_step_ < 0) nan_first_step_ = frame.step;
      nan_last_step_ = frame.step;
      Finding f;
      f.code = "NONFINITE_LOSS";
      f.severity = Severity::kWarning;
      f.step = nan_first_step_;
      f.last_step = frame.step;
      f.location = nan_tag;
      f.summary = FormatNumber(nan_total_, 6) + " iteration(s) had a NaN/Inf loss and were skipped (first logged at step " +
                  std::to_string(nan_first_step_) + ")";
      f.evidence_json = json{{"nan_iterations", Num(nan_total_)}, {"first_step", nan_first_step_},
                             {"last_step", nan_last_step_}, {"source", nan_tag}}.dump();
      f.causes = {{"precision_overflow", 0.3}, {"lr_too_high", 0.3}, {"gradient_explosion", 0.2}};
      ctx.Amend(std::move(f));
    }
  }

  const std::string& scale_tag = facts.roles.Get(Role::kLossScale);
  if (const double* v = scale_tag.empty() ? nullptr : frame.Scalar(scale_tag)) {
    if (std::isfinite(*v) && *v > 0) {
      if (scale_changes_.empty() || scale_changes_.back().second != *v) scale_changes_.emplace_back(frame.step, *v);
      if (std::isnan(scale_min_) || *v < scale_min_) {
        scale_min_ = *v;
        scale_min_step_ = frame.step;
      }
      if (!calibration_open_ && (std::isnan(scale_peak_after_calibration_) || *v > scale_peak_after_calibration_)) {
        scale_peak_after_calibration_ = *v;
      }
    }
  }

  if (skips_.empty()) return;
  std::string why;
  const Severity severity = Judge(&why);
  if (severity > Severity::kInfo && (!reported_any_ || severity > reported_)) {
    ctx.Report(Build(severity, why, ctx));  // the live alert; Finish amends the evidence
    reported_any_ = true;
    reported_ = severity;
  }
}

Severity Fp16OverflowDetector::Judge(std::string* why) const {
  Severity s = Severity::kInfo;
  auto raise = [&](Severity to, const std::string& reason) {
    if (to > s) {
      s = to;
      *why = reason;
    }
  };
  const double window_rate = static_cast<double>(max_window_skips_) / static_cast<double>(options_.rate_window);
  if (window_rate > options_.warning_rate) {
    raise(Severity::kWarning, std::to_string(max_window_skips_) + " of the " + std::to_string(options_.rate_window) +
                                  " steps up to step " + std::to_string(max_window_end_) + " were skipped");
  }
  if (max_run_ >= options_.max_consecutive) {
    raise(Severity::kWarning, std::to_string(max_run_) + " consecutive steps skipped up to step " +
                                  std::to_string(max_run_end_) + " after the loss scale had settled");
  }
  if (!std::isnan(scale_peak_after_calibration_) && !scale_changes_.empty() &&
      scale_changes_.back().second * options_.collapse_ratio <= scale_peak_after_calibration_) {
    raise(Severity::kWarning, "the loss scale fell from " + FormatNumber(scale_peak_after_calibration_, 6) + " to " +
                                  FormatNumber(scale_changes_.back().second, 6));
  }
  if (window_rate >= options_.critical_rate) {
    raise(Severity::kCritical, std::to_string(max_window_skips_) + " of the " + std::to_string(options_.rate_window) +
                                   " steps up to step " + std::to_string(max_window_end_) +
                                   " were skipped: most updates are lost");
  }
  if (!std::isnan(scale_min_) && scale_min_ <= options_.min_scale) {
    raise(Severity::kCritical, "the loss scale reached " + FormatNumber(scale_min_, 6) + " at step " +
                                   std::to_string(scale_min_step_) + ": gradients overflow float16 even unscaled");
  }
  return s;
}

Finding Fp16OverflowDetector::Build(Severity severity, const std::string& why, const DetectorContext& ctx) const {
  const int64_t steps = std::max<int64_t>(1, last_step_ - first_step_ + 1);
  const size_t n = skips_.size();
  const size_t after = n - calibration_skips_;
  Finding f;
  f.code = "FP16_OVERFLOW";
  f.severity = severity;
  f.step = skips_.front();
  f.last_step = skips_.back();
  f.location = skip_source_;
  std::string text = std::to_string(n) + " step" + (n == 1 ? "" : "s") + " skipped on float16 overflow in " +
                     std::to_string(steps) + " steps (" + Percent(static_cast<double>(n) / static_cast<double>(steps)) + ")";
  if (calibration_skips_ > 0) {
    text += "; " + std::to_string(calibration_skips_) + " at the start while the loss scale calibrated";
    if (scale_changes_.size() >= 2) {
      double calibrated = scale_changes_.front().second;
      for (const auto& [step, scale] : scale_changes_) {
        if (step <= skips_[calibration_skips_ - 1]) calibrated = scale;
      }
      text += " (" + FormatNumber(scale_changes_.front().second, 6) + " -> " + FormatNumber(calibrated, 6) + ")";
    }
  }
  if (after > 0) {
    text += "; " + std::to_string(after) + " after it, at most " + std::to_string(max_window_skips_) + " in any " +
            std::to_string(options_.rate_window) + " steps";
  }
  if (!scale_changes_.empty()) {
    text += "; loss scale now " + FormatNumber(scale_changes_.back().second, 6) + ", lowest " + FormatNumber(scale_min_, 6);
  }
  text += severity == Severity::kInfo ? ". Dynamic loss scaling at work: normal at this rate" : ". " + why;
  f.summary = text;

  json skip_steps = json::array();
  for (size_t i = 0; i < n && i < 50; ++i) skip_steps.push_back(skips_[i]);
  json ev = {{"skipped", n},
             {"steps", steps},
             {"skip_rate", Num(static_cast<double>(n) / static_cast<double>(steps))},
             {"calibration_skips", calibration_skips_},
             {"skip_steps", skip_steps},
             {"max_consecutive_after_calibration", max_run_},
             {"max_skips_in_window", max_window_skips_},
             {"window_steps", options_.rate_window},
             {"source", skip_source_}};
  if (n > 50) ev["skip_steps_truncated"] = true;
  if (!std::isnan(counter_value_)) ev["skipped_counter"] = {{"tag", ctx.facts.roles.Get(Role::kSkippedSteps)}, {"value", Num(counter_value_)}};
  if (!scale_changes_.empty()) {
    json trajectory = json::array();
    const size_t m = scale_changes_.size();
    const size_t half = options_.max_trajectory / 2;
    for (size_t i = 0; i < m; ++i) {
      if (m > options_.max_trajectory && i >= half && i < m - half) continue;
      trajectory.push_back({scale_changes_[i].first, Num(scale_changes_[i].second)});
    }
    ev["loss_scale"] = {{"tag", ctx.facts.roles.Get(Role::kLossScale)},
                        {"first", Num(scale_changes_.front().second)},
                        {"last", Num(scale_changes_.back().second)},
                        {"min", Num(scale_min_)},
                        {"min_step", scale_min_step_},
                        {"changes", m},
                        {"trajectory", trajectory}};
    if (m > options_.max_trajectory) ev["loss_scale"]["trajectory_truncated"] = true;
  }
  if (!why.empty() && severity > Severity::kInfo) ev["why"] = why;
  f.evidence_json = ev.dump();
  if (severity == Severity::kInfo) {
    f.causes = {{"precision_overflow", 0.3}};
  } else {
    f.causes = {{"precision_overflow", 0.6}, {"gradient_explosion", 0.3}, {"lr_too_high", 0.2}};
  }
  return f;
}

void Fp16OverflowDetector::Finish(const DetectorContext& ctx) {
  if (skips_.empty()) return;
  std::string why;
  const Severity severity = Judge(&why);
  ctx.Amend(Build(severity, why, ctx));
}

}  // namespace trainscope::doctor

// ---- precision fit: what the recorded histograms say about FP16, BF16, FP8, TF32 ----

namespace trainscope::doctor {

namespace {

std::string LowerText(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool Contains(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

// One (key, value) of a config, judged. `path` is where it was found ("config.precision").
void JudgeSetting(const std::string& key, const nlohmann::json& value, const std::string& path,
                  DeclaredPrecision* d) {
  const std::string k = LowerText(key);
  auto set = [&](bool* flag, std::string* why) {
    if (*flag) return;
    *flag = true;
    *why = path + " = " + value.dump();
  };
  bool enabled = value.is_boolean() && value.get<bool>();
  if (value.is_object() && value.contains("enabled") && value["enabled"].is_boolean()) {
    enabled = value["enabled"].get<bool>();  // DeepSpeed: {"fp16": {"enabled": true}}
  }
  if (enabled) {
    if (k == "fp16" || k == "half" || k == "use_fp16" || k == "fp16_enabled") set(&d->fp16, &d->fp16_why);
    if (k == "bf16" || k == "use_bf16" || k == "bf16_enabled" || k == "bfloat16") set(&d->bf16, &d->bf16_why);
    if (k == "fp8" || k == "use_fp8" || k == "fp8_enabled") set(&d->fp8, &d->fp8_why);
    if (k == "tf32" || k == "allow_tf32" || k == "use_tf32") set(&d->tf32, &d->tf32_why);
    return;
  }
  static const char* kPrecisionKeys[] = {"precision", "dtype", "torch_dtype", "amp", "amp_dtype", "mixed_precision",
                                         "compute_dtype", "param_dtype", "autocast", "autocast_dtype",
                                         "weight_dtype", "model_dtype", "precision_mode", "matmul_precision"};
  bool precision_key = false;
  for (const char* p : kPrecisionKeys) precision_key = precision_key || k == p;
  if (!precision_key) return;
  // Keys that name the parameters' own type: a bfloat16 there means bfloat16 weights.
  const bool weight_key = k == "param_dtype" || k == "torch_dtype" || k == "weight_dtype" || k == "model_dtype" ||
                          k == "dtype";
  if (value.is_number() && value.get<double>() == 16) {
    set(&d->fp16, &d->fp16_why);  // Lightning's precision=16
    return;
  }
  if (!value.is_string()) return;
  const std::string v = LowerText(value.get<std::string>());
  if (Contains(v, "bf16") || Contains(v, "bfloat16")) {
    set(&d->bf16, &d->bf16_why);
    if (weight_key || Contains(v, "true")) {  // Lightning's "bf16-true": the weights too
      d->bf16_weights = true;
    }
  } else if (Contains(v, "fp16") || Contains(v, "float16") || Contains(v, "half") || v == "16" ||
             v.rfind("16-", 0) == 0) {
    set(&d->fp16, &d->fp16_why);
  }
  if (Contains(v, "fp8") || Contains(v, "float8") || Contains(v, "e4m3") || Contains(v, "e5m2")) set(&d->fp8, &d->fp8_why);
  if (Contains(v, "tf32") || (k == "matmul_precision" && (v == "high" || v == "medium"))) set(&d->tf32, &d->tf32_why);
}

void WalkConfig(const nlohmann::json& node, const std::string& path, int depth, DeclaredPrecision* d) {
  if (!node.is_object() || depth > 3) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string here = path + "." + it.key();
    JudgeSetting(it.key(), it.value(), here, d);
    if (it.value().is_object()) WalkConfig(it.value(), here, depth + 1, d);
  }
}

}  // namespace

DeclaredPrecision ParseDeclaredPrecision(const std::map<std::string, std::string>& meta) {
  DeclaredPrecision d;
  for (const char* key : {"config", "precision"}) {
    auto it = meta.find(key);
    if (it == meta.end()) continue;
    nlohmann::json value = nlohmann::json::parse(it->second, nullptr, false);
    if (value.is_discarded()) value = it->second;  // a plain string meta value
    if (value.is_object()) WalkConfig(value, key, 0, &d);
    else JudgeSetting(key, value, key, &d);
  }
  return d;
}

bool IsSixteenBitFloat(const std::string& dtype) {
  const std::string d = Lower(dtype);
  return d.find("bfloat16") != std::string::npos || d.find("float16") != std::string::npos ||
         d.find("half") != std::string::npos || d == "bf16" || d == "fp16" || d.find("torch.bf16") != std::string::npos;
}

}  // namespace trainscope::doctor

#ifdef TRAINSCOPE_WITH_NUMERICS
#include <set>

#include "core/tag.h"
#include "numerics/fit.h"
#include "numerics/formats.h"
#include "doctor/param_roles.h"

namespace trainscope::doctor {

namespace {

using numerics::FitCounts;
using numerics::FitStats;
using numerics::FloatFormat;
using numerics::FormatTable;

const FloatFormat& Format(const char* name) { return *FormatTable::Builtin().Find(name); }

bool IsMatmulModule(const std::string& module, const std::string& type) {
  const std::string t = LowerText(type.empty() ? module : type);
  for (const char* word : {"linear", "conv", "attention", "fc", "proj", "dense", "head", "lm_head", "embed"}) {
    if (Contains(t, word)) return word != std::string("embed");  // embeddings are lookups, not matmuls
  }
  return false;
}

// Share of a tensor's values below `bins_below` exponent bins of the other (the update
// below half an ulp of its weight), assuming the two magnitudes are independent within the
// tensor: sum over weight bins e of P(weight in e) * P(update in a bin <= e - offset).
double IndependentShareBelow(const TensorStats& update, const TensorStats& weight, int offset) {
  const double n_update = static_cast<double>(update.numel);
  const double n_weight = static_cast<double>(weight.numel);
  if (n_update == 0 || n_weight == 0) return 0;
  std::array<double, TensorStats::kExponentBins + 1> below{};  // below[b] = P(update nonzero, bin < b)
  for (int b = 0; b < TensorStats::kExponentBins; ++b) {
    below[b + 1] = below[b] + static_cast<double>(update.exponent_counts[b]) / n_update;
  }
  double share = 0;
  for (int e = 0; e < TensorStats::kExponentBins; ++e) {
    const uint64_t c = weight.exponent_counts[e];
    if (!c) continue;
    const int limit = std::clamp(e - offset + 1, 0, TensorStats::kExponentBins);  // bins <= e - offset
    share += static_cast<double>(c) / n_weight * below[limit];
  }
  return share;
}

}  // namespace

struct PrecisionFitStale {
  size_t points = 0, est_points = 0;
  double observed_sum = 0, est_sum = 0, observed_max = 0;
  int64_t first_step = -1, last_step = 0, first_bad = -1;
  uint64_t numel = 0;
  double weight_abs_max = 0, update_abs_max = 0, update_rms = 0;
};

struct PrecisionFitDetector::State {
  const FloatFormat* fp16 = &Format("fp16");
  const FloatFormat* bf16 = &Format("bf16");
  const FloatFormat* e4m3 = &Format("fp8-e4m3");
  const FloatFormat* e5m2 = &Format("fp8-e5m2");
  size_t meta_seen = static_cast<size_t>(-1);
  DeclaredPrecision declared;
  bool loss_scaling = false;
  double loss_scale = kNaN;
  bool cast_signature = false;
  std::string cast_why;
  int64_t nonfinite_step = -1;  // first step with a non-finite weight or gradient

  struct Over {
    std::string tag;
    int64_t step = 0;
    double abs_max = 0;
    bool has_histogram = false;
    FitCounts counts;
  };
  std::map<std::string, Over> overflow_pending;  // first point past the range, per tag
  std::set<std::string> overflow_reported;

  struct Under {
    numerics::MergedGradient merged;
    bool any = false;
    FitCounts at_used_scale;
    int64_t first_bad = -1, last_bad = -1, first = 0, last = 0;
  };
  std::map<std::string, Under> grads;
  std::vector<std::string> grad_order;
  double grad_abs_max = 0;
  std::string grad_abs_max_tag;
  int64_t grad_abs_max_step = 0;
  int used_scale_exponent_min = 1000, used_scale_exponent_max = -1000;

  using Stale = PrecisionFitStale;
  std::map<std::string, Stale> stale;
  std::vector<std::string> stale_order;

  struct Fp8 {
    std::deque<double> window;
    FitCounts counts;
    size_t points = 0, histogram_points = 0, overflow_points = 0;
    int64_t first = 0, last = 0, first_overflow = -1, worst_step = 0;
    int last_k = 0;
    double worst_lost = 0;
    const FloatFormat* format = nullptr;
  };
  std::map<std::string, Fp8> fp8;

  struct Tf32 {
    double bits = 0, mean = 0, std = 0;
    int64_t step = 0;
    std::string input;
  };
  std::map<std::string, Tf32> tf32;

  bool Fp16Active() const { return declared.fp16 || loss_scaling || cast_signature; }
  std::string Fp16Why() const {
    if (declared.fp16) return declared.fp16_why;
    if (loss_scaling) return "a loss-scale series is logged (float16 with loss scaling)";
    return cast_why;
  }
};

PrecisionFitDetector::PrecisionFitDetector(PrecisionFitOptions options)
    : options_(options), state_(std::make_unique<State>()) {}
PrecisionFitDetector::~PrecisionFitDetector() = default;

void PrecisionFitDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  State& st = *state_;
  const RunFacts& facts = ctx.facts;
  if (facts.meta.size() != st.meta_seen) {
    st.meta_seen = facts.meta.size();
    st.declared = ParseDeclaredPrecision(facts.meta);
  }
  const std::string& scale_tag = facts.roles.Get(Role::kLossScale);
  if (const double* v = scale_tag.empty() ? nullptr : frame.Scalar(scale_tag)) {
    if (std::isfinite(*v) && *v > 0) {
      st.loss_scaling = true;
      st.loss_scale = *v;
    }
  }
  const std::string& skip_tag = facts.roles.Get(Role::kOverflowSkip);
  const double* skip = skip_tag.empty() ? nullptr : frame.Scalar(skip_tag);
  const bool skipped = skip && *skip > 0;
  const double fp16_limit = st.fp16->overflow_threshold;

  // The fingerprint of a float16 cast: an activation has Inf while its finite values all
  // fit float16 (<= 65504), and the activation just before it in forward order has finite
  // values past float16's range but far inside float32's (< 2^32): the cast made the Inf.
  // An FP32 blow-up makes Inf from values near 3.4e38, and leaves huge finite ones beside.
  if (!st.cast_signature) {
    const std::pair<std::string, TensorStats>* previous = nullptr;
    for (const auto& item : frame.stats) {
      if (!tags::kAct.Holds(item.first)) continue;
      const TensorStats& s = item.second;
      if (previous && s.inf > 0 && s.abs_max <= st.fp16->max_finite) {
        const TensorStats& p = previous->second;
        if (p.inf == 0 && p.nan == 0 && p.abs_max >= fp16_limit && p.abs_max < 4294967296.0) {
          st.cast_signature = true;
          st.cast_why = item.first + " turned Inf at step " + std::to_string(frame.step) + " with its finite values "
                        "within float16's range, right after " + previous->first + " reached " +
                        FormatNumber(p.abs_max, 6) + ", past float16's 65504: a cast to float16";
          break;
        }
      }
      previous = &item;
    }
  }

  // Once weights or gradients are non-finite, later values are the consequence: no new
  // overflow opens after that step (NONFINITE_* tells that story).
  if (st.nonfinite_step < 0) {
    for (const auto& [tag, s] : frame.stats) {
      if ((tags::kWeight.Holds(tag) || tags::kGrad.Holds(tag)) && s.nan + s.inf > 0 && !skipped) {
        st.nonfinite_step = frame.step;
        break;
      }
    }
  }
  const bool after_nonfinite = st.nonfinite_step >= 0 && frame.step > st.nonfinite_step;
  const bool fp16 = st.Fp16Active();
  const int used_k = st.loss_scaling ? static_cast<int>(std::floor(std::log2(st.loss_scale))) : 0;
  const double lr = facts.lr;
  for (const auto& [tag, s] : frame.stats) {
    const bool act = tags::kAct.Holds(tag);
    const bool grad = tags::kGrad.Holds(tag);
    // FP16_OVERFLOW: the first point of each activation or gradient past the range.
    if ((act || (grad && !skipped)) && !after_nonfinite && s.finite() > s.zeros && std::isfinite(s.abs_max) && s.abs_max >= fp16_limit &&
        !st.overflow_reported.count(tag) && !st.overflow_pending.count(tag)) {
      State::Over o;
      o.tag = tag;
      o.step = frame.step;
      o.abs_max = s.abs_max;
      o.has_histogram = s.has_histogram;
      o.counts = FitStats(s, *st.fp16, 0);
      st.overflow_pending[tag] = o;
    }
    if (grad && !skipped) {
      auto [it, fresh] = st.grads.try_emplace(tag);
      if (fresh) {
        st.grad_order.push_back(tag);
        it->second.merged.tag = tag;
      }
      State::Under& u = it->second;
      if (s.finite() > s.zeros && std::isfinite(s.abs_max) && s.abs_max > st.grad_abs_max) {
        st.grad_abs_max = s.abs_max;
        st.grad_abs_max_tag = tag;
        st.grad_abs_max_step = frame.step;
      }
      if (s.has_histogram) {
        MergeTensorStats(u.merged.merged, s);
        const FitCounts c = FitStats(s, *st.fp16, used_k);
        if (!u.any) u.first = frame.step;
        u.any = true;
        u.last = frame.step;
        u.at_used_scale.Add(c);
        st.used_scale_exponent_min = std::min(st.used_scale_exponent_min, used_k);
        st.used_scale_exponent_max = std::max(st.used_scale_exponent_max, used_k);
        if (c.Fraction(c.underflow_min) >= options_.underflow_tensor_fraction) {
          if (u.first_bad < 0) u.first_bad = frame.step;
          u.last_bad = frame.step;
        }
      }
    }
    // BF16_STALE_UPDATE: update/<p> beside weight/<p> and grad/<p> of the same step.
    std::string_view param;
    if (tags::kUpdate.Holds(tag, &param) && s.numel >= options_.min_numel && !skipped &&
        !(std::isfinite(lr) && lr <= 0)) {
      const TensorStats* w = frame.Stats(tags::kWeight.Of(param));
      const TensorStats* g = frame.Stats(tags::kGrad.Of(param));
      if (w && g && g->numel == s.numel && s.finite() == s.numel && g->finite() == g->numel) {
        auto [it, fresh] = st.stale.try_emplace(std::string(param));
        if (fresh) st.stale_order.emplace_back(param);
        State::Stale& x = it->second;
        const double n = static_cast<double>(s.numel);
        // Observed: the weight did not move although its gradient was not zero.
        const double observed = std::max(0.0, (static_cast<double>(s.zeros) - static_cast<double>(g->zeros)) / n);
        ++x.points;
        x.observed_sum += observed;
        x.observed_max = std::max(x.observed_max, observed);
        if (x.first_step < 0) x.first_step = frame.step;
        x.last_step = frame.step;
        if (observed >= options_.stale_fraction && x.first_bad < 0) x.first_bad = frame.step;
        x.numel = s.numel;
        x.weight_abs_max = w->abs_max;
        x.update_abs_max = s.abs_max;
        x.update_rms = std::sqrt(s.sum_squares / n);
        if (s.has_histogram && w->has_histogram) {
          // Estimated for bfloat16: an update is lost below half an ulp of its weight,
          // 2^(e - 8) for a weight in [2^e, 2^(e+1)): update bins <= e - 9.
          const double est = IndependentShareBelow(s, *w, st.bf16->layout.mantissa_bits + 2);
          ++x.est_points;
          x.est_sum += est;
        }
      }
    }
    // FP8 readiness, only when the run considers FP8.
    if (st.declared.fp8 && (act || grad || tags::kWeight.Holds(tag))) {
      State::Fp8& f = st.fp8[tag];
      f.format = grad ? st.e5m2 : st.e4m3;
      const double amax = s.finite() > s.zeros && std::isfinite(s.abs_max) ? s.abs_max : 0.0;
      double reference = amax;
      if (!f.window.empty()) reference = *std::max_element(f.window.begin(), f.window.end());
      const int k = numerics::DelayedScaleExponent(reference > 0 ? reference : amax, *f.format);
      if (f.points == 0) f.first = frame.step;
      f.last = frame.step;
      ++f.points;
      f.last_k = k;
      if (amax > 0 && std::ldexp(amax, k) >= f.format->overflow_threshold) {
        ++f.overflow_points;
        if (f.first_overflow < 0) f.first_overflow = frame.step;
      }
      if (s.has_histogram) {
        const FitCounts c = FitStats(s, *f.format, k);
        f.counts.Add(c);
        if (f.histogram_points == 0 || c.lost() > f.worst_lost) {
          f.worst_lost = c.lost();
          f.worst_step = frame.step;
        }
        ++f.histogram_points;
      }
      if (amax > 0) f.window.push_back(amax);
      while (static_cast<int>(f.window.size()) > std::max(1, options_.fp8_history)) f.window.pop_front();
    }
  }

  // TF32: the input of each matmul module is the previous module's output in forward order.
  if (st.declared.tf32 && facts.module_order.size() >= 2) {
    for (size_t i = 1; i < facts.module_order.size(); ++i) {
      const std::string& module = facts.module_order[i];
      if (!IsMatmulModule(module, facts.ModuleType(module))) continue;
      const TensorStats* in = frame.Stats(tags::kAct.Of(facts.module_order[i - 1]));
      if (!in || in->finite() < 2) continue;
      const double mean = in->mean();
      const double sd = in->stddev();
      if (!(sd > 0) || !std::isfinite(mean) || mean == 0) continue;
      const double bits = std::log2(std::fabs(mean) / sd) + 3;
      State::Tf32& t = st.tf32[module];
      if (bits > t.bits) t = {bits, mean, sd, frame.step, tags::kAct.Of(facts.module_order[i - 1])};
    }
  }

  if (!fp16) return;
  for (auto it = st.overflow_pending.begin(); it != st.overflow_pending.end();) {
    const State::Over& o = it->second;
    std::string family, layer;
    numerics::SplitTag(o.tag, &family, &layer);
    const bool is_act = family == "act";
    Finding f;
    f.code = "FP16_OVERFLOW";
    f.severity = Severity::kWarning;
    f.step = o.step;
    f.last_step = o.step;
    f.location = layer;
    const double over_max = o.counts.Fraction(o.counts.overflow_max);
    const double over_min = o.counts.Fraction(o.counts.overflow_min);
    std::string share = o.has_histogram
                            ? (over_min == over_max ? FormatNumber(100 * over_max, 3) + " %"
                                                    : FormatNumber(100 * over_min, 3) + "-" +
                                                          FormatNumber(100 * over_max, 3) + " %") +
                                  " of its values"
                            : "at least its largest value";
    f.summary = std::string(is_act ? "Activations of " : "Gradients of ") + layer + " reach " +
                FormatNumber(o.abs_max, 6) + " at step " + std::to_string(o.step) +
                ", past float16's largest value 65504 (" + FormatNumber(o.abs_max / st.fp16->max_finite, 3) +
                "x): " + share + " become Inf in float16";
    nlohmann::json ev = {{"tensor", o.tag},
                         {"family", family},
                         {"step", o.step},
                         {"largest_value", Num(o.abs_max)},
                         {"float16_max", st.fp16->max_finite},
                         {"overflow_threshold", st.fp16->overflow_threshold},
                         {"times_over", Num(o.abs_max / st.fp16->max_finite)},
                         {"precision", st.Fp16Why()}};
    if (o.has_histogram) {
      ev["fraction"] = Num(over_max);
      ev["fraction_min"] = Num(over_min);
    } else {
      ev["fraction"] = nullptr;
      ev["fraction_note"] = "no exponent histogram at this step (watch's histograms_every): at least one value";
    }
    f.evidence_json = ev.dump();
    f.causes = {{"precision_overflow", 0.8}};
    if (is_act) {
      f.causes.push_back({"unnormalized_input", 0.2});
      f.actions = {"Keep " + layer + " in float32: run it outside autocast (with torch.autocast(device_type, "
                   "enabled=False): ... x.float()), or do not cast its output to float16",
                   "Bound what feeds " + layer + ": normalise its input (a LayerNorm before it, standardised "
                   "features) so its outputs stay well below 65504 (now " + FormatNumber(o.abs_max, 4) + ")",
                   "Or train in bfloat16, which has float32's range (max 3.4e38)"};
    } else {
      f.causes.push_back({"gradient_explosion", 0.3});
      f.actions = {"Use dynamic loss scaling (torch.cuda.amp.GradScaler): it lowers the scale when scaled "
                   "gradients overflow and skips that step",
                   "Clip gradients (torch.nn.utils.clip_grad_norm_) or lower the LR: " + layer + "'s gradients reach " +
                       FormatNumber(o.abs_max, 4),
                   "Or train in bfloat16 (float32's range)"};
    }
    ctx.Report(std::move(f));
    st.overflow_reported.insert(it->first);
    it = st.overflow_pending.erase(it);
  }
}

void PrecisionFitDetector::ReportNotUpdated(const std::vector<std::pair<std::string, const PrecisionFitStale*>>& params,
                                            size_t moving, const DetectorContext& ctx) const {
  const RunFacts& facts = ctx.facts;
  // The largest parameter that never moves names the finding; every one is listed.
  auto worst = std::max_element(params.begin(), params.end(),
                                [](const auto& a, const auto& b) { return a.second->numel < b.second->numel; });
  const std::string& p = worst->first;
  const auto* x = worst->second;
  bool any_unoptimized = false;
  json names = json::array();
  for (const auto& [name, stale] : params) {
    any_unoptimized |= facts.unoptimized_params.count(name) > 0;
    if (names.size() < 20) names.push_back(name);
  }
  const bool lr_known = std::isfinite(facts.lr) && facts.lr_max > 0;
  const bool lr_collapsed = lr_known && facts.lr < 1e-6 * facts.lr_max;
  Finding f;
  f.code = "PARAM_NOT_UPDATED";
  // Some parameters move and these never do: a layer left out of training. Every parameter
  // stopping together (an LR annealed to ~0, an optimizer that converged) is information.
  f.severity = any_unoptimized || (moving > 0 && !lr_collapsed) ? Severity::kWarning : Severity::kInfo;
  f.step = x->first_bad >= 0 ? x->first_bad : x->first_step;
  f.last_step = x->last_step;
  f.location = p;
  f.summary = std::to_string(params.size()) + " parameter" + (params.size() == 1 ? "" : "s") + " never change (" + p +
              " among them: its update is exactly 0 at " + std::to_string(x->points) +
              " recorded steps while its gradient is not)";
  std::vector<Cause> causes;
  json ev = {{"param", p}, {"params", names}, {"count", params.size()}, {"points", x->points},
             {"steps", json::array({x->first_step, x->last_step})}, {"params_that_move", moving}};
  if (auto it = facts.param_dtypes.find(p); it != facts.param_dtypes.end()) ev["dtype"] = it->second;
  if (facts.unoptimized_params_known) {
    ev["unoptimized_params"] = json(std::vector<std::string>(facts.unoptimized_params.begin(), facts.unoptimized_params.end()));
    if (any_unoptimized) {
      RaiseCause(&causes, "param_not_in_optimizer", 0.9);
      f.summary += "; no optimizer holds " + std::string(facts.unoptimized_params.count(p) ? p : "them");
    }
  } else if (moving > 0) {
    RaiseCause(&causes, "param_not_in_optimizer", 0.6);
  }
  if (lr_known) {
    ev["lr"] = Num(facts.lr);
    ev["lr_max"] = Num(facts.lr_max);
    if (lr_collapsed) {
      RaiseCause(&causes, "lr_collapsed", 0.85);
      f.summary += "; the learning rate is " + FormatNumber(facts.lr, 3) + ", " +
                   FormatNumber(facts.lr / facts.lr_max, 2) + " of its maximum " + FormatNumber(facts.lr_max, 3);
    }
  } else {
    RaiseCause(&causes, "lr_collapsed", 0.2);
  }
  if (moving == 0 && !lr_collapsed) RaiseCause(&causes, "optimizer_stopped", 0.5);
  f.evidence_json = ev.dump();
  f.causes = std::move(causes);
  ctx.Report(std::move(f));
}

// The module a parameter belongs to: its name up to the last '.' ("conv1" for "conv1.weight").
static std::string ModuleOfParam(const std::string& param) {
  const size_t dot = param.rfind('.');
  return dot == std::string::npos ? param : param.substr(0, dot);
}

void PrecisionFitDetector::ReportWithoutGradient(size_t moving, const std::vector<std::string>& moving_params,
                                                 const DetectorContext& ctx) const {
  const RunFacts& facts = ctx.facts;
  const std::vector<std::string>& blocked = facts.params_without_grad;
  auto order_of = [&](const std::string& param) -> int64_t {
    const auto it = std::find(facts.module_order.begin(), facts.module_order.end(), ModuleOfParam(param));
    return it == facts.module_order.end() ? -1 : it - facts.module_order.begin();
  };
  // A blocked layer that runs before a layer that learns: the graph is cut on the way to
  // the loss (a .detach(), .item(), torch.no_grad()). A blocked layer after every learning
  // one is a head whose output the loss does not use: information.
  int64_t last_moving = -1;
  for (const std::string& p : moving_params) last_moving = std::max(last_moving, order_of(p));
  std::string cut;  // the blocked parameter nearest the cut: the latest one before a learning layer
  int64_t cut_order = -1;
  for (const std::string& p : blocked) {
    const int64_t o = order_of(p);
    if (o >= 0 && o < last_moving && o >= cut_order) {
      cut = p;
      cut_order = o;
    }
  }
  const bool upstream = !cut.empty();
  using json = nlohmann::json;
  Finding f;
  f.code = "PARAM_NOT_UPDATED";
  f.severity = upstream ? Severity::kWarning : Severity::kInfo;
  f.step = facts.first_step;
  f.location = upstream ? cut : blocked.front();
  const std::string n = std::to_string(blocked.size());
  f.summary = "No gradient reaches " + n + " parameter" + (blocked.size() == 1 ? "" : "s") + " (" + f.location +
              (blocked.size() > 1 ? " among them" : "") + "): .grad is None at every optimizer step while " +
              std::to_string(moving) + " other" + (moving == 1 ? " has" : "s have") + " one" +
              (upstream ? "; the graph is cut after " + ModuleOfParam(cut) + ", before layers that learn"
                        : "; they come after every layer that learns (an output the loss does not use)");
  json names = json::array();
  for (const std::string& p : blocked) {
    if (names.size() < 20) names.push_back(p);
  }
  json ev = {{"param", f.location}, {"params_without_grad", names}, {"count", blocked.size()},
             {"params_that_move", moving}, {"cut_before_learning_layers", upstream}};
  f.evidence_json = ev.dump();
  f.causes = {{"gradient_blocked", upstream ? 0.9 : 0.6}};
  ctx.Report(std::move(f));
}

void PrecisionFitDetector::Finish(const DetectorContext& ctx) {
  State& st = *state_;
  using json = nlohmann::json;

  // FP16_UNDERFLOW: gradients flushed to zero at the loss scale in use.
  if (st.Fp16Active()) {
    FitCounts all;
    std::string worst_tag;
    double worst = 0;
    int64_t first_bad = -1, last_bad = -1;
    std::vector<numerics::MergedGradient> merged;
    for (const std::string& tag : st.grad_order) {
      const State::Under& u = st.grads.at(tag);
      if (!u.any) continue;
      all.Add(u.at_used_scale);
      merged.push_back(u.merged);
      const double share = u.at_used_scale.Fraction(u.at_used_scale.underflow_min);
      // Ties (two tensors all flushed) go to the larger, then the first by name: online and
      // offline see gradients in different orders and must name the same one.
      const bool tie = share == worst && !worst_tag.empty();
      const uint64_t numel = u.at_used_scale.numel, worst_numel = tie ? st.grads.at(worst_tag).at_used_scale.numel : 0;
      if (share > worst || (tie && (numel > worst_numel || (numel == worst_numel && tag < worst_tag)))) {
        worst = share;
        worst_tag = tag;
      }
      if (u.first_bad >= 0 && (first_bad < 0 || u.first_bad < first_bad)) first_bad = u.first_bad;
      last_bad = std::max(last_bad, u.last_bad);
    }
    const double total = all.Fraction(all.underflow_min);
    if (!merged.empty() && (total >= options_.underflow_fraction || worst >= options_.underflow_tensor_fraction)) {
      const numerics::LossScaleAdvice a = numerics::RecommendLossScaleMerged(
          merged, st.grad_abs_max, st.grad_abs_max_tag, st.grad_abs_max_step, *st.fp16);
      const State::Under& w = st.grads.at(worst_tag);
      std::string family, layer;
      numerics::SplitTag(worst_tag, &family, &layer);
      Finding f;
      f.code = "FP16_UNDERFLOW";
      f.severity = Severity::kWarning;
      f.step = first_bad >= 0 ? first_bad : w.first;
      f.last_step = std::max(f.step, last_bad >= 0 ? last_bad : w.last);
      f.location = layer;
      const double scale = std::ldexp(1.0, a.k_recommended);
      const std::string used = st.loss_scaling ? "at the loss scale in use (2^" + std::to_string(st.used_scale_exponent_min) +
                                                     (st.used_scale_exponent_max != st.used_scale_exponent_min
                                                          ? "..2^" + std::to_string(st.used_scale_exponent_max)
                                                          : "") + ")"
                                               : "unscaled";
      f.summary = FormatNumber(100 * total, 3) + " % of gradient values flush to zero in float16 " + used +
                  " (below 2^-25, half the smallest subnormal 2^-24); worst " + worst_tag + ": " +
                  FormatNumber(100 * worst, 3) + " %. A loss scale of 2^" + std::to_string(a.k_recommended) + " (" +
                  FormatNumber(scale, 8) + ") leaves " +
                  FormatNumber(100 * a.at_recommended.Fraction(a.at_recommended.underflow_max), 3) +
                  " % flushed and overflows nothing (largest gradient " + FormatNumber(a.abs_max, 4) + " in " +
                  a.abs_max_tag + ")";
      f.evidence_json = json{{"tensor", worst_tag},
                             {"fraction", Num(worst)},
                             {"fraction_all_gradients", Num(total)},
                             {"subnormal_fraction_all_gradients", Num(all.Fraction(all.subnormal_max))},
                             {"steps", json::array({w.first, w.last})},
                             {"loss_scale_in_use", st.loss_scaling ? Num(st.loss_scale) : json(1.0)},
                             {"largest_gradient", Num(a.abs_max)},
                             {"largest_gradient_tensor", a.abs_max_tag},
                             {"largest_gradient_step", a.abs_max_step},
                             {"recommended_loss_scale", Num(scale)},
                             {"recommended_exponent", a.k_recommended},
                             {"exponent_range", json::array({a.k_low, a.k_high})},
                             {"flushed_at_recommended", Num(a.at_recommended.Fraction(a.at_recommended.underflow_max))},
                             {"overflow_at_recommended", Num(a.at_recommended.Fraction(a.at_recommended.overflow_max))},
                             {"precision", st.Fp16Why()}}
                          .dump();
      f.causes = {{"precision_overflow", 0.6}};
      f.actions = {"Scale the loss by 2^" + std::to_string(a.k_recommended) + " = " + FormatNumber(scale, 8) +
                       ": torch.cuda.amp.GradScaler(init_scale=" + FormatNumber(scale, 8) +
                       ") starts there, or multiply the loss by it and divide the gradients by it before the step "
                       "(any 2^k for k in " + std::to_string(a.k_low) + ".." + std::to_string(a.k_high) +
                       " keeps the largest gradient below 65504 with 2x to spare)",
                   "Or train in bfloat16: float32's exponent range, nothing above 2^-133 flushes"};
      ctx.Report(std::move(f));
    }
  }

  // BF16_STALE_UPDATE: observed (the weight did not move) or, for declared bfloat16
  // weights, estimated from the update and weight histograms.
  {
    struct Lost {
      std::string param;
      double share;
      bool observed;
      const State::Stale* x;
    };
    std::vector<Lost> lost;
    // Observed losses count when they are a real share of the model's update values: a
    // conv bias before a BatchNorm has gradients near zero and loses its updates in FP32
    // too, harmlessly; bfloat16 weights lose most of every matrix's.
    double observed_values = 0, all_values = 0;
    for (const std::string& p : st.stale_order) {
      const State::Stale& x = st.stale.at(p);
      const double observed = x.points ? x.observed_sum / static_cast<double>(x.points) : 0;
      all_values += static_cast<double>(x.numel);
      if (x.points >= options_.stale_min_points) observed_values += observed * static_cast<double>(x.numel);
    }
    const bool observed_matters = all_values > 0 && observed_values / all_values >= options_.stale_model_fraction;
    // A lost update is bfloat16's only for a parameter stored in 16 bits: meta `param_dtypes`
    // says so, or (without it) the config declares bfloat16 weights, or the loss is partial:
    // rounding loses the updates below half an ulp of their weight and keeps the others,
    // while a tensor no optimizer steps (or one stepped with an LR of ~0) loses them all.
    // A weight that does not move at all is PARAM_NOT_UPDATED (below).
    const RunFacts& facts = ctx.facts;
    auto sixteen_bit = [&](const std::string& p, double observed) {
      auto it = facts.param_dtypes.find(p);
      if (it != facts.param_dtypes.end()) return IsSixteenBitFloat(it->second);
      if (!facts.param_dtypes.empty()) return false;
      return st.declared.bf16_weights || observed < options_.not_updated_fraction;
    };
    std::vector<std::pair<std::string, const State::Stale*>> not_updated;
    size_t moving = 0;
    for (const std::string& p : st.stale_order) {
      const State::Stale& x = st.stale.at(p);
      const double observed = x.points ? x.observed_sum / static_cast<double>(x.points) : 0;
      const double estimated = x.est_points ? x.est_sum / static_cast<double>(x.est_points) : 0;
      if (x.points >= options_.stale_min_points && observed < 0.5) ++moving;
      const bool observed_lost = x.points >= options_.stale_min_points && observed >= options_.stale_fraction;
      const bool is16 = sixteen_bit(p, observed);
      if (observed_lost && !is16) {
        if (observed >= options_.not_updated_fraction &&
            (facts.unoptimized_params.count(p) || ClassifyParam(p, facts) == ParamRole::kWeight)) {
          not_updated.emplace_back(p, &x);
        }
        continue;
      }
      if (observed_matters && observed_lost) {
        lost.push_back({p, observed, true, &x});
      } else if (is16 && (st.declared.bf16_weights || facts.param_dtypes.count(p)) &&
                 x.est_points >= options_.stale_min_points && estimated >= options_.stale_fraction) {
        lost.push_back({p, estimated, false, &x});
      }
    }
    if (!not_updated.empty()) ReportNotUpdated(not_updated, moving, ctx);
    if (!ctx.facts.params_without_grad.empty() && moving > 0) {
      std::vector<std::string> moving_params;
      for (const std::string& p : st.stale_order) {
        const State::Stale& x = st.stale.at(p);
        if (x.points >= options_.stale_min_points && x.observed_sum / static_cast<double>(x.points) < 0.5) {
          moving_params.push_back(p);
        }
      }
      ReportWithoutGradient(moving, moving_params, ctx);
    }
    if (!lost.empty()) {
      // The parameter losing the most updates (share x size) first: a 4-element bias losing
      // all of them matters less than a weight matrix losing most.
      std::stable_sort(lost.begin(), lost.end(), [](const Lost& a, const Lost& b) {
        const double la = a.share * static_cast<double>(a.x->numel), lb = b.share * static_cast<double>(b.x->numel);
        return la != lb ? la > lb : a.param < b.param;
      });
      const Lost& worst = lost.front();
      double lost_values = 0, all_values = 0;
      for (const std::string& p : st.stale_order) {
        const State::Stale& x = st.stale.at(p);
        all_values += static_cast<double>(x.numel);
        auto it = std::find_if(lost.begin(), lost.end(), [&](const Lost& l) { return l.param == p; });
        if (it != lost.end()) lost_values += it->share * static_cast<double>(x.numel);
      }
      const double overall = all_values > 0 ? lost_values / all_values : 0;
      Finding f;
      f.code = "BF16_STALE_UPDATE";
      f.severity = Severity::kWarning;
      f.step = worst.x->first_bad >= 0 ? worst.x->first_bad : worst.x->first_step;
      f.last_step = worst.x->last_step;
      f.location = worst.param;
      json layers = json::array();
      for (size_t i = 0; i < lost.size() && i < 10; ++i) {
        layers.push_back({{"param", lost[i].param}, {"fraction_lost", Num(lost[i].share)},
                          {"how", lost[i].observed ? "observed" : "estimated"}});
      }
      const double ulp_half = std::ldexp(worst.x->weight_abs_max, -8);
      f.summary = FormatNumber(100 * worst.share, 3) + " % of " + worst.param + "'s updates are lost (" +
                  (worst.observed ? "observed: the weight did not change although its gradient was not zero"
                                  : "estimated for bfloat16 weights: updates below half a bfloat16 ulp of their weight") +
                  ", mean over " + std::to_string(worst.observed ? worst.x->points : worst.x->est_points) +
                  " recorded steps); " + std::to_string(lost.size()) + " parameter" + (lost.size() == 1 ? "" : "s") +
                  " affected, " + FormatNumber(100 * overall, 3) + " % of all updates recorded. Updates of rms " + FormatNumber(worst.x->update_rms, 3) + " vs weights up to " +
                  FormatNumber(worst.x->weight_abs_max, 3) + " (half a bfloat16 ulp there: " + FormatNumber(ulp_half, 3) +
                  ")";
      f.evidence_json = json{{"param", worst.param},
                             {"fraction_lost", Num(worst.share)},
                             {"fraction_lost_all_params", Num(overall)},
                             {"how", worst.observed ? "observed" : "estimated"},
                             {"method", worst.observed
                                            ? "share of the update's values exactly zero minus the gradient's, per recorded step"
                                            : "per weight binade e: P(weight in e) x P(|update| < 2^(e-8)), assuming "
                                              "update and weight magnitudes independent within the tensor"},
                             {"steps", json::array({worst.x->first_step, worst.x->last_step})},
                             {"points", worst.x->points},
                             {"max_fraction_lost", Num(worst.x->observed_max)},
                             {"weight_abs_max", Num(worst.x->weight_abs_max)},
                             {"update_abs_max", Num(worst.x->update_abs_max)},
                             {"update_rms", Num(worst.x->update_rms)},
                             {"numel", worst.x->numel},
                             {"layers", layers},
                             {"precision", st.declared.bf16_weights ? st.declared.bf16_why : "observed updates"}}
                          .dump();
      f.causes = {{"precision_overflow", 0.5}, {"lr_too_low", 0.2}};
      f.actions = {"Keep FP32 master weights: leave the parameters in float32 and compute in bfloat16 with "
                   "torch.autocast(device_type, dtype=torch.bfloat16); the optimizer then adds each update to the "
                   "float32 copy",
                   "Or add the updates with compensated (Kahan) summation, or stochastic rounding, in the optimizer",
                   "A larger LR does not fix it: a bfloat16 weight moves only by updates of at least half its ulp "
                   "(2^-8 of its magnitude)"};
      ctx.Report(std::move(f));
    }
  }

  // FP8_READINESS: only when the run considers FP8.
  if (st.declared.fp8 && !st.fp8.empty()) {
    struct Row {
      std::string tag;
      const State::Fp8* f;
      double lost;
    };
    std::vector<Row> rows;
    for (const auto& [tag, f] : st.fp8) rows.push_back({tag, &f, f.histogram_points ? f.counts.lost() : 0.0});
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      if (a.lost != b.lost) return a.lost > b.lost;
      return a.f->overflow_points > b.f->overflow_points;
    });
    const Row& worst = rows.front();
    json layers = json::array();
    size_t losing = 0;
    for (const Row& r : rows) {
      if (r.lost > options_.fp8_lost_warning) ++losing;
      if (layers.size() >= 12) continue;
      json amax = json::array();
      for (double a : r.f->window) amax.push_back(Num(a));
      layers.push_back({{"tensor", r.tag}, {"format", r.f->format->name()}, {"lost", Num(r.lost)},
                        {"overflow", Num(r.f->counts.Fraction(r.f->counts.overflow_max))},
                        {"underflow", Num(r.f->counts.Fraction(r.f->counts.underflow_max))},
                        {"stale_scale_steps", r.f->overflow_points}, {"points", r.f->points},
                        {"scale_exponent", r.f->window.empty() ? r.f->last_k
                                                               : numerics::DelayedScaleExponent(
                                                                     *std::max_element(r.f->window.begin(), r.f->window.end()),
                                                                     *r.f->format)},
                        {"amax_history", amax}});
    }
    std::string family, layer;
    numerics::SplitTag(worst.tag, &family, &layer);
    Finding f;
    f.code = "FP8_READINESS";
    f.severity = losing > 0 ? Severity::kWarning : Severity::kInfo;
    f.step = worst.f->first;
    f.last_step = worst.f->last;
    f.location = layer;
    f.summary = "FP8 with delayed per-tensor scaling (amax history " + std::to_string(options_.fp8_history) +
                " recorded steps; E4M3 forward, E5M2 backward): " + std::to_string(losing) + " of " +
                std::to_string(rows.size()) + " tensors lose more than " +
                FormatNumber(100 * options_.fp8_lost_warning, 3) + " % of their values; worst " + worst.tag + " (" +
                worst.f->format->name() + "): " + FormatNumber(100 * worst.lost, 3) + " % lost, scale stale at " +
                std::to_string(worst.f->overflow_points) + " of " + std::to_string(worst.f->points) + " steps";
    f.evidence_json = json{{"tensor", worst.tag}, {"history", options_.fp8_history}, {"layers", layers},
                           {"precision", st.declared.fp8_why}}
                          .dump();
    f.causes = {{"precision_overflow", 0.4}};
    f.actions = {"Keep the layers that lose most (" + layer + ") in bfloat16; convert the rest to FP8",
                 "A longer amax history, or a margin of one or two binades on the scale, for tensors whose amax "
                 "grows between steps (stale-scale steps)",
                 "Tensors that flush small values need a finer scale than one per tensor (per-channel or MX blocks "
                 "of 32)"};
    ctx.Report(std::move(f));
  }

  // TF32_PRECISION: matmul inputs whose spread is finer than TF32's mantissa resolves.
  if (st.declared.tf32) {
    std::vector<std::pair<std::string, const State::Tf32*>> notes;
    for (const auto& [module, t] : st.tf32) {
      if (t.bits > options_.tf32_mantissa_bits) notes.push_back({module, &t});
    }
    std::stable_sort(notes.begin(), notes.end(), [](const auto& a, const auto& b) { return a.second->bits > b.second->bits; });
    if (!notes.empty()) {
      const auto& [module, t] = notes.front();
      json layers = json::array();
      for (size_t i = 0; i < notes.size() && i < 10; ++i) {
        layers.push_back({{"module", notes[i].first}, {"input", notes[i].second->input},
                          {"mantissa_bits_needed", Num(notes[i].second->bits)}, {"input_mean", Num(notes[i].second->mean)},
                          {"input_std", Num(notes[i].second->std)}, {"step", notes[i].second->step}});
      }
      Finding f;
      f.code = "TF32_PRECISION";
      f.severity = Severity::kInfo;
      f.step = t->step;
      f.last_step = t->step;
      f.location = module;
      f.summary = "The input of " + module + " (" + t->input + ": mean " + FormatNumber(t->mean, 4) + ", std " +
                  FormatNumber(t->std, 4) + ") varies by 2^-" + FormatNumber(std::log2(std::fabs(t->mean) / t->std), 3) +
                  " of its magnitude: resolving that needs about " + FormatNumber(t->bits, 3) +
                  " mantissa bits, TF32 rounds matmul inputs to 10";
      f.evidence_json = json{{"module", module}, {"layers", layers}, {"precision", st.declared.tf32_why}}.dump();
      f.causes = {{"unnormalized_input", 0.5}};
      f.actions = {"Centre the input of " + module + " (subtract its mean, or a norm layer before it): TF32's "
                   "relative error 2^-11 then applies to the signal, not to its offset",
                   "Or keep this matmul in full float32: torch.backends.cuda.matmul.allow_tf32 = False "
                   "(torch.set_float32_matmul_precision('highest'))"};
      ctx.Report(std::move(f));
    }
  }
}

}  // namespace trainscope::doctor
#endif  // TRAINSCOPE_WITH_NUMERICS
